"""The HTTP seam: one POST, answered with a capped response summary.

A hostile receiver gets nothing from us but its request: no redirect is
followed, no proxy or cookie is used, TLS is always verified, the body is read
up to a cap and decompressed up to a cap, and every connection goes through
the target guard. A receiver with mutual TLS or its own CA gets its own TLS
context (`client_tls.py`); aiohttp keys its pool by the context, so such a
connection serves those settings only.

A delivery passes a `gate`, asked at the last moment the request can still be
held back: in the same step of the event loop as its first byte's write, after
any wait for a connection. A worker whose loop stood still while it waited may
have lost the receiver to another worker (the stall fence, `fence.py`); a
closed gate raises `NotSent`, and nothing of the request reaches the receiver.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import aiohttp
from aiohttp.abc import AbstractStreamWriter

from .client_tls import ClientContexts
from .domain.receiver_auth import MtlsAuth, ServerTls
from .domain.untrusted import MAX_HEADER_VALUE, clean_text
from .target_guard import BlockedTarget, TargetGuard

# Response headers worth keeping for the developer UI; others are dropped.
KEPT_RESPONSE_HEADERS = frozenset(
    {"content-type", "content-length", "retry-after", "server", "date", "location", "x-request-id",
     "webhook-delivery-control"}
)
# Kept headers whose repeats are one comma-separated list (RFC 9110 5.3), not a last-one-wins value.
LIST_HEADERS = frozenset({"webhook-delivery-control"})


def kept_headers(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The kept response headers, names lowered, values cleaned, list headers' repeats joined."""
    kept: dict[str, str] = {}
    for name, value in pairs:
        key = name.lower()
        if key in KEPT_RESPONSE_HEADERS:
            if key in kept and key in LIST_HEADERS:
                value = f"{kept[key]}, {value}"
            kept[key] = clean_text(value, MAX_HEADER_VALUE)
    return kept


@dataclass(slots=True, frozen=True)
class Response:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body_prefix: bytes = b""


class DeliveryError(Exception):
    """The POST did not produce an HTTP response (connect error, timeout, reset)."""


class NotSent(Exception):
    """The request's gate was closed when its first byte would have been written: none was."""


Gate = Callable[[], bool]  # may the request be written now?


class Transport(Protocol):
    """`client_cert` (mutual TLS) and `server_ca` are passed only for a receiver that has them."""

    async def post(
        self, url: str, headers: dict[str, str], body: bytes, client_cert: MtlsAuth | None = None,
        gate: Gate | None = None,
    ) -> Response: ...

    async def request(
        self, method: str, url: str, headers: dict[str, str], body: bytes = b"",
        client_cert: MtlsAuth | None = None, server_ca: ServerTls | None = None, gate: Gate | None = None,
    ) -> Response: ...

    async def close(self) -> None: ...


# Response header limits: aiohttp refuses a response past them (a parse error).
MAX_HEADER_LINE = 8190
MAX_RESPONSE_HEADERS = 64


