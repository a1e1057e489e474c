"""The receiver actor's transitions, driven synchronously with a fake clock."""

from __future__ import annotations

import random
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
    Facts,
    Ignored,
    Intake,
    LogAttempt,
    Policy,
    Probe,
    PutBacklog,
    ReceiverState,
    RememberId,
    Result,
    SaveState,
    Subscribe,
    Wake,
    decide,
    next_wake,
)
from dispatcher.domain.breaker import BreakerPolicy, Circuit
from dispatcher.domain.evolve import evolve
from dispatcher.domain.records import Message, Outcome, ReceiverConfig
from dispatcher.domain.retry import RetryPolicy

RETRY = RetryPolicy(schedule=(1.0, 2.0, 4.0, 8.0), jitter=0.0, max_attempts=100, max_age=1000.0)
POLICY = Policy(RETRY, BreakerPolicy(failures=1000, window=20, ratio=1.0), dedup_window=100.0)
CONFIG = ReceiverConfig("r1", "http://127.0.0.1:1/", "whsec_" + "A" * 32)


def msg(i: int, at: float = 0.0) -> Message:
    return Message(f"m{i}", "r1", "a.b", {"i": i}, accepted_at=at)


def outcome(seq: int, status: int | None, attempt: int = 1, **kw: Any) -> Outcome:
    ok = status is not None and 200 <= status < 300
    error = None if status else "timeout"
    return Outcome(seq, f"m{seq}", "t", ok, status, error, 1.0, 0.0, attempt=attempt, **kw)


def answer(state: ReceiverState, status: int | None, **kw: Any) -> Result:
    """The result of the head's current attempt."""
    assert state.head is not None
    return Result(outcome(state.head, status, attempt=state.attempts + 1, **kw))


def probe_result(state: ReceiverState, ok: bool, status: int | None = None) -> Result:
    """The result of the latest probe."""
    status = status or (200 if ok else None)
    error = None if ok else "refused"
    number = state.breaker.probes
    return Result(Outcome(0, "ping_x", "t", ok, status, error, 1.0, 0.0, attempt=number, probe=True))


def step(
    state: ReceiverState | None,
    command: actor.Command,
    now: float,
    policy: Policy = POLICY,
    in_flight: bool = False,
    backlog: dict[int, float] | None = None,
) -> tuple[Any, list[Any]]:
    """decide() with a backlog whose every seq was accepted at 0 unless given."""
    return decide(state, command, Facts(now, 0.5, in_flight, AcceptedAt(backlog)), policy)


class AcceptedAt:
    """A backlog view: each seq accepted when `times` says (None: every seq at 0); every size 0."""

    def __init__(self, times: dict[int, float] | None = None, every: float = 0.0) -> None:
        self.times = times
        self.every = every

    def accepted_at(self, seq: int) -> float | None:
        return self.every if self.times is None else self.times.get(seq)

    def size(self, seq: int) -> int:
        return 0


def io(effects: list[Any]) -> list[Any]:
    """The effects other than attempt-log writes."""
    return [e for e in effects if not isinstance(e, LogAttempt)]


def fresh(policy: Policy = POLICY) -> ReceiverState:
    state, effects = step(None, Configure(CONFIG), 0.0, policy)
    assert effects == [SaveState(), Subscribe()]
    return state


def with_backlog(n: int, policy: Policy = POLICY) -> ReceiverState:
    state = fresh(policy)
    for i in range(1, n + 1):
        state, _ = step(state, Intake(msg(i)), 0.0, policy, in_flight=i > 1)
    return state


def test_first_message_is_stored_then_delivered() -> None:
    state, effects = step(fresh(), Intake(msg(1, at=10.0)), 10.0)
    assert effects == [PutBacklog(1, msg(1, 10.0)), RememberId("m1", 1, 110.0), SaveState(), Deliver(1, 1)]
    assert (state.next_seq, state.head, state.backlog, state.head_accepted_at) == (2, 1, 1, 10.0)


def test_second_message_waits_behind_the_head() -> None:
    state, _ = step(fresh(), Intake(msg(1)), 0.0)
    state, effects = step(state, Intake(msg(2)), 0.0, in_flight=True)
    assert not any(isinstance(e, Deliver) for e in effects)
    assert state.head == 1 and state.backlog == 2


