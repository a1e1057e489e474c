"""GET /metrics on a real worker: counters move by exactly what happened, lag is per receiver and bounded;
its log is JSON, one object per line.

Every receiver here names its event types, so an event published by one test
reaches only the receivers it means to.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from dispatcher.broker import EmbeddedBroker
from dispatcher.client import DispatcherProducer
from tests.harness import Api, Delivery, Receiver, WorkerProcess, wait_until

pytestmark = pytest.mark.integration

METRICS_TOKEN = "metrics-token"
WATCHED = "rcv_metrics_watched"  # named in DISPATCHER_METRICS_RECEIVERS
P = "webhook_dispatcher_"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
async def worker(make_module_worker: Callable[..., WorkerProcess]) -> AsyncIterator[WorkerProcess]:
    proc = make_module_worker(
        DISPATCHER_METRICS_TOKEN=METRICS_TOKEN, DISPATCHER_METRICS_TOP_RECEIVERS="1",
        DISPATCHER_METRICS_RECEIVERS=WATCHED, DISPATCHER_LOG_FORMAT="json",
    )
    await proc.wait_ready()
    yield proc


async def scrape(worker: WorkerProcess, token: str | None = METRICS_TOKEN) -> tuple[int, str, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as session, session.get(worker.url + "/metrics", headers=headers) as r:
        return r.status, r.headers.get("Content-Type", ""), await r.text()


async def samples(worker: WorkerProcess) -> Samples:
    status, _, text = await scrape(worker)
    assert status == 200, text
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((P + name, frozenset(labels.items())), 0.0)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def messages(rid: str, n: int, event_type: str = "metrics.test") -> list[dict[str, Any]]:
    return [{"receiver_id": rid, "event_type": event_type, "payload": {"n": i}} for i in range(n)]


async def test_metrics_need_their_token_and_parse(worker: WorkerProcess) -> None:
    assert (await scrape(worker, None))[0] == 401
    assert (await scrape(worker, "test-token"))[0] == 401, "the API token is not the metrics token"
    status, kind, text = await scrape(worker)
    assert status == 200 and kind.startswith("text/plain; version=0.0.4")
    names = {family.name for family in text_string_to_metric_families(text)}
    for name in ("messages_accepted", "delivery_attempts", "delivery_attempt_duration_seconds",
                 "delivery_latency_seconds", "dead_letters", "receivers", "circuit_open_receivers",
                 "in_flight", "backlog_messages", "oldest_undelivered_age_seconds",
                 "receiver_backlog_messages", "receiver_oldest_undelivered_age_seconds",
                 "consumer_lag_messages", "partitions_owned",
                 "changelog_write_seconds", "recovery_duration_seconds", "event_loop_lag_seconds", "ready"):
        assert P + name in names, name
    found = {s.name + str(sorted(s.labels.items())): s.value
             for family in text_string_to_metric_families(text) for s in family.samples}
    assert found[P + "partitions_owned[]"] == 8 and found[P + "ready[]"] == 1
    lags = [v for k, v in found.items() if k.startswith(P + "consumer_lag_messages")]
    assert len(lags) == 8 and all(v >= 0 for v in lags), "a figure per owned requests partition"


async def test_counters_move_by_exactly_the_deliveries_failures_and_dead_letters(
    worker: WorkerProcess, api: Api, broker: EmbeddedBroker
) -> None:
    fail_first = {"left": 1}

    async def behaviour(path: str, d: Delivery) -> int:
        if path == "refuses":
            return 400  # permanent: dead-lettered at once
        if path == "flaky" and fail_first["left"]:
            fail_first["left"] -= 1
            return 503
        return 200

    recv = await Receiver(behaviour).start()
    try:
        good = (await api.create_receiver(recv.url("good"), event_types=["metrics.*"]))["id"]
        flaky = (await api.create_receiver(recv.url("flaky"), event_types=["other.*"]))["id"]
        refuses = (await api.create_receiver(recv.url("refuses"), event_types=["other.*"]))["id"]
        before = await samples(worker)
        await api.send_batch(messages(good, 5) + messages(flaky, 1) + messages(refuses, 3))
        async with DispatcherProducer(broker.url.removeprefix("kafka://"), app_id=worker.app_id) as producer:
            await producer.send_message(good, "metrics.direct", {"n": 5})
            await producer.publish_event("metrics.fanned", {"n": 6})  # to `good` only
        await wait_until(lambda: len(recv.completed) == 5 + 2 + 2 + 3, 30, "12 answers")
        for rid, delivered in ((good, 7), (flaky, 1)):
            await api.eventually_state(rid, lambda s, n=delivered: s["delivered"] == n, 10, "delivered")
        await api.eventually_state(refuses, lambda s: s["dead_lettered"] == 3, 10, "3 dead letters")
        after = await samples(worker)
    finally:
        await recv.stop()
    total = "delivery_attempts_total"
    assert moved(before, after, total, outcome="success", lane="fast", kind="message") == 8
    assert moved(before, after, total, outcome="retryable", lane="fast", kind="message") == 1
    assert moved(before, after, total, outcome="permanent", lane="fast", kind="message") == 3
    assert moved(before, after, "dead_letters_total", reason="permanent_status") == 3
    assert moved(before, after, "messages_accepted_total", source="api") == 9
    assert moved(before, after, "messages_accepted_total", source="kafka") == 1
    assert moved(before, after, "messages_accepted_total", source="fanout") == 1
    assert moved(before, after, "delivery_attempt_duration_seconds_count") == 12
    assert moved(before, after, "delivery_latency_seconds_count") == 8
    latency_count = value(after, "delivery_latency_seconds_count")
    assert value(after, "delivery_latency_seconds_bucket", le="+Inf") == latency_count
    # DISPATCHER_LOG_FORMAT=json: every line an object; the failed attempt's names its ids.
    lines = [orjson.loads(line) for line in worker.log_path.read_text().splitlines() if line.strip()]
    failed = [line for line in lines if line["message"].startswith("attempt failed")
              and line.get("receiver_id") == flaky]
    assert failed and (failed[0]["seq"], failed[0]["attempt"], failed[0]["status"]) == (1, 1, 503)
    assert failed[0]["msg_id"] and failed[0]["level"] == "warning"


async def test_a_paused_receivers_backlog_shows_as_its_own_series(worker: WorkerProcess, api: Api) -> None:
    recv = await Receiver().start()
    try:
        owned = sum(v for (name, _), v in (await samples(worker)).items() if name == P + "receivers")
        await api.create_receiver(recv.url("watched"), id=WATCHED, event_types=["watched.*"])
        plain = (await api.create_receiver(recv.url("plain"), event_types=["plain.*"]))["id"]
        for rid in (WATCHED, plain):
            assert (await api.call("POST", f"/v1/receivers/{rid}/pause"))[0] == 200
        await api.send_batch(messages(plain, 4))
        await api.eventually_state(plain, lambda s: s["backlog"] == 4, 10, "4 buffered")
        await api.send_batch(messages(WATCHED, 2))
        await api.eventually_state(WATCHED, lambda s: s["backlog"] == 2, 10, "2 buffered")
        found = await samples(worker)
        # Top 1 by age is `plain` (its messages came first), and WATCHED is named.
        assert {dict(k[1])["receiver_id"] for k in found if k[0] == P + "receiver_backlog_messages"} == {
            plain, WATCHED}
        assert value(found, "receiver_backlog_messages", receiver_id=plain) == 4
        assert value(found, "receiver_backlog_messages", receiver_id=WATCHED) == 2
        assert value(found, "receiver_oldest_undelivered_age_seconds", receiver_id=plain) > 0
        assert value(found, "receivers", status="paused") >= 2
        assert sum(v for (name, _), v in found.items() if name == P + "receivers") == owned + 2
        assert value(found, "backlog_messages") >= 6
        assert value(found, "oldest_undelivered_age_seconds") > 0
        for rid in (WATCHED, plain):
            assert (await api.call("POST", f"/v1/receivers/{rid}/resume"))[0] == 200
        await wait_until(lambda: len(recv.completed) == 6, 30, "6 delivered after resume")
        await api.eventually_state(plain, lambda s: s["backlog"] == 0, 10, "drained")
        found = await samples(worker)
        assert value(found, "receiver_backlog_messages", receiver_id=plain) == 0
        assert (P + "receiver_backlog_messages", frozenset({("receiver_id", plain)})) not in found
    finally:
        await recv.stop()
