"""Errors as `{"error": {"code", "field", "message"}}`, and bearer-token auth on /v1: the admin token
(`DISPATCHER_API_TOKEN`) or a tenant token (dispatcher/domain/tokens.py, web/scopes.py)."""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from http import HTTPStatus

import orjson
from aiohttp import web

from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.throttle import Throttle
from dispatcher.domain.tokens import ADMIN, Principal, parse_token, refusal
from dispatcher.domain.untrusted import log_token, one_line

from .engine import ENGINE
from .scopes import ADMIN_ONLY, PRINCIPAL, route_access

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
        log.exception("unhandled error on %s %s", request.method, one_line(request.path))
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


TOKEN_WAIT = 2.0  # s an unknown token id waits for the tokens to be read up to now (minted elsewhere)
UNAUTHORIZED = "missing or wrong bearer token"


def auth_middleware(token: str) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    """Require a bearer token on every /v1 call: the admin `token`, or a tenant token, which reaches only
    the routes web/scopes.py lets it (403 on the others) and its own tenant's receivers there."""

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not (request.path.startswith("/v1/") or request.path == "/v1"):
            return await handler(request)
        principal, why = await authenticate(request, token)
        if principal is None:
            return error_response(401, "unauthorized", why, "Authorization")
        if not principal.admin and route_access(request) == ADMIN_ONLY:
            log.warning("refused %s %s: %s: the call is for the admin token only",
                        request.method, one_line(request.path), principal.describe())
            return error_response(403, "forbidden", f"a tenant token (tenant {principal.tenant!r}) cannot "
                                  "make this call: it needs the admin token", "Authorization")
        request[PRINCIPAL] = principal
        return await handler(request)

    return check


async def authenticate(request: web.Request, admin_token: str) -> tuple[Principal | None, str]:
    """Who the bearer token says calls, or None and why not (the 401's message)."""
    if bearer_authorized(request, admin_token):
        return ADMIN, ""
    given = request.headers.get("Authorization", "")
    if not given.startswith("Bearer "):
        return None, UNAUTHORIZED
    return await tenant_principal(request.app, given[7:], f"{request.method} {one_line(request.path)}")


async def tenant_principal(app: web.Application, presented: str, where: str) -> tuple[Principal | None, str]:
    """The tenant token `presented` (to the API or the console's login), or None and why not.

    Found by its id and checked by the hash of its secret; a refusal is logged with the token's id and
    tenant, never its secret. Only a caller holding the right secret is told that its token was
    revoked or has expired.
    """
    parsed = parse_token(presented)
    if parsed is None:
        return None, UNAUTHORIZED
    token_id, secret = parsed
    record = await app[ENGINE].find_token(token_id, TOKEN_WAIT)
    why = refusal(record, secret, time.time())
    if not why:
        assert record is not None
        return Principal(record.tenant, record.id), ""
    if record is not None:
        log.warning("refused %s: token_id=%s tenant=%s: %s", where, token_id, record.tenant, why)
    else:  # anyone can make up ids: one line per 10 s, not one per call
        held = _UNKNOWN_IDS.admit(time.monotonic())
        if held is not None:
            log.warning("refused %s: token_id=%s: %s (%d more calls with unknown token ids in the last 10 s"
                        " not logged)", where, log_token(token_id), why, held)
    return None, f"this token is {why}" if why in ("revoked", "expired") else UNAUTHORIZED


_UNKNOWN_IDS = Throttle(10.0)
