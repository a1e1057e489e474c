"""Requests to a receiver with its `auth` (a client certificate, or an OAuth2 bearer token) and `tls`.

Every request goes out through the worker's transport, token requests included, so a token
URL passes the same target guard, timeouts, caps and no-redirect rule as a delivery.

Tokens (client-credentials grant) are cached in memory per set of credentials, in a bounded
LRU, until shortly before they expire (`domain/oauth2_tokens.token_times`). Concurrent
deliveries that need a token share one fetch. A 401 from the receiver drops the token it
was sent with, and the request is made once more with a new one. A token server that gives
no usable token makes the attempt fail with an `auth_error: ...` reason, retried with the
receiver's backoff like any failed attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable

from .domain.oauth2_tokens import Token, TokenError, parse_token_response, token_request
from .domain.receiver_auth import OAuth2Auth
from .domain.records import ReceiverConfig
from .transport import DeliveryError, Gate, Response, Transport

MAX_TOKENS = 10_000  # cached tokens per worker (one per set of credentials)
MAX_TOKEN_BODY = 16 * 1024  # a token answer is a few hundred bytes; one past this is refused


class TokenSource:
    """OAuth2 access tokens: fetched through the transport, cached, refreshed, one fetch at a time."""

    def __init__(self, transport: Transport, clock: Callable[[], float] = time.time,
                 size: int = MAX_TOKENS) -> None:
        self._transport = transport
        self._clock = clock
        self._size = size
        self._tokens: OrderedDict[bytes, Token] = OrderedDict()
        self._fetching: dict[bytes, asyncio.Task[Token]] = {}
        self.fetches = 0  # token requests made (tests and benchmarks read it)

    async def get(self, auth: OAuth2Auth) -> Token:
        """A fresh token for `auth`; TokenError if none can be had.

        A token past its refresh time but not expired is still used if the refresh fails.
        """
        key = auth.identity
        cached = self._tokens.get(key)
        if cached is not None and cached.fresh(self._clock()):
            self._tokens.move_to_end(key)
            return cached
        fetch = self._fetching.get(key)
        if fetch is None:
            fetch = self._fetching[key] = asyncio.create_task(self._fetch(key, auth))
            fetch.add_done_callback(lambda task: self._fetched(key, task))
        try:
            return await asyncio.shield(fetch)  # a waiter's cancel does not cancel the others' fetch
        except TokenError:
            if cached is not None and self._clock() < cached.expires_at:
                return cached
            raise

    def invalidate(self, auth: OAuth2Auth, token: Token) -> None:
        """The receiver refused `token`: forget it (unless a newer one has replaced it meanwhile)."""
        key = auth.identity
        if self._tokens.get(key) is token:
            del self._tokens[key]

    async def _fetch(self, key: bytes, auth: OAuth2Auth) -> Token:
        self.fetches += 1
        headers, body = token_request(auth)
        try:
            resp = await self._transport.request("POST", auth.token_url, headers, body)
        except DeliveryError as exc:
            raise TokenError(f"token request failed: {exc}") from None
        raw = resp.body_prefix
        token = parse_token_response(resp.status, raw, self._clock(), len(raw) > MAX_TOKEN_BODY,
                                     auth.client_secret)
        self._tokens[key] = token
        self._tokens.move_to_end(key)
        if len(self._tokens) > self._size:
            self._tokens.popitem(last=False)
        return token

    def _fetched(self, key: bytes, task: asyncio.Task[Token]) -> None:
        if self._fetching.get(key) is task:
            del self._fetching[key]
        if not task.cancelled():
            task.exception()  # read, so a failure no waiter is left for is not logged as unretrieved

    async def close(self) -> None:
        for task in list(self._fetching.values()):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        self._fetching.clear()
        self._tokens.clear()


class AuthedRequests:
    """Requests to a receiver's URL, authenticated as its `auth` asks."""

    def __init__(self, transport: Transport, clock: Callable[[], float] = time.time) -> None:
        self._transport = transport
        self.tokens = TokenSource(transport, clock)

    async def send(
        self, method: str, config: ReceiverConfig, headers: dict[str, str], body: bytes = b"", url: str = "",
        gate: Gate | None = None,
    ) -> Response:
        """One request to `url` (a transform's path on the receiver's host), else `config.url`;
        DeliveryError if no answer (`auth_error: ...`: no token), NotSent if `gate` held it back."""
        auth, server_ca, target = config.auth, config.tls, url or config.url
        if auth is None and server_ca is None:
            if method == "POST":
                return await self._transport.post(target, headers, body, gate=gate)
            return await self._transport.request(method, target, headers, body, gate=gate)
        if not isinstance(auth, OAuth2Auth):
            return await self._transport.request(method, target, headers, body, client_cert=auth,
                                                 server_ca=server_ca, gate=gate)
        return await self._with_token(method, config, auth, headers, body, target, gate)

    async def _with_token(
        self, method: str, config: ReceiverConfig, auth: OAuth2Auth, headers: dict[str, str], body: bytes,
        target: str, gate: Gate | None,
    ) -> Response:
        token = await self._token(auth)
        resp = await self._transport.request(method, target, {**headers, "authorization": token.value},
                                             body, server_ca=config.tls, gate=gate)
        if resp.status != 401:
            return resp
        # The token may have been revoked or rotated before its time: one new token, one more try.
        self.tokens.invalidate(auth, token)
        token = await self._token(auth)
        return await self._transport.request(method, target, {**headers, "authorization": token.value},
                                             body, server_ca=config.tls, gate=gate)

    async def _token(self, auth: OAuth2Auth) -> Token:
        try:
            return await self.tokens.get(auth)
        except TokenError as exc:
            raise DeliveryError(f"auth_error: {exc}") from None

    async def close(self) -> None:
        await self.tokens.close()
