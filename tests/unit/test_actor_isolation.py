"""The actor's isolation rules: batches, rate limits, backlog caps and lanes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson

from dispatcher.domain import actor
from dispatcher.domain.actor import (
    Configure,
    Control,
    DeadLetter,
    DeadLetterHead,
    DeleteBacklog,
    Deliver,
    DropLatest,
    Facts,
    Intake,
    MovedLane,
    Policy,
    PutBacklog,
    PutLatest,
    ReceiverState,
    Result,
    Wake,
    decide,
    next_wake,
)
from dispatcher.domain.delivery_options import REJECT, DeliveryOptions
from dispatcher.domain.lanes import Lane, LanePolicy
from dispatcher.domain.records import Message, Outcome, ReceiverConfig
from tests.unit.test_actor import CONFIG, POLICY, msg

T0 = 1.0  # every message in these tests is accepted at T0


class Backlog:
    """A stand-in for the table's backlog (a `BacklogView`): what PutBacklog wrote, DeleteBacklog removed."""

    def __init__(self) -> None:
        self.entries: dict[int, bytes] = {}
        self.newest: dict[str, int] = {}  # coalescing's index: ordering key -> newest seq

    def facts(self, now: float, in_flight: bool = False) -> Facts:
        return Facts(now, 0.5, in_flight, self)

    def accepted_at(self, seq: int) -> float | None:
        return T0 if seq in self.entries else None

    def size(self, seq: int) -> int:
        return len(self.entries.get(seq, b""))

    def key(self, seq: int) -> str:
        raw = self.entries.get(seq)
        return str(orjson.loads(raw).get("ordering_key") or "") if raw else ""

    def latest(self, seq: int) -> int:
        return self.newest.get(self.key(seq), 0)

    def apply(self, effects: list[Any]) -> None:
        for effect in effects:
            if isinstance(effect, PutBacklog):
                self.entries[effect.seq] = effect.encoded
            elif isinstance(effect, DeleteBacklog):
                del self.entries[effect.seq]
            elif isinstance(effect, PutLatest):
                self.newest[effect.key] = effect.seq
            elif isinstance(effect, DropLatest) and self.newest.get(effect.key) == effect.seq:
                del self.newest[effect.key]


class Actor:
    """decide() with effects applied to a Backlog, and the in-flight flag the glue would keep."""

    def __init__(self, options: DeliveryOptions | None = None, policy: Policy = POLICY) -> None:
        self.policy = policy
        self.backlog = Backlog()
        self.in_flight = False
        config = replace(CONFIG, options=options or DeliveryOptions())
        self.state: ReceiverState = self.run(Configure(config), T0)[0]

    def run(self, command: actor.Command, now: float) -> tuple[ReceiverState, list[Any]]:
        facts = self.backlog.facts(now, self.in_flight)
        state, effects = decide(getattr(self, "state", None), command, facts, self.policy)
        assert state is not None
        self.backlog.apply(effects)
        self.state = state
        if any(isinstance(e, (Deliver, actor.Probe)) for e in effects):
            self.in_flight = True
        return state, effects

    def send(self, i: int, now: float = T0) -> list[Any]:
        return self.run(Intake(msg(i, at=now)), now)[1]

    def answer(
        self, status: int | None, now: float = T0, last: int = 0, latency_ms: float = 1.0
    ) -> list[Any]:
        head = self.state.head
        assert head is not None and self.in_flight
        ok = status is not None and 200 <= status < 300
        error = None if status else "timeout"
        outcome = Outcome(head, f"m{head}", "t", ok, status, error, latency_ms, now,
                          attempt=self.state.attempts + 1, last=last)
        self.in_flight = False
        return self.run(Result(outcome), now)[1]


def delivers(effects: list[Any]) -> list[Deliver]:
    return [e for e in effects if isinstance(e, Deliver)]


def dead(effects: list[Any]) -> list[tuple[int, str]]:
    return [(e.seq, e.reason) for e in effects if isinstance(e, DeadLetterHead)]


