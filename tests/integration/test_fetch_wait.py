"""A partition of thousands of batches is read to its end at a 3 ms fetch wait.

The embedded broker answers a fetch with what it gathered when the wait runs
out, and it lists every batch of the partition first, so at 3 ms a partition of
some thousands of batches came back empty on every fetch (a restarted worker
read none of a 100,000-receiver changelog).
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from dispatcher.broker import EmbeddedBroker
from dispatcher.fetch_wait import FetchWait
from dispatcher.overrides.fetcher import _behind_when_asked, _progress, adapt_fetch_wait
from tests.harness import new_app_id

BATCHES = 6000  # one record each; about 8 ms of listing per fetch on 2 cores


async def _produce_one_per_batch(host: str, topic: str, count: int) -> None:
    async with AIOKafkaProducer(bootstrap_servers=host) as producer:
        sent = []
        for n in range(count):
            batch = producer.create_batch()
            batch.append(key=b"k", value=b"%d" % n, timestamp=None)
            sent.append(await producer.send_batch(batch, topic, partition=0))
        await asyncio.gather(*sent)


async def test_a_partition_of_many_batches_is_read_to_its_end(broker: EmbeddedBroker) -> None:
    host = broker.url.removeprefix("kafka://")
    topic = f"{new_app_id()}.many-batches"
    await _produce_one_per_batch(host, topic, BATCHES)
    consumer = AIOKafkaConsumer(bootstrap_servers=host, enable_auto_commit=False, fetch_max_wait_ms=3)
    await consumer.start()
    try:
        wait = adapt_fetch_wait(consumer)
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        values: list[int] = []
        deadline = time.monotonic() + 60
        while len(values) < BATCHES and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                values.extend(int(r.value) for r in records)
        assert values == list(range(BATCHES))
        # Caught up: the next fetch answers nothing new, and the wait is the configured one again.
        for _ in range(20):
            await consumer.getmany(timeout_ms=50)
            if wait.current_ms == 3:
                break
        assert wait.current_ms == 3
    finally:
        await consumer.stop()


def test_fetch_wait_doubles_while_starved_and_returns_once_caught_up() -> None:
    wait = FetchWait(base_ms=3, cap_ms=40)
    starved = [wait.after_fetch(behind=True, starved=True, brought=False) for _ in range(5)]
    assert starved == [6, 12, 24, 40, 40]
    assert wait.after_fetch(behind=True, starved=False, brought=True) == 40  # records came: keep what works
    assert wait.after_fetch(behind=False, starved=False, brought=False) == 3
    assert FetchWait(base_ms=500, cap_ms=40).cap_ms == 500  # never below the configured wait


def test_fetch_wait_rises_after_a_quiet_spell_and_drops_with_the_next_record() -> None:
    wait = FetchWait(base_ms=2, idle_cap_ms=50, idle_after_ms=100)
    quiet = [wait.after_fetch(behind=False, starved=False, brought=False) for _ in range(56)]
    assert quiet[:49] == [2] * 49, "short gaps between records keep the configured wait"
    # After 100 ms of empty answers it doubles to the cap, but never past a quarter of the spell
    # so far (waited: 100, 104, 112, 128, 160, 200 ms).
    assert quiet[49:] == [4, 8, 16, 32, 40, 50, 50]
    # Records come: the answer leaves their partition behind (its high watermark is above the
    # offset asked for), and the wait is the configured one again at once, not after the flow stops
    # (a quiet spell is no gap of a flow: the flow's wait did not learn from it).
    assert wait.after_fetch(behind=True, starved=False, brought=True) == 2 == wait.flowing_ms
    assert wait.after_fetch(behind=False, starved=False, brought=False) == 2, "the quiet spell starts again"
    for _ in range(60):
        wait.after_fetch(behind=False, starved=False, brought=False)
    assert wait.current_ms == 50
    assert wait.after_fetch(behind=True, starved=False, brought=False) == 2, "a record landed during it"
    assert FetchWait(base_ms=500, idle_cap_ms=50).idle_cap_ms == 500  # Kafka's wait stays as configured


def test_a_long_quiet_spell_waits_at_most_a_quarter_of_itself_up_to_the_cap() -> None:
    """The first record after a spell waits at most a quarter of it more; polls thin out as it lasts."""
    wait = FetchWait(base_ms=2, idle_cap_ms=1000, idle_after_ms=100)
    waited = 0
    for _ in range(2000):  # bounded: 2,000 empty answers
        current = wait.current_ms
        assert current == 2 or current <= max(2, waited // 4), (waited, current)
        wait.after_fetch(behind=False, starved=False, brought=False)
        waited += current
        if wait.current_ms == 1000:
            break
    assert wait.current_ms == 1000, "a long enough spell reaches the cap"
    assert 4000 <= waited < 5000, "once the spell is four times the cap, and not much later"
    assert wait.after_fetch(behind=True, starved=False, brought=True) == 2, "a record ends the spell"


ROUND_TRIP_MS = 0.5  # a fetch's request, answer and handling, besides the broker's wait


def _embedded_broker_model(wait: FetchWait, gap_ms: float, records: int = 1000) -> tuple[float, list[float]]:
    """A flow of a record every `gap_ms` against the embedded broker's fetches: an answer comes at
    once with the records already there, else when the wait runs out, empty (behind, if one landed
    meanwhile). Returns the fetches per record and each record's wait for a fetch."""
    arrivals = [gap_ms * (n + 1) for n in range(records)]
    now, fetched, fetches, waited, landed = 0.0, 0, 0, [], False
    while fetched < records and fetches < 100 * records:  # bounded
        fetches += 1
        took = ROUND_TRIP_MS
        if arrivals[fetched] <= now:
            while fetched < records and arrivals[fetched] <= now:
                waited.append(now - arrivals[fetched])
                fetched += 1
            wait.after_fetch(behind=True, starved=False, brought=True, took_ms=took, asked_behind=landed)
            landed = False
        else:
            took += wait.current_ms
            landed = arrivals[fetched] <= now + took
            wait.after_fetch(behind=landed, starved=False, brought=False, took_ms=took, asked_behind=False)
        now += took
    return fetches / records, waited


