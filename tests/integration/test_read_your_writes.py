"""A message's status read right after its send answered: never unknown, as a new user's script does it.

`POST /v1/messages` answers once the broker has the record; the owner applies
it a moment later. The status read waits for the owner to catch up before it
calls an id unknown.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from dispatcher.client import ApiError, DispatcherClient
from tests.harness import TOKEN, Api, Receiver, WorkerProcess, wait_until

ROUNDS = 60
BURST = 1000


def message(receiver_id: str, n: int) -> dict[str, Any]:
    return {"receiver_id": receiver_id, "event_type": "ryw.sent", "payload": {"n": n}}


async def test_a_status_read_right_after_the_send_knows_the_message(api: Api) -> None:
    server = await Receiver().start()
    try:
        rid = (await api.create_receiver(server.url("ryw"), id="ryw-http"))["id"]
        answers = []
        for n in range(ROUNDS):
            status, sent = await api.call("POST", "/v1/messages", message(rid, n))
            assert status == 202, sent
            answers.append(await api.call("GET", f"/v1/receivers/{rid}/messages/{sent['id']}"))
        # A batch goes to the broker as one multi-record batch, whose end the embedded broker's
        # ListOffsets reports short: the last of them is read right away.
        for n in range(ROUNDS // 10):
            ids = await api.send_batch([message(rid, 1000 * n + i) for i in range(20)])
            answers.append(await api.call("GET", f"/v1/receivers/{rid}/messages/{ids[-1]}"))
        found = [(code, body.get("status") or body["error"]["code"]) for code, body in answers]
        unknown = [answer for answer in found if answer[0] != 200]
        assert not unknown, f"{len(unknown)} of {len(found)} reads did not know an accepted message"
        assert {status for _, status in found} <= {"pending", "delivered"}
    finally:
        await server.stop()


async def test_the_python_client_send_then_status_never_gets_a_404(worker: WorkerProcess) -> None:
    server = await Receiver().start()
    try:
        async with DispatcherClient(worker.url, TOKEN) as client:
            await client.create_receiver(server.url("ryw-client"), id="ryw-client")
            statuses = []
            for n in range(ROUNDS):
                sent = await client.send_message("ryw-client", "ryw.sent", {"n": n})
                statuses.append((await client.message_status("ryw-client", sent["id"]))["status"])
            assert set(statuses) <= {"pending", "delivered"}
    finally:
        await server.stop()


async def test_an_id_never_sent_is_still_unknown(worker: WorkerProcess, api: Api) -> None:
    server = await Receiver().start()
    try:
        rid = (await api.create_receiver(server.url("ryw-none"), id="ryw-none"))["id"]
        status, body = await api.call("GET", f"/v1/receivers/{rid}/messages/never-sent")
        assert (status, body["error"]["code"], body["error"]["field"]) == (404, "not_found", "message_id")
        async with DispatcherClient(worker.url, TOKEN) as client:
            await client.send_message(rid, "ryw.sent", {"n": 1})  # a partition with records
            with pytest.raises(ApiError) as info:
                await client.message_status(rid, "never-sent-either")
        assert (info.value.status, info.value.code, info.value.field) == (404, "not_found", "message_id")
    finally:
        await server.stop()


async def test_a_burst_of_unknown_ids_neither_stalls_intake_nor_answers_503(api: Api) -> None:
    """Hundreds of reads of ids never sent share the partition's end reads (one at a time): each
    gets its 404, and a message sent meanwhile is known to its own read at once (never 503)."""
    server = await Receiver().start()
    try:
        rid = (await api.create_receiver(server.url("ryw-burst"), id="ryw-burst"))["id"]
        # A multi-record last batch makes every end read cost a probe fetch (tens of ms).
        await api.send_batch([message(rid, 100 + i) for i in range(50)])
        reads_before = await _end_reads(api)
        unknown = [asyncio.ensure_future(api.call("GET", f"/v1/receivers/{rid}/messages/nope-{n}"))
                   for n in range(BURST)]
        known = []
        for n in range(5):
            status, sent = await api.call("POST", "/v1/messages", message(rid, n))
            assert status == 202, sent
            known.append(await api.call("GET", f"/v1/receivers/{rid}/messages/{sent['id']}"))
        answers = await asyncio.gather(*unknown)
        codes = Counter((status, body["error"]["code"]) for status, body in answers)
        assert codes == {(404, "not_found"): BURST}, codes
        assert [status for status, _ in known] == [200] * 5, known
        # One read at a time, shared by whoever came meanwhile: reads follow each other while callers
        # keep coming (the client sends 100 at a time), far fewer than one per caller.
        reads = await _end_reads(api) - reads_before
        print(f"{reads} end reads for {BURST} unknown ids")
        assert reads <= BURST // 10, f"{reads} end reads for {BURST} unknown ids"
        await wait_until(lambda: len(server.deliveries) == 55, 30, "the messages delivered")
    finally:
        await server.stop()


async def _end_reads(api: Api) -> int:
    status, body = await api.call("GET", "/readyz")
    assert status == 200, body
    return int(body["end_reads"])


async def test_an_unknown_id_is_answered_without_waiting_out_the_consumers_long_poll(
    make_module_worker: Callable[..., WorkerProcess],
) -> None:
    """The partition's end is asked on a connection of its own: on the group consumer's, the broker
    answered it only after the consumer's fetch, a long poll (here 10 s, past the read's 5 s bound,
    so the read answered 503 instead of 404)."""
    worker = make_module_worker(DISPATCHER_FETCH_MAX_WAIT_MS="10000")
    await worker.wait_ready(120)
    api = Api(worker.url)
    try:
        rid = (await api.create_receiver("http://127.0.0.1:9/never", id="ryw-long-poll"))["id"]
        for n in range(3):  # from the second on, a fetch of the 10 s is surely in flight
            status, body = await api.call("GET", f"/v1/receivers/{rid}/messages/unknown-{n}")
            assert (status, body["error"]["code"]) == (404, "not_found"), body
    finally:
        await api.close()
