"""The fan-out agent: one event in, one message per subscribed receiver out.

Reads the events topic (the API's `POST /v1/events`, or producers writing to
Kafka directly), matches the event against the subscription index (event
type, tenant, and each matched receiver's content filter) and produces a
copy to the requests topic for every receiver, keyed by receiver id. Copies'
ids are derived from the event id and the receiver id, so a re-processed
event makes no second deliveries (the receiver's dedup drops them). The
event is acked only after every copy is acked by the broker; a failing
produce is retried, never skipped: an exception that escaped the agent would
ack the event and lose it. An event that cannot be fanned out (unreadable,
or copies too large for a record) is dead-lettered with a bounded summary of
its bytes, so it cannot hold up the events behind it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from .domain.errors import InvalidInput
from .domain.events import Event, copy_for, decode_event
from .domain.filters import document as filter_document
from .domain.records import encode_message_record
from .domain.untrusted import broker_time, clean_text, log_token, one_line, raw_summary
from .subscription_feed import SubscriptionFeed
from .tracing import Tracing, header_traceparent

log = logging.getLogger(__name__)

Produce = Callable[[list[tuple[str, bytes]]], Awaitable[None]]
DeadLetterSend = Callable[[str, bytes], Awaitable[None]]
CHUNK = 1000  # copies produced (and awaited) at a time, so a huge fan-out holds little memory
SYNC_WAIT = 60.0  # for the subscriptions (a restarted worker reads them all first)


class FanOut:
    """Fans events out; an event it cannot fan out is dead-lettered (a bounded summary) and passed by."""

    def __init__(self, feed: SubscriptionFeed, produce: Produce, dead_letter: DeadLetterSend,
                 max_record: int) -> None:
        self.feed = feed
        self.produce = produce
        self.dead_letter = dead_letter
        self.max_record = max_record  # the largest copy the producer may send
        self.refused = 0  # copies receivers' content filters kept back, since the start (/metrics)
        self.tracing = Tracing()  # off unless the worker sets it up (tracing.py)

    def register(self, app: Any, events_topic: Any) -> Any:
        async def fanout(stream: Any) -> None:
            async for event in stream.events():
                await self.fan_out_record(event.message, event.value or b"")

        return app.agent(events_topic, name="fanout", concurrency=1)(fanout)

    async def fan_out_record(self, message: Any, raw: bytes) -> int:
        """Fan one events-topic record out (in a span, child of its `traceparent`, when tracing is on)."""
        if not self.tracing.enabled:
            return await self._fan_out(message, raw)
        parent = header_traceparent(getattr(message, "headers", None))
        where = {"messaging.destination.partition.id": str(message.partition),
                 "messaging.kafka.offset": message.offset}
        with self.tracing.span("webhook.fanout", "consumer", parent, where) as span:
            copies = await self._fan_out(message, raw)  # its copies carry this span's traceparent
            span.set_attribute("webhook.copies", copies)
        return copies

    async def _fan_out(self, message: Any, raw: bytes) -> int:
        """Fan one events-topic record out; returns the number of copies (0 for a bad record).

        The index is first brought up to a moment after the record was read
        (Faust's monitor stamps `time_in`), so it holds every subscription whose
        record the broker had before the event.
        """
        since = message.time_in if message.time_in is not None else time.monotonic()
        if not await self.feed.sync(since, SYNC_WAIT):
            log.warning("fanning out before the subscriptions are all read (%d known)", len(self.feed.index))
        fallback_id = f"kafka_{message.partition}_{message.offset}"
        try:
            event = decode_event(raw, fallback_id, broker_time(message.timestamp, time.time()))
        except InvalidInput as exc:
            await self._reject(fallback_id, raw, "malformed", f"{exc.field}: {exc.message}")
            return 0
        doc = filter_document(event.event_type, event.payload, None)  # an event has no headers
        matched, refused = self.feed.index.match_counted(event.event_type, event.tenant, doc)
        receivers = sorted(matched)
        try:
            size = len(encode_message_record(copy_for(event, receivers[0]))) if receivers else 0
        except Exception as exc:  # noqa: BLE001 - whatever the event holds, it is dead-lettered, not lost
            await self._reject(event.id, raw, "malformed", f"its copies cannot be encoded: {exc}")
            return 0
        if size > self.max_record:
            detail = f"its copies would be larger than the {self.max_record} bytes a record may hold"
            await self._reject(event.id, raw, "too_large", detail)
            return 0
        for start in range(0, len(receivers), CHUNK):
            await _produce_retrying(event, receivers[start : start + CHUNK], self.produce)
        self.refused += refused
        log.info("event_id=%s event_type=%s tenant=%s fanned out to %d receivers (%d filtered out)",
                 event.id, event.event_type, event.tenant, len(receivers), refused)
        return len(receivers)

    async def _reject(self, event_id: str, raw: bytes, reason: str, detail: str) -> None:
        """Dead-letter an event (keyed by its id) with a bounded summary of its bytes."""
        # The id may be the record's key, the detail a field it named: a producer's, escaped for the log.
        log.error("event_id=%s not fanned out (%s): %s", log_token(event_id), reason, one_line(detail[:300]))
        summary = raw_summary(raw)
        record = {"event_id": event_id, "reason": reason, "detail": clean_text(detail, 2000),
                  "at": time.time(), "raw": summary["prefix"], "raw_size": summary["size"],
                  "raw_sha256": summary["sha256"]}
        letter = orjson.dumps(record)
        await _retrying(lambda: self.dead_letter(event_id, letter),
                        f"dead letter of event_id={log_token(event_id)}")


async def _produce_retrying(event: Event, receivers: list[str], produce: Produce) -> None:
    records = [(rid, encode_message_record(copy_for(event, rid))) for rid in receivers]
    await _retrying(lambda: produce(records), f"fan-out of event_id={event.id}")


async def _retrying(send: Callable[[], Awaitable[None]], what: str) -> None:
    """A produce that failed is tried again (the broker may be away), never skipped."""
    delay = 0.1
    while True:
        try:
            await send()
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s: produce failed, retrying in %.1f s", what, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
