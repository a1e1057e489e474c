"""`state.status`: derived from the state alone, and never `retrying` once nothing waits for a retry.

Every path that settles a failed message without a 2xx (dead-lettered for
max_attempts, max_age, a permanent status, a missing entry or overflow, in
order or through the window) must leave an empty backlog `active`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.domain import actor
from dispatcher.domain.actor import (
    Configure,
    DeadLetterHead,
    DeleteBacklog,
    Deliver,
    Facts,
    Intake,
    Policy,
    Probe,
    PutBacklog,
    ReceiverState,
    Result,
    Wake,
    decide,
)
from dispatcher.domain.breaker import BreakerPolicy
from dispatcher.domain.delivery_options import DeliveryOptions
from dispatcher.domain.records import Outcome
from dispatcher.domain.retry import RetryPolicy
from tests.unit.test_actor import CONFIG, msg

RETRY = RetryPolicy(schedule=(1.0, 2.0), jitter=0.0, max_attempts=3, max_age=100.0)
# The circuit stays closed unless a test asks otherwise: `failing` would hide `retrying`.
POLICY = Policy(RETRY, BreakerPolicy(failures=10_000, window=20, ratio=1.1), dedup_window=1000.0)
STRICT = DeliveryOptions()
UNORDERED = DeliveryOptions(ordering="none", concurrency="fixed", max_in_flight=3)
CAPPED = DeliveryOptions(backlog_max=1)
ANSWERS = [200, 204, 400, 404, 429, 500, 503, None]


class Receiver:
    """decide() with the backlog and the running deliveries the glue would keep."""

    def __init__(self, options: DeliveryOptions = STRICT, policy: Policy = POLICY) -> None:
        self.policy = policy
        self.now = 1000.0  # failing_since 0 means "not failing": the clock starts later
        self.accepted: dict[int, float] = {}  # the stored backlog: seq -> accepted at
        self.out: dict[int, Deliver] = {}  # deliveries running, by seq
        self.probe = 0  # the probe running, 0: none
        self.letters: list[str] = []
        self.sent = 0
        self.state: ReceiverState | None = None
        self.run(Configure(replace(CONFIG, options=options)))

    # a BacklogView over `accepted`
    def accepted_at(self, seq: int) -> float | None:
        return self.accepted.get(seq)

    def size(self, seq: int) -> int:
        return 0

    def run(self, command: actor.Command) -> list[Any]:
        busy = bool(self.out) or bool(self.probe)
        facts = Facts(self.now, 0.5, busy, self, frozenset(s for s, d in self.out.items() if d.parallel))
        state, effects = decide(self.state, command, facts, self.policy)
        assert state is not None
        self.state = state
        for effect in effects:
            if isinstance(effect, PutBacklog):
                self.accepted[effect.seq] = effect.message.accepted_at
            elif isinstance(effect, DeleteBacklog):
                self.accepted.pop(effect.seq, None)
            elif isinstance(effect, DeadLetterHead):
                self.letters.append(effect.reason)
            elif isinstance(effect, Deliver):
                self.out[effect.seq] = effect
            elif isinstance(effect, Probe):
                self.probe = effect.number
        return effects

    def send(self, count: int = 1) -> None:
        for _ in range(count):
            self.sent += 1
            self.run(Intake(msg(self.sent, at=self.now)))

    def answer(self, status: int | None, pick: int = 0) -> None:
        """Answer one running delivery (the `pick`-th, wrapping), or the probe if none runs."""
        if self.out:
            seq = sorted(self.out)[pick % len(self.out)]
            sent = self.out.pop(seq)
            self.run(Result(outcome(seq, status, sent.attempt, last=seq + sent.count - 1)))
        elif self.probe:
            number, self.probe = self.probe, 0
            ok = status is not None and 200 <= status < 300
            probe = Outcome(0, "ping", "t", ok, status, None if ok else "refused", 1.0, self.now,
                            attempt=number, probe=True)
            self.run(Result(probe))

    def wake(self, after: float) -> None:
        self.now += after
        self.run(Wake())

    @property
    def status(self) -> str:
        assert self.state is not None
        return actor.status(self.state)


def outcome(seq: int, status: int | None, attempt: int, last: int) -> Outcome:
    ok = status is not None and 200 <= status < 300
    error = None if status else "timeout"
    return Outcome(seq, f"m{seq}", "t", ok, status, error, 1.0, 0.0, attempt=attempt, last=last)


def strict_dead_letter_by_max_attempts(r: Receiver) -> None:
    r.send()
    for _ in range(RETRY.max_attempts):
        r.answer(503)
        r.wake(RETRY.schedule[-1])


def strict_dead_letter_by_max_age(r: Receiver) -> None:
    r.send()
    r.answer(503)
    r.wake(RETRY.max_age + 1)


def strict_dead_letter_by_permanent_status(r: Receiver) -> None:
    r.send()
    r.answer(400)


def strict_missing_entry_after_a_failure(r: Receiver) -> None:
    r.send(2)
    r.answer(503)  # seq 1 waits for its retry, seq 2 behind it
    r.accepted.pop(2)  # seq 2's entry is lost
    r.wake(RETRY.schedule[0])
    r.answer(400)  # seq 1 goes, and seq 2 with it: nothing to send


def strict_overflow_drops_the_failed_head(r: Receiver) -> None:
    r.send()
    r.answer(503)  # the head waits for its retry
    r.send()  # over the cap of one: the failed head goes (backlog_full)
    r.wake(0.0)
    r.answer(400)


def window_dead_letters_by_permanent_status(r: Receiver) -> None:
    r.send(3)
    for _ in range(3):
        r.answer(400)


def window_dead_letters_by_max_attempts(r: Receiver) -> None:
    r.send(2)
    for _ in range(RETRY.max_attempts):
        r.answer(503)
        r.answer(503)
        r.wake(RETRY.schedule[-1])


def window_dead_letters_by_max_age(r: Receiver) -> None:
    r.send(2)
    r.answer(503)
    r.answer(503)
    r.wake(RETRY.max_age + 1)


PATHS = [
    (STRICT, strict_dead_letter_by_max_attempts, {"max_attempts"}),
    (STRICT, strict_dead_letter_by_max_age, {"max_age"}),
    (STRICT, strict_dead_letter_by_permanent_status, {"permanent_status"}),
    (STRICT, strict_missing_entry_after_a_failure, {"missing_entry", "permanent_status"}),
    (CAPPED, strict_overflow_drops_the_failed_head, {"backlog_full", "permanent_status"}),
    (UNORDERED, window_dead_letters_by_permanent_status, {"permanent_status"}),
    (UNORDERED, window_dead_letters_by_max_attempts, {"max_attempts"}),
    (UNORDERED, window_dead_letters_by_max_age, {"max_age"}),
]


@pytest.mark.parametrize(("options", "path", "reasons"), PATHS, ids=[p[1].__name__ for p in PATHS])
def test_an_emptied_backlog_is_active_whichever_way_it_emptied(
    options: DeliveryOptions, path: Any, reasons: set[str]
) -> None:
    r = Receiver(options)
    path(r)
    assert r.state is not None
    assert set(r.letters) == reasons, "the path went the way its name says"
    assert (r.state.backlog, r.state.failing_since > 0) == (0, True), "failed, and nothing is left"
    assert r.status == "active"


@pytest.mark.parametrize("options", [STRICT, UNORDERED])
def test_a_message_waiting_for_its_retry_is_retrying_until_it_settles(options: DeliveryOptions) -> None:
    r = Receiver(options)
    r.send(2)
    assert r.status == "active"
    r.answer(503)
    assert r.status == "retrying"
    r.wake(RETRY.schedule[0])
    r.answer(200)
    r.answer(200)
    assert r.state is not None and r.state.backlog == 0 and r.status == "active"


def test_a_new_message_after_a_dead_letter_is_active_until_it_fails() -> None:
    r = Receiver()
    strict_dead_letter_by_permanent_status(r)
    r.send()
    assert r.status == "active", "it has not failed yet"
    r.answer(503)
    assert r.status == "retrying"


commands = st.one_of(
    st.tuples(st.just("send"), st.integers(1, 3)),
    st.tuples(st.just("answer"), st.sampled_from(ANSWERS), st.integers(0, 5)),
    st.tuples(st.just("wake"), st.sampled_from([0.0, 0.5, 1.0, 2.0, 50.0, 101.0])),
)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([STRICT, UNORDERED, DeliveryOptions(backlog_max=2), DeliveryOptions(batch_max=3)]),
    st.lists(commands, max_size=40),
)
def test_retrying_always_means_a_failed_message_is_still_to_be_delivered(
    options: DeliveryOptions, script: list[tuple[Any, ...]]
) -> None:
    r = Receiver(options)
    for command in script:
        if command[0] == "send":
            r.send(command[1])
        elif command[0] == "answer":
            r.answer(command[1], command[2])
        else:
            r.wake(command[1])
        state = r.state
        assert state is not None
        if r.status == "retrying":
            assert state.backlog > 0
        if state.backlog == 0:
            assert r.status == "active", (state, r.letters)
