"""Unordered receivers: a window of up to max_in_flight messages out at once, each retried on its own."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dispatcher.domain import actor
from dispatcher.domain.actor import (
    Configure,
    Control,
    DeadLetterHead,
    Deliver,
    Facts,
    Forget,
    Intake,
    Policy,
    Probe,
    ReceiverState,
    Result,
    Unsubscribe,
    Wake,
    decide,
    next_wake,
)
from dispatcher.domain.breaker import BreakerPolicy, Circuit
from dispatcher.domain.delivery_options import DeliveryOptions
from dispatcher.domain.records import Outcome
from tests.unit.test_actor import CONFIG, POLICY, RETRY, msg
from tests.unit.test_actor_isolation import T0, Backlog

UNORDERED = DeliveryOptions(ordering="none", concurrency="fixed", max_in_flight=3)


class Window:
    """decide() for one unordered receiver, with the seqs the deliverer would have running."""

    def __init__(self, options: DeliveryOptions = UNORDERED, policy: Policy = POLICY) -> None:
        self.policy = policy
        self.backlog = Backlog()
        self.sending: set[int] = set()
        self.probing = False
        self.state: ReceiverState | None = None
        self.state = self.run(Configure(replace(CONFIG, options=options)), T0)[0]

    def facts(self, now: float) -> Facts:
        base = self.backlog.facts(now, bool(self.sending) or self.probing)
        return replace(base, sending=frozenset(self.sending))

    def run(self, command: actor.Command, now: float = T0) -> tuple[ReceiverState, list[Any]]:
        state, effects = decide(self.state, command, self.facts(now), self.policy)
        assert state is not None
        self.backlog.apply(effects)
        self.state = state
        for effect in effects:
            if isinstance(effect, Deliver) and effect.parallel:
                assert effect.seq not in self.sending, f"seq {effect.seq} sent twice at once"
                self.sending.add(effect.seq)
            elif isinstance(effect, Probe):
                self.probing = True
        return state, effects

    def send(self, *seqs: int, now: float = T0) -> list[Deliver]:
        out: list[Deliver] = []
        for i in seqs:
            out += sent(self.run(Intake(msg(i, at=now)), now)[1])
        return out

    def answer(self, seq: int, status: int | None, now: float = T0, attempt: int | None = None) -> list[Any]:
        slot = next(s for s in self.state.window if s.seq == seq)  # type: ignore[union-attr]
        ok = status is not None and 200 <= status < 300
        outcome = Outcome(seq, f"m{seq}", "t", ok, status, None if status else "timeout", 1.0, now,
                          attempt=attempt or slot.attempts + 1)
        self.sending.discard(seq)
        return self.run(Result(outcome), now)[1]

    def wake(self, now: float) -> list[Any]:
        return self.run(Wake(), now)[1]

    def wakes_at(self) -> float | None:
        assert self.state is not None
        busy = bool(self.sending) or self.probing
        return next_wake(self.state, self.policy, busy, frozenset(self.sending))


def sent(effects: list[Any]) -> list[Deliver]:
    return [e for e in effects if isinstance(e, Deliver)]


def seqs(effects: list[Any]) -> list[int]:
    return [e.seq for e in sent(effects)]


def test_up_to_max_in_flight_go_out_at_once_and_the_next_as_soon_as_one_settles() -> None:
    w = Window()
    assert [d.seq for d in w.send(1, 2, 3, 4, 5)] == [1, 2, 3]
    assert all(d.attempt == 1 and d.parallel for d in w.send())
    assert seqs(w.answer(2, 200)) == [4], "a later seq may finish first"
    assert w.state is not None and (w.state.delivered_seq, w.state.backlog) == (0, 4), "2 is settled"
    assert seqs(w.answer(1, 200)) == [5]
    assert (w.state.delivered_seq, w.state.cursor) == (2, 6)
    for seq in (3, 4, 5):
        w.answer(seq, 200)
    assert (w.state.delivered_seq, w.state.backlog, w.state.delivered, w.state.window) == (5, 0, 5, ())
    assert w.backlog.entries == {}


def test_a_failing_message_retries_alone_while_the_others_flow() -> None:
    w = Window()
    w.send(1, 2, 3, 4, 5, 6)
    assert seqs(w.answer(1, 500)) == [], "the failed one waits out its backoff and keeps its place"
    assert seqs(w.answer(2, 200)) == [4]
    assert seqs(w.answer(3, 200)) == [5]
    assert w.wakes_at() == T0 + RETRY.schedule[0]
    retried = w.wake(T0 + RETRY.schedule[0])
    assert sent(retried) == [Deliver(1, 2, 1, parallel=True)]
    assert seqs(w.answer(4, 200, now=T0 + 1)) == [6]
    assert w.state is not None and w.state.delivered_seq == 0, "seq 1 still holds the floor"
    w.answer(1, 200, now=T0 + 1)
    assert w.state.delivered_seq == 4


def test_a_permanent_failure_dead_letters_that_message_only() -> None:
    w = Window()
    w.send(1, 2)
    effects = w.answer(1, 400)
    assert [(e.seq, e.reason, e.last_status) for e in effects if isinstance(e, DeadLetterHead)] == [
        (1, "permanent_status", 400)
    ]
    assert w.state is not None and (w.state.dead_lettered, w.state.delivered_seq) == (1, 1)
    w.answer(2, 200)
    assert (w.state.delivered, w.state.delivered_seq, w.state.backlog) == (1, 2, 0)


def test_stale_and_duplicate_outcomes_change_nothing() -> None:
    w = Window()
    w.send(1, 2)
    w.answer(1, 200)
    before = w.state
    w.sending.add(1)
    w.answer(2, 200, attempt=5)  # not the attempt that is out
    assert w.state is not None and w.state.delivered == before.delivered  # type: ignore[union-attr]
    assert [s.seq for s in w.state.window] == [2]


def test_an_open_circuit_stops_the_window_and_probes_when_nothing_is_out() -> None:
    policy = replace(POLICY, breaker=BreakerPolicy(failures=2, window=20, ratio=1.0, probe_base=10.0))
    w = Window(policy=policy)
    w.send(1, 2, 3, 4)
    w.answer(1, 500)
    w.answer(2, 500)
    assert w.state is not None and w.state.breaker.circuit is Circuit.OPEN
    opened = w.state.breaker
    assert seqs(w.answer(3, 500)) == [], "open: nothing new, and nothing to probe while one is out"
    assert w.state.breaker == opened, "a late failure does not restart the wait"
    assert w.wakes_at() == w.state.breaker.probe_at
    assert isinstance(w.wake(w.state.breaker.probe_at)[-1], Probe)
    ping = Outcome(0, "ping", "t", True, 200, None, 1.0, T0 + 20, attempt=w.state.breaker.probes, probe=True)
    w.probing = False
    half_open = w.run(Result(ping), T0 + 20)[1]
    assert len(sent(half_open)) == 1, "half-open: one message tries the receiver"


def test_a_late_success_closes_the_circuit_and_the_window_refills() -> None:
    policy = replace(POLICY, breaker=BreakerPolicy(failures=2, window=20, ratio=1.0))
    w = Window(policy=policy)
    w.send(1, 2, 3, 4, 5)
    w.answer(1, 500)
    w.answer(2, 500)
    assert w.state is not None and w.state.breaker.circuit is Circuit.OPEN
    assert seqs(w.answer(3, 200)) == [4], "a 2xx that was out proves the receiver is up (1, 2 wait to retry)"
    assert w.state.breaker.circuit is Circuit.CLOSED


def test_expired_messages_are_dead_lettered_when_started_or_waiting() -> None:
    w = Window(policy=replace(POLICY, retry=replace(RETRY, max_age=50.0)))
    w.send(1, 2, 3, 4)
    w.answer(1, 500)
    effects = w.wake(T0 + 60)
    assert sorted((e.seq, e.reason) for e in effects if isinstance(e, DeadLetterHead)) == [
        (1, "max_age"), (4, "max_age")
    ], "the idle slot and the one not yet started; 2 and 3 are out, their outcomes decide"


def test_rate_limit_paces_the_window() -> None:
    w = Window(DeliveryOptions(ordering="none", concurrency="fixed", max_in_flight=8, rate_limit=1.0))
    assert len(w.send(1, 2, 3, 4)) == 1, "burst of one at 1/s"
    assert w.wakes_at() == T0 + 1.0
    assert seqs(w.wake(T0 + 1.0)) == [2]


def test_overflow_drops_the_oldest_not_yet_started() -> None:
    w = Window(DeliveryOptions(ordering="none", concurrency="fixed", max_in_flight=2, backlog_max=3))
    w.send(1, 2, 3, 4, 5)
    assert w.state is not None and w.state.backlog == 3
    assert sorted(w.backlog.entries) == [1, 2, 5]
    assert w.state.dead_lettered == 2


def test_switching_to_strict_drains_the_window_first() -> None:
    w = Window()
    w.send(1, 2, 3, 4, 5)
    w.answer(2, 200)  # 4 starts
    strict = replace(CONFIG, options=DeliveryOptions())
    assert seqs(w.run(Configure(strict))[1]) == [], "nothing new while the window drains"
    w.answer(1, 200)
    w.answer(3, 200)
    assert w.state is not None and w.state.cursor == 5
    effects = w.answer(4, 200)
    assert (w.state.cursor, w.state.delivered_seq, w.state.window) == (0, 4, ())
    assert sent(effects) == [Deliver(5, 1)], "ordered again, from the next seq"


def test_switching_to_unordered_keeps_the_heads_attempts() -> None:
    ordered = DeliveryOptions()
    state, effects = decide(None, Configure(replace(CONFIG, options=ordered)), Facts(T0), POLICY)
    backlog = Backlog()
    for command in (Intake(msg(1, at=T0)), Intake(msg(2, at=T0))):
        state, effects = decide(state, command, backlog.facts(T0), POLICY)
        backlog.apply(effects)
    failed = Outcome(1, "m1", "t", False, 500, None, 1.0, T0, attempt=1)
    state, _ = decide(state, Result(failed), backlog.facts(T0), POLICY)
    config = replace(CONFIG, options=UNORDERED)
    state, effects = decide(state, Configure(config), backlog.facts(T0 + 100), POLICY)
    assert state is not None and [(s.seq, s.attempts) for s in state.window] == [(1, 1), (2, 0)]
    assert sent(effects) == [Deliver(1, 2, parallel=True), Deliver(2, 1, parallel=True)]


def test_the_window_survives_a_round_trip_through_bytes() -> None:
    w = Window()
    w.send(1, 2)
    w.answer(1, 500)
    assert w.state is not None
    assert ReceiverState.from_bytes(w.state.to_bytes()) == w.state


def test_deleting_dead_letters_the_backlog_in_bounded_steps_then_forgets() -> None:
    policy = replace(POLICY, max_expired_per_event=2)
    for options in (DeliveryOptions(), UNORDERED):
        w = Window(options, policy)
        for i in range(1, 6):
            w.run(Intake(msg(i, at=T0)))
        state, effects = w.run(Control("delete"))
        assert [(e.seq, e.reason) for e in effects if isinstance(e, DeadLetterHead)][:1] == [
            (1, "receiver_deleted")
        ]
        assert state.deleting and state.backlog == 3 and w.wakes_at() == 0.0, "a wake does the rest"
        late = decide(state, Intake(msg(9, at=T0)), w.facts(T0), policy)[1]
        refused = [(e.reason, e.seq) for e in late if isinstance(e, actor.DeadLetter)]
        assert refused == [("receiver_deleted", None)]
        state, effects = decide(state, Wake(), w.facts(T0), policy)
        assert state is not None and state.backlog == 1 and not sent(effects)
        forgetting, effects = decide(state, Wake(), w.facts(T0), policy)
        assert forgetting is not None and forgetting.deleting and forgetting.backlog == 0
        assert effects[-2:] == [Unsubscribe(), Forget()], "the glue deletes its entries, the state last"
        assert [e.seq for e in effects if isinstance(e, DeadLetterHead)] == [5]


def test_a_reset_dead_letters_the_backlog_then_starts_afresh_with_seqs_carrying_on() -> None:
    policy = replace(POLICY, max_expired_per_event=2)
    w = Window(DeliveryOptions(), policy)
    for i in range(1, 4):
        w.run(Intake(msg(i, at=T0)))
    w.run(Result(Outcome(1, "m1", "t", False, 500, None, 1.0, T0, attempt=1)))
    assert w.state is not None and w.state.failed_attempts == 1
    state, effects = w.run(Control("reset"), T0 + 5)
    assert state.resetting
    assert [e.reason for e in effects if isinstance(e, DeadLetterHead)] == ["state_reset"] * 2
    assert isinstance(effects[0], actor.ForgetHistory), "the history goes first, the purge's letters stay"
    state, effects = decide(state, Wake(), w.facts(T0 + 6), policy)
    assert state is not None and not state.resetting
    counts = (state.next_seq, state.delivered_seq, state.backlog, state.failed_attempts, state.dead_lettered)
    assert counts == (4, 3, 0, 0, 3), "seqs carry on; counters start again from the reset's dead letters"
    assert state.active_since == T0 + 6 and state.dead_letters_kept == 3
    assert not any(isinstance(e, actor.ForgetHistory) for e in effects), "the reset's letters are kept"
