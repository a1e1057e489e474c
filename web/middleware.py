"""Errors as `{"error": {"code", "field", "message"}}`, and bearer-token auth on /v1."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable

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
    try:
        return await handler(request)
    except InvalidInput as exc:
        return error_response(exc.status, exc.code, exc.message, exc.field)
    except web.HTTPRequestEntityTooLarge:
        return error_response(413, "too_large", "request body too large", "body")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(exc.status, exc.reason.lower().replace(" ", "_"), exc.text or exc.reason)
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return error_response(500, "internal_error", "internal error; see the worker log")


def auth_middleware(token: str) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    """Require `Authorization: Bearer <token>` on every /v1 call."""
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith("/v1/") or request.path == "/v1":
            given = request.headers.get("Authorization", "").encode()
            if not token or not hmac.compare_digest(given, expected):
                return error_response(401, "unauthorized", "missing or wrong bearer token", "Authorization")
        return await handler(request)

    return check