def test_success_advances_logs_and_delivers_the_next() -> None:
    state = with_backlog(2)
    state, effects = step(state, answer(state, 200), 5.0)
    assert isinstance(effects[0], LogAttempt) and effects[0].number == 1
    assert effects[1:] == [SaveState(), DeleteBacklog(1), Deliver(2, 1)]
    assert (state.delivered_seq, state.delivered, state.last_status) == (1, 1, 200)


def test_failures_follow_the_schedule_then_success_resets() -> None:
    state = with_backlog(1)
    dues = []
    for _ in range(5):
        state, effects = step(state, answer(state, 500), 100.0)
        assert io(effects) == [SaveState()]
        dues.append(state.next_attempt_at - 100.0)
    assert dues == [1.0, 2.0, 4.0, 8.0, 8.0]  # the last delay repeats past the schedule
    assert state.attempts == 5 and state.failed_attempts == 5 and state.failing_since == 100.0
    state, _ = step(state, answer(state, 204), 200.0)
    assert (state.attempts, state.next_attempt_at, state.head, state.failing_since) == (0, 0.0, None, 0.0)


def test_wake_delivers_only_when_due() -> None:
    state = replace(with_backlog(1), attempts=2, next_attempt_at=50.0)
    assert step(state, Wake(), 49.0)[1] == []
    assert next_wake(state, POLICY, in_flight=False) == 50.0
    assert step(state, Wake(), 50.0)[1] == [Deliver(1, 3)]
    assert step(state, Wake(), 50.0, in_flight=True)[1] == []


def test_stale_outcome_changes_nothing_but_may_resume_the_head() -> None:
    state = replace(with_backlog(3), delivered_seq=2)
    new, effects = step(state, Result(outcome(1, 200)), 0.0)
    assert new == state
    assert effects == [Ignored("stale outcome", "m1", 1), Deliver(3, 1)]


def test_duplicate_id_within_window_is_ignored() -> None:
    state = replace(fresh(), next_seq=6)
    new, effects = step(state, Intake(msg(3), seen_seq=3), 0.0)
    assert new == state and effects == [Ignored("duplicate message id", "m3", 3)]


def test_an_event_copy_accepted_before_the_receiver_was_created_is_not_taken() -> None:
    state = replace(fresh(), config=replace(CONFIG, created_at=50.0))
    older = replace(msg(1, at=49.9), from_event=True)
    new, effects = step(state, Intake(older), 60.0)
    assert new == state and effects == [Ignored("event accepted before the receiver was created", "m1")]
    # The same age as a direct message, or a copy of a later event: taken.
    for taken in (msg(1, at=49.9), replace(msg(2, at=50.0), from_event=True)):
        new, effects = step(state, Intake(taken), 60.0)
        assert new.next_seq == 2 and effects[0] == PutBacklog(1, taken)


def test_dedup_entry_ahead_of_saved_state_is_not_trusted() -> None:
    """Crash after the dedup write but before the state write: the message keeps its seq."""
    state = replace(fresh(), next_seq=6, delivered_seq=5)
    new, effects = step(state, Intake(msg(9), seen_seq=6), 0.0)
    assert effects[0] == PutBacklog(6, msg(9)) and new.next_seq == 7


def test_message_for_unknown_receiver_is_dead_lettered() -> None:
    state, effects = step(None, Intake(msg(1)), 0.0)
    assert state is None
    assert effects == [DeadLetter("unknown_receiver", "m1", None, "no such receiver")]


def test_reconfigure_resumes_a_waiting_head() -> None:
    state = with_backlog(1)
    new, effects = step(state, Configure(replace(CONFIG, url="http://127.0.0.1:2/")), 0.0)
    assert new.config.url.endswith(":2/") and effects == [SaveState(), Subscribe(), Deliver(1, 1)]


def test_state_round_trips_through_bytes() -> None:
    state = with_backlog(1)
    state, _ = step(state, answer(state, 500), 3.0)
    state = replace(state, breaker=replace(state.breaker, circuit=Circuit.OPEN, probe_at=9.0))
    assert ReceiverState.from_bytes(state.to_bytes()) == state


