"""Changing and deleting a receiver: PATCH changes what it names; DELETE dead-letters the backlog
and removes the subscriptions and table entries."""

from __future__ import annotations

import orjson
from aiokafka import AIOKafkaConsumer

from dispatcher.broker import EmbeddedBroker
from dispatcher.settings import Settings
from tests.harness import Api, Delivery, Receiver, WorkerProcess, wait_until, wait_until_read


async def dead_letter_records(worker: WorkerProcess, broker_url: str, want: int) -> list[dict]:
    consumer = AIOKafkaConsumer(
        f"{worker.app_id}.dead-letters", bootstrap_servers=broker_url.removeprefix("kafka://"),
        auto_offset_reset="earliest", enable_auto_commit=False,
    )
    await consumer.start()
    records: list[dict] = []
    try:
        for _ in range(100):  # bounded: up to ~50 s
            batch = await consumer.getmany(timeout_ms=500)
            records += [orjson.loads(r.value) for rs in batch.values() for r in rs]
            if len(records) >= want:
                break
    finally:
        await consumer.stop()
    return records


async def test_delete_dead_letters_the_backlog_and_forgets_the_receiver(
    worker: WorkerProcess, api: Api, broker: EmbeddedBroker
) -> None:
    server = await Receiver().start()
    try:
        rid = (await api.create_receiver(server.url("gone"), id="gone", event_types=["bye.*"]))["id"]
        assert (await api.call("POST", f"/v1/receivers/{rid}/pause"))[0] == 200
        one = {"receiver_id": rid, "event_type": "t.x", "payload": {}}
        ids = await api.send_batch([one] * 5)
        await api.eventually_state(rid, lambda s: s["backlog"] == 5, 30, "5 buffered")
        await wait_until_known(worker, 1)

        status, answer = await api.call("DELETE", f"/v1/receivers/{rid}")
        assert (status, answer) == (200, {"id": rid, "deleted": True, "dead_lettered": 5})
        summary = f"receiver_id={rid} 5 messages dead-lettered reason=receiver_deleted (seqs 1..5), 0 left"
        await wait_until(lambda: summary in worker.log_path.read_text(), 30, "the delete's summary line")
        mine = [line for line in worker.log_path.read_text().splitlines() if f"receiver_id={rid} " in line]
        assert [line for line in mine if "dead-lettered" in line] == [next(x for x in mine if summary in x)]
        assert "[INFO]" in next(x for x in mine if summary in x), "a delete asked for is no warning"
        letters = [r for r in await dead_letter_records(worker, broker.url, 5) if r["receiver_id"] == rid]
        assert sorted((r["seq"], r["msg_id"], r["reason"]) for r in letters) == [
            (n + 1, ids[n], "receiver_deleted") for n in range(5)
        ]
        assert (await api.call("GET", f"/v1/receivers/{rid}"))[0] == 404
        status, answer = await api.call("POST", "/v1/messages", one)
        assert status == 404 and answer["error"]["field"] == "receiver_id"
        await wait_until_known(worker, 0)
        status, answer = await api.call("POST", "/v1/events", {"event_type": "bye.now", "payload": {}})
        assert (status, answer["receivers"]) == (202, 0), "unsubscribed everywhere"

        # The id can be used again: a fresh receiver, seqs from 1.
        await api.create_receiver(server.url("again"), id=rid)
        await api.send_batch([{"receiver_id": rid, "event_type": "t.x", "payload": {}}])
        await wait_until(lambda: len(server.completed) == 1, 30, "the new receiver's message")
        assert server.completed[0].seq == 1 and server.completed[0].path == "again"
    finally:
        await server.stop()


async def wait_until_known(worker: WorkerProcess, count: int) -> None:
    await wait_until_read(
        worker.readyz, lambda r: r["subscriptions"]["receivers"] == count, 30, f"{count} subscriptions"
    )


async def test_patch_changes_only_what_it_names_on_the_owner(api: Api) -> None:
    made = await api.create_receiver("http://127.0.0.1:9/p", id="patched", event_types=["a.*"], rate_limit=5)
    patch = {"event_types": ["b.c"], "tenant": "acme"}
    status, body = await api.call("PATCH", "/v1/receivers/patched", patch)
    assert status == 200, body
    assert (body["event_types"], body["tenant"], body["url"], body["rate_limit"]) == (
        ["b.c"], "acme", made["url"], 5.0
    )
    assert "secret" not in body, "a patch without a new secret keeps it and shows none"
    for patch, field in [({"url": "ftp://x"}, "url"), ({"nope": 1}, "nope"), ({"id": "x"}, "id")]:
        status, body = await api.call("PATCH", "/v1/receivers/patched", patch)
        assert status == 422 and body["error"]["field"] == field, body
    status, body = await api.call("PATCH", "/v1/receivers/nobody", {"tenant": "x"})
    assert status == 404 and body["error"]["field"] == "receiver_id"


