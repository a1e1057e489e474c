"""Where a record of the requests and commands topics enters the worker, and the path it takes.

Read top to bottom, a record's path through the worker:

1. fetch: the fetch loop of `overrides/consumer.py` reads each partition
   once and in order (a skipped offset is read again) and hands a record of
   these topics to `apply_record` here (`_apply_direct`), in the fetch loop;
2. decode: `apply_record` turns its bytes into an actor command (a producer's
   message on requests; configuration, control, an outcome or a wake on
   commands), or dead-letters what cannot be decoded;
3. actor: `ActorRunner.handle` (`actor_runner.py`) reads the receiver's state,
   runs the pure `decide` (`domain/actor/`) and runs its effects in order:
   table writes (`actor_store.py` -> `table_writer.py`), dead letters,
   deliveries (`deliverer.py`) and the receiver's timer;
4. outcome: a delivery's outcome comes back to `ActorRunner.apply_outcome`
   (or, from another worker, as a record on commands: step 2);
5. ack and commit: once applied, the record is acked; Faust commits acked
   offsets after the producer's flush (`overrides/producer.py`), which waits
   for the table's changelog writes first. A request record applied (or
   dead-lettered) is also marked in `runner.applied`, which status reads wait
   on (`applied.py`).

No Faust agent or stream carries these records: subscribing the topics goes
through Faust's public conductor (`app.topics.add`), and the fetch loop calls
`apply_record` itself: Faust's agent, stream and event per record cost more
than half again the worker's CPU per delivery (docs/benchmarks.md, "The record
path").
Records are applied one at a time, each fully (state written) before the next
is read, and acked only then, so a commit covers only what is stored. Nothing
escapes: a record that cannot be applied is dead-lettered (awaited) before the
next is read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .actor_runner import ActorRunner
from .domain import actor
from .domain.errors import InvalidInput
from .domain.record_seal import RESERVED_CLAIMS, is_sealed
from .domain.records import ReceiverControl, ReceiverUpsert, decode_command, decode_request
from .domain.throttle import Throttle
from .domain.untrusted import broker_time, log_token, one_line
from .overrides.app import DispatcherApp
from .table_writer import WriteRefused
from .tracing import header_traceparent

log = logging.getLogger(__name__)


def subscribe(app: DispatcherApp, source: Any, commands_topic: str, runner: ActorRunner) -> None:
    """Subscribe the actor's topics, their records applied by `apply_record` in the fetch loop."""

    async def apply(message: Any) -> None:
        await apply_record(message, commands_topic, runner)

    def positioned(tp: Any, offset: int) -> None:
        if tp.topic == runner.requests_topic:
            runner.applied.positioned(tp.partition, offset)

    for topic in source.topics:
        app.direct_sources[topic] = apply
    app.seek_hooks.append(positioned)
    app.topics.add(source)  # Faust's conductor subscribes it with the app's other topics


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
    if msg.topic != commands_topic:  # applied, or dead-lettered: a status read may now look for it
        runner.applied.mark(msg.partition, msg.offset)


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
    record = decode_request(receiver_id, msg.value or b"", fallback_id, stamped,
                            lambda: _vouched(runner, receiver_id, msg))
    seen = runner.store.seen_seq(receiver_id, record.id, runner.clock())
    if runner.deliverer.tracing.enabled:  # its delivery spans join the trace it came with
        parent = header_traceparent(getattr(msg, "headers", None))
        if parent:
            record = replace(record, traceparent=parent)
    if seen is None:  # a new message (a redelivered record is not counted twice)
        source = "fanout" if record.from_event else _source(getattr(msg, "headers", None))
        runner.deliverer.counts.accept(source)
    return actor.Intake(record, seen)


def _vouched(runner: ActorRunner, receiver_id: str, msg: Any) -> bool:
    """Did a worker of this group write the record (its seal holds)? Asked only of one that claims
    what only a worker may (record_seal.py); a producer's claim is dropped, and the log says so,
    one line per 10 s at most (a producer could send millions)."""
    key = runner.seal_key
    if key is not None and is_sealed(key, receiver_id, msg.value or b"", getattr(msg, "headers", None)):
        return True
    held = _UNSEALED.admit(time.monotonic())
    if held is not None:
        log.warning("receiver_id=%s partition=%s offset=%s: a record without this group's seal claimed"
                    " what only a worker's may (%s); taken as a producer's plain message (%d more such"
                    " records in the last 10 s not logged)", log_token(receiver_id), msg.partition,
                    msg.offset, ", ".join(RESERVED_CLAIMS), held)
    return False


_UNSEALED = Throttle(10.0)


# Workers mark the request records they produce (the API's, fan-out's) with this header.
SOURCE_HEADER = "webhook-dispatcher-source"
_API_SOURCE = (SOURCE_HEADER, b"api")


def _source(headers: Any) -> str:
    """"api" for a record the API produced; "kafka" for a producer's own."""
    if not headers:
        return "kafka"
    return "api" if _API_SOURCE in (headers.items() if isinstance(headers, Mapping) else headers) else "kafka"


async def _reject(runner: ActorRunner, receiver_id: str, msg: Any, reason: str, detail: str) -> None:
    """Dead-letter a record that cannot be applied (a bounded summary of it), so the partition goes on."""
    if msg.topic != runner.requests_topic:
        # Written by workers only; its text may hold a receiver's secret, so only the error is logged.
        log.error("dropping bad command %s[%d]@%d: %s", msg.topic, msg.partition, msg.offset,
                  one_line(detail[:300]))
        return
    letter = actor.DeadLetter(reason, f"kafka_{msg.partition}_{msg.offset}", None, detail)
    # A configuration record may carry secrets: its dead letter keeps only its size and digest.
    await runner.dead_letter(receiver_id, letter, msg.value or b"", keep_prefix=reason != "forbidden_record")
