"""What every bench does with a run: it runs on the worker's kind of event loop, and its JSON is saved."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import orjson

from dispatcher.event_loop import new_event_loop
from dispatcher.settings import Settings

T = TypeVar("T")
RESULTS = Path(__file__).parent / "results"  # where every bench saves its runs by default


def save(result: dict[str, Any], out: Path, kind: str = "suite",
         default: Callable[[Any], Any] | None = None) -> Path:
    """`result` as `<out>/<kind>-<its start, in seconds>.json` (every bench saves its runs this way)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{kind}-{int(result['at'])}.json"
    path.write_bytes(orjson.dumps(result, default=default, option=orjson.OPT_INDENT_2))
    return path


def worker_loop() -> str:
    """The event loop the worker is given: a bench runs its clients on the same kind."""
    return os.environ.get("DISPATCHER_EVENT_LOOP", Settings().event_loop)


def run_on(loop: str, main: Coroutine[Any, Any, T]) -> T:
    """Run `main` on a new loop of that kind; the process's event-loop policy is put back after.

    `new_event_loop` makes uvloop's the policy (right for a worker process); a bench run inside
    the test suite must not leave it behind: asyncio's subprocesses (Playwright's) need the default.
    """
    policy = asyncio.get_event_loop_policy()
    try:
        with asyncio.Runner(loop_factory=lambda: new_event_loop(loop)) as runner:
            return runner.run(main)
    finally:
        asyncio.set_event_loop_policy(policy)