def test_a_changed_config_is_written_with_its_change() -> None:
    state = with_backlog(1)
    state.to_bytes()  # the config's JSON is made once and kept with it
    url = "http://127.0.0.1:2/"
    for changed in (replace(state.config, url=url), evolve(state.config, url=url)):
        again = ReceiverState.from_bytes(replace(state, config=changed).to_bytes())
        assert again.config.url == url
        assert again.config == changed


def test_state_written_by_a_newer_version_drops_the_fields_it_does_not_know() -> None:
    state = with_backlog(1)
    newer = orjson.loads(state.to_bytes())
    newer["field_of_a_later_release"] = 1
    newer["config"]["option_of_a_later_release"] = "x"
    assert ReceiverState.from_bytes(orjson.dumps(newer)) == state


# retry classification ----------------------------------------------------------


def test_permanent_status_dead_letters_the_head_and_moves_on() -> None:
    state = with_backlog(2)
    state, effects = step(state, answer(state, 400), 5.0)
    head = effects[1]
    assert isinstance(head, DeadLetterHead) and (head.seq, head.reason) == (1, "permanent_status")
    assert io(effects)[1:] == [SaveState(), DeleteBacklog(1), Deliver(2, 1)]
    assert (state.delivered_seq, state.dead_lettered, state.dead_letters_kept) == (1, 1, 1)


def test_receiver_overrides_make_404_retryable() -> None:
    config = replace(CONFIG, retry={"retryable_statuses": [404]})
    state = replace(with_backlog(1), config=config)
    state, effects = step(state, answer(state, 404), 5.0)
    assert io(effects) == [SaveState()] and state.next_attempt_at == 6.0


def test_max_attempts_dead_letters_the_head() -> None:
    policy = replace(POLICY, retry=replace(RETRY, max_attempts=3))
    state = with_backlog(2, policy)
    for _ in range(2):
        state, _ = step(state, answer(state, 503), 5.0, policy)
    assert state.head == 1
    state, effects = step(state, answer(state, 503), 5.0, policy)
    letters = [e for e in effects if isinstance(e, DeadLetterHead)]
    assert [(d.seq, d.reason, d.attempts, d.last_status) for d in letters] == [(1, "max_attempts", 3, 503)]
    assert state.head == 2 and effects[-1] == Deliver(2, 1)


def test_retry_after_stretches_the_delay_on_429() -> None:
    state = with_backlog(1)
    state, _ = step(state, answer(state, 429, headers={"retry-after": "30"}), 100.0)
    assert state.next_attempt_at == 130.0
    state, _ = step(state, answer(state, 429, headers={"retry-after": "0"}), 200.0)
    assert state.next_attempt_at == 202.0  # never shorter than the schedule


def test_410_disables_and_parks_the_backlog_until_enabled() -> None:
    state = with_backlog(3)
    state, effects = step(state, answer(state, 410), 5.0)
    assert state.disabled and "410" in state.disabled_reason
    assert io(effects) == [SaveState()]
    assert next_wake(state, POLICY, False) == state.dedup_sweep_at  # only housekeeping
    state, effects = step(state, Wake(), 10_000.0)
    assert not any(isinstance(e, (Deliver, DeadLetterHead)) for e in effects), "parked, not expired"
    state, effects = step(state, Control("enable"), 20_000.0)
    assert not state.disabled and state.attempts == 0 and state.active_since == 20_000.0
    assert effects == [SaveState(), Deliver(1, 1)]


def test_pause_holds_delivery_and_resume_restarts_it() -> None:
    state, _ = step(with_backlog(1), Control("pause"), 1.0, in_flight=True)
    state, effects = step(state, answer(state, 500), 2.0)
    assert not any(isinstance(e, Deliver) for e in effects)
    state, effects = step(state, Wake(), 500.0)
    assert effects == []
    state, effects = step(state, Control("resume"), 600.0)
    assert effects == [SaveState(), Deliver(1, 2)]