class AiohttpTransport:
    """One shared ClientSession for every receiver, built for hostile peers."""

    def __init__(
        self,
        guard: TargetGuard,
        timeout: float,
        connect_timeout: float,
        response_cap: int,
        limit: int,
        ca_file: Path | None = None,
    ):
        self._guard = guard
        self._timeout = aiohttp.ClientTimeout(total=timeout, connect=connect_timeout)
        self._cap = response_cap
        self._limit = limit
        self._ssl = tls_context(ca_file)
        self._client_contexts = ClientContexts(lambda: tls_context(ca_file))
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=self._limit,
            limit_per_host=0,
            use_dns_cache=False,  # the guard's resolver caches by each answer's TTL
            resolver=self._guard.resolver(),
            socket_factory=self._guard.socket_factory,
            ssl=self._ssl,
        )
        return aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            auto_decompress=False,
            trust_env=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=("User-Agent",),
            headers={"user-agent": "webhook-dispatcher"},
            max_line_size=MAX_HEADER_LINE,
            max_field_size=MAX_HEADER_LINE,
            max_headers=MAX_RESPONSE_HEADERS,
        )

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
        NotSent when `gate` held it back."""
        if self._session is None:
            self._session = self._open()
        data: bytes | _GatedBody | None = None
        if method != "GET":
            data = body if gate is None else _GatedBody(body, gate)
        context = self._ssl
        if client_cert is not None or server_ca is not None:
            context = client_context(self._client_contexts, client_cert, server_ca)
        try:
            async with self._session.request(
                method, url, data=data, headers=headers, allow_redirects=False, ssl=context
            ) as resp:
                closed = _close_watch(resp)
                raw = await _read_capped(resp, self._cap)
                if closed is not None and closed.done() and closed.exception() is not None:
                    raise DeliveryError("the connection was reset before the body ended")
                # aiohttp decodes header bytes that are not UTF-8 to lone surrogates, which no
                # JSON encoder takes: the values are cleaned before they go anywhere.
                kept = kept_headers(resp.headers.items())
                return Response(resp.status, kept, decoded_body(raw, resp.headers, self._cap))
        except TimeoutError as exc:
            raise DeliveryError("timeout") from exc
        except aiohttp.ClientConnectorError as exc:
            blocked = exc.os_error if isinstance(exc.os_error, BlockedTarget) else None
            raise DeliveryError(str(blocked) if blocked else f"{type(exc).__name__}: {exc}") from exc
        except (aiohttp.ClientError, OSError) as exc:
            if isinstance(exc.__cause__, NotSent):  # aiohttp wraps what the body's write raised
                raise NotSent(str(exc.__cause__)) from None
            raise DeliveryError(f"{type(exc).__name__}: {exc}") from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class _GatedBody(aiohttp.BytesPayload):
    """A body that asks its gate before it is written. aiohttp holds the request's head back until
    the body's first bytes go (one write for both), so a closed gate leaves the wire untouched."""

    def __init__(self, body: bytes, gate: Gate) -> None:
        super().__init__(body)
        self._gate = gate

    async def write(self, writer: AbstractStreamWriter) -> None:
        self._check()
        await super().write(writer)

    async def write_with_length(self, writer: AbstractStreamWriter, content_length: int | None) -> None:
        self._check()
        await super().write_with_length(writer, content_length)

    def _check(self) -> None:
        if not self._gate():
            raise NotSent("held back by its gate before a byte was written")


def client_context(
    contexts: ClientContexts, client_cert: MtlsAuth | None, server_ca: ServerTls | None
) -> ssl.SSLContext:
    """The context of a receiver's own TLS settings; DeliveryError if they will not load."""
    try:
        return contexts.get(client_cert, server_ca)
    except (ssl.SSLError, OSError) as exc:  # checked at the API, so only a store from another version
        raise DeliveryError(f"the receiver's TLS settings will not load: {type(exc).__name__}") from None


def tls_context(ca_file: Path | None) -> ssl.SSLContext:
    """Verification always on; `ca_file` adds a private CA to the system's, never replaces checks."""
    context = ssl.create_default_context()
    if ca_file is not None:
        context.load_verify_locations(cafile=str(ca_file))
    return context


_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def decoded_body(raw: bytes, headers: Mapping[str, str], cap: int) -> bytes:
    """The body as the receiver meant it, inflated to at most `cap` bytes (a gzip bomb stays small)."""
    encoding = headers.get("content-encoding", "").strip().lower()
    wbits = _WBITS.get(encoding)
    if wbits is None or not raw:
        return raw
    try:
        return zlib.decompressobj(wbits).decompress(raw, cap)
    except zlib.error:
        return raw


def _close_watch(resp: aiohttp.ClientResponse) -> asyncio.Future[None] | None:
    """For a body delimited by the close: a future that fails if the close was a reset.

    aiohttp ends such a body at any close, so a 200 whose body a reset cut off
    would read as a whole answer; a cut-off answer is no answer.
    """
    close_delimited = "content-length" not in resp.headers and "chunked" not in resp.headers.get(
        "transfer-encoding", "").lower()
    connection = resp.connection
    if not close_delimited or connection is None or connection.protocol is None:
        return None
    closed = connection.protocol.closed
    if closed is not None:
        closed.add_done_callback(_retrieve)
    return closed


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()  # read, so asyncio does not log it as never retrieved


async def _read_capped(resp: aiohttp.ClientResponse, cap: int) -> bytes:
    """Read at most `cap` bytes of the body; the rest is never buffered."""
    chunks: list[bytes] = []
    size = 0
    while size < cap:
        chunk = await resp.content.read(cap - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size >= cap:
        resp.close()  # drop the connection instead of draining a huge body
    return b"".join(chunks)


async def cancel_quietly(task: asyncio.Task[object]) -> None:
    task.cancel()
    # A cancelled delivery has nothing to report; the next owner re-delivers.
    with contextlib.suppress(BaseException):
        await task
