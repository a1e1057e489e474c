"""Random command sequences against the actor: no idle wake loop, no stuck receiver, nothing overtakes.

After every command, for ordered and unordered receivers alike, with the
control header, heartbeats, the adaptive window, the breaker, rate limits,
pauses, replayed outcomes and clock steps:
- a wake that `next_wake` says is due changes the state or sends something
  (else the timer would fire every tick, doing nothing);
- a receiver with a backlog, nothing out and nothing holding it has a wake;
- an ordered receiver posts only its head, one at a time; a heartbeat goes
  only with nothing out and nothing waiting, carrying the highest seq;
- a key-ordered receiver never posts a message while an earlier one of its
  ordering key is unsettled.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatcher.domain.actor import (
    Configure,
    Control,
    DeadLetterHead,
    DeleteBacklog,
    Deliver,
    Heartbeat,
    Intake,
    Probe,
    PutBacklog,
    ReceiverState,
    Result,
    Wake,
    decide,
    next_wake,
)
from dispatcher.domain.breaker import BreakerPolicy
from dispatcher.domain.delivery_options import ORDERINGS, DeliveryOptions
from dispatcher.domain.records import Outcome
from tests.unit.test_actor import CONFIG, POLICY, msg
from tests.unit.test_actor_isolation import T0, Backlog

STEER = "webhook-delivery-control"
COALESCING = "key+coalesce"  # an ordering for `options`: key-ordered and coalescing
MODES = (*ORDERINGS, COALESCING)
USEFUL = (Deliver, Probe, Heartbeat, DeadLetterHead)
QUIET = replace(POLICY, dedup_window=10**7, retain=0, max_asked_pause=60.0,
                breaker=BreakerPolicy(failures=3, window=5, ratio=0.5))


class Driver:
    """decide() with the jobs the glue would have out: one (ordered, probe, heartbeat) or per seq."""

    def __init__(self, options: DeliveryOptions) -> None:
        self.backlog = Backlog()
        self.out: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self.answered: list[Outcome] = []
        self.now = T0
        self.config = replace(CONFIG, options=options)
        self.state: ReceiverState | None = None
        self.keys: dict[int, str] = {}  # seq -> the ordering key it arrived with
        self.run(Configure(self.config))

    @property
    def sending(self) -> frozenset[int]:
        return frozenset(key[1] for key in self.out if key[0] == "slot")

    def run(self, command: Any) -> list[Any]:
        facts = replace(self.backlog.facts(self.now, bool(self.out)), sending=self.sending)
        state, effects = decide(self.state, command, facts, QUIET)
        assert state is not None
        self.backlog.apply(effects)
        self.keys.update((e.seq, e.message.ordering_key) for e in effects if isinstance(e, PutBacklog))
        gone = [e.seq for e in effects if isinstance(e, DeleteBacklog) and e.superseded_by]
        head = self.out.get(("one",), ())
        out = [seq for seq in gone if ("slot", seq) in self.out or head[:2] == ("msg", seq)]
        assert not out, f"{out} superseded while out"
        for e in effects:
            self._started(state, e)
        self.state = state
        return effects

    def _started(self, state: ReceiverState, e: Any) -> None:
        if isinstance(e, Deliver):
            key = ("slot", e.seq) if e.parallel else ("one",)
            assert key not in self.out, f"{key} started twice"
            if not e.parallel:
                assert not self.out and e.seq == state.delivered_seq + 1, "an ordered receiver posts its head"
            elif state.config.options.keyed and self.keys.get(e.seq):
                ordering = self.keys[e.seq]  # as given at intake, not as the state remembers it
                earlier = [s.seq for s in state.window if s.seq < e.seq and self.keys.get(s.seq) == ordering]
                assert not earlier, f"seq {e.seq} posted before {earlier} of its key settled"
            self.out[key] = ("msg", e.seq, e.attempt)
        elif isinstance(e, Probe):
            assert not self.out, "a probe while something is out"
            self.out[("one",)] = ("probe", e.number)
        elif isinstance(e, Heartbeat):
            assert not self.out and state.backlog == 0, "a heartbeat only when idle"
            assert e.last_seq == state.next_seq - 1
            self.out[("one",)] = ("heartbeat", e.number)

    def answer(self, pick: int, status: int | None, latency_ms: float, header: str | None) -> None:
        if not self.out:
            return
        key = sorted(self.out, key=str)[pick % len(self.out)]
        kind, *rest = self.out.pop(key)
        ok = status is not None and 200 <= status < 300
        headers = {STEER: header} if header else {}
        common: dict[str, Any] = {"headers": headers}
        if kind == "msg":
            seq, attempt = rest
            outcome = Outcome(seq, f"m{seq}", "t", ok, status, None if status else "timeout", latency_ms,
                              self.now, attempt=attempt, **common)
        else:
            outcome = Outcome(0, kind, "t", ok, status, None if status else "timeout", latency_ms, self.now,
                              attempt=rest[0], probe=True, heartbeat=kind == "heartbeat", **common)
        self.answered.append(outcome)
        self.run(Result(outcome))

    def replay(self, pick: int) -> None:
        if self.answered:
            self.run(Result(replace(self.answered[pick % len(self.answered)], at=self.now)))

    def wake_at(self) -> float | None:
        assert self.state is not None
        state = replace(self.state, dedup_sweep_at=0.0, retain_sweep_at=0.0)
        return next_wake(state, QUIET, bool(self.out), self.sending)

    def check(self) -> None:
        state = self.state
        assert state is not None
        due = self.wake_at()
        if due is not None and due <= self.now:
            effects = self.run(Wake())
            assert self.state != state or any(isinstance(e, USEFUL) for e in effects), "an idle wake"
        state = self.state
        assert state is not None
        if state.backlog and not self.out and not state.held:
            assert self.wake_at() is not None, "stuck: a backlog, nothing out, no wake"


HEADERS = st.sampled_from([None, "pause=5", "pause=0", "pause=100000", "rate=0.01", "rate=0", "rate=2",
                           "max-in-flight=1", "max-in-flight=0", "max-in-flight=99", "disable",
                           "pause=1, rate=0.5, max-in-flight=2", "garbage=1,,,", "rate=0.000001"])
OPS = st.one_of(
    st.tuples(st.just("intake"), st.sampled_from(["", "", "a", "b", "a", "c"])),
    st.tuples(st.just("answer"), st.integers(0, 5),
              st.sampled_from([200, 200, 200, 503, 429, 500, None, 410]),
              st.sampled_from([1.0, 50.0, 500.0, 30_000.0]), HEADERS),
    st.tuples(st.just("time"), st.sampled_from([0.0, 0.01, 0.3, 1.0, 5.0, 30.0, 61.0, 200.0])),
    st.tuples(st.just("wake")),
    st.tuples(st.just("replay"), st.integers(0, 10)),
    st.tuples(st.just("config"), st.sampled_from(MODES), st.sampled_from(["adaptive", "fixed"]),
              st.sampled_from([0.0, 1.0, 10.0]), st.sampled_from(["obey", "ignore"]),
              st.sampled_from([0.0, 0.5, 5.0])),
    st.tuples(st.just("control"), st.sampled_from(["pause", "resume", "enable", "disable"])),
)


def options(ordering: str, concurrency: str, heartbeat: float, control: str, rate: float) -> DeliveryOptions:
    coalesce = ordering == COALESCING  # key-ordered, coalescing
    return DeliveryOptions(ordering="key" if coalesce else ordering, concurrency=concurrency, max_in_flight=4,
                           heartbeat_interval=heartbeat, delivery_control=control, rate_limit=rate,
                           coalesce=coalesce)



@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(MODES), st.sampled_from([0.0, 1.0, 10.0]), st.lists(OPS, max_size=60))
def test_random_commands_never_loop_stall_or_overtake(
    ordering: str, heartbeat: float, ops: list[Any]
) -> None:
    d = Driver(options(ordering, "adaptive", heartbeat, "obey", 0.0))
    sent = 0
    for op in ops:
        kind = op[0]
        if kind == "intake":
            sent += 1
            d.run(Intake(replace(msg(sent, at=d.now), ordering_key=op[1])))
        elif kind == "answer":
            d.answer(*op[1:])
        elif kind == "time":
            d.now += op[1]
        elif kind == "wake":
            d.run(Wake())
        elif kind == "replay":
            d.replay(op[1])
        elif kind == "config":
            d.config = replace(d.config, options=options(*op[1:]))
            d.run(Configure(d.config))
        else:
            d.run(Control(op[1]))
        d.check()
