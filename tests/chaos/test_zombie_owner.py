"""A worker paused past its session (SIGSTOP) while its deliveries are in flight, then resumed.

While it was away the other worker took its partitions. Once resumed it must
not POST for them (nor write their changelogs) before the group has given it
an assignment again; then the other worker is killed with -9 and the resumed
one takes everything. Nothing accepted may be lost, nothing go out of order,
and no seq may be given to two message ids.

Which worker made each POST is read off the kernel's socket table: the
receiver looks up the process that holds the connection's other end.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from datetime import datetime
from pathlib import Path

import pytest
from aiohttp import web

from dispatcher.broker import socket_inodes, tcp_sockets
from tests.chaos.test_kill9 import Load, report_missing
from tests.harness import PARTITIONS, Api, WorkerProcess, owned, wait_assigned, wait_until, wait_until_read

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

RECEIVERS = 16


def _inode_of_connection(port: int, remote_port: int) -> str | None:
    """The inode of the loopback TCP socket from local `port` to `remote_port` (the worker's end).

    Both ports: a worker's socket to the broker may have the same local port as another worker's
    socket to this receiver (an ephemeral port is unique per destination, not per machine).
    """
    ends = (port, remote_port)
    return next((s.inode for s in tcp_sockets() if (s.local_port, s.remote_port) == ends), None)


class WhoPosts:
    """A receiver that records, for every POST, when it came, from which worker, and what."""

    def __init__(self, workers: dict[str, WorkerProcess]) -> None:
        self.workers = workers
        self.posts: list[tuple[float, str, str, str, int]] = []  # at, worker, path, msg id, seq
        self.runner: web.AppRunner | None = None
        self.port = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def _who(self, request: web.Request) -> str:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        inode = _inode_of_connection(peer[1], self.port) if peer else None
        for name, worker in self.workers.items():
            process = worker.process
            if inode is not None and process is not None and inode in socket_inodes(process.pid):
                return name
        return "?"

    async def _handle(self, request: web.Request) -> web.Response:
        await request.read()
        who = self._who(request)
        self.posts.append((time.time(), who, request.match_info["path"], request.headers["webhook-id"],
                           int(request.headers.get("webhook-sequence", 0))))
        await asyncio.sleep(0.2)  # deliveries stay in flight for a while
        return web.Response(text="ok")

    async def start(self) -> WhoPosts:
        app = web.Application()
        app.router.add_post("/{path:.*}", self._handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


def _assignments_after(log: Path, since: float) -> list[float]:
    """When the worker logged a recovered assignment, after `since` (epoch seconds)."""
    times = []
    for line in log.read_text(errors="replace").splitlines():
        if "partitions owned=" in line and line.startswith("["):
            at = datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if at > since:
                times.append(at)
    return times


async def test_a_resumed_zombie_owner_posts_nothing_stale_and_loses_nothing(make_worker) -> None:
    a, b = make_worker("a"), make_worker("b")
    recv = await WhoPosts({"a": a, "b": b}).start()
    a.start()
    await a.wait_ready()
    b.start()
    await b.wait_ready()
    await wait_assigned([a, b], "a and b sharing the partitions, both ready")
    api = Api(b.url)
    rids = [(await api.create_receiver(recv.url(f"z{i}"), id=f"z{i}"))["id"] for i in range(RECEIVERS)]
    await api.close()
    load = Load([b], rids)  # b's API: a is paused for part of the run
    stop = asyncio.Event()
    sender = asyncio.create_task(load.run(stop))
    try:
        await wait_until(lambda: any(who == "a" for _, who, *_ in recv.posts), 30, "a delivering")
        assert a.process is not None
        os.kill(a.process.pid, signal.SIGSTOP)
        stopped_at = time.time()
        await wait_until_read(lambda: owned(b), lambda p: len(p) == PARTITIONS, 90, "b takes all")
        os.kill(a.process.pid, signal.SIGCONT)
        resumed_at = time.time()
        print(f"\nSIGSTOP a for {resumed_at - stopped_at:.1f} s", flush=True)
        await wait_until(lambda: _assignments_after(a.log_path, resumed_at) != [], 90, "a reassigned")
        await asyncio.sleep(2)
        b.kill9()
        await wait_until_read(lambda: owned(a), lambda p: len(p) == PARTITIONS, 90, "a takes all")
        await asyncio.sleep(2)
    finally:
        stop.set()
        await sender
        if a.process is not None and a.process.poll() is None:
            os.kill(a.process.pid, signal.SIGCONT)

    try:
        await wait_until(lambda: set(load.accepted) <= {p[3] for p in recv.posts}, 180, "all accepted")
    except AssertionError:
        await report_missing(a, load, {p[3] for p in recv.posts})
        raise
    delivered = {msg_id for *_, msg_id, _ in recv.posts}
    reassigned_at = _assignments_after(a.log_path, resumed_at)[0]
    stale = [p for p in recv.posts if p[1] == "a" and resumed_at < p[0] < reassigned_at]
    seqs: dict[tuple[str, int], set[str]] = {}
    firsts: dict[str, list[int]] = {}
    seen: set[str] = set()
    for _, _, path, msg_id, seq in recv.posts:
        seqs.setdefault((path, seq), set()).add(msg_id)
        if msg_id not in seen:
            seen.add(msg_id)
            firsts.setdefault(path, []).append(seq)
    reused = {key: ids for key, ids in seqs.items() if len(ids) > 1}
    out_of_order = [path for path, order in firsts.items() if order != list(range(1, len(order) + 1))]
    lost = set(load.accepted) - delivered - {p[3] for p in recv.posts}
    fenced = "the event loop stood still" in a.log_path.read_text(errors="replace")
    print(f"\nzombie: accepted={len(load.accepted)} posts={len(recv.posts)} lost={len(lost)} "
          f"out_of_order={len(out_of_order)} seqs_reused={len(reused)} stale_posts={len(stale)} "
          f"unknown_poster={sum(1 for p in recv.posts if p[1] == '?')} fence_engaged={fenced}", flush=True)
    await recv.stop()
    assert fenced, "the resumed worker never noticed its stall"
    assert stale == [], stale[:5]
    assert lost == set()
    assert reused == {}
    assert out_of_order == []
