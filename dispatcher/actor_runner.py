"""Where the actor's effects become I/O: table writes, deliveries, timers, dead letters.

Commands come from the records of the receiver's partition (`handle`, called
by `consume.apply_record` in the fetch loop) and, for delivery outcomes made
on this worker, straight from the deliverer (`apply_outcome`). One lock
serialises both, so each command is applied whole before the next: the runner
stays the only writer of a receiver's entries. After every command the
receiver's timer is set from its new state, so the timer wheel mirrors the
table.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import fields, replace
from typing import Any

import orjson

from .actor_store import HISTORY, ActorStore
from .applied import AppliedOffsets
from .deliverer import Deliverer
from .domain import actor
from .domain.actor import Command, Effect, Facts, Policy, ReceiverState
from .domain.records import Message, Outcome
from .domain.subscriptions import encode_subscription
from .domain.untrusted import RAW_PREFIX, clean_text, log_token, one_line, raw_summary
from .metrics import ReceiverBook
from .table_writer import Fenced, WriteRefused
from .timers import PartitionTimers

log = logging.getLogger(__name__)
OUTCOME_FIELDS = tuple(f.name for f in fields(Outcome))
FORGET_STEP = 1000  # table entries a deleted receiver's command removes; a wake does the rest
UNAPPLIED_RETRY = 60.0  # seconds before a receiver whose outcome could not be applied is woken

SendDeadLetter = Callable[[str, bytes], Awaitable[None]]
# (receiver id, record or None for a tombstone) to a topic keyed by receiver id
Publish = Callable[[str, bytes | None], Awaitable[None]]


async def publish_nowhere(receiver_id: str, record: bytes | None) -> None:
    return None


class ActorRunner:
    def __init__(
        self,
        store: ActorStore,
        deliverer: Deliverer,
        timers: PartitionTimers,
        send_dead_letter: SendDeadLetter,
        policy: Policy,
        requests_topic: str,
        clock: Callable[[], float] = time.time,
        publish_subscription: Publish = publish_nowhere,
        seal_key: bytes | None = None,
    ) -> None:
        self.store = store
        self.seal_key = seal_key  # the group's (record_seal.py); None: no record is taken as a worker's
        self.deliverer = deliverer
        self.timers = timers
        self._send_dead_letter = send_dead_letter
        self.policy = policy
        self.requests_topic = requests_topic
        self.clock = clock
        self._publish_subscription = publish_subscription
        self.lock = asyncio.Lock()
        self.applied = AppliedOffsets()  # how far each requests partition is applied (consume.py marks it)
        # May an outcome be applied here now? (the partition is owned and no rebalance is under way)
        self.writable: Callable[[int], bool] = lambda partition: False
        # May this worker write its tables at all now? (the stall fence)
        self.may_write: Callable[[], bool] = lambda: True
        # Told of every attempt logged (receiver id, record): the developer UI's live tail.
        self.on_attempt: Callable[[str, bytes], None] = lambda receiver_id, record: None
        self.book = ReceiverBook()  # the owned receivers' lag, for /metrics

    async def handle(self, receiver_id: str, partition: int, command: Command) -> None:
        """Apply one command decoded from a record of the receiver's partition."""
        async with self.lock:
            await self._handle(receiver_id, partition, command)

    async def apply_outcome(self, receiver_id: str, partition: int, outcome: Outcome) -> bool:
        """Apply an outcome of this worker's delivery at once, without the round trip through Kafka.

        False when the partition is not writable here (it is moving): the
        caller then sends the outcome through the commands topic, to whichever
        worker owns the partition once the rebalance is done.
        """
        async with self.lock:
            if not self.writable(partition):
                return False
            self.deliverer.release(receiver_id, outcome.token)
            try:
                await self._handle(receiver_id, partition, actor.Result(outcome))
            except WriteRefused:
                raise
            except Exception as exc:
                log.exception("cannot apply outcome receiver_id=%s msg_id=%s seq=%s attempt=%d",
                              receiver_id, outcome.msg_id, outcome.seq, outcome.attempt)
                await self._apply_as_failure(receiver_id, partition, outcome, exc)
            return True

    async def _apply_as_failure(
        self, receiver_id: str, partition: int, outcome: Outcome, exc: Exception
    ) -> None:
        """An outcome that cannot be applied counts as a failed attempt, on the normal schedule.

        Dropping it would leave the head due at once: a receiver whose answer
        breaks the outcome path would be POSTed again and again with no backoff.
        """
        failed = replace(outcome, ok=False, status=None, headers={}, body_prefix="",
                         error=f"unusable response ({type(exc).__name__})")
        try:
            await self._handle(receiver_id, partition, actor.Result(failed))
        except WriteRefused:
            raise
        except Exception:
            log.exception("cannot apply outcome receiver_id=%s msg_id=%s seq=%s even as a failure",
                          receiver_id, outcome.msg_id, outcome.seq)
            self.timers.set(receiver_id, partition, self.clock() + UNAPPLIED_RETRY)

    async def _handle(self, receiver_id: str, partition: int, command: Command) -> None:
        if not self.may_write():  # checked once per command, so none is applied in part
            raise Fenced("ownership in doubt after a stall: the command waits for the group's word")
        now = self.clock()
        state = self.store.load(receiver_id)
        if isinstance(command, actor.Wake) and state is not None:
            command = self._sweep(state, partition, now)
        facts = Facts(
            now,
            random.random(),
            self.deliverer.busy(receiver_id),
            self.store.backlog_view(receiver_id),
            self.deliverer.in_flight_seqs(receiver_id),
        )
        new_state, effects = actor.decide(state, command, facts, self.policy)
        if state is not None and new_state is not None and new_state.congestion is not state.congestion:
            self._count_window(state, new_state)
        letters = await self._send_dead_letters(receiver_id, effects)
        log_purge_step(receiver_id, effects, new_state)
        for effect in effects:
            if isinstance(effect, actor.DeadLetterHead):  # on the topic already: now the table
                self.store.put_dead_letter(receiver_id, effect.seq, letters[effect.seq])
                continue
            sending = self._run(receiver_id, partition, new_state, effect)
            if sending is not None:
                await sending
        if new_state is not None and not (new_state.deleting and self.store.peek(receiver_id) is None):
            self.set_timer(new_state, partition)
            if state is None:
                self.book.created(partition)
        else:
            self.timers.set(receiver_id, partition, None)
            if state is not None:
                self.book.deleted(receiver_id, partition)

    def _count_window(self, before: ReceiverState, after: ReceiverState) -> None:
        """An adaptive window that moved is counted for /metrics, by why."""
        if after.congestion.window != before.congestion.window:
            self.deliverer.counts.window_change(after.congestion.reason)

    def _sweep(self, state: ReceiverState, partition: int, now: float) -> actor.Wake:
        """Expired dedup entries and kept messages go on a wake; the actor learns the next expiries."""
        rid = state.receiver_id
        dedup = self.store.sweep_dedup(rid, partition, now) if 0 < state.dedup_sweep_at <= now else None
        retain = None
        if 0 < state.retain_sweep_at <= now:
            retain = self.store.sweep_retained(rid, partition, now, self.policy.retain)
        return actor.Wake(dedup, retain)

    def set_timer(self, state: ReceiverState, partition: int) -> None:
        """The receiver's next wake, from its newest state (which the lag book notes too)."""
        self.book.note(state, partition)
        busy = self.deliverer.busy(state.receiver_id)
        sending = self.deliverer.in_flight_seqs(state.receiver_id)
        self.timers.set(state.receiver_id, partition, actor.next_wake(state, self.policy, busy, sending))

    def _run(
        self, receiver_id: str, partition: int, state: ReceiverState | None, effect: Effect
    ) -> Awaitable[None] | None:
        """Run one effect; one that sends (to a topic) is returned to be awaited, in its turn."""
        match effect:
            case actor.PutBacklog(seq, _, encoded):
                self.store.put_backlog(receiver_id, seq, encoded)
            case actor.RememberId(msg_id, seq, expires_at):
                self.store.remember_id(receiver_id, msg_id, seq, expires_at)
            case actor.RememberFiltered(msg_id, expires_at):
                self.store.remember_filtered(receiver_id, msg_id, expires_at)
                self.deliverer.counts.filtered += 1
            case actor.MarkCancelled(msg_id, seq):
                self.store.mark_cancelled(receiver_id, msg_id, seq)
            case actor.SaveState():
                assert state is not None
                self.store.save(state)
            case actor.DeleteBacklog(seq, superseded_by):
                if superseded_by:  # before its entry goes: status and catch-up read `superseded`
                    self.store.mark_superseded(receiver_id, seq, superseded_by)
                    self.deliverer.counts.superseded += 1
                settled_at = self.clock() if self.policy.retain else 0.0
                self.store.settle(receiver_id, seq, settled_at, superseded_by)
            case actor.PutLatest(key, seq):
                self.store.put_latest(receiver_id, key, seq)
            case actor.DropLatest(key, seq):
                self.store.drop_latest(receiver_id, key, seq)
            case actor.Deliver(seq, attempt, count, lane, parallel):
                assert state is not None
                config = state.config
                self.deliverer.start(receiver_id, partition, config, seq, attempt, count, lane, parallel)
            case actor.Probe(number):
                assert state is not None
                lane = state.health.lane
                self.deliverer.start_probe(receiver_id, partition, state.config, number, lane)
            case actor.Heartbeat(number, last_seq):
                assert state is not None
                lane = state.health.lane
                self.deliverer.start_heartbeat(receiver_id, partition, state.config, number, last_seq, lane)
            case actor.Subscribe():
                assert state is not None
                config = state.config
                record = encode_subscription(config.event_types, config.tenant, config.filter)
                return self._publish_subscription(receiver_id, record)
            case actor.Unsubscribe():
                return self._publish_subscription(receiver_id, None)
            case actor.ForgetHistory():
                self.store.forget(receiver_id, partition, HISTORY)
            case actor.Forget():
                removed, gone = self.store.forget_step(receiver_id, partition, FORGET_STEP)
                if gone:
                    log.info("receiver_id=%s deleted (last %d table entries removed)", receiver_id, removed)
            case actor.MovedLane(lane, p90, timeouts):
                log.info("receiver_id=%s moved to the %s lane (p90 %s ms, %d timeouts in a row)",
                         receiver_id, lane, p90, timeouts)
            case actor.TrimDeadLetters(_, excess):
                self.store.trim_dead_letters(receiver_id, partition, excess)
            case actor.LogAttempt(control=control):
                if control:
                    assert state is not None
                    self.deliverer.counts.control(state.config.options.delivery_control)
                record = attempt_record(effect)
                self.store.log_attempt(receiver_id, effect.number, record)
                self.on_attempt(receiver_id, record)
            case actor.DeadLetter():
                return self.dead_letter(receiver_id, effect)
            case actor.Ignored(reason, msg_id, seq):
                log.debug("ignored receiver_id=%s msg_id=%s seq=%s: %s", receiver_id, msg_id, seq, reason)
        return None

    async def _send_dead_letters(self, receiver_id: str, effects: list[Effect]) -> dict[int, bytes]:
        """Send the command's dead letters to the topic, all at once, before the table records them.

        One at a time, a backlog expiring 200 messages per command held the
        runner (every receiver's commands) for 200 broker round trips.
        """
        letters = {e.seq: self._dead_letter_record(receiver_id, e)
                   for e in effects if isinstance(e, actor.DeadLetterHead)}
        if letters:
            await asyncio.gather(*(self._send_dead_letter(receiver_id, raw) for raw in letters.values()))
        return letters

    def _dead_letter_record(self, receiver_id: str, effect: actor.DeadLetterHead) -> bytes:
        """A message that will not be delivered, as its dead letter (logged)."""
        entry = self.store.get_backlog(receiver_id, effect.seq) or {"id": "", "seq": effect.seq}
        record = {
            "receiver_id": receiver_id,
            "seq": effect.seq,
            "msg_id": entry["id"],
            "reason": effect.reason,
            "detail": effect.detail,
            "attempts": effect.attempts,
            "last_status": effect.last_status,
            "last_error": effect.last_error,
            "at": self.clock(),
            "message": bounded_content({k: entry.get(k) for k in MESSAGE_FIELDS}),
        }
        raw = encode_letter(record)
        self.deliverer.counts.dead_letter(effect.reason)
        log.log(
            logging.DEBUG if effect.reason in PURGE_REASONS else logging.WARNING,
            "dead-lettered msg_id=%s receiver_id=%s seq=%d attempt=%d reason=%s %s",
            entry["id"], receiver_id, effect.seq, effect.attempts, effect.reason,
            one_line(effect.detail[:300]),
        )
        return raw

    async def dead_letter(
        self, receiver_id: str, effect: actor.DeadLetter, raw: bytes = b"", keep_prefix: bool = True
    ) -> None:
        """A record that never got a seq: it goes to the dead-letter topic only, bounded in size.

        With `raw` (a record that could not be read) the letter keeps a prefix of
        it (none unless `keep_prefix`), its size and its sha256.
        """
        key = receiver_id if len(receiver_id) <= MAX_KEY else receiver_id[:MAX_KEY]  # a hostile key
        record: dict[str, Any] = {
            "receiver_id": key,
            "msg_id": effect.msg_id,
            "seq": effect.seq,
            "reason": effect.reason,
            "detail": clean_text(effect.detail, 2000),
            "at": self.clock(),
        }
        if raw:
            summary = raw_summary(raw, RAW_PREFIX if keep_prefix else 0)
            record |= {"raw": summary["prefix"], "raw_size": summary["size"], "raw_sha256": summary["sha256"]}
            if summary["truncated"]:
                record["raw_truncated"] = True
        if effect.message is not None:
            record["message"] = bounded_content(message_content(effect.message))
        log.warning(  # a rejected record's key and detail are a producer's: escaped for the log
            "dead-lettered msg_id=%s receiver_id=%s seq=%s reason=%s %s",
            log_token(effect.msg_id), log_token(key), effect.seq, effect.reason,
            one_line(record["detail"][:300]),
        )
        self.deliverer.counts.dead_letter(effect.reason)
        await self._send_dead_letter(key, encode_letter(record))


