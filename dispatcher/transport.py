"""The HTTP seam: one POST, answered with a capped response summary."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Protocol

import aiohttp

# Response headers worth keeping for the developer UI; others are dropped.
KEPT_RESPONSE_HEADERS = frozenset(
    {"content-type", "content-length", "retry-after", "server", "date", "location", "x-request-id"}
)


@dataclass(slots=True, frozen=True)
class Response:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body_prefix: bytes = b""


class DeliveryError(Exception):
    """The POST did not produce an HTTP response (connect error, timeout, reset)."""


class Transport(Protocol):
    async def post(self, url: str, headers: dict[str, str], body: bytes) -> Response: ...

    async def close(self) -> None: ...


class AiohttpTransport:
    """One shared ClientSession: no redirects, no cookies, no proxies from env."""

    def __init__(self, timeout: float, connect_timeout: float, response_cap: int, limit: int):
        self._timeout = aiohttp.ClientTimeout(total=timeout, connect=connect_timeout)
        self._cap = response_cap
        self._limit = limit
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(limit=self._limit, limit_per_host=0, ttl_dns_cache=60)
        return aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            auto_decompress=False,
            trust_env=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=("User-Agent",),
            headers={"user-agent": "webhook-dispatcher"},
        )

    async def post(self, url: str, headers: dict[str, str], body: bytes) -> Response:
        if self._session is None:
            self._session = self._open()
        try:
            async with self._session.post(
                url, data=body, headers=headers, allow_redirects=False
            ) as resp:
                prefix = await _read_capped(resp, self._cap)
                kept = {k.lower(): v for k, v in resp.headers.items()}
                kept = {k: v for k, v in kept.items() if k in KEPT_RESPONSE_HEADERS}
                return Response(resp.status, kept, prefix)
        except TimeoutError as exc:
            raise DeliveryError("timeout") from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise DeliveryError(f"{type(exc).__name__}: {exc}") from exc

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


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
