"""The metrics' plain counts, the lag book and the collector, without a worker."""

from __future__ import annotations

from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dispatcher.domain.actor import ReceiverState
from dispatcher.domain.aimd import Congestion
from dispatcher.domain.breaker import Breaker, Circuit
from dispatcher.domain.records import Outcome, ReceiverConfig
from dispatcher.domain.window import Slot
from dispatcher.metrics import Counts, Histogram, ReceiverBook, outcome_label, survey_in_chunks
from dispatcher.worker_metrics import LoopLag, WorkerCollector, WorkerFigures, exposition, new_registry

NOW = 1_000_000.0


def state(rid: str, **fields: object) -> ReceiverState:
    config = ReceiverConfig(rid, f"https://example.com/{rid}", "whsec_" + "A" * 32)
    return ReceiverState(rid, config, **fields)


def failing(rid: str, backlog: int, accepted_at: float) -> ReceiverState:
    return state(rid, next_seq=backlog + 1, attempts=3, head_accepted_at=accepted_at,
                 breaker=Breaker(Circuit.OPEN, consecutive=5))


def outcome(status: int | None, error: str | None = None) -> Outcome:
    ok = status is not None and 200 <= status < 300
    return Outcome(1, "m", "t", ok, status, error, 1.0, NOW)


@pytest.mark.parametrize(("status", "error", "retry", "label"), [
    (204, None, None, "success"),
    (503, None, None, "retryable"),
    (429, None, None, "retryable"),
    (400, None, None, "permanent"),
    (501, None, None, "permanent"),
    (410, None, None, "gone"),
    (404, None, {"retryable_statuses": [404]}, "retryable"),
    (503, None, {"permanent_statuses": [503]}, "permanent"),
    (None, "timeout", None, "timeout"),
    (None, "connect timeout (example.com:443)", None, "timeout"),
    (None, "cannot connect to example.com:443: refused", None, "connect_error"),
    (None, "blocked: 10.0.0.1 is private", None, "blocked"),
    (None, "auth_error: token request failed: timeout", None, "auth_error"),
])
def test_outcome_labels_follow_the_receivers_retry_settings(
    status: int | None, error: str | None, retry: dict[str, list[int]] | None, label: str
) -> None:
    assert outcome_label(outcome(status, error), retry) == label


def test_histogram_buckets_are_cumulative_and_le_inclusive() -> None:
    hist = Histogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 1.0, 7.0):
        hist.observe(value)
    assert hist.buckets() == [("0.1", 2), ("1.0", 4), ("+Inf", 5)]
    assert hist.total == pytest.approx(8.65)


def test_book_keeps_only_receivers_with_something_to_report() -> None:
    book = ReceiverBook()
    book.counted(0, 3)
    book.note(state("idle"), 0)
    book.note(failing("down", 5, NOW - 60), 0)
    book.note(state("paused", paused=True), 1)
    assert set(book.lag) == {"down", "paused"}
    statuses = book.survey(20, frozenset()).statuses
    assert statuses["failing"] == 1 and statuses["paused"] == 1
    book.note(state("down", next_seq=6, delivered_seq=5), 0)  # drained: active again
    assert set(book.lag) == {"paused"}
    book.drop_partitions({1})
    assert book.lag == {} and book.survey(20, frozenset()).statuses["active"] == 3


def test_oldest_of_an_unordered_receiver_is_its_oldest_slot() -> None:
    book = ReceiverBook()
    window = (Slot(3, NOW - 5), Slot(4, NOW - 50, attempts=2))
    book.note(state("u", next_seq=6, cursor=5, window=window), 0)
    assert book.lag["u"].oldest == NOW - 50 and book.lag["u"].backlog == 3