def test_max_age_dead_letters_every_expired_head() -> None:
    policy = replace(POLICY, retry=replace(RETRY, max_age=100.0))
    state = fresh(policy)
    backlog = {1: 0.0, 2: 10.0, 3: 500.0}
    for i, at in backlog.items():
        state, _ = step(state, Intake(msg(i, at)), at, policy, in_flight=True, backlog=backlog)
    assert next_wake(state, policy, in_flight=False) == 0.0  # head 1 is due now
    state, _ = step(state, answer(state, 500), 50.0, policy, backlog=backlog)
    assert next_wake(state, policy, in_flight=False) == 51.0
    state, effects = step(state, Wake(), 150.0, policy, backlog=backlog)
    letters = [(e.seq, e.reason) for e in effects if isinstance(e, DeadLetterHead)]
    assert letters == [(1, "max_age"), (2, "max_age")]
    assert effects[-1] == Deliver(3, 1)
    assert (state.head, state.dead_lettered, state.head_accepted_at) == (3, 2, 500.0)


def test_missing_backlog_entry_is_dead_lettered_not_spun_on() -> None:
    state = replace(with_backlog(2), head_accepted_at=0.0)
    state, effects = step(state, Wake(), 5.0, backlog={2: 1.0})
    assert [(e.seq, e.reason) for e in effects if isinstance(e, DeadLetterHead)] == [(1, "missing_entry")]
    assert effects[-1] == Deliver(2, 1)


def test_dead_letters_kept_are_capped() -> None:
    policy = replace(POLICY, dead_letters_keep=2, retry=replace(RETRY, max_attempts=1))
    state = with_backlog(4, policy)
    trims = 0
    for _ in range(3):
        state, effects = step(state, answer(state, 500), 1.0, policy)
        trims += sum(isinstance(e, actor.TrimDeadLetters) for e in effects)
    assert (state.dead_letters_kept, state.dead_lettered, trims) == (2, 3, 1)


def test_a_reset_keeps_the_dead_letters_its_own_included() -> None:
    """Status reads "settled and no dead letter" as delivered: no dead letter may go with a reset."""
    policy = replace(POLICY, max_expired_per_event=2)
    state = with_backlog(4, policy)
    state, _ = step(state, answer(state, 400), 1.0, policy)  # seq 1: a dead letter from before
    state, _ = step(state, Control("pause"), 2.0, policy, in_flight=True)
    state, effects = step(state, Control("reset"), 3.0, policy)
    kinds = [type(e).__name__ for e in io(effects)]
    assert kinds[:3] == ["ForgetHistory", "DeadLetterHead", "DeadLetterHead"], "history first, then the purge"
    assert (state.resetting, state.dead_lettered, state.dead_letters_kept) == (True, 2, 3)
    state, effects = step(state, Control("reset"), 4.0, policy)  # a second reset goes on with the first
    assert not any(isinstance(e, actor.ForgetHistory) for e in effects), "the first one's letters stay"
    assert [(e.seq, e.reason) for e in effects if isinstance(e, DeadLetterHead)] == [(4, "state_reset")]
    counts = (state.resetting, state.delivered_seq, state.dead_lettered, state.dead_letters_kept)
    assert counts == (False, 4, 3, 4), "the reset's three letters counted; all four kept"
    assert 0 < state.retain_sweep_at <= 3.0 + policy.retain, "its kept messages are swept in time"


# circuit breaker --------------------------------------------------------------


BREAKER = BreakerPolicy(failures=3, window=20, ratio=0.5, probe_base=10.0, probe_cap=40.0)
OPENING = replace(POLICY, breaker=BREAKER)


def test_breaker_opens_probes_then_half_opens_and_closes() -> None:
    state = with_backlog(2, OPENING)
    for t in (1.0, 2.0, 3.0):
        state, effects = step(state, answer(state, 503), t, OPENING)
    assert state.breaker.circuit is Circuit.OPEN and state.breaker.probe_at == 13.0
    assert next_wake(state, OPENING, False) == 13.0
    assert step(state, Wake(), 12.0, OPENING)[1] == []  # no message while open
    state, effects = step(state, Wake(), 13.0, OPENING)
    assert effects == [SaveState(), Probe(1)]
    failed = probe_result(state, ok=False)
    state, effects = step(state, failed, 14.0, OPENING)
    assert state.breaker.probe_at == 34.0  # 14 + 10 x 2: probes space out
    replayed, effects = step(state, failed, 15.0, OPENING)  # after a crash: already applied
    assert replayed == state and effects == [Ignored("stale probe result", "ping_x")]
    state, effects = step(state, Wake(), 34.0, OPENING)
    assert effects[-1] == Probe(2)
    state, effects = step(state, probe_result(state, ok=True), 35.0, OPENING)
    assert state.breaker.circuit is Circuit.HALF_OPEN and effects[-1] == Deliver(1, 4)
    state, effects = step(state, answer(state, 200), 36.0, OPENING)
    assert state.breaker.circuit is Circuit.CLOSED and effects[-1] == Deliver(2, 1)