# batching ------------------------------------------------------------------


def test_an_idle_batching_receiver_gets_a_single_event_at_once() -> None:
    a = Actor(DeliveryOptions(batch_max=100))
    assert delivers(a.send(1)) == [Deliver(1, 1, count=1)]


def test_batches_form_from_the_backlog_and_settle_as_a_whole() -> None:
    a = Actor(DeliveryOptions(batch_max=3))
    a.send(1)
    for i in range(2, 7):
        assert delivers(a.send(i)) == [], "one POST at a time"
    assert delivers(a.answer(200)) == [Deliver(2, 1, count=3)]
    effects = a.answer(200, last=4)  # the glue may carry fewer than asked (bytes cap)
    assert [e.seq for e in effects if isinstance(e, DeleteBacklog)] == [2, 3, 4]
    assert delivers(effects) == [Deliver(5, 1, count=2)]
    assert (a.state.delivered_seq, a.state.delivered) == (4, 4)


def test_a_refused_batch_is_dead_lettered_whole() -> None:
    a = Actor(DeliveryOptions(batch_max=10))
    a.send(1)
    for i in range(2, 5):
        a.send(i)
    a.answer(200)
    effects = a.answer(400, last=4)
    assert dead(effects) == [(2, "permanent_status"), (3, "permanent_status"), (4, "permanent_status")]
    assert (a.state.delivered_seq, a.state.dead_lettered, a.state.head) == (4, 3, None)


def test_a_failed_batch_is_retried_from_its_head() -> None:
    a = Actor(DeliveryOptions(batch_max=10))
    a.send(1)
    a.send(2)
    a.send(3)
    a.answer(500)  # seq 1 alone failed
    assert a.state.head == 1 and not delivers(a.run(Wake(), T0 + 0.01)[1])
    wake = next_wake(a.state, a.policy, False)
    assert wake is not None
    assert delivers(a.run(Wake(), wake)[1]) == [Deliver(1, 2, count=3)], "the retry carries what queued since"


# rate limit -------------------------------------------------------------------


def test_rate_limit_spaces_posts_and_caps_batches() -> None:
    a = Actor(DeliveryOptions(rate_limit=2.0))
    assert delivers(a.send(1)) == [Deliver(1, 1)]
    a.send(2)
    a.send(3)
    assert delivers(a.answer(200)) == [Deliver(2, 1)]
    assert delivers(a.answer(200)) == [], "two tokens spent at T0"
    assert a.state.next_attempt_at == T0 + 0.5 and next_wake(a.state, a.policy, False) == T0 + 0.5
    assert delivers(a.run(Wake(), T0 + 0.5)[1]) == [Deliver(3, 1)]
    assert a.state.attempts == 0, "waiting for a token is not a failed attempt"

    b = Actor(DeliveryOptions(rate_limit=5.0, batch_max=100))
    b.send(1)
    for i in range(2, 30):
        b.send(i)
    assert delivers(b.answer(200)) == [Deliver(2, 1, count=4)], "4 tokens left of a burst of 5"


# backlog caps -----------------------------------------------------------------


def test_overflow_dead_letters_the_oldest_but_never_the_one_in_flight() -> None:
    a = Actor(policy=replace(POLICY, backlog_max=2))
    a.send(1)
    a.send(2)
    assert dead(a.send(3)) == [], "seq 1 is in flight"
    effects = a.answer(500)
    assert dead(effects) == [(1, "backlog_full")]
    assert delivers(effects) == [Deliver(2, 1)]
    assert (a.state.backlog, a.state.dead_lettered) == (2, 1)


def test_a_paused_receiver_keeps_the_newest_messages_within_its_cap() -> None:
    a = Actor(DeliveryOptions(backlog_max=3))
    a.run(Control("pause"), T0)
    for i in range(1, 11):
        a.send(i)
    assert (a.state.delivered_seq, a.state.backlog, a.state.dead_lettered) == (7, 3, 7)
    assert sorted(a.backlog.entries) == [8, 9, 10]


