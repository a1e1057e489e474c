"""/metrics of one worker: a collector that reads the worker's counts and figures at scrape time.

Each worker has its own registry (tests run several workers in one process);
nothing is computed between scrapes but the plain counts of `metrics.py` and
the event loop's lag.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from faust.types import TP
from mode import Service
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from .metrics import (
    KINDS,
    OUTCOMES,
    PREFIX,
    SOURCES,
    Counts,
    Histogram,
    ReceiverBook,
    Survey,
    parse_receiver_ids,
    survey_in_chunks,
)

LOOP_TICK = 0.25  # seconds between two looks at the event loop's lag


class LoopLag(Service):
    """How late the event loop runs a timer: the worst since the last scrape, and the last one."""

    def __init__(self, tick: float = LOOP_TICK) -> None:
        super().__init__()
        self.tick = tick
        self.worst = 0.0

    async def on_start(self) -> None:
        self.add_future(self._watch())

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        while not self.should_stop:
            due = loop.time() + self.tick
            await asyncio.sleep(self.tick)
            self.worst = max(self.worst, loop.time() - due)

    def take(self) -> float:
        worst, self.worst = self.worst, 0.0
        return worst


@dataclass(slots=True)
class WorkerFigures:
    """The worker's live figures the collector reads, each a callable over the worker's parts."""

    in_flight: Callable[[], dict[str, int]]  # lane -> POSTs running
    partitions: Callable[[], int]  # partitions owned
    consumer_lag: Callable[[], dict[int, int]]  # requests partition -> records not yet applied
    recovery_seconds: Callable[[], float]  # the last rebalance's revocation to recovered
    ready: Callable[[], bool]
    filtered_at_fanout: Callable[[], int] = lambda: 0  # event copies content filters kept back


class WorkerCollector(Collector):
    def __init__(
        self, counts: Counts, book: ReceiverBook, figures: WorkerFigures, loop_lag: LoopLag,
        top: int, always: frozenset[str], clock: Callable[[], float] = time.time,
    ) -> None:
        self.counts, self.book, self.figures, self.loop_lag = counts, book, figures, loop_lag
        self.top, self.always, self.clock = top, always, clock
        self._prepared: Survey | None = None

    async def prepare(self) -> None:
        """Survey the lag book before a scrape, a chunk at a time (`collect` then only reads it)."""
        self._prepared = await survey_in_chunks(self.book, self.top, self.always)

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        yield from self._counters()
        yield from self._receivers()
        yield from self._worker()

    def _counters(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        c = self.counts
        accepted = counter("messages_accepted", "Messages taken in, by source.", ["source"])
        for source in SOURCES:
            accepted.add_metric([source], c.accepted.get(source, 0))
        yield accepted
        attempts = counter("delivery_attempts", "Delivery attempts (POSTs), by outcome, lane and kind.",
                           ["outcome", "lane", "kind"])
        seen = dict.fromkeys(((o, "fast", k) for o in OUTCOMES for k in KINDS), 0) | c.attempts
        for (outcome, lane, kind), value in sorted(seen.items()):
            attempts.add_metric([outcome, lane, kind], value)
        yield attempts
        letters = counter("dead_letters", "Messages dead-lettered, by reason.", ["reason"])
        for reason, value in sorted(c.dead_letters.items()):
            letters.add_metric([reason], value)
        yield letters
        windows = counter("concurrency_window_changes", "Changes of unordered receivers' adaptive in-flight "
                          "windows, by why: grew, a cut (429, 503, timeout, latency), ceiling or start.",
                          ["reason"])
        for reason, value in sorted(c.window_changes.items()):
            windows.add_metric([reason], value)
        yield windows
        controls = counter("delivery_control_answers", "Answers that carried webhook-delivery-control, by "
                           "whether the receiver's setting obeys or ignores it.", ["mode"])
        for mode in ("obey", "ignore"):
            controls.add_metric([mode], c.controls.get(mode, 0))
        yield controls
        superseded = counter("messages_superseded", "Messages of coalescing receivers settled unsent because "
                             "a newer one of their ordering key came while they waited.", [])
        superseded.add_metric([], c.superseded)
        yield superseded
        filtered = counter("messages_filtered", "Messages receivers' content filters refused: event copies "
                           "at fan-out, direct messages at intake.", ["at"])
        filtered.add_metric(["fanout"], self.figures.filtered_at_fanout())
        filtered.add_metric(["intake"], c.filtered)
        yield filtered
        transforms = counter("transforms", "Messages run through their receiver's transform, by outcome: "
                             "ok (posted), cancelled (settled unposted), error (dead-lettered).", ["outcome"])
        for outcome in ("ok", "cancelled", "error"):
            transforms.add_metric([outcome], c.transforms.get(outcome, 0))
        yield transforms
        yield histogram("delivery_attempt_duration_seconds", "Time of one attempt, POST to answer.",
                        c.attempt_seconds)
        yield histogram("delivery_latency_seconds", "Accepted to 2xx, per message: what a receiver sees.",
                        c.latency_seconds)
        yield histogram("changelog_write_seconds", "A changelog batch from send to the broker's ack.",
                        c.changelog_seconds)

    def _receivers(self) -> Iterator[GaugeMetricFamily]:
        survey, self._prepared = self._prepared or self.book.survey(self.top, self.always), None
        now = self.clock()
        by_status = gauge("receivers", "Receivers owned by this worker, by status.", ["status"])
        for word, value in survey.statuses.items():
            by_status.add_metric([word], value)
        yield by_status
        for name, figure in survey.figures(now):
            yield gauge(name, _SUMMARY_HELP[name], value=figure)
        backlog = gauge("receiver_backlog_messages", "Backlog of the receivers with the oldest undelivered "
                        "message (top N) and of those named in DISPATCHER_METRICS_RECEIVERS.",
                        ["receiver_id"])
        age = gauge("receiver_oldest_undelivered_age_seconds", "Age of the oldest undelivered message of the "
                    "same receivers.", ["receiver_id"])
        window = gauge("receiver_concurrency_window", "In-flight window of the same receivers that deliver "
                       "unordered (adaptive: as it stands now; fixed: max_in_flight; capped by what the "
                       "receiver asked for).", ["receiver_id"])
        for receiver_id, lag in survey.chosen:
            backlog.add_metric([receiver_id], lag.backlog)
            age.add_metric([receiver_id], max(0.0, now - lag.oldest) if lag.oldest else 0.0)
            if lag.window:
                window.add_metric([receiver_id], lag.window)
        yield backlog
        yield age
        yield window

    def _worker(self) -> Iterator[GaugeMetricFamily]:
        f = self.figures
        in_flight = gauge("in_flight", "Delivery attempts posting now, by lane.", ["lane"])
        for lane, value in sorted(f.in_flight().items()):
            in_flight.add_metric([lane], value)
        yield in_flight
        yield gauge("partitions_owned", "Receiver partitions this worker owns.", value=f.partitions())
        lag = gauge("consumer_lag_messages", "Records of a requests partition not yet applied.",
                    ["partition"])
        for partition, value in sorted(f.consumer_lag().items()):
            lag.add_metric([str(partition)], value)
        yield lag
        yield gauge("recovery_duration_seconds", "The last rebalance: partitions revoked to recovered.",
                    value=f.recovery_seconds())
        yield gauge("event_loop_lag_seconds", "How late the event loop ran a timer, worst since the last "
                    "scrape.", value=self.loop_lag.take())
        yield gauge("ready", "1 once the worker has recovered its partitions and no rebalance is under way.",
                    value=float(f.ready()))


_SUMMARY_HELP = {
    "backlog_messages": "Messages not yet delivered, over this worker's receivers.",
    "circuit_open_receivers": "Receivers whose circuit is open or half-open.",
    "oldest_undelivered_age_seconds": "Age of the oldest undelivered message over this worker's receivers.",
}


def counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(PREFIX + name, doc, labels=labels)  # `_total` is added by the family


def gauge(
    name: str, doc: str, labels: list[str] | None = None, value: float | None = None
) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, doc, value=value, labels=labels)


def histogram(name: str, doc: str, hist: Histogram) -> HistogramMetricFamily:
    return HistogramMetricFamily(PREFIX + name, doc, buckets=hist.buckets(), sum_value=hist.total)


def new_registry(collector: Collector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    """The registry in the Prometheus text format (0.0.4)."""
    return generate_latest(registry)


class WorkerMetrics:
    """One worker's registry and its collector: `render` is a scrape."""

    def __init__(self, collector: WorkerCollector) -> None:
        self.collector = collector
        self.registry = new_registry(collector)

    async def render(self) -> bytes:
        await self.collector.prepare()
        return exposition(self.registry)


