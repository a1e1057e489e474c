"""Key-ordered receivers on the embedded broker: each key in seq order, keys side by side, a failing
key holding only itself; events' copies carry their key."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.harness import Api, Delivery, Receiver, wait_until
from tests.keyed import KeyedReceiver

pytestmark = pytest.mark.integration

FAST_RETRY = {"schedule": [0.3], "jitter": 0}


def keyed(rid: str, n: int, key: str) -> dict[str, Any]:
    payload = {"k": key, "n": n}
    return {"receiver_id": rid, "event_type": "keyed.test", "payload": payload, "ordering_key": key}


async def test_each_key_in_order_side_by_side_and_a_failing_key_holds_only_itself(api: Api) -> None:
    failed: list[int] = []

    def fail(delivery: Delivery, key: str) -> bool:
        if key == "bad" and len(failed) < 3:  # the bad key's first message fails three times
            failed.append(delivery.seq)
            return True
        return False

    async with KeyedReceiver(fail=fail) as recv:
        rid = (await api.create_receiver(recv.url("k"), ordering="key", max_in_flight=4, concurrency="fixed",
                                         retry=FAST_RETRY))["id"]
        count = 60
        messages = [keyed(rid, n, "bad" if n % 6 == 0 else f"k{n % 4}") for n in range(count)]
        await api.send_batch(messages)
        await wait_until(lambda: not recv.missing_seqs("k", count), 60, "every message answered 2xx")
        assert recv.violations == []
        assert recv.keys_out_of_order() == []
        assert failed == [1, 1, 1], "only the bad key's first message failed, and it was retried"
        bad_first_ok = recv.ok_order.index(("k", 1))
        others_meanwhile = [seq for _, seq in recv.ok_order[:bad_first_ok]]
        assert len(others_meanwhile) >= 20, "the other keys flowed while the bad one waited for retries"
        bad_seqs = [n + 1 for n in range(count) if n % 6 == 0]
        assert all(("k", s) not in recv.ok_order[:bad_first_ok] for s in bad_seqs), "the bad key waited"
        assert recv.most_open >= 2, "different keys went side by side"
        state = await api.eventually_state(rid, lambda s: s["backlog"] == 0, 30, "an empty backlog")
        assert state["delivered_seq"] == count


async def test_event_copies_carry_the_events_ordering_key(api: Api) -> None:
    async with KeyedReceiver(max_delay=0.6) as recv:
        rid = (await api.create_receiver(recv.url("ev"), ordering="key", max_in_flight=8, concurrency="fixed",
                                         event_types=["keyed.event"]))["id"]
        events = [{"event_type": "keyed.event", "payload": {"k": f"acct-{n % 2}", "n": n},
                   "ordering_key": f"acct-{n % 2}"} for n in range(12)]
        answers = await asyncio.gather(*(api.call("POST", "/v1/events", event) for event in events))
        assert [status for status, _ in answers] == [202] * 12, answers
        await wait_until(lambda: not recv.missing_seqs("ev", 12), 60, "every event delivered")
        assert recv.violations == [] and recv.keys_out_of_order() == []
        assert recv.most_open <= 2, "two keys: at most two out at once"
        status, body = await api.call("GET", f"/v1/receivers/{rid}")
        assert status == 200 and body["ordering"] == "key"


async def test_an_ordering_key_is_checked_at_the_api(api: Api) -> None:
    status, body = await api.call("POST", "/v1/messages", {
        "receiver_id": "nobody", "event_type": "a.b", "payload": {}, "ordering_key": "x" * 129})
    assert (status, body["error"]["field"]) == (422, "ordering_key")
    status, body = await api.call("POST", "/v1/messages/batch", {"messages": [
        {"receiver_id": "nobody", "event_type": "a.b", "payload": {}, "ordering_key": "a\tb"}]})
    assert (status, body["error"]["field"]) == (422, "messages[0].ordering_key")
    status, body = await api.call("POST", "/v1/receivers", {"url": "http://127.0.0.1:9/", "ordering": "key",
                                                            "batch_max": 4})
    assert (status, body["error"]["field"]) == (422, "batch_max")


async def test_the_state_shows_which_messages_wait_behind_their_key(api: Api) -> None:
    release = asyncio.Event()

    async def hold(path: str, delivery: Delivery) -> int:
        await release.wait()
        return 200

    async with Receiver(hold) as recv:
        rid = (await api.create_receiver(recv.url("w"), ordering="key", max_in_flight=4,
                                         concurrency="fixed"))["id"]
        await api.send_batch([keyed(rid, 0, "a"), keyed(rid, 1, "a"), keyed(rid, 2, "b")])
        state = await api.eventually_state(rid, lambda s: len(s["window"]) == 3, 30, "three in the window")
        assert [(w["seq"], w["behind_key"]) for w in state["window"]] == [(1, False), (2, True), (3, False)]
        await wait_until(lambda: len(recv.deliveries) == 2, 30, "a's first and b's out")
        release.set()
        await api.eventually_state(rid, lambda s: s["backlog"] == 0, 30, "an empty backlog")
