"""The receiver actor's transitions, driven synchronously with a fake clock."""

from __future__ import annotations

from dataclasses import replace

from dispatcher.domain import actor
from dispatcher.domain.actor import (
    Configure,
    DeadLetter,
    DeleteBacklog,
    Deliver,
    Ignored,
    Intake,
    Policy,
    PutBacklog,
    ReceiverState,
    RememberId,
    Result,
    SaveState,
    ScheduleWake,
    Wake,
    decide,
)
from dispatcher.domain.backoff import Backoff
from dispatcher.domain.records import Message, Outcome, ReceiverConfig

POLICY = Policy(Backoff(base=1.0, cap=8.0, jitter=0.0), dedup_window=100.0)
CONFIG = ReceiverConfig("r1", "http://127.0.0.1:1/", "whsec_" + "A" * 32)


def msg(i: int) -> Message:
    return Message(f"m{i}", "r1", "a.b", {"i": i})


def outcome(seq: int, ok: bool, token: str = "t") -> Outcome:
    return Outcome(seq, f"m{seq}", token, ok, 200 if ok else 500, None, 1.0, 0.0)


def fresh() -> ReceiverState:
    state, effects = decide(None, Configure(CONFIG), 0.0, POLICY)
    assert effects == [SaveState()]
    assert state is not None
    return state


def test_first_message_is_stored_then_delivered() -> None:
    state, effects = decide(fresh(), Intake(msg(1)), 10.0, POLICY)
    assert effects == [PutBacklog(1, msg(1)), RememberId("m1", 1, 110.0), SaveState(), Deliver(1, 1)]
    assert (state.next_seq, state.head, state.backlog) == (2, 1, 1)


def test_second_message_waits_behind_the_head() -> None:
    state, _ = decide(fresh(), Intake(msg(1)), 0.0, POLICY)
    state, effects = decide(state, Intake(msg(2)), 0.0, POLICY)
    assert not any(isinstance(e, Deliver) for e in effects)
    assert state.head == 1 and state.backlog == 2


def test_success_advances_and_delivers_the_next() -> None:
    state = replace(fresh(), next_seq=3)
    state, effects = decide(state, Result(outcome(1, True)), 5.0, POLICY)
    assert effects == [SaveState(), DeleteBacklog(1), Deliver(2, 1)]
    assert (state.delivered_seq, state.delivered, state.last_response["status"]) == (1, 1, 200)


def test_failure_backs_off_exponentially_then_success_resets() -> None:
    state = replace(fresh(), next_seq=2)
    dues = []
    for _ in range(5):
        state, effects = decide(state, Result(outcome(1, False)), 100.0, POLICY)
        assert effects[0] == SaveState()
        dues.append(effects[1].at - 100.0)
    assert dues == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert state.attempts == 5 and state.failed_attempts == 5
    state, effects = decide(state, Result(outcome(1, True)), 200.0, POLICY)
    assert (state.attempts, state.next_attempt_at, state.head) == (0, 0.0, None)


def test_wake_delivers_only_when_due() -> None:
    state = replace(fresh(), next_seq=2, attempts=2, next_attempt_at=50.0)
    assert decide(state, Wake(), 49.0, POLICY)[1] == [ScheduleWake(50.0)]
    assert decide(state, Wake(), 50.0, POLICY)[1] == [Deliver(1, 3)]
    assert decide(replace(state, next_seq=1, delivered_seq=0), Wake(), 99.0, POLICY)[1] == []


def test_stale_outcome_changes_nothing_but_may_resume_the_head() -> None:
    state = replace(fresh(), next_seq=4, delivered_seq=2)
    new, effects = decide(state, Result(outcome(1, True)), 0.0, POLICY)
    assert new == state
    assert effects == [Ignored("stale outcome", "m1", 1), Deliver(3, 1)]


def test_duplicate_id_within_window_is_ignored() -> None:
    state = replace(fresh(), next_seq=6)
    new, effects = decide(state, Intake(msg(3), seen_seq=3), 0.0, POLICY)
    assert new == state and effects == [Ignored("duplicate message id", "m3", 3)]


def test_dedup_entry_ahead_of_saved_state_is_not_trusted() -> None:
    """Crash after the dedup write but before the state write: the message keeps its seq."""
    state = replace(fresh(), next_seq=6)
    new, effects = decide(state, Intake(msg(9), seen_seq=6), 0.0, POLICY)
    assert effects[0] == PutBacklog(6, msg(9)) and new.next_seq == 7


def test_message_for_unknown_receiver_is_dead_lettered() -> None:
    state, effects = decide(None, Intake(msg(1)), 0.0, POLICY)
    assert state is None
    assert effects == [DeadLetter("unknown_receiver", "m1", None, "no such receiver")]


def test_reconfigure_resumes_a_waiting_head() -> None:
    state = replace(fresh(), next_seq=2)
    new, effects = decide(state, Configure(replace(CONFIG, url="http://127.0.0.1:2/")), 0.0, POLICY)
    assert new.config.url.endswith(":2/") and effects == [SaveState(), Deliver(1, 1)]


def test_state_round_trips_through_bytes() -> None:
    state, _ = decide(replace(fresh(), next_seq=2), Result(outcome(1, False)), 3.0, POLICY)
    assert ReceiverState.from_bytes(state.to_bytes()) == state


def test_order_holds_for_any_interleaving_of_outcomes() -> None:
    """Drive 30 messages with failures and stale outcomes: Deliver seqs never skip ahead."""
    import random

    rng = random.Random(3)
    state = fresh()
    delivered_first: list[int] = []
    for i in range(1, 31):
        state, _ = decide(state, Intake(msg(i)), 0.0, POLICY)
    now = 0.0
    while state.head is not None:
        now += 10.0
        head = state.head
        for stale in (head - 1, head - 2):
            if stale > 0 and rng.random() < 0.3:
                state, _ = decide(state, Result(outcome(stale, True)), now, POLICY)
        ok = rng.random() < 0.6
        state, effects = decide(state, Result(outcome(head, ok)), now, POLICY)
        if ok:
            delivered_first.append(head)
        assert all(e.seq == state.head for e in effects if isinstance(e, Deliver))
    assert delivered_first == list(range(1, 31))
    assert actor.ReceiverState.from_bytes(state.to_bytes()).delivered == 30
