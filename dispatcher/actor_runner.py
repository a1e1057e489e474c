"""Where the actor's effects become I/O: table writes, deliveries, timers, dead letters.

`handle` runs inside the stream iteration of the receiver's partition: it may
write the table. `wake` runs from a timer, outside the stream: it may only
start deliveries and schedule timers, which is all a Wake ever decides.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from .actor_store import ActorStore
from .deliverer import Deliverer
from .domain import actor
from .domain.actor import Command, Effect, Policy, ReceiverState
from .timers import WakeTimers

log = logging.getLogger(__name__)

SendDeadLetter = Callable[[str, bytes], Awaitable[None]]


class ActorRunner:
    def __init__(
        self,
        store: ActorStore,
        deliverer: Deliverer,
        timers: WakeTimers,
        send_dead_letter: SendDeadLetter,
        policy: Policy,
        requests_topic: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.deliverer = deliverer
        self.timers = timers
        self._send_dead_letter = send_dead_letter
        self.policy = policy
        self.requests_topic = requests_topic
        self.clock = clock

    async def handle(self, receiver_id: str, partition: int, command: Command) -> None:
        """Apply one command from the stream (the only writer of this receiver)."""
        now = self.clock()
        state = self.store.load(receiver_id)
        new_state, effects = actor.decide(state, command, now, self.policy, random.random())
        for effect in effects:
            await self._run(receiver_id, partition, new_state, effect)

    async def wake(self, receiver_id: str, partition: int) -> None:
        """A timer fired: start the head's next attempt if it is due."""
        state = self.store.load(receiver_id)
        _, effects = actor.decide(state, actor.Wake(), self.clock(), self.policy)
        for effect in effects:
            assert isinstance(effect, (actor.Deliver, actor.ScheduleWake, actor.Ignored)), effect
            await self._run(receiver_id, partition, state, effect)

    async def _run(
        self, receiver_id: str, partition: int, state: ReceiverState | None, effect: Effect
    ) -> None:
        match effect:
            case actor.PutBacklog(seq, message):
                self.store.put_backlog(receiver_id, seq, message)
            case actor.RememberId(msg_id, seq, expires_at):
                self.store.remember_id(receiver_id, msg_id, seq, expires_at)
            case actor.SaveState():
                assert state is not None
                self.store.save(state)
            case actor.DeleteBacklog(seq):
                self.store.delete_backlog(receiver_id, seq)
            case actor.Deliver(seq, attempt):
                assert state is not None
                self._deliver(state, partition, seq, attempt)
            case actor.ScheduleWake(at):
                self.timers.schedule(receiver_id, partition, at)
            case actor.DeadLetter():
                await self.dead_letter(receiver_id, effect)
            case actor.Ignored(reason, msg_id, seq):
                log.debug("ignored receiver_id=%s msg_id=%s seq=%s: %s", receiver_id, msg_id, seq, reason)

    def _deliver(self, state: ReceiverState, partition: int, seq: int, attempt: int) -> None:
        if self.deliverer.busy(state.receiver_id):
            return
        entry = self.store.get_backlog(state.receiver_id, seq)
        if entry is None:
            log.error("backlog entry missing receiver_id=%s seq=%d", state.receiver_id, seq)
            return
        self.deliverer.start(state.receiver_id, partition, state.config, entry, attempt)

    async def dead_letter(self, receiver_id: str, effect: actor.DeadLetter, raw: bytes = b"") -> None:
        record: dict[str, Any] = {
            "receiver_id": receiver_id,
            "msg_id": effect.msg_id,
            "seq": effect.seq,
            "reason": effect.reason,
            "detail": effect.detail,
            "at": self.clock(),
        }
        if raw:
            record["raw"] = raw.decode("utf-8", "replace")
        log.warning(
            "dead-lettered msg_id=%s receiver_id=%s seq=%s reason=%s %s",
            effect.msg_id, receiver_id, effect.seq, effect.reason, effect.detail,
        )
        await self._send_dead_letter(receiver_id, orjson.dumps(record))
