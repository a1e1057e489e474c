"""A full disk under a worker: it stops, and nothing it answered 202 for is lost.

The worker's data dir is a small tmpfs. A paused receiver buffers large
messages until RocksDB cannot write; the worker must stop (exit code 75)
instead of going on with holes. Once space is back, a worker on the same data
dir takes over, and every accepted message is delivered, in order.
"""

from __future__ import annotations

import base64
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import orjson
import pytest

from dispatcher.worker import STORAGE_FAULT_EXIT
from tests.harness import TOKEN, Api, Receiver, WorkerProcess, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.adversarial]

VOLUME_MB = 64
LEFT_MB = 8
MESSAGES = 150  # 22 MB: more than the room left, less than the room once the filler goes
PAYLOAD = base64.b64encode(os.urandom(110_000)).decode()  # 150 kB that RocksDB cannot compress


@pytest.fixture
def small_volume(tmp_path: Path) -> Iterator[Path]:
    volume = tmp_path / "volume"
    volume.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={VOLUME_MB}m", "tmpfs", str(volume)],
                             capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield volume
    finally:
        subprocess.run(["umount", "-l", str(volume)], check=False)


def _fill(volume: Path, leave_mb: int) -> Path:
    """A file that takes all but `leave_mb` MiB of the volume."""
    stat = os.statvfs(volume)
    free = stat.f_bavail * stat.f_frsize
    filler = volume / "filler"
    with filler.open("wb") as out:
        out.truncate(0)
        block = b"\0" * (1 << 20)
        for _ in range(max(0, free // (1 << 20) - leave_mb)):
            out.write(block)
    return filler


async def _start_on(make_worker: Callable[..., WorkerProcess], name: str, data_dir: Path) -> WorkerProcess:
    """A worker on `data_dir`, ready; small memtables, so RocksDB writes to disk early."""
    worker = make_worker(name, DISPATCHER_TABLE_WRITE_BUFFER="262144")
    worker.data_dir = data_dir
    worker.start()
    await worker.wait_ready()
    return worker


async def _send(session: aiohttp.ClientSession, url: str, rid: str, n: int) -> str | None:
    body = {"receiver_id": rid, "id": f"big-{n:04d}", "event_type": "t.x", "payload": {"n": n, "d": PAYLOAD}}
    try:
        async with session.post(url + "/v1/messages", data=orjson.dumps(body)) as resp:
            return body["id"] if resp.status == 202 else None
    except aiohttp.ClientError:
        return None


async def test_a_full_disk_stops_the_worker_and_loses_nothing(
    make_worker: Callable[..., WorkerProcess], small_volume: Path, receiver: Receiver
) -> None:
    data_dir = small_volume / "data"
    first = await _start_on(make_worker, "full", data_dir)
    api = Api(first.url)
    try:
        rid = (await api.create_receiver(receiver.url("full")))["id"]
        assert (await api.call("POST", f"/v1/receivers/{rid}/pause"))[0] == 200
    finally:
        await api.close()
    filler = _fill(small_volume, leave_mb=LEFT_MB)
    accepted: list[str] = []
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        for n in range(MESSAGES):
            assert first.process is not None
            if first.process.poll() is not None:
                break
            msg_id = await _send(session, first.url, rid, n)
            if msg_id is not None:
                accepted.append(msg_id)
    assert first.process is not None
    await wait_until(lambda: first.process.poll() is not None, 90, "the worker stopped on the full disk")
    assert first.process.returncode == STORAGE_FAULT_EXIT, first.log_path.read_text()[-3000:]
    assert "an actor table write failed" in first.log_path.read_text()
    assert len(accepted) > 10, "the disk filled before the test could send anything"

    filler.unlink()  # the space comes back
    second = await _start_on(make_worker, "after", data_dir)
    api = Api(second.url)
    try:
        deadline = time.monotonic() + 60
        while (await api.call("POST", f"/v1/receivers/{rid}/resume"))[0] != 200:
            assert time.monotonic() < deadline, "the receiver never came back"
        await wait_until(lambda: len({d.msg_id for d in receiver.by_path("full")}) >= len(accepted),
                         120, f"{len(accepted)} accepted messages delivered")
    finally:
        await api.close()
    delivered = [d.msg_id for d in receiver.by_path("full")]
    first_copies = list(dict.fromkeys(delivered))
    assert [m for m in first_copies if m in set(accepted)] == accepted, "lost or out of order"
    seqs = [d.seq for d in receiver.by_path("full")]
    assert sorted(set(seqs)) == list(range(1, len(set(seqs)) + 1)), "seqs are contiguous from 1"
