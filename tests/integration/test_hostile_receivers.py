"""Receivers that attack the worker: endless bodies, gzip bombs, header floods, slowloris, silence, bad TLS.

A raw asyncio server on 127.0.0.1 writes exactly the bytes each attack needs.
The worker reads at most DISPATCHER_RESPONSE_CAP bytes, inflates at most that
much, records the capped body, and ends a stalled request at its timeout; its
resident memory must stay flat (< 50 MB growth) through all of it.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import trustme

from tests.harness import Api, Receiver, WorkerProcess, tls_receiver

pytestmark = pytest.mark.integration

MB = 1024 * 1024
TIMEOUT = 2.0


def gzip_bomb(inflated_mb: int) -> bytes:
    """`inflated_mb` MiB of 'A' in about a thousandth of the space."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b"A" * MB
    return b"".join(packer.compress(block) for _ in range(inflated_mb)) + packer.flush()


class HostileServer:
    """Answers each request path with one attack, byte for byte."""

    def __init__(self) -> None:
        self.bomb = gzip_bomb(1024)
        self.endless_sent = 0
        self.server: asyncio.Server | None = None
        self.port = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    async def start(self) -> HostileServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1].decode().lstrip("/")
            attack = self.ATTACKS.get(path.split("?")[0], HostileServer._silent)
            await attack(self, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the worker hung up on us: the point of every attack
        finally:
            writer.close()

    async def _endless(self, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n")
        chunk = b"B" * MB
        for _ in range(8 * 1024):  # 8 GiB at most; the worker hangs up long before
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
            self.endless_sent += len(chunk)

    async def _gzip_bomb(self, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-encoding: gzip\r\n"
            b"content-length: %d\r\n\r\n" % len(self.bomb)
        )
        writer.write(self.bomb)
        await writer.drain()

    async def _header_flood(self, writer: asyncio.StreamWriter) -> None:
        flood = b"".join(b"x-h%d: %s\r\n" % (i, b"v" * 100) for i in range(5000))
        writer.write(b"HTTP/1.1 200 OK\r\n" + flood + b"content-length: 0\r\n\r\n")
        await writer.drain()

    async def _long_header(self, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nx-long: " + b"L" * (4 * MB) + b"\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()

    async def _slowloris(self, writer: asyncio.StreamWriter) -> None:
        for byte in b"HTTP/1.1 200 OK\r\nx-slow: " + b"s" * 1000:  # one byte every 0.2 s
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.2)

    async def _silent(self, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(60)  # never answers; bounded so the test cannot hang

    ATTACKS: dict[str, Callable[[HostileServer, asyncio.StreamWriter], Awaitable[None]]] = {
        "endless": _endless,
        "gzip-bomb": _gzip_bomb,
        "header-flood": _header_flood,
        "long-header": _long_header,
        "slowloris": _slowloris,
        "silent": _silent,
    }


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A private CA the worker is told to trust, and one it is not."""
    trusted, stranger = trustme.CA(), trustme.CA()
    ca_file = tmp_path_factory.mktemp("tls") / "ca.pem"
    trusted.cert_pem.write_to_path(str(ca_file))
    return {"trusted": trusted, "stranger": stranger, "ca_file": ca_file}


@pytest.fixture(scope="module")
async def hostile_worker(
    make_module_worker: Callable[..., WorkerProcess], tls: dict[str, Any]
) -> AsyncIterator[WorkerProcess]:
    worker = make_module_worker(
        DISPATCHER_TIMEOUT=str(TIMEOUT),
        DISPATCHER_CONNECT_TIMEOUT="1",
        DISPATCHER_CA_FILE=str(tls["ca_file"]),
    )
    await worker.wait_ready()
    yield worker


@pytest.fixture
async def hostile() -> AsyncIterator[HostileServer]:
    server = await HostileServer().start()
    yield server
    await server.stop()


async def first_attempt(api: Api, url: str) -> dict[str, Any]:
    rid = (await api.create_receiver(url))["id"]
    await api.send_batch([{"receiver_id": rid, "event_type": "t.x", "payload": {}}])
    await api.eventually_state(rid, lambda s: s["last_response"] is not None, 15, f"an attempt on {url}")
    await api.call("POST", f"/v1/receivers/{rid}/pause")  # no more retries of failing attacks
    return (await api.attempts(rid))[0]


async def test_hostile_bodies_are_capped_and_memory_stays_flat(
    hostile_worker: WorkerProcess, hostile: HostileServer, receiver: Receiver
) -> None:
    api = Api(hostile_worker.url)
    try:
        await first_attempt(api, receiver.url("warm-up"))  # worker warmed up before the baseline
        before = hostile_worker.rss_mb()

        endless = await first_attempt(api, hostile.url("endless"))
        assert endless["status"] == 200
        assert endless["body_prefix"] == "B" * 1024
        bomb = await first_attempt(api, hostile.url("gzip-bomb"))
        assert bomb["status"] == 200
        assert bomb["body_prefix"] == "A" * 1024, "the capped body is stored inflated"

        grown = hostile_worker.rss_mb() - before
        print(f"\nRSS {before:.1f} MB before; grew {grown:.1f} MB after an endless body "
              f"({hostile.endless_sent / MB:.0f} MiB sent before the hang-up) and a 1 GiB gzip bomb")
        assert grown < 50
        assert hostile.endless_sent < 64 * MB, "the worker hung up instead of draining"
    finally:
        await api.close()


@pytest.mark.parametrize(
    ("path", "error"),
    [("slowloris", "timeout"), ("silent", "timeout"), ("header-flood", "headers"), ("long-header", "header")],
)
async def test_stalling_and_flooding_receivers_end_in_a_recorded_error(
    hostile_worker: WorkerProcess, hostile: HostileServer, path: str, error: str
) -> None:
    api = Api(hostile_worker.url)
    try:
        attempt = await first_attempt(api, hostile.url(path))
        assert attempt["status"] is None
        assert error in attempt["error"].lower(), attempt
    finally:
        await api.close()


async def test_tls_is_verified_and_a_private_ca_can_be_trusted(
    hostile_worker: WorkerProcess, tls: dict[str, Any]
) -> None:
    api = Api(hostile_worker.url)
    trusted, port_ok = await tls_receiver(tls["trusted"])
    stranger, port_bad = await tls_receiver(tls["stranger"])
    try:
        good = await first_attempt(api, f"https://127.0.0.1:{port_ok}/hook")
        assert (good["status"], good["body_prefix"]) == (200, "tls ok")
        bad = await first_attempt(api, f"https://127.0.0.1:{port_bad}/hook")
        assert bad["status"] is None and "certificate" in bad["error"].lower(), bad
    finally:
        await api.close()
        await trusted.cleanup()
        await stranger.cleanup()
