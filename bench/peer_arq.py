"""The arq peer's worker (bench/peers.py): `python -m bench.peer_arq`, one process.

The job POSTs one webhook with the process's one aiohttp ClientSession, and fails (arq retries
it) on anything but 200. Run through `arq.worker.run_worker` rather than the `arq` command so
that the log level is WARNING, as the dispatcher's worker runs in the bench: arq's command logs
two INFO lines for every job.
"""

from __future__ import annotations

import logging
import os
from typing import Any, ClassVar

import aiohttp
from arq.connections import RedisSettings
from arq.worker import run_worker

from .peer_jobs import ARQ_MAX_JOBS, ARQ_POLL_DELAY, LOOP_ENV, REDIS_ENV, redis_url, webhook


async def deliver(ctx: dict[str, Any], url: str, msg_id: str, seq: int, payload: dict[str, Any]) -> None:
    body, headers = webhook(msg_id, seq, payload)
    async with ctx["session"].post(url, data=body, headers=headers) as resp:
        await resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{url} answered {resp.status}")


async def startup(ctx: dict[str, Any]) -> None:
    ctx["session"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=ARQ_MAX_JOBS))


async def shutdown(ctx: dict[str, Any]) -> None:
    await ctx["session"].close()


class WorkerSettings:
    """arq's settings but for `max_jobs` and `poll_delay`. arq starts jobs only while it polls; a
    poll ends once `max_jobs` run, and the next comes `poll_delay` after the last began, so slots
    freed in between wait (up to 0.5 s with the default, which the paced run would carry too).
    On a 6,000-message drain, one run each, 0.5, 0.05, 0.01 and 0.002 s made 976, 1,322, 1,096 and
    1,096/s: within the machine's noise, the drain being bound by CPU."""

    functions: ClassVar[list[Any]] = [deliver]
    on_startup = startup
    on_shutdown = shutdown
    max_jobs = ARQ_MAX_JOBS
    poll_delay = ARQ_POLL_DELAY
    redis_settings = RedisSettings.from_dsn(redis_url()) if REDIS_ENV in os.environ else None


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    if os.environ.get(LOOP_ENV) == "uvloop":
        import uvloop

        uvloop.install()
    run_worker(WorkerSettings)  # type: ignore[arg-type]
