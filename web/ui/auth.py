"""Log in with the API token, log out."""

from __future__ import annotations

import aiohttp_jinja2
from aiohttp import web

from dispatcher.domain.tokens import ADMIN

from ..engine import ENGINE
from ..middleware import tenant_principal
from .guard import UI_THROTTLE, Ui, safe_next, see_other, session_keys
from .session import COOKIE


async def login_form(request: web.Request) -> web.StreamResponse:
    if session_keys(request).check(request.cookies.get(COOKIE)) is not None:
        return see_other(safe_next(request.query.get("next", "/ui/")))
    return _login_page(request, 200, "")


def _login_page(request: web.Request, status: int, error: str, next_path: str = "") -> web.Response:
    context = {"error": error, "next": safe_next(next_path or request.query.get("next", "/ui/")), "csrf": ""}
    return aiohttp_jinja2.render_template("login.html", request, context, status=status)


async def login(request: web.Request) -> web.StreamResponse:
    """A good token (the admin's, or a tenant token: a session of its tenant) always sets the session
    cookie; bad ones from one address are slowed down."""
    keys, throttle = session_keys(request), request.app[UI_THROTTLE]
    form = await request.post()
    next_path = str(form.get("next", "/ui/"))
    address = request.remote or "?"
    # Only wrong tokens are slowed: behind an ingress many users share one address, and a
    # stranger's bad guesses must not lock out whoever holds the token.
    given = str(form.get("token", ""))
    principal = ADMIN if keys.token_ok(given, request.app[ENGINE].settings.api_token) else None
    if principal is None:  # a tenant token? (its 256-bit secret needs no throttle; the admin token may)
        principal, _ = await tenant_principal(request.app, given, "console login")
    if principal is None:
        wait = throttle.wait_for(address)
        if wait > 0:
            why = f"Too many failed logins: wait {wait:.0f} s and try again."
            return _login_page(request, 429, why, next_path)
        throttle.failed(address)
        why = "That is not the API token. (A tenant token works too, unless revoked or expired.)"
        return _login_page(request, 401, why, next_path)
    throttle.succeeded(address)
    response = see_other(safe_next(next_path))
    response.set_cookie(
        COOKIE, keys.issue(principal.token_id or ""), max_age=int(keys.ttl), path="/ui", httponly=True,
        samesite="Strict", secure=secure_request(request),
    )
    return response


def secure_request(request: web.Request) -> bool:
    """HTTPS here, or at a TLS-terminating proxy in front (`X-Forwarded-Proto: https`). Trusting the
    header is harmless: a Secure cookie is only ever sent over HTTPS, never anywhere else."""
    forwarded = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
    return request.secure or forwarded == "https"


async def logout(ui: Ui) -> web.StreamResponse:
    response = see_other("/ui/login")
    response.del_cookie(COOKIE, path="/ui")
    return response
