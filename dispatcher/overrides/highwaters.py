"""A partition's true end, from a fetch response's high watermark.

Tansu (the embedded broker) answers `ListOffsets(latest)` with the last
batch's base offset + 1, so Faust's table recovery, which reads a changelog up
to that end, would miss the rest of the last batch. A fetch response carries
the true high watermark (aiokafka's public `highwater`), so the end of every
non-empty partition is read that way too, and the higher of the two is used.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiokafka
from faust.transport.drivers import aiokafka as faust_aiokafka

log = logging.getLogger(__name__)


def client_options(app: Any, purpose: str) -> dict[str, Any]:
    """What a consumer of our own needs to reach the app's brokers: servers, id, credentials."""
    conf = app.conf
    servers = faust_aiokafka.server_list(conf.broker_consumer, faust_aiokafka.Transport.default_port)
    return {
        "bootstrap_servers": servers,
        "client_id": f"{conf.broker_client_id}-{purpose}",
        **faust_aiokafka.credentials_to_aiokafka_auth(conf.broker_credentials, conf.ssl_context),
    }



async def fetched_highwaters(ends: dict[Any, int], limit: float = 10.0, **consumer: Any) -> dict[Any, int]:
    """Each partition's high watermark as a fetch from its reported end - 1 answers it.

    `ends` are ListOffsets answers (> 0); the result is never below them. A
    partition whose fetch does not answer within `limit` (the probe's start
    included), or a probe that fails, keeps its reported end: the recovery goes
    on as Faust's own would, with a warning.
    """
    if not ends:
        return {}
    exact: dict[Any, int] = {}
    try:
        async with asyncio.timeout(limit):
            await _probe(ends, exact, consumer)
    except TimeoutError:
        pass
    except Exception as exc:  # noqa: BLE001 - the broker or the network: ListOffsets' ends stand
        log.warning("cannot read the fetched highwaters (%s: %s)", type(exc).__name__, exc)
    missing = set(ends) - set(exact)
    if missing:
        log.warning("no fetched highwater within %.0fs for %d partitions: keeping ListOffsets' ends %s",
                    limit, len(missing), sorted(missing)[:10])
    return {**ends, **exact}


async def _probe(ends: dict[Any, int], exact: dict[Any, int], consumer: dict[str, Any]) -> None:
    """Fill `exact` with each partition's fetched watermark (never below its end), as they come."""
    # The watermark is all we want, so each partition's fetch is kept small.
    probe = aiokafka.AIOKafkaConsumer(enable_auto_commit=False, max_partition_fetch_bytes=1024, **consumer)
    try:
        await probe.start()
        probe.assign(list(ends))
        for tp, end in ends.items():
            probe.seek(tp, end - 1)
        while len(exact) < len(ends):
            await probe.getmany(timeout_ms=100)
            for tp, end in ends.items():
                watermark = probe.highwater(tp)
                if watermark is not None:
                    exact[tp] = max(end, watermark)
    finally:
        await probe.stop()
