"""Errors as `{"error": {"code", "field", "message"}}`, and bearer-token auth on /v1."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus

import orjson
from aiohttp import web

from dispatcher.domain.errors import InvalidInput

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(status: int, code: str, message: str, field: str = "") -> web.Response:
    body = {"error": {"code": code, "field": field, "message": message}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error as JSON; nothing from inside the worker (tracebacks, exception text) in a body."""
    try:
        return await handler(request)
    except InvalidInput as exc:
        return error_response(exc.status, exc.code, exc.message, exc.field)
    except web.HTTPRequestEntityTooLarge:
        return error_response(413, "too_large", "request body too large", "body")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _http_error(exc.status)
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(500, "internal_error", "internal error; see the worker log")


def _http_error(status: int) -> web.Response:
    """aiohttp's own errors (no route, wrong method) by their status phrase alone: an exception's
    text may carry whatever the code that raised it put there."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    return error_response(status, phrase.lower().replace(" ", "_").replace("-", "_"), phrase)


def header_bytes(value: str) -> bytes | None:
    """The bytes a header (or environment) value came as; None if it cannot have come as bytes.

    aiohttp decodes header bytes as UTF-8 with `surrogateescape`, so bytes that are not UTF-8
    arrive as lone surrogates that a plain `.encode()` refuses; encoding back the same way gives
    the bytes sent.
    """
    try:
        return value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return None


def bearer_authorized(request: web.Request, token: str) -> bool:
    """Whether `request` carries `Authorization: Bearer <token>`, compared in constant time.

    The one check for /v1 and for /readyz's details; no token configured means nobody passes.
    """
    given = header_bytes(request.headers.get("Authorization", ""))
    expected = header_bytes(f"Bearer {token}")
    if not token or given is None or expected is None:
        return False
    return hmac.compare_digest(given, expected)


def auth_middleware(token: str) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    """Require `Authorization: Bearer <token>` on every /v1 call."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if (request.path.startswith("/v1/") or request.path == "/v1") and not bearer_authorized(
            request, token
        ):
            return error_response(401, "unauthorized", "missing or wrong bearer token", "Authorization")
        return await handler(request)

    return check
