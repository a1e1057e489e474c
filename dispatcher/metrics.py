"""What the worker counts for /metrics, kept in plain ints and folded into families at scrape time.

The hot path only adds to dicts and lists of ints (a counter is a dict item, a
histogram a bisect and two additions): `prometheus_client`'s own metric objects
take a lock per update. Receivers' lag is kept only for receivers with
something to report (a backlog, or a status other than active), so the book
grows with the trouble, not with the fleet; per-receiver series are the
`top` oldest backlogs plus the receivers named in `always`.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .domain.actor import ReceiverState
from .domain.actor.status import STATUSES, status
from .domain.breaker import Circuit
from .domain.records import Outcome
from .domain.retry import RetryPolicy, Verdict

PREFIX = "webhook_dispatcher_"
_CLOSED = Circuit.CLOSED
_new_lag = tuple.__new__  # a Lag without NamedTuple's __new__ (a third of the cost)
# An attempt's time: 5 ms to the default 15 s timeout and past it.
ATTEMPT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0)
# Accepted to 2xx: milliseconds for a healthy receiver, up to days for one that was down.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
                   1800.0, 3600.0, 21600.0, 86400.0)
CHANGELOG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
OUTCOMES = ("success", "retryable", "permanent", "gone", "timeout", "connect_error", "blocked")
KINDS = ("message", "batch", "probe", "ping")
SOURCES = ("api", "kafka", "fanout")
_DEFAULT_RETRY = RetryPolicy()


class Histogram:
    """Bucket counts and a sum: the exposition's cumulative form is built at scrape time."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # `le` is inclusive, as bisect_left's index
        self.total += value

    def buckets(self) -> list[tuple[str, int]]:
        """Cumulative (le, count) pairs, +Inf last."""
        out, running = [], 0
        for bound, count in zip((*map(repr, self.bounds), "+Inf"), self.counts, strict=True):
            running += count
            out.append((bound, running))
        return out


@dataclass(slots=True)
class Counts:
    """The worker's counters: updated on the hot path, read at scrape time."""

    accepted: dict[str, int] = field(default_factory=dict)  # source -> messages
    attempts: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (outcome, lane, kind)
    dead_letters: dict[str, int] = field(default_factory=dict)  # reason -> messages
    attempt_seconds: Histogram = field(default_factory=lambda: Histogram(ATTEMPT_BUCKETS))
    latency_seconds: Histogram = field(default_factory=lambda: Histogram(LATENCY_BUCKETS))
    changelog_seconds: Histogram = field(default_factory=lambda: Histogram(CHANGELOG_BUCKETS))

    def accept(self, source: str, count: int = 1) -> None:
        self.accepted[source] = self.accepted.get(source, 0) + count

    def attempt(self, outcome: str, lane: str, kind: str, seconds: float) -> None:
        key = (outcome, lane, kind)
        self.attempts[key] = self.attempts.get(key, 0) + 1
        self.attempt_seconds.observe(seconds)

    def dead_letter(self, reason: str) -> None:
        self.dead_letters[reason] = self.dead_letters.get(reason, 0) + 1


def outcome_label(outcome: Outcome, retry: dict[str, Any] | None = None) -> str:
    """One word for an attempt's outcome, as the receiver's retry settings judge its status."""
    if outcome.ok:
        return "success"
    status_code = outcome.status
    if status_code is None:
        error = outcome.error or ""
        if error.startswith("blocked"):
            return "blocked"
        return "timeout" if "timeout" in error else "connect_error"
    verdict = _classify(status_code, retry)
    if verdict is Verdict.GONE:
        return "gone"
    return "permanent" if verdict is Verdict.PERMANENT else "retryable"


def _classify(status_code: int, retry: dict[str, Any] | None) -> Verdict:
    if retry and (retry.get("retryable_statuses") or retry.get("permanent_statuses")):
        policy = RetryPolicy(retryable_statuses=frozenset(retry.get("retryable_statuses") or ()),
                             permanent_statuses=frozenset(retry.get("permanent_statuses") or ()))
        return policy.classify(status_code)
    return _DEFAULT_RETRY.classify(status_code)