# A delete or a reset dead-letters the backlog on purpose, up to 200 a step: a line per step, not per letter.
PURGE_REASONS = frozenset({actor.RECEIVER_DELETED, actor.STATE_RESET})


def log_purge_step(receiver_id: str, effects: list[Effect], state: ReceiverState | None) -> None:
    """One INFO line for a step of a delete or reset: how many it dead-lettered, how many are left."""
    purged = [e for e in effects if isinstance(e, actor.DeadLetterHead) and e.reason in PURGE_REASONS]
    if purged:
        left = state.backlog if state is not None else 0
        seqs = [e.seq for e in purged]
        log.info("receiver_id=%s %d messages dead-lettered reason=%s (seqs %d..%d), %d left in its backlog",
                 receiver_id, len(purged), purged[0].reason, min(seqs), max(seqs), left)


MESSAGE_FIELDS = ("type", "data", "headers", "accepted_at", "replay_of", "ordering_key")
MAX_KEY = 256
# A dead letter must fit in one produce request (Kafka's default limit is 1 MB):
# a message whose content is larger keeps a summary of it instead.
MAX_DEAD_LETTER_CONTENT = 512 * 1024


def encode_letter(record: dict[str, Any]) -> bytes:
    """A dead letter's bytes, always: a message whose content cannot be encoded keeps why instead."""
    try:
        return orjson.dumps(record)
    except TypeError as exc:
        record["message"] = {"data": None, "unencodable": f"{type(exc).__name__}: {exc}"[:300]}
        return orjson.dumps(record)


def message_content(msg: Message) -> dict[str, Any]:
    return {"type": msg.event_type, "data": msg.payload, "headers": msg.headers,
            "accepted_at": msg.accepted_at, "replay_of": msg.replay_of,
            **({"ordering_key": msg.ordering_key} if msg.ordering_key else {})}


def bounded_content(content: dict[str, Any]) -> dict[str, Any]:
    """The message as a dead letter keeps it: whole, or its data summarised if too large."""
    try:
        data = orjson.dumps(content.get("data"))
    except TypeError:
        data = b""
    if len(data) <= MAX_DEAD_LETTER_CONTENT:
        return content
    return {**content, "data": None, "data_summary": raw_summary(data)}


def attempt_record(effect: actor.LogAttempt) -> bytes:
    outcome = {name: getattr(effect.outcome, name) for name in OUTCOME_FIELDS if name != "token"}
    record = {"number": effect.number, "kind": effect.kind, "attempt": effect.attempt, **outcome}
    if effect.control:
        record["control"] = effect.control
    return orjson.dumps(record)