def test_ten_thousand_failing_receivers_make_a_bounded_number_of_series() -> None:
    book = ReceiverBook()
    book.counted(0, 10_000)
    for n in range(10_000):
        book.note(failing(f"rcv_{n:05d}", 1 + n % 7, NOW - n), n % 8)
    figures = WorkerFigures(lambda: {"fast": 3, "slow": 0}, lambda: 8, lambda: dict.fromkeys(range(8), 0),
                            lambda: 2.5, lambda: True)
    collector = WorkerCollector(Counts(), book, figures, LoopLag(), 20, frozenset({"rcv_00000"}), lambda: NOW)
    text = exposition(new_registry(collector)).decode()
    families = list(text_string_to_metric_families(text))
    series = sum(len(f.samples) for f in families)
    per_receiver = {s.labels["receiver_id"] for f in families for s in f.samples if "receiver_id" in s.labels}
    print(f"series with 10,000 failing receivers: {series} ({len(per_receiver)} receivers with their own)")
    assert len(per_receiver) == 21  # the 20 oldest and the one named
    assert "rcv_09999" in per_receiver and "rcv_00000" in per_receiver
    assert series < 250
    found = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}
    assert found[("webhook_dispatcher_circuit_open_receivers", ())] == 10_000
    assert found[("webhook_dispatcher_oldest_undelivered_age_seconds", ())] == 9_999
    assert found[("webhook_dispatcher_receivers", (("status", "failing"),))] == 10_000


async def test_a_survey_in_chunks_finds_what_one_pass_finds() -> None:
    book = ReceiverBook()
    book.counted(0, 1_000)
    for n in range(1_000):
        book.note(failing(f"rcv_{n:05d}", 1 + n % 3, NOW - (n * 7919) % 1_000), 0)
    book.note(state("paused", paused=True), 0)
    whole = book.survey(5, frozenset({"paused", "rcv_00000"}))
    chunked = await survey_in_chunks(book, 5, frozenset({"paused", "rcv_00000"}), chunk=64)
    assert chunked.chosen == whole.chosen and chunked.statuses == whole.statuses
    totals = (whole.backlog, whole.circuits, whole.oldest)
    assert (chunked.backlog, chunked.circuits, chunked.oldest) == totals
    ages = [NOW - lag.oldest for _, lag in whole.chosen[:5]]
    assert ages == sorted(ages, reverse=True) and ages[0] == 999, "the oldest first"
    assert [rid for rid, _ in whole.chosen[5:]] == ["paused", "rcv_00000"], "named, not among the top"


def test_the_window_of_an_unordered_receiver_and_its_changes_are_series() -> None:
    book = ReceiverBook()
    book.counted(0, 2)
    unordered = state("u", next_seq=9, cursor=5, window=(Slot(3, NOW - 5),))
    options = replace(unordered.config.options, ordering="none", max_in_flight=16)
    book.note(replace(unordered, config=replace(unordered.config, options=options),
                      congestion=Congestion(window=6)), 0)
    book.note(failing("ordered", 2, NOW - 9), 0)
    counts = Counts()
    counts.window_change("429")
    counts.window_change("grew")
    counts.window_change("grew")
    counts.control("ignore")
    figures = WorkerFigures(lambda: {"fast": 0, "slow": 0}, lambda: 8, lambda: {}, lambda: 0.0, lambda: True)
    collector = WorkerCollector(counts, book, figures, LoopLag(), 20, frozenset(), lambda: NOW)
    families = list(text_string_to_metric_families(exposition(new_registry(collector)).decode()))
    found = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}
    assert found[("webhook_dispatcher_receiver_concurrency_window", (("receiver_id", "u"),))] == 6
    assert ("webhook_dispatcher_receiver_concurrency_window", (("receiver_id", "ordered"),)) not in found
    changes = "webhook_dispatcher_concurrency_window_changes_total"
    assert (found[(changes, (("reason", "grew"),))], found[(changes, (("reason", "429"),))]) == (2, 1)
    controls = "webhook_dispatcher_delivery_control_answers_total"
    assert (found[(controls, (("mode", "ignore"),))], found[(controls, (("mode", "obey"),))]) == (1, 0)