def test_a_sparse_flow_polls_fewer_times_a_record_and_waits_an_eighth_of_its_gap() -> None:
    for gap_ms in (50.0, 99.0):  # 20/s, 10/s
        polls, waited = _embedded_broker_model(FetchWait(base_ms=2), gap_ms)
        fixed = gap_ms / (2 + ROUND_TRIP_MS)  # polls a record at a fixed 2 ms wait: 20 and 40
        assert polls < fixed / 2, (gap_ms, polls)
        steady = sorted(waited[100:])  # once the gap is learnt
        assert steady[int(len(steady) * 0.99)] <= gap_ms / 8, (gap_ms, steady[-5:])


def test_a_dense_flow_and_kafka_keep_the_configured_wait() -> None:
    for gap_ms in (2.0, 5.0, 10.0, 20.0):  # 500/s, 200/s (the paced scenario), 100/s, 50/s
        wait = FetchWait(base_ms=2)
        _, waited = _embedded_broker_model(wait, gap_ms)
        assert max(waited) <= 2.0 and wait.flowing_ms == 2, gap_ms
    kafka = FetchWait(base_ms=500)  # Kafka answers a long poll when a record comes: it never moves
    _embedded_broker_model(kafka, 50.0, records=50)
    assert kafka.flowing_ms == kafka.current_ms == 500


def test_a_burst_after_a_trickle_and_quiet_spells_wait_the_configured_wait() -> None:
    wait = FetchWait(base_ms=2)
    _embedded_broker_model(wait, 50.0, records=200)  # a trickle of 20/s: the wait is up
    assert wait.flowing_ms == 6
    # One record 5 ms after the last: a shorter gap counts at once, not by a part.
    wait.after_fetch(behind=False, starved=False, brought=False, took_ms=4.5, asked_behind=False)
    assert wait.after_fetch(behind=True, starved=False, brought=True, took_ms=0.5, asked_behind=False) == 2
    # Quiet spells of a second between bursts (and a worker's start, a rebalance) are no gap.
    for _ in range(5):
        wait.after_fetch(behind=False, starved=False, brought=False, took_ms=1000, asked_behind=False)
        came = wait.after_fetch(behind=True, starved=False, brought=True, took_ms=0.5, asked_behind=False)
        assert came == 2


def test_a_starved_wait_comes_back_to_the_configured_one_once_caught_up() -> None:
    """Catching up after starvation is not a quiet spell: the next empty answer waits the base."""
    wait = FetchWait(base_ms=3, cap_ms=2000, idle_cap_ms=50, idle_after_ms=100)
    for _ in range(10):
        wait.after_fetch(behind=True, starved=True, brought=False)
    assert wait.current_ms == 2000
    assert wait.after_fetch(behind=False, starved=False, brought=False) == 3


def test_only_a_partition_behind_when_asked_counts_as_starved() -> None:
    """A record that lands while the broker gathers an answer is not starvation (a live partition)."""
    tp = TopicPartition("t", 0)
    state = SimpleNamespace(has_valid_position=True, position=10, highwater=10)
    assignment = SimpleNamespace(state_value=lambda _: state)
    request = SimpleNamespace(topics=[("t", [(0, 10, 1 << 20)])])
    fetcher = SimpleNamespace(_records={})

    asked_behind = _behind_when_asked(assignment, request)  # caught up as the fetch goes out
    assert _progress(fetcher, assignment, request, asked_behind) == (False, False, False), "quiet"
    state.highwater = 11  # a record arrived during the fetch; the answer carried none
    assert _progress(fetcher, assignment, request, asked_behind) == (True, False, False)

    asked_behind = _behind_when_asked(assignment, request)  # now behind as the fetch goes out
    assert _progress(fetcher, assignment, request, asked_behind) == (True, True, False), "answered empty"
    fetcher._records[tp] = object()
    assert _progress(fetcher, assignment, request, asked_behind) == (True, False, True), "got records"
