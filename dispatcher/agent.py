"""The receiver actor agent: one stream over the requests and commands topics.

Concurrency is 1 per partition, and every event is fully applied (state
written) before the next is read, so Faust's ack-on-next-event commits only
what is stored. Nothing escapes the loop: a record that cannot be applied is
dead-lettered (awaited) before the stream moves past it.
"""

from __future__ import annotations

import logging
from typing import Any

from .actor_runner import ActorRunner
from .domain import actor
from .domain.errors import InvalidInput
from .domain.records import Message, ReceiverControl, decode_command, decode_request

log = logging.getLogger(__name__)


def register_actor_agent(app: Any, source: Any, commands_topic: str, runner: ActorRunner) -> Any:
    async def receiver_actor(stream: Any) -> None:
        async for event in stream.events():
            await _apply(event, commands_topic, runner)

    return app.agent(source, name="receiver_actor", concurrency=1)(receiver_actor)


async def _apply(event: Any, commands_topic: str, runner: ActorRunner) -> None:
    msg = event.message
    receiver_id = (event.key or b"").decode("utf-8", "replace")
    try:
        if msg.topic == commands_topic:
            outcome = decode_command(event.value)
            if outcome is None:
                await runner.handle(receiver_id, msg.partition, actor.Wake())
                return
            runner.deliverer.release(receiver_id, outcome.token)
            await runner.handle(receiver_id, msg.partition, actor.Result(outcome))
        else:
            await runner.handle(receiver_id, msg.partition, _request_command(runner, receiver_id, event))
    except InvalidInput as exc:
        await _reject(runner, receiver_id, event, exc.code, exc.field + ": " + exc.message)
    except Exception as exc:
        log.exception("cannot apply record %s[%d]@%d", msg.topic, msg.partition, msg.offset)
        await _reject(runner, receiver_id, event, "internal_error", f"{type(exc).__name__}: {exc}")


def _request_command(runner: ActorRunner, receiver_id: str, event: Any) -> actor.Command:
    msg = event.message
    fallback_id = f"kafka_{msg.partition}_{msg.offset}"
    record = decode_request(receiver_id, event.value or b"", fallback_id, msg.timestamp)
    if isinstance(record, ReceiverControl):
        return actor.Control(record.action, record.reason)
    if not isinstance(record, Message):
        return actor.Configure(record)
    seen = runner.store.seen_seq(receiver_id, record.id, runner.clock())
    return actor.Intake(record, seen)


async def _reject(runner: ActorRunner, receiver_id: str, event: Any, reason: str, detail: str) -> None:
    msg = event.message
    if msg.topic != runner.requests_topic:
        log.error("dropping bad command %s[%d]@%d: %s", msg.topic, msg.partition, msg.offset, detail)
        return
    letter = actor.DeadLetter(reason, f"kafka_{msg.partition}_{msg.offset}", None, detail)
    await runner.dead_letter(receiver_id, letter, event.value or b"")
