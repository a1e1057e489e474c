"""A lean HTTP/1.1 client for deliveries: asyncio protocols and llhttp (httptools), nothing else.

A POST through aiohttp's ClientSession costs the client several times what the
same POST written by hand on a keep-alive connection does (`python -m
bench.http_clients`; figures in docs/benchmarks.md, "Figures behind the code").
A delivery needs little of what aiohttp offers (no redirects, proxies, cookies, streaming or
multipart), so this client keeps only what a hostile receiver requires:

- every connection is dialled through the target guard (addresses resolved
  per new connection, each checked again when its socket is made);
- TLS is always verified (the system's CAs, plus `ca_file`), with SNI; a
  receiver with mutual TLS or its own CA gets a context that presents its
  client certificate or trusts only its CA (`client_tls.py`), and connections
  of its own;
- the whole request has a deadline, the connect a shorter one. Waiting
  answers are checked against theirs every `DEADLINE_TICK` seconds by one
  timer of the transport's, not by a timer of each request's own (a
  per-request `asyncio.timeout` cost more than the rest of the request's
  Python): an answer is given up at most a tick past its deadline;
- a response head is capped (64 headers of at most 8,190 bytes), its body
  read to `response_cap` and then the connection dropped;
- connections are kept alive per (scheme, host, port, receiver TLS settings),
  reused most recent first, and closed after 15 idle seconds. A request on a reused connection
  that the peer closes before answering a byte is sent once more on a new
  connection, at once: most often the peer had timed the idle connection out
  as the request went. Had it read the request, the copy is a duplicate under
  the same webhook-id, which at-least-once delivery allows anyway.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable
from pathlib import Path

import httptools
from aiohttp.abc import ResolveResult
from yarl import URL

from .client_tls import ClientContexts, tls_identity
from .domain.receiver_auth import MtlsAuth, ServerTls
from .domain.untrusted import MAX_HEADER_VALUE
from .target_guard import BlockedTarget, TargetGuard
from .transport import (
    KEPT_RESPONSE_HEADERS,
    LIST_HEADERS,
    MAX_HEADER_LINE,
    MAX_RESPONSE_HEADERS,
    DeliveryError,
    Gate,
    NotSent,
    Response,
    client_context,
    decoded_body,
    tls_context,
)

IDLE_TIMEOUT = 15.0
DEADLINE_TICK = 0.1  # seconds between checks of the answers being waited for
# Headers needed to read the body, beside the ones kept for the UI.
_READ_HEADERS = frozenset({"content-encoding", "transfer-encoding"})
_KEPT = KEPT_RESPONSE_HEADERS | _READ_HEADERS
# Bytes before the end of a response head: every header at its cap, plus the status line.
_HEAD_LIMIT = (MAX_RESPONSE_HEADERS + 1) * (MAX_HEADER_LINE + 2)
# Bytes of one exchange that are not its body: bytes that are neither head nor body (an endless
# chunk extension, zero padding, 103s without end) count against no other cap, and would be read
# until the timeout. Two heads at their limit (an interim answer's and the final one's), and 1 MiB
# for chunk framing and the body bytes of a read not yet parsed: a 64 KiB body in one-byte chunks
# takes 384 KiB of framing.
_NON_BODY_LIMIT = 2 * _HEAD_LIMIT + (1 << 20)
_URL_CACHE_MAX = 65_536
PoolKey = tuple[bool, str, int, bytes]  # scheme is https, host, port, the receiver's TLS settings (b"": none)


class _Target:
    """What a URL gives a request: pool key, host to dial, and the start of the request head."""

    __slots__ = ("host", "host_header", "key", "port", "target", "tls")

    def __init__(self, url: str) -> None:
        parsed = URL(url)
        if parsed.scheme not in ("http", "https") or not parsed.raw_host:
            raise DeliveryError(f"not an http(s) URL: {url!r}")
        self.tls = parsed.scheme == "https"
        self.host = parsed.raw_host  # IDNA-encoded
        self.port = parsed.port or (443 if self.tls else 80)
        self.key: PoolKey = (self.tls, self.host, self.port, b"")
        self.target = parsed.raw_path_qs or "/"
        self.host_header = parsed.host_port_subcomponent or self.host


class _Peer(Exception):
    """The connection ended or broke; `answered` says whether any response byte had come."""

    def __init__(self, message: str, answered: bool) -> None:
        super().__init__(message)
        self.answered = answered


class _Connection(asyncio.Protocol):
    """One keep-alive connection, one request at a time; llhttp parses the answers."""

    def __init__(self, key: PoolKey, cap: int) -> None:
        self.key = key
        self.cap = cap
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.wire_bytes = 0  # of the current exchange
        self.closed = False
        self.idle_since = 0.0
        self.reused = False
        self._waiter: asyncio.Future[tuple[int, dict[str, str], bytes]] | None = None
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body = bytearray()
        self.header_count = 0
        self.status_bytes = 0  # of the reason phrase
        self.head_bytes = 0
        self.headers_done = False
        self.answered = False
        self.capped = False
        self.complete = False
        self.keep_alive = False

    # the request --------------------------------------------------------------

    def send(self, head: bytes, body: bytes) -> asyncio.Future[tuple[int, dict[str, str], bytes]]:
        assert self.transport is not None and self._waiter is None
        self._reset()
        self.wire_bytes = 0
        self._waiter = asyncio.get_running_loop().create_future()
        if body:
            self.transport.writelines((head, body))
        else:
            self.transport.write(head)
        return self._waiter

    def done(self) -> None:
        """The caller has its answer (or gave up): the connection is free again or closed."""
        self._waiter = None

    @property
    def reusable(self) -> bool:
        return not self.closed and self.complete and not self.capped and self.keep_alive

    def close(self, abort: bool = False) -> None:
        """Close; `abort` drops the connection at once (no TLS goodbye to a peer still sending)."""
        self.closed = True
        if self.transport is not None:
            if abort:
                self.transport.abort()
            else:
                self.transport.close()

    def _answer(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result((self.status, self.headers, bytes(self.body)))

    def give_up(self, reason: str) -> None:
        """Past the deadline: the waiting request fails, and the connection is dropped."""
        self._fail(DeliveryError(reason))

    def _fail(self, exc: Exception) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.close(abort=True)

    # asyncio.Protocol ---------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            if not self.capped:  # bytes nobody asked for: the connection cannot be trusted
                self.close()
            return
        self.answered = True
        self.wire_bytes += len(data)
        if self.wire_bytes - len(self.body) > _NON_BODY_LIMIT:
            self._fail(DeliveryError(f"an answer over {_NON_BODY_LIMIT} bytes on the wire besides its body"))
            return
        head_open = not self.headers_done
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(DeliveryError("the receiver switched protocols"))
            return
        except httptools.HttpParserCallbackError as exc:  # a limit of ours, raised in a callback
            cause = exc.__context__
            self._fail(cause if isinstance(cause, DeliveryError) else DeliveryError(str(exc)))
            return
        except httptools.HttpParserError as exc:
            self._fail(DeliveryError(f"bad HTTP response: {exc}"))
            return
        # Counted only while the head is still open after the read: a read that ends the head may
        # carry body bytes after it, which are not head. So a head may pass the limit by at most the
        # read that ends it (256 KiB; its status line and each header are capped on their own), and
        # a head that never ends is stopped here within one read.
        if head_open and not self.headers_done:
            self.head_bytes += len(data)
            if self.head_bytes > _HEAD_LIMIT:
                self._fail(DeliveryError(f"response headers over {_HEAD_LIMIT} bytes"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        # A body delimited by the close ends only at a clean close: a reset cuts it off, and a
        # cut-off answer is no answer (a 200 whose body never arrived whole is not a delivery).
        if exc is None and self.headers_done and not self.complete and "content-length" not in self.headers \
                and "transfer-encoding" not in self.headers:
            self.complete = True
            self._answer()
            return
        reason = f"{type(exc).__name__}: {exc}" if exc else "connection closed by the receiver"
        self._fail(_Peer(reason, self.answered))

    # llhttp callbacks ------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.complete:  # a second answer to one request: this connection is not reused
            self.keep_alive = False

    def on_status(self, reason: bytes) -> None:
        self.status_bytes += len(reason)
        if self.status_bytes > MAX_HEADER_LINE:
            raise DeliveryError(f"a response status line over {MAX_HEADER_LINE} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        self.header_count += 1
        if self.header_count > MAX_RESPONSE_HEADERS:
            raise DeliveryError(f"more than {MAX_RESPONSE_HEADERS} response headers")
        if len(name) + len(value) + 2 > MAX_HEADER_LINE:
            raise DeliveryError(f"a response header line over {MAX_HEADER_LINE} bytes")
        lowered = name.decode("latin-1").lower()
        if lowered in _KEPT and not self.headers_done:  # a chunked body's trailers: not kept, as by aiohttp
            text = value.decode("latin-1")
            if lowered in LIST_HEADERS and lowered in self.headers:  # repeats make one list
                text = f"{self.headers[lowered]}, {text}"[:MAX_HEADER_VALUE]
            self.headers[lowered] = text

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        if self.capped:
            return
        room = self.cap - len(self.body)
        if len(body) >= room:
            self.body += body[:room]
            self.capped = True  # drop the connection instead of draining a huge body
            self._answer()
            self.close(abort=True)
        else:
            self.body += body

    def on_message_complete(self) -> None:
        if 100 <= self.status < 200:  # an interim answer (100 Continue, 103): the real one follows
            self._reset()
            self.answered = True
            return
        if self.complete:  # the end of an answer nobody asked for
            return
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()  # llhttp knows it only until the next message
        self._answer()


class Http1Transport:
    """The `Transport` of deliveries on keep-alive HTTP/1.1 connections (see the module's notes)."""

    def __init__(
        self,
        guard: TargetGuard,
        timeout: float,
        connect_timeout: float,
        response_cap: int,
        limit: int,
        ca_file: Path | None = None,
    ) -> None:
        self._guard = guard
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._cap = response_cap
        self._ssl = tls_context(ca_file)
        self._client_contexts = ClientContexts(lambda: tls_context(ca_file))
        self._slots = asyncio.Semaphore(limit)
        self._limit = limit
        self._idle: dict[PoolKey, list[_Connection]] = {}
        self._idle_count = 0
        self._targets: dict[str, _Target] = {}
        self._sweeper: asyncio.TimerHandle | None = None
        self._open: set[_Connection] = set()
        self._waiting: dict[_Connection, float] = {}  # connection -> deadline of the answer it waits for
        self._ticker: asyncio.TimerHandle | None = None
        self._clock: Callable[[], float] | None = None  # the running loop's, once known

    async def post(
        self, url: str, headers: dict[str, str], body: bytes, client_cert: MtlsAuth | None = None,
        gate: Gate | None = None,
    ) -> Response:
        return await self.request("POST", url, headers, body, client_cert, gate=gate)

    async def request(
        self, method: str, url: str, headers: dict[str, str], body: bytes = b"",
        client_cert: MtlsAuth | None = None, server_ca: ServerTls | None = None, gate: Gate | None = None,
    ) -> Response:
        """One request, no redirects followed; raises DeliveryError when there is no response,
        NotSent when `gate` held it back (see transport.py).

        `client_cert`: present this certificate in the TLS handshake (mutual TLS); `server_ca`:
        the receiver's own CA, the only one its certificate may chain to."""
        target = self._target(url)
        head = self._head(method, target, headers, body)
        key, context = target.key, self._ssl
        if client_cert is not None or server_ca is not None:
            context = client_context(self._client_contexts, client_cert, server_ca)
            key = (target.tls, target.host, target.port, tls_identity(client_cert, server_ca))
        async with self._slots:
            status, got, raw = await self._exchange(target, key, context, head, body,
                                                    self._now() + self._timeout, gate)
        kept = {k: v for k, v in got.items() if k in KEPT_RESPONSE_HEADERS}
        return Response(status, kept, decoded_body(raw, got, self._cap))

    async def close(self) -> None:
        for handle in (self._sweeper, self._ticker):
            if handle is not None:
                handle.cancel()
        self._sweeper = self._ticker = None
        for conn in list(self._open):
            conn.close()
        self._open.clear()
        self._idle.clear()
        self._idle_count = 0

    # one exchange ------------------------------------------------------------------

    async def _exchange(
        self, target: _Target, key: PoolKey, context: ssl.SSLContext, head: bytes, body: bytes,
        deadline: float, gate: Gate | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        for attempt in range(2):  # the second, on a new connection, only after a reused one hung up
            conn = self._take_idle(key) if attempt == 0 else None
            if conn is None:
                conn = await self._connect(target, key, context, deadline)
            if gate is not None and not self._may_write(gate, conn):  # no await from here to the write
                if attempt:  # the first went out on the reused connection, unanswered
                    raise DeliveryError("connection closed by the receiver")
                raise NotSent("held back by its gate before a byte was written")
            try:
                answer = conn.send(head, body)
                self._watch(conn, deadline)
                return await answer
            except _Peer as exc:
                if conn.reused and not exc.answered:
                    continue
                raise DeliveryError(str(exc)) from None
            except BaseException:  # a timeout or a cancel mid-exchange: the connection is in an unknown state
                conn.close(abort=True)
                raise
            finally:
                self._waiting.pop(conn, None)
                conn.done()
                self._settle(conn)
        raise DeliveryError("connection closed by the receiver")

    def _may_write(self, gate: Gate, conn: _Connection) -> bool:
        """Ask the gate; a connection it holds back is given up unused."""
        try:
            allowed = gate()
        except BaseException:
            self._unused(conn)
            raise
        if not allowed:
            self._unused(conn)
        return allowed

    def _watch(self, conn: _Connection, deadline: float) -> None:
        self._waiting[conn] = deadline
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().call_later(DEADLINE_TICK, self._on_tick)

    def _on_tick(self) -> None:
        """Give up the answers past their deadline; tick again while any is awaited."""
        self._ticker = None
        now = self._now()
        for conn in [conn for conn, deadline in self._waiting.items() if deadline <= now]:
            del self._waiting[conn]
            conn.give_up("timeout")
        if self._waiting:
            self._ticker = asyncio.get_running_loop().call_later(DEADLINE_TICK, self._on_tick)

    def _settle(self, conn: _Connection) -> None:
        """Keep a connection that finished its exchange cleanly; close any other."""
        if not conn.reusable:
            conn.close()
            self._open.discard(conn)
            return
        conn.reused = True
        conn.idle_since = self._now()
        self._keep(conn)

    def _unused(self, conn: _Connection) -> None:
        """A connection taken for a request that was held back: an idle one goes back as it was
        (its idle time runs on), a new one is closed (it was never used, so nothing says it can be)."""
        if conn.reused and conn.reusable:
            self._keep(conn)
        else:
            conn.close()
            self._open.discard(conn)

    def _keep(self, conn: _Connection) -> None:
        self._idle.setdefault(conn.key, []).append(conn)
        self._idle_count += 1
        if self._idle_count > self._limit:
            self._sweep(evict=True)
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().call_later(IDLE_TIMEOUT, self._on_sweep)

    def _take_idle(self, key: PoolKey) -> _Connection | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()  # the most recently used: least likely to have timed out at the peer
            self._idle_count -= 1
            if not conn.closed and self._now() - conn.idle_since < IDLE_TIMEOUT:
                return conn
            conn.close()
            self._open.discard(conn)
        return None

    async def _connect(
        self, target: _Target, key: PoolKey, context: ssl.SSLContext, deadline: float
    ) -> _Connection:
        loop = asyncio.get_running_loop()
        errors: list[str] = []
        timeout = min(self._connect_timeout, deadline - self._now())
        try:
            async with asyncio.timeout(max(timeout, 0.0)):
                answers = await self._guard.resolve_allowed(target.host, target.port)
                for answer in answers:
                    addr_info = (answer["family"], socket.SOCK_STREAM, answer["proto"], "",
                                 _sockaddr(answer))
                    sock = self._guard.socket_factory(addr_info)
                    try:
                        sock.setblocking(False)
                        await loop.sock_connect(sock, addr_info[4])
                        conn = _Connection(key, self._cap)
                        await loop.create_connection(
                            lambda conn=conn: conn, sock=sock,  # type: ignore[misc]
                            ssl=context if target.tls else None,
                            server_hostname=target.host if target.tls else None,
                        )
                    except ssl.SSLError as exc:
                        sock.close()
                        raise DeliveryError(f"TLS: {exc}") from exc
                    except OSError as exc:
                        sock.close()
                        errors.append(f"{addr_info[4][0]}: {exc}")
                        continue
                    self._open.add(conn)
                    return conn
        except TimeoutError as exc:
            if timeout < self._connect_timeout:  # the request's own deadline came first
                raise DeliveryError("timeout") from exc
            raise DeliveryError(f"connect timeout ({target.host}:{target.port})") from exc
        except BlockedTarget as exc:
            raise DeliveryError(str(exc)) from exc
        except OSError as exc:  # resolution failed
            raise DeliveryError(f"cannot resolve {target.host}: {exc}") from exc
        raise DeliveryError(f"cannot connect to {target.host}:{target.port}: " + "; ".join(errors))

    # helpers ----------------------------------------------------------------------

    def _target(self, url: str) -> _Target:
        target = self._targets.get(url)
        if target is None:
            if len(self._targets) >= _URL_CACHE_MAX:
                self._targets.clear()
            target = self._targets[url] = _Target(url)
        return target

    @staticmethod
    def _head(method: str, target: _Target, headers: dict[str, str], body: bytes) -> bytes:
        lines = [f"{method} {target.target} HTTP/1.1", f"host: {target.host_header}",
                 "user-agent: webhook-dispatcher", "accept: */*", "accept-encoding: gzip, deflate"]
        if body or method not in ("GET", "HEAD"):
            lines.append(f"content-length: {len(body)}")
        lines.extend(f"{name}: {value}" for name, value in headers.items())
        head = "\r\n".join(lines)
        if not head.count("\r") == head.count("\n") == len(lines) - 1:
            raise DeliveryError("a header name or value holds a line break")
        try:
            return (head + "\r\n\r\n").encode("latin-1")
        except UnicodeEncodeError as exc:
            raise DeliveryError(f"a header is not latin-1: {exc}") from exc

    def _now(self) -> float:
        if self._clock is None:
            self._clock = asyncio.get_running_loop().time
        return self._clock()

    def _on_sweep(self) -> None:
        self._sweeper = None
        self._sweep(evict=False)
        if self._idle_count:
            self._sweeper = asyncio.get_running_loop().call_later(IDLE_TIMEOUT, self._on_sweep)

    def _sweep(self, evict: bool) -> None:
        """Close idle connections past their time; with `evict`, also the oldest over the limit."""
        now = self._now()
        kept: list[_Connection] = []
        for conns in self._idle.values():
            kept.extend(c for c in conns if not c.closed and now - c.idle_since < IDLE_TIMEOUT)
        if evict:
            kept.sort(key=lambda c: c.idle_since)
            kept = kept[max(0, len(kept) - self._limit // 2):]
        keep = set(kept)
        for conns in self._idle.values():
            for conn in conns:
                if conn not in keep:
                    conn.close()
                    self._open.discard(conn)
        self._idle = {}
        for conn in kept:
            self._idle.setdefault(conn.key, []).append(conn)
        self._idle_count = len(kept)


def _sockaddr(answer: ResolveResult) -> tuple[object, ...]:
    host, port = answer["host"], answer["port"]
    if answer["family"] == socket.AF_INET6:
        return (host, port, 0, 0)
    return (host, port)