class Lag(NamedTuple):
    """What the book keeps of one receiver that has something to report."""

    partition: int
    status: str
    circuit_open: bool
    backlog: int
    oldest: float  # when its oldest undelivered message was accepted; 0: not known (or none)


def oldest_accepted(state: ReceiverState) -> float:
    """When the receiver's oldest undelivered message was accepted, from its state alone."""
    if state.cursor and state.window:
        return min(slot.accepted_at for slot in state.window)
    return state.head_accepted_at if state.backlog else 0.0


class ReceiverBook:
    """The owned receivers' lag, kept from the states the runner saves (about a µs a command).

    Only receivers with a backlog or a status other than active are kept; the
    others are counted per partition, so idle receivers cost no memory here.
    """

    def __init__(self) -> None:
        self.lag: dict[str, Lag] = {}
        self.counts: dict[int, int] = {}  # partition -> receivers owned there

    def note(self, state: ReceiverState, partition: int) -> None:
        """Called after every command: the common case (delivering, nothing held) takes no call."""
        backlog = state.backlog
        circuit_open = state.breaker.circuit is not _CLOSED
        held = circuit_open or state.attempts or state.cursor or state.paused or state.disabled
        if held or state.deleting or state.resetting or state.config.verify:
            word = status(state)
        elif not backlog:
            self.lag.pop(state.receiver_id, None)  # active and idle: counted, not kept
            return
        else:
            word = "active"
        if not backlog and word == "active":
            self.lag.pop(state.receiver_id, None)
            return
        oldest = oldest_accepted(state) if state.cursor else state.head_accepted_at
        self.lag[state.receiver_id] = _new_lag(Lag, (partition, word, circuit_open, backlog, oldest))

    def created(self, partition: int) -> None:
        self.counts[partition] = self.counts.get(partition, 0) + 1

    def deleted(self, receiver_id: str, partition: int) -> None:
        self.lag.pop(receiver_id, None)
        self.counts[partition] = max(0, self.counts.get(partition, 0) - 1)

    def counted(self, partition: int, receivers: int) -> None:
        """A rebuild scanned the partition: this many receivers live there."""
        self.counts[partition] = receivers

    def drop_partitions(self, partitions: Iterable[int]) -> None:
        gone = set(partitions)
        for partition in gone:
            self.counts.pop(partition, None)
        for receiver_id in [rid for rid, lag in self.lag.items() if lag.partition in gone]:
            del self.lag[receiver_id]

    def by_status(self) -> dict[str, int]:
        """Receivers per status; `active` is every owned receiver not kept with another status."""
        out = dict.fromkeys(STATUSES, 0)
        for lag in self.lag.values():
            out[lag.status] += 1
        out["active"] = max(0, sum(self.counts.values()) - sum(out.values()) + out["active"])
        return out

    def oldest(self, top: int, always: frozenset[str]) -> list[tuple[str, Lag]]:
        """The `top` receivers with the oldest undelivered message, then those named in `always`."""
        aged = ((rid, lag) for rid, lag in self.lag.items() if lag.oldest > 0)
        chosen = heapq.nsmallest(top, aged, key=lambda item: item[1].oldest) if top > 0 else []
        named = {rid for rid, _ in chosen}
        chosen += [(rid, self.lag[rid]) for rid in sorted(always - named) if rid in self.lag]
        return chosen


def parse_receiver_ids(text: str) -> frozenset[str]:
    """DISPATCHER_METRICS_RECEIVERS: comma-separated receiver ids."""
    return frozenset(part.strip() for part in text.split(",") if part.strip())


def summary(book: ReceiverBook, now: float) -> Iterator[tuple[str, float]]:
    """The fleet-wide lag figures over the book: (name, value)."""
    backlog, circuits, oldest = 0, 0, 0.0
    for lag in book.lag.values():
        backlog += lag.backlog
        circuits += lag.circuit_open
        if lag.oldest and (not oldest or lag.oldest < oldest):
            oldest = lag.oldest
    yield "backlog_messages", float(backlog)
    yield "circuit_open_receivers", float(circuits)
    yield "oldest_undelivered_age_seconds", max(0.0, now - oldest) if oldest else 0.0
