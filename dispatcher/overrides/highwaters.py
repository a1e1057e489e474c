"""A partition's true end, from a fetch response's high watermark.

Tansu (the embedded broker) answers `ListOffsets(latest)` with the last
batch's base offset + 1, so Faust's table recovery, which reads a changelog up
to that end, would miss the rest of the last batch. A fetch response carries
the true high watermark (aiokafka's public `highwater`), so the end of every
non-empty partition is read that way too, and the higher of the two is used.
"""

from __future__ import annotations

import logging
import time
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
    partition whose fetch does not answer within `limit` keeps its reported end.
    """
    if not ends:
        return {}
    # The watermark is all we want, so each partition's fetch is kept small.
    probe = aiokafka.AIOKafkaConsumer(enable_auto_commit=False, max_partition_fetch_bytes=1024, **consumer)
    await probe.start()
    try:
        probe.assign(list(ends))
        for tp, end in ends.items():
            probe.seek(tp, end - 1)
        exact: dict[Any, int] = {}
        deadline = time.monotonic() + limit
        while len(exact) < len(ends) and time.monotonic() < deadline:
            await probe.getmany(timeout_ms=100)
            for tp, end in ends.items():
                watermark = probe.highwater(tp)
                if watermark is not None:
                    exact[tp] = max(end, watermark)
        missing = set(ends) - set(exact)
        if missing:
            log.warning("no fetched highwater within %.0fs for %s: keeping ListOffsets'", limit, missing)
        return {**ends, **exact}
    finally:
        await probe.stop()