def test_byte_cap_counts_stored_sizes() -> None:
    probe = Actor()
    probe.send(1)
    size = len(probe.backlog.entries[1])
    a = Actor(DeliveryOptions(backlog_max_bytes=2 * size))
    a.run(Control("pause"), T0)
    for i in range(1, 6):
        a.send(i)
    assert a.state.backlog == 2 and a.state.backlog_bytes == 2 * size
    a.run(Control("resume"), T0)
    a.answer(200)
    assert a.state.backlog_bytes == size == sum(len(v) for v in a.backlog.entries.values())


def test_reject_refuses_new_messages_and_keeps_the_backlog() -> None:
    a = Actor(policy=replace(POLICY, backlog_max=2, backlog_overflow=REJECT))
    a.send(1)
    a.send(2)
    effects = a.send(3)
    assert effects == [DeadLetter("backlog_full", "m3", None, effects[0].detail)]
    assert "refused" in effects[0].detail and a.state.next_seq == 3
    a.answer(200)
    assert next(e for e in a.send(3) if isinstance(e, PutBacklog)).seq == 3, "room again: accepted"


# lanes ----------------------------------------------------------------------------


def test_slow_answers_move_deliveries_to_the_slow_lane_and_fast_ones_bring_them_back() -> None:
    lanes = LanePolicy(slow_ms=1000.0, window=4, min_samples=2, timeouts=2, parole_after=2)
    a = Actor(policy=replace(POLICY, lanes=lanes))
    for i in range(1, 8):
        a.send(i)
    assert delivers(a.answer(200, latency_ms=3000.0)) == [Deliver(2, 1)]
    effects = a.answer(200, latency_ms=3000.0)
    assert [e for e in effects if isinstance(e, MovedLane)] == [MovedLane(Lane.SLOW, 3000.0, 0)]
    assert delivers(effects) == [Deliver(3, 1, lane=Lane.SLOW)]
    assert delivers(a.answer(200, latency_ms=5.0)) == [Deliver(4, 1, lane=Lane.SLOW)]
    effects = a.answer(200, latency_ms=5.0)
    assert any(isinstance(e, MovedLane) and e.lane is Lane.FAST for e in effects)
    assert delivers(effects) == [Deliver(5, 1)]
    assert a.state.health.moves == 2


def test_state_with_lane_and_bucket_survives_the_table() -> None:
    a = Actor(DeliveryOptions(rate_limit=3.0, batch_max=5, backlog_max=10))
    a.send(1)
    a.answer(None)
    assert ReceiverState.from_bytes(a.state.to_bytes()) == a.state


def test_a_message_is_stored_with_its_size() -> None:
    a = Actor()
    [put] = [e for e in a.send(1) if isinstance(e, PutBacklog)]
    assert put.encoded and a.state.backlog_bytes == len(put.encoded)
    assert put == PutBacklog(1, Message("m1", "r1", "a.b", {"i": 1}, accepted_at=T0))


def test_config_options_round_trip() -> None:
    config = replace(CONFIG, options=DeliveryOptions(rate_limit=1.5, batch_max=7, backlog_overflow=REJECT))
    assert ReceiverConfig.from_dict(config.as_dict()) == config


def test_a_message_larger_than_the_byte_cap_leaves_no_bytes_behind() -> None:
    """Stored and dead-lettered by one command: its bytes leave the count with it, or every later
    message would find the backlog full for ever."""
    probe = Actor()
    probe.send(1)
    size = len(probe.backlog.entries[1])
    a = Actor(DeliveryOptions(backlog_max_bytes=size // 2))
    for i in range(1, 4):
        effects = a.send(i)
        assert [e.reason for e in effects if isinstance(e, DeadLetterHead)] == ["backlog_full"]
    assert (a.state.backlog, a.state.backlog_bytes, a.backlog.entries) == (0, 0, {})
    a.run(Configure(replace(CONFIG, options=DeliveryOptions(backlog_max_bytes=2 * size))), T0)
    assert any(isinstance(e, Deliver) for e in a.send(4)), "room again: delivered"
