"""The receiver actor's input: every record of the requests and commands topics, in order.

Records are applied one at a time, each fully (state written) before the next
is read, and acked only then, so a commit covers only what is stored. On our
app the consumer calls `apply` for each record itself (`direct_sources`):
Faust's conductor, stream and event per record cost about 30 % of the
worker's CPU per delivery (interleaved drains: 0.97 and 1.31 s per 1,000
deliveries with them, 0.69 and 0.89 without), and concurrency 1 needs none of
them. Nothing escapes: a record that cannot be applied is dead-lettered
(awaited) before the next is read.
"""

from __future__ import annotations

import logging
from typing import Any

from .actor_runner import ActorRunner
from .domain import actor
from .domain.errors import InvalidInput
from .domain.records import ReceiverControl, ReceiverUpsert, decode_command, decode_request
from .domain.untrusted import broker_time
from .table_writer import WriteRefused

log = logging.getLogger(__name__)


def register_actor_agent(app: Any, source: Any, commands_topic: str, runner: ActorRunner) -> Any:
    """The agent subscribes the topics; on our app the consumer applies their records itself
    (`direct_sources`), so the agent's stream gets none and only another app's would feed it."""

    async def apply(message: Any) -> None:
        await apply_record(message, commands_topic, runner)

    async def receiver_actor(stream: Any) -> None:
        async for event in stream.events():
            await apply(event.message)

    direct = getattr(app, "direct_sources", None)
    if direct is not None:
        for topic in source.topics:
            direct[topic] = apply
    return app.agent(source, name="receiver_actor", concurrency=1)(receiver_actor)


async def apply_record(msg: Any, commands_topic: str, runner: ActorRunner) -> None:
    """One record (key and value raw bytes) of the requests or commands topic."""
    receiver_id = (msg.key or b"").decode("utf-8", "replace")
    try:
        if msg.topic == commands_topic:
            await runner.handle(receiver_id, msg.partition, _command(runner, receiver_id, msg.value or b""))
        else:
            await runner.handle(receiver_id, msg.partition, _request_command(runner, receiver_id, msg))
    except InvalidInput as exc:
        await _reject(runner, receiver_id, msg, exc.code, exc.field + ": " + exc.message)
    except WriteRefused:
        raise  # not the record's fault: it stays unacked, and is read again by the next owner
    except Exception as exc:
        log.exception("cannot apply record %s[%d]@%d", msg.topic, msg.partition, msg.offset)
        await _reject(runner, receiver_id, msg, "internal_error", f"{type(exc).__name__}: {exc}")


def _command(runner: ActorRunner, receiver_id: str, raw: bytes) -> actor.Command:
    """A worker's record: the API's configuration and control, an outcome, or a wake."""
    record = decode_command(receiver_id, raw)
    if record is None:
        return actor.Wake()
    if isinstance(record, ReceiverControl):
        return actor.Control(record.action, record.reason)
    if isinstance(record, ReceiverUpsert):
        return actor.Configure(record.config, record.if_absent)
    runner.deliverer.release(receiver_id, record.token)
    return actor.Result(record)


def _request_command(runner: ActorRunner, receiver_id: str, msg: Any) -> actor.Command:
    """A producer's record: a message, nothing else."""
    fallback_id = f"kafka_{msg.partition}_{msg.offset}"
    stamped = broker_time(msg.timestamp, runner.clock())  # CreateTime is the producer's word too
    record = decode_request(receiver_id, msg.value or b"", fallback_id, stamped)
    seen = runner.store.seen_seq(receiver_id, record.id, runner.clock())
    return actor.Intake(record, seen)


async def _reject(runner: ActorRunner, receiver_id: str, msg: Any, reason: str, detail: str) -> None:
    """Dead-letter a record that cannot be applied (a bounded summary of it), so the partition goes on."""
    if msg.topic != runner.requests_topic:
        # Written by workers only; its text may hold a receiver's secret, so only the error is logged.
        log.error("dropping bad command %s[%d]@%d: %s", msg.topic, msg.partition, msg.offset, detail[:300])
        return
    letter = actor.DeadLetter(reason, f"kafka_{msg.partition}_{msg.offset}", None, detail)
    # A configuration record may carry secrets: its dead letter keeps only its size and digest.
    await runner.dead_letter(receiver_id, letter, msg.value or b"", keep_prefix=reason != "forbidden_record")