async def test_receivers_show_the_worker_defaults_they_get_and_keep_following_them(api: Api) -> None:
    worker = Settings()  # the harness changes none of these
    expected = {"backlog_max": worker.backlog_max, "backlog_max_bytes": worker.backlog_max_bytes,
                "backlog_overflow": worker.backlog_overflow, "batch_max_bytes": worker.batch_max_bytes}
    made = await api.create_receiver("http://127.0.0.1:9/d", id="defaulted")
    got = (await api.call("GET", "/v1/receivers/defaulted"))[1]
    listed = (await api.call("GET", "/v1/receivers?limit=1000"))[1]["receivers"]
    for view in (made, got, next(r for r in listed if r["id"] == "defaulted")):
        assert {k: view[k] for k in expected} == expected
        retry = view["retry"]  # the harness's worker retries fast: exponential, 0.05 s up to 0.5 s
        assert (retry["schedule"], retry["base"], retry["cap"], retry["max_attempts"]) == (
            "exponential", 0.05, 0.5, 10_000
        )
        assert {*expected, "retry.max_attempts"} <= set(view["worker_defaults"])
    status, chosen = await api.call("PATCH", "/v1/receivers/defaulted", {"backlog_max": 5})
    assert (status, chosen["backlog_max"], "backlog_max" in chosen["worker_defaults"]) == (200, 5, False)
    status, back = await api.call("PATCH", "/v1/receivers/defaulted", {"backlog_max": 0})
    assert (status, back["backlog_max"], "backlog_max" in back["worker_defaults"]) == (
        200, worker.backlog_max, True
    ), "0 is the worker's default again"


async def test_reset_needs_confirmation_then_drops_backlog_and_history(api: Api) -> None:
    server = await Receiver().start()
    try:
        rid = (await api.create_receiver(server.url("reset"), id="to-reset"))["id"]
        assert (await api.call("POST", f"/v1/receivers/{rid}/pause"))[0] == 200
        one = {"receiver_id": rid, "event_type": "t.x", "payload": {}}
        await api.send_batch([one] * 3)
        await api.eventually_state(rid, lambda s: s["backlog"] == 3, 30, "3 buffered")
        status, body = await api.call("DELETE", f"/v1/receivers/{rid}/state")
        assert status == 422 and body["error"]["field"] == "confirm"
        status, state = await api.call("DELETE", f"/v1/receivers/{rid}/state?confirm=reset")
        assert status == 200, state
        fresh = (state["next_seq"], state["backlog"], state["dead_lettered"], state["paused"])
        assert fresh == (4, 0, 3, False), "seqs carry on; backlog, pause and counters (but its own) go"
        status, letters = await api.call("GET", f"/v1/receivers/{rid}/dead-letters")
        assert [(d["seq"], d["reason"]) for d in letters["dead_letters"]] == [
            (1, "state_reset"), (2, "state_reset"), (3, "state_reset")
        ], "the reset's dead letters stay"
        await api.send_batch([one])
        await wait_until(lambda: len(server.completed) == 1, 30, "the next message")
        assert server.completed[0].seq == 4, "seqs carry on after a reset"
    finally:
        await server.stop()


async def test_messages_a_reset_dead_lettered_never_read_delivered(api: Api) -> None:
    """Status is "settled and no dead letter: delivered", so a reset must keep the dead letters."""

    async def refuse_second(path: str, delivery: Delivery) -> int:
        return 400 if delivery.seq == 2 else 200

    server = await Receiver(refuse_second).start()
    try:
        rid = (await api.create_receiver(server.url("reset-status"), id="reset-status"))["id"]
        one = {"receiver_id": rid, "event_type": "t.x", "payload": {}}
        before = await api.send_batch([one, one])
        await api.eventually_state(rid, lambda s: s["delivered_seq"] == 2, 30, "delivered and refused")
        assert (await api.call("POST", f"/v1/receivers/{rid}/pause"))[0] == 200
        held = await api.send_batch([one] * 3)
        await api.eventually_state(rid, lambda s: s["backlog"] == 3, 30, "3 buffered")
        status, state = await api.call("DELETE", f"/v1/receivers/{rid}/state?confirm=reset")
        assert (status, state["delivered_seq"]) == (200, 5), state

        async def status_of(msg_id: str) -> tuple[str, str | None]:
            code, body = await api.call("GET", f"/v1/receivers/{rid}/messages/{msg_id}")
            assert code == 200, body
            return body["status"], body.get("reason")

        expected = [("delivered", None), ("dead_lettered", "permanent_status")]
        assert [await status_of(m) for m in before] == expected, "what happened before the reset stands"
        assert [await status_of(m) for m in held] == [("dead_lettered", "state_reset")] * 3
        status, body = await api.call("GET", f"/v1/receivers/{rid}/events?after_seq=0")
        assert status == 200, body
        assert [(e["seq"], e["id"], e["status"]) for e in body["events"]] == [
            (seq, msg_id, "dead_lettered") for seq, msg_id in zip((3, 4, 5), held, strict=True)
        ], "the catch-up lists what the reset dead-lettered as such"
    finally:
        await server.stop()
