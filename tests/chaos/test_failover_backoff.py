"""kill -9 the owner while a message waits out its backoff: the new owner retries it on time."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.harness import Api, Delivery, Receiver, owned, wait_assigned, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

BACKOFF = 15.0  # longer than a takeover (session timeout 6 s), so the new owner must wait


async def test_retry_survives_kill9_and_is_not_early(make_worker) -> None:
    async def behaviour(path: str, d: Delivery) -> int:
        return 500 if len(recv.deliveries) == 1 else 200

    recv = await Receiver(behaviour).start()
    workers = [make_worker("a").start(), make_worker("b").start()]
    try:
        for w in workers:
            await w.wait_ready()
        split = await wait_assigned(workers, "the two workers sharing the partitions")
        parts = [split[w.data_dir.name] for w in workers]

        api = Api(workers[0].url)
        created = await api.create_receiver(
            recv.url("backoff"), retry={"schedule": [BACKOFF], "jitter": 0}
        )
        rid = created["id"]
        await api.send_batch([{"receiver_id": rid, "event_type": "t.x", "payload": {"n": 1}}])
        await wait_until(lambda: len(recv.completed) == 1, 30, "the first (failing) attempt")
        state: dict = {}
        deadline = time.monotonic() + 10
        while not state.get("next_attempt_at") and time.monotonic() < deadline:
            _, body = await api.call("GET", f"/v1/receivers/{rid}")
            state = body["state"]
            partition = body["partition"]
        await api.close()
        due = state["next_attempt_at"]
        assert due and state["head_attempts"] == 1

        owner = next(w for w, p in zip(workers, parts, strict=True) if partition in p)
        survivor = next(w for w in workers if w is not owner)
        # The API reads the owner's local table. Give the changelog write of the failure
        # time to be acked (offsets commit every second, after a full flush): a kill before
        # that legitimately loses the failure, and the new owner re-sends at once.
        await asyncio.sleep(max(0.0, recv.completed[0].at + 3.0 - time.time()))
        killed_at = time.time()
        owner.kill9()
        await wait_until(lambda: len(recv.completed) == 2, BACKOFF + 60, "the retry on the new owner")
        first, retry = recv.deliveries
        taken_over = partition in await owned(survivor)
        assert taken_over
        assert retry.seq == first.seq == 1 and retry.msg_id == first.msg_id
        assert retry.at >= due, f"retried {due - retry.at:.3f}s before its due time"
        assert retry.at > killed_at
        print(
            f"\nkill -9 {killed_at - first.at:.1f}s into a {BACKOFF:.0f}s backoff: "
            f"retried {retry.at - due:.3f}s after its due time by the new owner"
        )
    finally:
        await recv.stop()

