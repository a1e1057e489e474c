"""The fan-out agent: one event in, one message per subscribed receiver out.

Reads the events topic (the API's `POST /v1/events`, or producers writing to
Kafka directly), matches the event against the subscription index and
produces a copy to the requests topic for every receiver, keyed by receiver
id. Copies' ids are derived from the event id and the receiver id, so a
re-processed event makes no second deliveries (the receiver's dedup drops
them). The event is acked only after every copy is acked by the broker; a
failing produce is retried, never skipped: an exception that escaped the
agent would ack the event and lose it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .domain.errors import InvalidInput
from .domain.events import Event, copy_for, decode_event
from .domain.records import encode_message_record
from .subscription_feed import SubscriptionFeed

log = logging.getLogger(__name__)

Produce = Callable[[list[tuple[str, bytes]]], Awaitable[None]]
CHUNK = 1000  # copies produced (and awaited) at a time, so a huge fan-out holds little memory
SYNC_WAIT = 60.0  # for the subscriptions (a restarted worker reads them all first)


def register_fanout_agent(app: Any, events_topic: Any, feed: SubscriptionFeed, produce: Produce) -> Any:
    async def fanout(stream: Any) -> None:
        async for event in stream.events():
            await fan_out_record(event.message, event.value or b"", feed, produce)

    return app.agent(events_topic, name="fanout", concurrency=1)(fanout)


async def fan_out_record(message: Any, raw: bytes, feed: SubscriptionFeed, produce: Produce) -> int:
    """Fan one events-topic record out; returns the number of copies (0 for a bad record).

    The index is first brought up to a moment after the record was read
    (Faust's monitor stamps `time_in`), so it holds every subscription whose
    record the broker had before the event.
    """
    since = message.time_in if message.time_in is not None else time.monotonic()
    if not await feed.sync(since, SYNC_WAIT):
        log.warning("fanning out before the subscriptions are all read (%d known)", len(feed.index))
    try:
        event = decode_event(raw, f"kafka_{message.partition}_{message.offset}", message.timestamp)
    except InvalidInput as exc:
        log.error("unreadable event %s[%d]@%d skipped: %s: %s",
                  message.topic, message.partition, message.offset, exc.field, exc.message)
        return 0
    receivers = sorted(feed.index.match(event.event_type, event.tenant))
    for start in range(0, len(receivers), CHUNK):
        await _produce_retrying(event, receivers[start : start + CHUNK], produce)
    log.info("event_id=%s event_type=%s tenant=%s fanned out to %d receivers",
             event.id, event.event_type, event.tenant, len(receivers))
    return len(receivers)


async def _produce_retrying(event: Event, receivers: list[str], produce: Produce) -> None:
    records = [(rid, encode_message_record(copy_for(event, rid))) for rid in receivers]
    delay = 0.1
    while True:
        try:
            await produce(records)
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("fan-out of event_id=%s: produce failed, retrying in %.1f s", event.id, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