def worker_registry(dispatcher: Any, loop_lag: LoopLag) -> WorkerMetrics:
    """The metrics of one worker (`worker.Dispatcher`), reading its parts at scrape time."""
    settings, runner, ownership = dispatcher.settings, dispatcher.runner, dispatcher.ownership
    figures = WorkerFigures(
        in_flight=lambda: {str(lane): n for lane, n in dispatcher.deliverer.pool.used.items()},
        partitions=lambda: len(ownership.owned),
        consumer_lag=lambda: consumer_lag(dispatcher),
        recovery_seconds=lambda: ownership.recovery_seconds,
        ready=lambda: ownership.ready,
        filtered_at_fanout=lambda: dispatcher.fanout.refused,
    )
    collector = WorkerCollector(
        dispatcher.deliverer.counts, runner.book, figures, loop_lag,
        settings.metrics_top_receivers, parse_receiver_ids(settings.metrics_receivers),
    )
    return WorkerMetrics(collector)


def consumer_lag(dispatcher: Any) -> dict[int, int]:
    """Per owned requests partition: its high watermark (as last fetched) less the applied offset."""
    topic, applied, out = dispatcher.names["requests"], dispatcher.runner.applied, {}
    for partition in sorted(dispatcher.ownership.owned):
        done = applied.next_offset(partition)
        try:
            end = dispatcher.app.consumer.highwater(TP(topic, partition))
        except Exception:  # noqa: BLE001 - not fetched yet, or the assignment just moved
            continue
        if done is not None and end is not None:
            out[partition] = max(0, int(end) - done)
    return out
