"""The actor steered by its receiver: the control header's directives, heartbeats and the adaptive window."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest

from dispatcher.domain.actor import (
    Configure,
    Control,
    DeadLetterHead,
    Deliver,
    Heartbeat,
    LogAttempt,
    Probe,
    Result,
    Wake,
    next_wake,
)
from dispatcher.domain.breaker import BreakerPolicy, Circuit
from dispatcher.domain.delivery_control import Asked
from dispatcher.domain.delivery_options import DeliveryOptions
from dispatcher.domain.records import Outcome, decode_command, encode_outcome
from tests.unit.test_actor import POLICY
from tests.unit.test_actor_isolation import T0, Actor
from tests.unit.test_actor_window import Window, seqs

STEER = "webhook-delivery-control"
QUIET = replace(POLICY, dedup_window=10**7, retain=0)  # no sweep timers beside the ones under test


def answer_head(a: Actor, status: int, now: float, headers: dict[str, str] | None = None) -> list[Any]:
    head = a.state.head
    assert head is not None and a.in_flight
    outcome = Outcome(head, f"m{head}", "t", 200 <= status < 300, status, None, 1.0, now,
                      headers=headers or {}, attempt=a.state.attempts + 1)
    a.in_flight = False
    return a.run(Result(outcome), now)[1]


def answer_heartbeat(
    a: Actor, number: int, status: int, now: float, headers: dict[str, str] | None = None
) -> list[Any]:
    outcome = Outcome(0, "heartbeat_x", "t", 200 <= status < 300, status, None, 1.0, now,
                      headers=headers or {}, attempt=number, probe=True, heartbeat=True)
    a.in_flight = False
    return a.run(Result(outcome), now)[1]


def wake_at(a: Actor) -> float | None:
    return next_wake(a.state, a.policy, a.in_flight)


def delivered(effects: list[Any]) -> list[int]:
    return [e.seq for e in effects if isinstance(e, Deliver)]


def beats(effects: list[Any]) -> list[Heartbeat]:
    return [e for e in effects if isinstance(e, Heartbeat)]


def notes(effects: list[Any]) -> list[str]:
    return [e.control for e in effects if isinstance(e, LogAttempt)]


# webhook-delivery-control -----------------------------------------------------------------------


def test_a_pause_asked_on_a_2xx_holds_the_next_until_it_ends() -> None:
    a = Actor(None, QUIET)
    a.send(1)
    a.send(2)
    effects = answer_head(a, 200, T0 + 1, {STEER: "pause=30"})
    assert delivered(effects) == [] and notes(effects) == [f"{STEER}: pause 30s"]
    assert wake_at(a) == T0 + 31
    assert delivered(a.run(Wake(), T0 + 30)[1]) == []
    assert delivered(a.run(Wake(), T0 + 31)[1]) == [2]


def test_a_pause_on_a_failure_outlasts_its_backoff() -> None:
    a = Actor(None, QUIET)
    a.send(1)
    answer_head(a, 503, T0, {STEER: "pause=80"})
    assert a.state.attempts == 1 and wake_at(a) == T0 + 80
    assert delivered(a.run(Wake(), T0 + 79)[1]) == []
    assert delivered(a.run(Wake(), T0 + 80)[1]) == [1]


def test_a_rate_asked_paces_like_the_receivers_own() -> None:
    a = Actor(None, QUIET)
    for i in range(1, 5):
        a.send(i)
    answer_head(a, 200, T0, {STEER: "rate=0.5"})  # the burst of one token goes to seq 2
    a.in_flight = True
    assert delivered(answer_head(a, 200, T0)) == [], "seq 3 waits for the next token"
    assert wake_at(a) == pytest.approx(T0 + 2)


def test_disable_asked_holds_delivery() -> None:
    a = Actor(None, QUIET)
    a.send(1)
    a.send(2)
    effects = answer_head(a, 200, T0, {STEER: "disable"})
    assert a.state.disabled and STEER in a.state.disabled_reason and delivered(effects) == []
    assert delivered(a.run(Control("enable"), T0 + 1)[1]) == [2]


def test_a_receiver_set_to_ignore_is_not_steered() -> None:
    a = Actor(DeliveryOptions(delivery_control="ignore"), QUIET)
    a.send(1)
    a.send(2)
    effects = answer_head(a, 200, T0, {STEER: "pause=30, disable"})
    assert delivered(effects) == [2] and not a.state.disabled
    assert notes(effects) == [f"{STEER} ignored (delivery_control: ignore)"]


def test_max_in_flight_asked_caps_the_window() -> None:
    w = Window(DeliveryOptions(ordering="none", concurrency="fixed", max_in_flight=4))
    assert [d.seq for d in w.send(1, 2, 3, 4, 5, 6, 7)] == [1, 2, 3, 4]
    outcome = Outcome(1, "m1", "t", True, 200, None, 1.0, T0, headers={STEER: "max-in-flight=2"}, attempt=1)
    w.sending.discard(1)
    assert seqs(w.run(Result(outcome), T0)[1]) == [], "three still out: over the cap of two"
    assert w.state is not None and w.state.in_flight_limit == 2
    w.answer(2, 200)
    assert seqs(w.answer(3, 200)) == [5], "one out: one more"


# the adaptive window ----------------------------------------------------------------------------


def test_an_adaptive_window_starts_at_one_and_grows_with_fast_answers() -> None:
    w = Window(DeliveryOptions(ordering="none", max_in_flight=8))
    assert [d.seq for d in w.send(*range(1, 20))] == [1]
    assert seqs(w.answer(1, 200)) == [2, 3]
    assert seqs(w.answer(2, 200)) == [4, 5]
    assert w.state is not None and w.state.in_flight_limit == 3


def test_a_429_halves_the_adaptive_window() -> None:
    w = Window(DeliveryOptions(ordering="none", max_in_flight=8))
    w.send(*range(1, 40))
    for seq in range(1, 8):
        w.answer(seq, 200, now=T0 + seq)
    assert w.state is not None and w.state.in_flight_limit == 8
    w.answer(8, 429, now=T0 + 10)
    assert w.state.in_flight_limit == 4 and w.state.congestion.reason == "429"


# heartbeats -------------------------------------------------------------------------------------


HEARTBEATS = DeliveryOptions(heartbeat_interval=10)


def test_an_idle_receiver_gets_a_heartbeat_with_the_last_seq() -> None:
    a = Actor(HEARTBEATS, QUIET)
    a.send(1)
    a.send(2)
    answer_head(a, 200, T0 + 1)
    answer_head(a, 200, T0 + 2)
    assert wake_at(a) == T0 + 12
    assert beats(a.run(Wake(), T0 + 11)[1]) == []
    [beat] = beats(a.run(Wake(), T0 + 12)[1])
    a.in_flight = True
    assert (beat.number, beat.last_seq) == (1, 2)
    assert wake_at(a) == a.state.dedup_sweep_at, "nothing while it is out (the dedup sweep is not delivery)"


def test_a_heartbeats_answer_is_logged_and_never_counts_as_a_failure() -> None:
    policy = replace(QUIET, breaker=BreakerPolicy(failures=1, window=20, ratio=1.0))
    a = Actor(HEARTBEATS, policy)
    [beat] = beats(a.run(Wake(), T0 + 10)[1])
    effects = answer_heartbeat(a, beat.number, 500, T0 + 10)
    [logged] = [e for e in effects if isinstance(e, LogAttempt)]
    assert logged.kind == "heartbeat"
    state = a.state
    assert (state.breaker.circuit, state.failing_since, state.failed_attempts) == (Circuit.CLOSED, 0.0, 0)
    assert wake_at(a) == T0 + 20, "the next one an interval after the answer"


def test_a_stale_heartbeat_answer_is_ignored_and_its_header_heeded_otherwise() -> None:
    a = Actor(HEARTBEATS, QUIET)
    [beat] = beats(a.run(Wake(), T0 + 10)[1])
    assert not notes(answer_heartbeat(a, beat.number + 5, 200, T0 + 10, {STEER: "pause=60"}))
    assert a.state.asked.pause_until == 0.0
    answer_heartbeat(a, beat.number, 200, T0 + 10, {STEER: "pause=60"})
    assert wake_at(a) == T0 + 80, "an interval after the pause it asked for"


@pytest.mark.parametrize(
    ("setup", "why"),
    [
        (lambda a: a.send(1), "a message is out"),
        (lambda a: (a.send(1), answer_head(a, 500, T0)), "a message waits for its retry"),
        (lambda a: a.run(Control("pause"), T0), "paused"),
        (lambda a: a.run(Control("disable"), T0), "disabled"),
    ],
)
def test_no_heartbeat_while_anything_is_waiting_or_held(setup: Any, why: str) -> None:
    a = Actor(HEARTBEATS, QUIET)
    setup(a)
    for t in (T0 + 10, T0 + 100, T0 + 1000):
        assert beats(a.run(Wake(), t)[1]) == [], why


def test_no_heartbeat_while_the_circuit_is_open() -> None:
    policy = replace(QUIET, breaker=BreakerPolicy(failures=1, window=20, ratio=1.0))
    a = Actor(HEARTBEATS, policy)
    a.send(1)
    answer_head(a, 500, T0)
    assert a.state.breaker.circuit is Circuit.OPEN
    assert all(not beats(a.run(Wake(), T0 + t)[1]) for t in (10, 100))


def test_no_heartbeat_without_an_interval() -> None:
    a = Actor(None, QUIET)
    assert wake_at(a) is None and beats(a.run(Wake(), T0 + 10**6)[1]) == []


def test_a_due_retry_waits_for_room_in_the_window_without_waking_in_a_loop() -> None:
    w = Window(DeliveryOptions(ordering="none", max_in_flight=8))
    assert [d.seq for d in w.send(*range(1, 10))] == [1]
    assert seqs(w.answer(1, 429, now=T0)) == [2], "the refused one waits for its retry; the next goes"
    assert w.state is not None
    retry_at = next(s.next_attempt_at for s in w.state.window if s.seq == 1)
    later = retry_at + 1
    assert seqs(w.wake(later)) == [], "one out, a window of one: no room for the retry"
    wake = w.wakes_at()
    assert wake is None or wake > later, "no wake due while nothing can go"
    assert seqs(w.answer(2, 200, now=later)) == [1, 3], "an answer makes room: the retry, then the next"


def test_the_operator_overrides_what_the_receiver_asked() -> None:
    a = Actor(None, QUIET)
    a.send(1)
    a.send(2)
    answer_head(a, 200, T0, {STEER: "pause=600, rate=1"})
    assert delivered(a.run(Control("resume"), T0 + 1)[1]) == [2], "resume lifts the receiver's pause"
    assert a.state.asked.rate == 1.0, "its rate still holds"
    ignoring = replace(a.state.config, options=DeliveryOptions(delivery_control="ignore"))
    a.run(Configure(ignoring), T0 + 2)
    assert a.state.asked == Asked(), "set to ignore: nothing it asked holds"


def test_a_pause_holds_what_goes_not_what_expires() -> None:
    a = Actor(None, QUIET)
    a.send(1)
    a.send(2)
    answer_head(a, 200, T0, {STEER: "pause=3600"})
    max_age = QUIET.retry.max_age
    assert wake_at(a) == T0 + max_age, "the next wake is seq 2's expiry, not the pause's end"
    effects = a.run(Wake(), T0 + max_age)[1]
    assert [(e.seq, e.reason) for e in effects if isinstance(e, DeadLetterHead)] == [(2, "max_age")]
    assert delivered(effects) == []


def test_a_heartbeats_answer_applies_once() -> None:
    a = Actor(HEARTBEATS, QUIET)
    [beat] = beats(a.run(Wake(), T0 + 10)[1])
    answer = Outcome(0, "hb", "t", True, 200, None, 1.0, T0 + 10, headers={STEER: "disable"},
                     attempt=beat.number, probe=True, heartbeat=True)
    a.in_flight = False
    a.run(Result(answer), T0 + 10)
    assert a.state.disabled
    a.run(Control("enable"), T0 + 11)
    effects = a.run(Result(answer), T0 + 12)[1]  # replayed from the commands topic after a crash
    assert not a.state.disabled and not notes(effects)


def test_an_outcome_from_a_newer_version_is_read() -> None:
    raw = encode_outcome(Outcome(3, "m3", "t", True, 200, None, 1.0, T0, attempt=1))
    newer = orjson.dumps({**orjson.loads(raw), "a_later_field": 1})
    assert decode_command("r1", newer) == Outcome(3, "m3", "t", True, 200, None, 1.0, T0, attempt=1)


FLAKY = BreakerPolicy(failures=1, window=20, ratio=1.0, probe_base=5, probe_cap=5)


def answer_probe(a: Actor, number: int, status: int, now: float) -> list[Any]:
    outcome = Outcome(0, "ping", "t", 200 <= status < 300, status, None, 1.0, now, attempt=number, probe=True)
    a.in_flight = False
    return a.run(Result(outcome), now)[1]


def test_after_an_outage_that_dead_lettered_everything_probes_go_on_and_heartbeats_resume() -> None:
    policy = replace(QUIET, breaker=FLAKY)
    a = Actor(HEARTBEATS, policy)
    a.send(1)
    answer_head(a, 500, T0)
    assert a.state.breaker.circuit is Circuit.OPEN
    expiry = T0 + policy.retry.max_age
    effects = a.run(Wake(), expiry)  # seq 1 expires while the receiver is down; the probes go on
    assert (a.state.backlog, a.state.dead_lettered) == (0, 1)
    [probe] = [e for e in effects[1] if isinstance(e, Probe)]
    answer_probe(a, probe.number, 200, expiry + 5)
    assert a.state.breaker.circuit is Circuit.CLOSED and a.state.failing_since == 0.0
    [beat] = beats(a.run(Wake(), expiry + 15)[1])
    assert beat.last_seq == 1, "the receiver learns that seq 1 went by"


def test_a_receiver_down_for_good_with_nothing_left_is_disabled_not_pinged_forever() -> None:
    policy = replace(QUIET, breaker=FLAKY, disable_after=100.0)
    a = Actor(None, policy)
    a.send(1)
    answer_head(a, 500, T0)
    now = T0 + policy.retry.max_age
    effects = a.run(Wake(), now)[1]
    while not a.state.disabled and now < T0 + 10_000:
        probes = [e for e in effects if isinstance(e, Probe)]
        if probes:
            answer_probe(a, probes[0].number, 503, now)
        now += 5
        effects = a.run(Wake(), now)[1]
    assert a.state.disabled and wake_at(a) == a.state.dedup_sweep_at, "no more probes"