def test_half_open_failure_reopens_with_a_longer_wait() -> None:
    state = with_backlog(1, OPENING)
    for t in (1.0, 2.0, 3.0):
        state, _ = step(state, answer(state, 503), t, OPENING)
    state, _ = step(state, Wake(), 13.0, OPENING)
    state, _ = step(state, probe_result(state, ok=True), 14.0, OPENING)
    state, _ = step(state, answer(state, 500), 15.0, OPENING)
    assert state.breaker.circuit is Circuit.OPEN and state.breaker.probe_at == 35.0


def test_failing_longer_than_disable_after_disables() -> None:
    policy = replace(OPENING, disable_after=100.0)
    state = with_backlog(1, policy)
    for t in (1.0, 2.0, 3.0):
        state, _ = step(state, answer(state, 503), t, policy)
    state, _ = step(state, Wake(), 50.0, policy)
    state, _ = step(state, probe_result(state, ok=False, status=500), 50.0, policy)
    assert not state.disabled
    state, _ = step(state, Wake(), 101.0, policy)
    state, _ = step(state, probe_result(state, ok=False, status=500), 101.0, policy)
    assert state.disabled and "failing for" in state.disabled_reason


def test_manual_ping_success_half_opens_an_open_circuit() -> None:
    state = with_backlog(1, OPENING)
    for t in (1.0, 2.0, 3.0):
        state, _ = step(state, answer(state, 503), t, OPENING)
    ping = Outcome(0, "p", "manual", True, 200, None, 1.0, 4.0, probe=True, manual=True)
    state, effects = step(state, Result(ping), 4.0, OPENING)
    assert effects[0].kind == "ping" and effects[-1] == Deliver(1, 4)


def test_every_wake_makes_progress() -> None:
    """After any step, the next wake is in the future, or the step started I/O (no busy loop)."""
    rng = random.Random(5)
    policy = replace(OPENING, retry=replace(RETRY, max_age=30.0, max_attempts=6), dedup_window=40.0)
    state = fresh(policy)
    now, in_flight, backlog = 0.0, False, {}
    for _ in range(3000):
        now += rng.choice([0.0, 0.5, 3.0, 20.0])
        roll = rng.random()
        if roll < 0.3:
            backlog[state.next_seq] = now
            command: actor.Command = Intake(msg(state.next_seq, now))
        elif roll < 0.6 and in_flight and state.head:
            command = answer(state, rng.choice([200, 500, 429, 400, None]))
            in_flight = False
        elif roll < 0.65:
            command = Control(rng.choice(["pause", "resume", "enable", "disable"]))
        else:
            due = next_wake(state, policy, in_flight)
            if due is None or due > now:
                continue
            command = Wake(now + 40.0 if state.dedup_sweep_at and state.dedup_sweep_at <= now else None)
        state, effects = step(state, command, now, policy, in_flight, backlog)
        in_flight = in_flight or any(isinstance(e, (Deliver, Probe)) for e in effects)
        due = next_wake(state, policy, in_flight)
        if due is not None and due <= now:  # due now: the wake that follows must act
            sweep = now + 40.0 if 0 < state.dedup_sweep_at <= now else None
            woken, effects = step(state, Wake(sweep), now, policy, in_flight, backlog)
            assert effects, (state, due)
            assert effects != [SaveState()] or woken.dedup_sweep_at > now


def test_an_outcome_replayed_after_a_crash_counts_once() -> None:
    """The new owner re-reads outcomes the old owner applied but had not committed."""
    state = with_backlog(1)
    failure = answer(state, 500)
    state, _ = step(state, failure, 10.0)
    replayed, effects = step(state, failure, 11.0, in_flight=True)
    assert replayed == state and effects == [Ignored("stale outcome", "m1", 1)]
    assert (state.attempts, state.next_attempt_at) == (1, 11.0)
