"""What the worker counts for /metrics, kept in plain ints and folded into families at scrape time.

The hot path only adds to dicts and lists of ints (a counter is a dict item, a
histogram a bisect and two additions): `prometheus_client`'s own metric objects
take a lock per update. Receivers' lag is kept only for receivers with
something to report (a backlog, or a status other than active), so the book
grows with the trouble, not with the fleet; per-receiver series are the
`top` oldest backlogs plus the receivers named in `always`.
"""

from __future__ import annotations

import asyncio
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
_new_lag = tuple.__new__  # a Lag without NamedTuple's slower __new__ (the book notes every command)
# An attempt's time: 5 ms to the default 15 s timeout and past it.
ATTEMPT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0)
# Accepted to 2xx: milliseconds for a healthy receiver, up to days for one that was down.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
                   1800.0, 3600.0, 21600.0, 86400.0)
CHANGELOG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
OUTCOMES = ("success", "retryable", "permanent", "gone", "timeout", "connect_error", "blocked", "auth_error")
KINDS = ("message", "batch", "probe", "ping", "heartbeat")
SOURCES = ("api", "kafka", "fanout")
CHUNK = 5000  # lag entries surveyed between two yields to the event loop (about 2.5 ms)
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
    window_changes: dict[str, int] = field(default_factory=dict)  # why an adaptive window moved -> times
    controls: dict[str, int] = field(default_factory=dict)  # webhook-delivery-control answers: obey/ignore
    superseded: int = 0  # coalescing: messages settled unsent, a newer one of their key going instead
    filtered: int = 0  # direct messages a receiver's content filter refused at intake
    transforms: dict[str, int] = field(default_factory=dict)  # receivers' transforms: ok, cancelled, error
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

    def window_change(self, reason: str) -> None:
        self.window_changes[reason] = self.window_changes.get(reason, 0) + 1

    def control(self, mode: str) -> None:
        self.controls[mode] = self.controls.get(mode, 0) + 1

    def transform(self, outcome: str) -> None:
        self.transforms[outcome] = self.transforms.get(outcome, 0) + 1


def outcome_label(outcome: Outcome, retry: dict[str, Any] | None = None) -> str:
    """One word for an attempt's outcome, as the receiver's retry settings judge its status."""
    if outcome.ok:
        return "success"
    status_code = outcome.status
    if status_code is None:
        error = outcome.error or ""
        if error.startswith("blocked"):
            return "blocked"
        if error.startswith("auth_error"):  # no token from the receiver's OAuth2 token server
            return "auth_error"
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
    window: int = 0  # an unordered receiver's in-flight window now; 0: ordered (one at a time)


def oldest_accepted(state: ReceiverState) -> float:
    """When the receiver's oldest undelivered message was accepted, from its state alone."""
    if state.cursor and state.window:
        return min(slot.accepted_at for slot in state.window)
    return state.head_accepted_at if state.backlog else 0.0


class ReceiverBook:
    """The owned receivers' lag, kept from the states the runner saves (on the hot path: kept cheap).

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
        window = state.in_flight_limit if state.cursor else 0
        self.lag[state.receiver_id] = _new_lag(Lag, (partition, word, circuit_open, backlog, oldest, window))

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

    def survey(self, top: int, always: frozenset[str]) -> Survey:
        """The book's figures in one pass (on the event loop: `survey_in_chunks` for a large book)."""
        survey = Survey(top)
        survey.add(self.lag.items())
        return survey.finish(self, always)


async def survey_in_chunks(
    book: ReceiverBook, top: int, always: frozenset[str], chunk: int = CHUNK
) -> Survey:
    """`book.survey`, yielding to the event loop every `chunk` receivers: one pass over a book of
    100,000 held the loop for tens of ms (docs/benchmarks.md, "Monitoring"). Judged on a copy of
    the book as the scrape began."""
    survey, items = Survey(top), list(book.lag.items())
    for start in range(0, len(items), chunk):
        survey.add(items[start : start + chunk])
        await asyncio.sleep(0)
    return survey.finish(book, always)


class Survey:
    """A scrape's figures over the lag book: totals, receivers per status, the `top` oldest."""

    def __init__(self, top: int) -> None:
        self.top = top
        self.backlog = 0
        self.circuits = 0
        self.oldest = 0.0  # accepted time of the oldest undelivered message; 0: none
        self.statuses = dict.fromkeys(STATUSES, 0)
        self._heap: list[tuple[float, str, Lag]] = []  # the top oldest, as (-accepted time, id, lag)
        self.chosen: list[tuple[str, Lag]] = []

    def add(self, items: Iterable[tuple[str, Lag]]) -> None:
        backlog, circuits, oldest, statuses, heap, top = (
            self.backlog, self.circuits, self.oldest, self.statuses, self._heap, self.top)
        for rid, lag in items:
            backlog += lag.backlog
            circuits += lag.circuit_open
            statuses[lag.status] += 1
            accepted = lag.oldest
            if accepted:
                if not oldest or accepted < oldest:
                    oldest = accepted
                if len(heap) < top:
                    heapq.heappush(heap, (-accepted, rid, lag))
                elif top and -accepted > heap[0][0]:
                    heapq.heapreplace(heap, (-accepted, rid, lag))
        self.backlog, self.circuits, self.oldest = backlog, circuits, oldest

    def finish(self, book: ReceiverBook, always: frozenset[str]) -> Survey:
        """`active` is every owned receiver the book does not keep with another status."""
        self.statuses["active"] = max(0, sum(book.counts.values()) - sum(self.statuses.values())
                                      + self.statuses["active"])
        self.chosen = [(rid, lag) for _, rid, lag in sorted(self._heap, reverse=True)]
        named = {rid for rid, _ in self.chosen}
        self.chosen += [(rid, book.lag[rid]) for rid in sorted(always - named) if rid in book.lag]
        return self

    def figures(self, now: float) -> Iterator[tuple[str, float]]:
        """The fleet-wide lag figures: (name, value)."""
        yield "backlog_messages", float(self.backlog)
        yield "circuit_open_receivers", float(self.circuits)
        yield "oldest_undelivered_age_seconds", max(0.0, now - self.oldest) if self.oldest else 0.0


def parse_receiver_ids(text: str) -> frozenset[str]:
    """DISPATCHER_METRICS_RECEIVERS: comma-separated receiver ids."""
    return frozenset(part.strip() for part in text.split(",") if part.strip())
