"""Both delivery transports against scripted receivers on 127.0.0.1: the same answers, the same limits.

Each receiver here is a raw asyncio server that writes exactly the bytes a test
gives it, so chunked, close-delimited, interim, oversized and broken answers can
be served as they would come from a hostile peer.
"""

from __future__ import annotations

import asyncio
import gzip
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trustme

from dispatcher.domain.addresses import AllowList, TargetPolicy
from dispatcher.http1 import _HEAD_LIMIT, Http1Transport, _Connection
from dispatcher.target_guard import TargetGuard
from dispatcher.transport import (
    MAX_HEADER_LINE,
    MAX_RESPONSE_HEADERS,
    AiohttpTransport,
    DeliveryError,
    NotSent,
    Transport,
)
from tests.harness import Handler, ScriptedReceiver, answering, tls_receiver, wait_until

pytestmark = pytest.mark.integration

CAP = 4096
LOOPBACK = TargetPolicy(AllowList.parse("127.0.0.0/8"))
OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"

TRANSPORTS = {"aiohttp": AiohttpTransport, "http1": Http1Transport}


# Where each transport's request waits for a free connection (its pool at its limit).
WAITS_FOR_A_CONNECTION = {"Semaphore.acquire", "BaseConnector._wait_for_available_connection"}


def awaiting(task: asyncio.Task[Any]) -> list[str]:
    """The coroutines `task` is suspended in, outermost first."""
    chain: list[str] = []
    coro: Any = task.get_coro()
    while coro is not None:
        chain.append(getattr(coro, "__qualname__", type(coro).__name__))
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return chain


@pytest.fixture(params=sorted(TRANSPORTS))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def make(kind: str) -> AsyncIterator[Callable[..., Transport]]:
    made: list[Transport] = []

    def build(policy: TargetPolicy = LOOPBACK, timeout: float = 5.0, ca_file: Path | None = None,
              limit: int = 64) -> Transport:
        transport = TRANSPORTS[kind](TargetGuard(policy), timeout, 2.0, CAP, limit, ca_file)
        made.append(transport)
        return transport

    yield build
    for transport in made:
        await transport.close()


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[ScriptedReceiver]]]:
    servers: list[ScriptedReceiver] = []

    async def start(handler: Handler) -> ScriptedReceiver:
        servers.append(await ScriptedReceiver(handler).start())
        return servers[-1]

    yield start
    for server in servers:
        await server.stop()


async def test_keep_alive_carries_many_requests_on_one_connection(make, serve) -> None:
    server = await serve(answering(OK))
    transport = make()
    for i in range(20):
        resp = await transport.post(server.url(), {"webhook-id": f"m{i}"}, b'{"n":%d}' % i)
        assert (resp.status, resp.body_prefix) == (200, b"ok")
    assert len(server.requests) == 20 and server.connections == 1
    assert all(req.endswith(b'{"n":%d}' % i) for i, req in enumerate(server.requests))


async def test_the_request_carries_exactly_our_headers(make, serve) -> None:
    server = await serve(answering(OK))
    headers = {"content-type": "application/json", "webhook-id": "msg_1", "x-tenant": "t-1"}
    await make().post(server.url("a/b?x=1"), headers, b"{}")
    head = server.requests[0].split(b"\r\n\r\n")[0].decode().split("\r\n")
    assert head[0] == "POST /a/b?x=1 HTTP/1.1"
    names = {line.split(": ", 1)[0].lower() for line in head[1:]}
    assert names == {"host", "user-agent", "accept", "accept-encoding", "content-length", *headers}
    fields = {line.split(": ", 1)[0].lower(): line.split(": ", 1)[1] for line in head[1:]}
    assert fields["host"] == f"127.0.0.1:{server.port}" and fields["content-length"] == "2"
    assert fields["user-agent"] == "webhook-dispatcher"


async def test_chunked_gzip_answers_are_read_and_inflated(make, serve) -> None:
    packed = gzip.compress(b"accepted " * 10)
    parts = (packed[:7], packed[7:])
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts) + b"0\r\n\r\n"
    server = await serve(answering(
        b"HTTP/1.1 202 Accepted\r\ntransfer-encoding: chunked\r\ncontent-encoding: gzip\r\n"
        b"x-request-id: r-1\r\nset-cookie: no\r\n\r\n" + chunked))
    transport = make()
    for _ in range(2):
        resp = await transport.post(server.url(), {}, b"{}")
        assert (resp.status, resp.body_prefix) == (202, b"accepted " * 10)
        assert resp.headers["x-request-id"] == "r-1" and "set-cookie" not in resp.headers
    assert server.connections == 1


async def test_a_body_ended_by_the_close_and_an_interim_answer(make, serve) -> None:
    closing = await serve(
        answering(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end", keep_open=False))
    interim = await serve(answering(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"))
    transport = make()
    for _ in range(2):
        resp = await transport.post(closing.url(), {}, b"{}")
        assert (resp.status, resp.body_prefix) == (200, b"until the end")
        assert (await transport.post(interim.url(), {}, b"{}")).status == 204
    assert closing.connections == 2


async def test_redirects_come_back_as_answers(make, serve) -> None:
    server = await serve(
        answering(b"HTTP/1.1 302 Found\r\nlocation: http://10.0.0.1/\r\ncontent-length: 0\r\n\r\n"))
    resp = await make().post(server.url(), {}, b"{}")
    assert (resp.status, resp.headers["location"]) == (302, "http://10.0.0.1/")
    assert len(server.requests) == 1


async def test_a_huge_body_is_cut_at_the_cap_and_the_next_request_still_goes(make, serve) -> None:
    async def flood(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: ScriptedReceiver
    ) -> None:
        await server.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100000000\r\n\r\n")
        for _ in range(1000):  # bounded: up to 64 MB, or until the client hangs up
            writer.write(b"x" * 65536)
            await writer.drain()

    server = await serve(flood)
    transport = make()
    for _ in range(2):
        resp = await transport.post(server.url(), {}, b"{}")
        assert (resp.status, resp.body_prefix) == (200, b"x" * CAP)
    assert server.connections == 2


@pytest.mark.parametrize("head", [
    b"".join(b"x-h%d: v\r\n" % i for i in range(100)),
    b"x-long: " + b"v" * 9000 + b"\r\n",
    b"x-endless: " + b"v" * 2_000_000,
], ids=["too-many", "too-long", "endless"])
async def test_oversized_answer_heads_are_refused(make, serve, head: bytes) -> None:
    server = await serve(answering(b"HTTP/1.1 200 OK\r\n" + head + b"\r\ncontent-length: 0\r\n\r\n"))
    with pytest.raises(DeliveryError):
        await make().post(server.url(), {}, b"{}")


ENDLESS = {  # an answer's start, then a piece repeated without end: bytes that are neither head nor body
    "chunk-extension": (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1;x=", b"a" * 65536),
    "chunk-size-zeros": (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n", b"0" * 65536),
    "interim-answers": (b"", b"HTTP/1.1 103 Early Hints\r\nlink: </a>; rel=preload\r\n\r\n" * 1024),
}


@pytest.mark.parametrize("attack", sorted(ENDLESS))
async def test_http1_cuts_off_an_answer_that_never_ends_outside_its_head_and_body(serve, attack: str) -> None:
    """Without a cap on the wire, each of these was read until the timeout: gigabytes, a core busy."""
    start, piece = ENDLESS[attack]
    sent = [0]

    async def endless(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: ScriptedReceiver
    ) -> None:
        await server.read_request(reader)
        writer.write(start)
        for _ in range(4096):  # bounded: up to 256 MiB, or until the client hangs up
            writer.write(piece)
            await writer.drain()
            sent[0] += len(piece)

    server = await serve(endless)
    transport = Http1Transport(TargetGuard(LOOPBACK), 60.0, 2.0, CAP, 64)
    try:
        with pytest.raises(DeliveryError, match="on the wire"):
            await transport.post(server.url(), {}, b"{}")
    finally:
        await transport.close()
    await wait_until(lambda: server.connections == 1, 5, "the connection")
    assert sent[0] < 8 * 2**20, "read far past the wire's cap before hanging up"


async def test_trailers_of_a_chunked_answer_are_not_taken_for_its_headers(make, serve) -> None:
    """Both clients alike: what steers delivery (retry-after, the control header) comes in the head."""
    server = await serve(answering(
        b"HTTP/1.1 503 Busy\r\ntransfer-encoding: chunked\r\nretry-after: 5\r\n\r\n"
        b"2\r\nno\r\n0\r\nretry-after: 86400\r\nwebhook-delivery-control: disable\r\n\r\n"
    ))
    resp = await make().post(server.url(), {}, b"{}")
    assert (resp.status, resp.body_prefix) == (503, b"no")
    assert resp.headers.get("retry-after") == "5" and "webhook-delivery-control" not in resp.headers


async def test_http1_reads_a_whole_answer_at_the_head_limit_in_one_byte_chunks(serve) -> None:
    """The cap on what is neither head nor body leaves room for any answer within the other caps."""
    cap = 64 * 1024
    head = b"".join(b"x-h%d: %s\r\n" % (i, b"v" * 8000) for i in range(60))
    body = b"".join(b"1\r\n%c\r\n" % (97 + i % 26) for i in range(cap)) + b"0\r\n\r\n"
    answer = b"HTTP/1.1 200 OK\r\n" + head + b"transfer-encoding: chunked\r\n\r\n" + body
    server = await serve(answering(answer))
    transport = Http1Transport(TargetGuard(LOOPBACK), 30.0, 2.0, cap, 64)
    try:
        resp = await transport.post(server.url(), {}, b"{}")
    finally:
        await transport.close()
    assert (resp.status, resp.body_prefix) == (200, bytes(97 + i % 26 for i in range(cap)))


async def test_http1_counts_body_bytes_read_with_the_heads_end_as_body(serve) -> None:
    """A read that ends a head near its limit may carry much of the body: those bytes are not head.

    The kernel decides where reads split, so the read is given to the connection whole here,
    as the event loop would hand it over: a head of 64 headers at their line cap, then 256 KiB of body.
    """
    lines = [b"x-h%02d: %s\r\n" % (i, b"v" * (MAX_HEADER_LINE - 7)) for i in range(MAX_RESPONSE_HEADERS - 1)]
    head = b"HTTP/1.1 200 OK\r\ncontent-length: 262144\r\n" + b"".join(lines) + b"\r\n"
    answer = head + b"b" * 262144
    assert len(head) < _HEAD_LIMIT < len(answer)
    status, _, body = await answered_in_one_read(answer)
    assert (status, len(body)) == (200, 262144)


async def answered_in_one_read(answer: bytes) -> tuple[int, dict[str, str], bytes]:
    """What http1's connection makes of `answer` handed to it as one read, as the event loop would."""
    ours, theirs = socket.socketpair()
    conn = _Connection((False, "127.0.0.1", 1, b""), 1 << 20)
    transport, _ = await asyncio.get_running_loop().create_connection(lambda: conn, sock=ours)
    try:
        transport.pause_reading()  # the answer comes only as the one read below
        waiter = conn.send(b"POST / HTTP/1.1\r\n\r\n", b"")
        conn.data_received(answer)
        return await waiter
    finally:
        transport.close()
        theirs.close()


async def test_http1_refuses_a_status_line_past_the_header_line_cap_even_in_the_read_that_ends_the_head(
) -> None:
    """The read that ends a head is not counted against the head's limit, so the status line, like
    each header, has a cap of its own: a reason phrase of 200 KiB is refused, not read."""
    answer = b"HTTP/1.1 200 " + b"O" * 200_000 + b"\r\ncontent-length: 2\r\n\r\nok"
    with pytest.raises(DeliveryError, match="status line over"):
        await answered_in_one_read(answer)


async def test_silence_ends_in_a_timeout_and_a_closed_port_in_an_error(make, serve) -> None:
    async def silent(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, server: ScriptedReceiver
    ) -> None:
        await server.read_request(reader)
        await asyncio.sleep(30)

    server = await serve(silent)
    transport = make(timeout=0.5)
    with pytest.raises(DeliveryError, match="timeout"):
        await transport.post(server.url(), {}, b"{}")
    closed = await serve(silent)
    await closed.stop()
    with pytest.raises(DeliveryError):
        await transport.post(closed.url(), {}, b"{}")


async def test_a_refused_target_is_never_dialled(make, serve) -> None:
    server = await serve(answering(OK))
    with pytest.raises(DeliveryError, match="blocked"):
        await make(policy=TargetPolicy(AllowList.parse(""))).post(server.url(), {}, b"{}")
    assert server.connections == 0


async def test_a_closed_gate_holds_the_request_back_before_a_byte_is_written(make, serve) -> None:
    async def read_all(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                       server: ScriptedReceiver) -> None:
        server.requests.append(await reader.read())  # every byte, until the client hangs up

    server = await serve(read_all)
    with pytest.raises(NotSent):
        await make().post(server.url(), {}, b"{}", gate=lambda: False)
    await wait_until(lambda: server.requests != [], 10, "the held-back connection closed")
    assert (server.connections, server.requests) == (1, [b""])


async def test_the_gate_is_asked_after_the_wait_for_a_connection(make, serve) -> None:
    """Asked as the request is written, not as it is made: a worker whose loop stood still while the
    request waited (here, for the only connection) may have lost the receiver meanwhile."""
    release = asyncio.Event()

    async def hold_the_first(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                             server: ScriptedReceiver) -> None:
        for _ in range(10):
            await server.read_request(reader)
            if len(server.requests) == 1:
                await release.wait()
            writer.write(OK)
            await writer.drain()

    server = await serve(hold_the_first)
    transport = make(limit=1)
    first = asyncio.create_task(transport.post(server.url(), {}, b"{}"))
    await wait_until(lambda: len(server.requests) == 1, 10, "the first request holding the connection")
    gate = {"open": True, "asked": 0}

    def may_write() -> bool:
        gate["asked"] += 1
        return bool(gate["open"])

    second = asyncio.create_task(transport.post(server.url(), {}, b"{}", gate=may_write))
    await wait_until(lambda: WAITS_FOR_A_CONNECTION & set(awaiting(second)), 10, "the second request waiting")
    assert gate["asked"] == 0, "asked before the request could be written"
    gate["open"] = False  # the fence engages while the request waits
    release.set()
    assert (await first).status == 200
    with pytest.raises(NotSent):
        await second
    assert gate["asked"] == 1 and len(server.requests) == 1
    assert (await transport.post(server.url(), {}, b"{}")).status == 200


async def test_http1_puts_an_idle_connection_back_when_the_gate_holds_the_request(serve) -> None:
    server = await serve(answering(OK))
    transport = Http1Transport(TargetGuard(LOOPBACK), 5.0, 2.0, CAP, 8)
    try:
        assert (await transport.post(server.url(), {}, b"{}")).status == 200
        with pytest.raises(NotSent):
            await transport.post(server.url(), {}, b"{}", gate=lambda: False)
        assert (await transport.post(server.url(), {}, b"{}")).status == 200
        assert (server.connections, len(server.requests)) == (1, 2)
    finally:
        await transport.close()


async def test_a_connection_the_receiver_closed_while_idle_is_replaced(kind, make, serve) -> None:
    server = await serve(answering(OK, keep_open=False))  # answers keep-alive, then hangs up
    transport = make()
    resp = await transport.post(server.url(), {}, b"{}")
    assert resp.status == 200
    await asyncio.sleep(0.2)  # the close reaches the client
    assert (await transport.post(server.url(), {}, b"{}")).status == 200
    assert len(server.requests) == 2 and server.connections == 2


async def test_tls_is_verified_and_a_private_ca_is_trusted(make, tmp_path: Path) -> None:
    ca = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))

    runner, port = await tls_receiver(ca)
    try:
        with pytest.raises(DeliveryError, match=r"(?i)certificate"):
            await make().post(f"https://127.0.0.1:{port}/hook", {}, b"{}")
        resp = await make(ca_file=ca_file).post(f"https://127.0.0.1:{port}/hook", {}, b"{}")
        assert (resp.status, resp.body_prefix) == (200, b"tls ok")
    finally:
        await runner.cleanup()


async def test_http1_refuses_a_header_that_would_split_the_request(serve) -> None:
    server = await serve(answering(OK))
    transport = Http1Transport(TargetGuard(LOOPBACK), 5.0, 2.0, CAP, 8)
    try:
        with pytest.raises(DeliveryError, match="line break"):
            await transport.post(server.url(), {"x-a": "1\r\nx-injected: 2"}, b"{}")
        assert server.requests == []
    finally:
        await transport.close()


async def test_http1_sends_again_when_a_reused_connection_closes_unanswered(serve) -> None:
    async def hang_up_on_the_second(reader, writer, server: ScriptedReceiver) -> None:
        await server.read_request(reader)
        writer.write(OK)
        await writer.drain()
        if server.connections == 1:
            await server.read_request(reader)  # read, then close without a byte of answer

    server = await serve(hang_up_on_the_second)
    transport = Http1Transport(TargetGuard(LOOPBACK), 5.0, 2.0, CAP, 8)
    try:
        assert (await transport.post(server.url(), {}, b"{}")).status == 200
        assert (await transport.post(server.url(), {}, b"{}")).status == 200
        assert (len(server.requests), server.connections) == (3, 2)
    finally:
        await transport.close()


async def test_http1_does_not_send_again_once_the_gate_has_closed(serve) -> None:
    """The first copy went out (the gate was open) and was not answered: the copy that would follow
    on a new connection is held back, and the attempt fails as the hang-up, not as never made."""
    async def hang_up_on_the_second(reader, writer, server: ScriptedReceiver) -> None:
        await server.read_request(reader)
        writer.write(OK)
        await writer.drain()
        await server.read_request(reader)  # read, then close without a byte of answer

    server = await serve(hang_up_on_the_second)
    transport = Http1Transport(TargetGuard(LOOPBACK), 5.0, 2.0, CAP, 8)
    answers = iter([True, False])  # the fence engages between the two writes
    try:
        assert (await transport.post(server.url(), {}, b"{}")).status == 200
        with pytest.raises(DeliveryError, match="closed by the receiver"):
            await transport.post(server.url(), {}, b"{}", gate=lambda: next(answers))
        assert (len(server.requests), server.connections) == (2, 2)
    finally:
        await transport.close()


async def test_http1_does_not_reuse_a_connection_that_answered_twice(serve) -> None:
    server = await serve(answering(OK + b"HTTP/1.1 500 Smuggled\r\ncontent-length: 0\r\n\r\n"))
    transport = Http1Transport(TargetGuard(LOOPBACK), 5.0, 2.0, CAP, 8)
    try:
        for _ in range(2):
            resp = await transport.post(server.url(), {}, b"{}")
            assert (resp.status, resp.body_prefix) == (200, b"ok")
        assert server.connections == 2
    finally:
        await transport.close()


async def test_http1_gives_up_only_the_answers_past_their_deadline(serve) -> None:
    async def silent_on_slow(reader, writer, server: ScriptedReceiver) -> None:
        while True:
            request = await server.read_request(reader)
            if b"/slow" in request.split(b"\r\n", 1)[0]:
                await asyncio.sleep(30)
            writer.write(OK)
            await writer.drain()

    server = await serve(silent_on_slow)
    transport = Http1Transport(TargetGuard(LOOPBACK), 0.5, 2.0, CAP, 8)
    try:
        slow = [asyncio.create_task(transport.post(server.url("slow"), {}, b"{}")) for _ in range(3)]
        fast = [await transport.post(server.url("fast"), {}, b"{}") for _ in range(5)]
        results = await asyncio.gather(*slow, return_exceptions=True)
        assert [r.status for r in fast] == [200] * 5
        assert [str(r) for r in results] == ["timeout"] * 3
        assert transport._waiting == {}  # nothing is left watched once every answer is settled
        assert (await transport.post(server.url("fast"), {}, b"{}")).status == 200  # after the drops
    finally:
        await transport.close()


async def test_repeats_of_the_control_header_make_one_list_and_others_keep_the_last(make, serve) -> None:
    server = await serve(answering(
        b"HTTP/1.1 200 OK\r\nWebhook-Delivery-Control: pause=5\r\nretry-after: 1\r\n"
        b"webhook-delivery-control: rate=2\r\nRetry-After: 7\r\ncontent-length: 0\r\n\r\n"))
    resp = await make().post(server.url(), {}, b"{}")
    assert resp.headers["webhook-delivery-control"] == "pause=5, rate=2"
    assert resp.headers["retry-after"] == "7"
