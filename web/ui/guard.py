"""Every console page goes through `page`: a session or the login page, the CSRF token on every
POST, the owner answering per-receiver pages, errors as HTML, and strict headers on all of /ui.

A session opened with a tenant token carries its principal: the owner of a receiver answers 404 for
another tenant's (web/scopes.py, as the API does), and a token revoked or expired ends the session."""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp_jinja2
from aiohttp import web
from yarl import URL

from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.tokens import ADMIN, Principal, status

from ..engine import ENGINE, Engine
from ..middleware import TOKEN_WAIT
from ..routing import FORWARDED
from ..scopes import check_visible
from .session import COOKIE, LoginThrottle, Session, SessionKeys

UI_THROTTLE: web.AppKey[LoginThrottle] = web.AppKey("ui_throttle")

# Nothing inline, nothing from elsewhere: a receiver's markup that slipped through could not run.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


@dataclass(slots=True)
class Ui:
    """One console request: the engine, the session, its CSRF token and who it acts for."""

    request: web.Request
    engine: Engine
    session: Session
    csrf: str
    form: dict[str, str]
    principal: Principal = ADMIN

    def render(self, template: str, status: int = 200, **context: Any) -> web.Response:
        context.update(csrf=self.csrf, own_url=str(self.engine.own_url()), path=self.request.path,
                       tenant=self.principal.tenant or "")
        return aiohttp_jinja2.render_template(template, self.request, context, status=status)

    def field(self, name: str, default: str = "") -> str:
        """A form field (POST) or query parameter (GET), stripped."""
        source = self.form if self.request.method == "POST" else self.request.query
        return source.get(name, default).strip()


MAX_INT = 2**62  # above any seq or count the console handles


def number_field(text: str, field: str, *, integer: bool = False, maximum: float = MAX_INT) -> float:
    """Every numeric form or query field of the console: a finite number from 0 to `maximum` (a whole
    one if `integer`), or a 400 naming the field (never `inf`/`nan` reaching `int()`)."""
    if not text.isascii() or "_" in text:  # float() takes "1_0" and other scripts' digits ("١٢")
        raise InvalidInput(field, "must be a number", status=400)
    try:
        value = float(text)
    except (ValueError, OverflowError):
        raise InvalidInput(field, "must be a number", status=400) from None
    if not math.isfinite(value):
        raise InvalidInput(field, "must be a finite number", status=400)
    if integer and not value.is_integer():
        raise InvalidInput(field, "must be a whole number", status=400)
    if not 0 <= value <= maximum:
        raise InvalidInput(field, f"must be from 0 to {maximum:.0f}", status=400)
    return value


def int_field(text: str, field: str, maximum: int = MAX_INT) -> int:
    return int(number_field(text, field, integer=True, maximum=maximum))


PageHandler = Callable[[Ui], Awaitable[web.StreamResponse]]


def page(handler: PageHandler, owned: bool = False) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """A console page: logged in, CSRF-checked on POST, and (`owned`) answered by the owner of
    `{receiver_id}`, as the API answers a receiver's requests."""

    async def run(request: web.Request) -> web.StreamResponse:
        keys, engine = session_keys(request), request.app[ENGINE]
        session = keys.check(request.cookies.get(COOKIE))
        principal = await session_principal(engine, session) if session is not None else None
        if session is None or principal is None:
            return _to_login(request)
        form: dict[str, str] = {}
        if request.method == "POST":
            posted = await request.post()
            form = {k: v for k, v in posted.items() if isinstance(v, str)}
            if not keys.csrf_ok(session, form.get("csrf", "")):
                return _error(request, 403, "csrf", "missing or wrong CSRF token: reload the page and retry")
        ui = Ui(request, engine, session, keys.csrf(session), form, principal)
        try:
            if owned and not engine.is_local(request.match_info["receiver_id"]):
                return await forward_ui(engine, request, request.match_info["receiver_id"])
            if owned:
                check_visible(engine, principal, request.match_info["receiver_id"])
            return await handler(ui)
        except InvalidInput as exc:
            return ui.render("error.html", status=exc.status, error=exc)

    return run


async def session_principal(engine: Engine, session: Session) -> Principal | None:
    """Who the session acts for: the admin, or its tenant token while that is neither revoked nor
    expired (None: the session is over)."""
    if not session.token_id:
        return ADMIN
    record = await engine.find_token(session.token_id, TOKEN_WAIT)
    if record is None or status(record, time.time()) != "active":
        return None
    return Principal(record.tenant, record.id)


def session_keys(request: web.Request) -> SessionKeys:
    """The keys of the worker's settings (derived per request: one HMAC, and nothing to keep in step)."""
    settings = request.app[ENGINE].settings
    return SessionKeys(settings.api_token, settings.ui_session_ttl)


def _to_login(request: web.Request) -> web.StreamResponse:
    if request.method != "GET":
        return _error(request, 403, "session", "no session (expired, or logged out): log in again")
    return see_other(URL("/ui/login").with_query(next=request.path_qs))


def _error(request: web.Request, status: int, field: str, message: str) -> web.Response:
    error = InvalidInput(field, message, code="forbidden", status=status)
    return aiohttp_jinja2.render_template("error.html", request, {"error": error, "csrf": ""}, status=status)


def see_other(location: str | URL) -> web.Response:
    """A 303 to `location` (after a POST, the browser GETs it)."""
    return web.Response(status=303, headers={"Location": str(location)})


def safe_next(target: str) -> str:
    """Where to go after login: a console path only (never another site: `//host`, `/\\host`)."""
    if target.startswith("/ui/") and not target.startswith(("//", "/\\")) and "\\" not in target:
        return target
    return "/ui/"


async def forward_ui(engine: Engine, request: web.Request, receiver_id: str) -> web.Response:
    """Ask the receiver's owner for this page (its session cookie goes along; redirects come back)."""
    owner = engine.owner_url(receiver_id)
    if owner is None or request.headers.get(FORWARDED):
        raise InvalidInput("receiver_id", "the owner of this receiver is moving (rebalance); retry",
                           code="unavailable", status=503)
    headers = {k: v for k, v in request.headers.items() if k.lower() in ("cookie", "content-type")}
    headers[FORWARDED] = "1"
    async with engine.http_client.request(
        request.method, owner.join(request.rel_url), headers=headers, data=await request.read(),
        allow_redirects=False,
    ) as resp:
        kept = {k: v for k, v in resp.headers.items() if k.lower() in ("location", "cache-control")}
        return web.Response(status=resp.status, body=await resp.read(), headers=kept,
                            content_type=resp.content_type)


async def security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """Every /ui answer (pages, static files, errors) with a strict CSP, and pages never cached."""
    if request.path == "/ui" or request.path.startswith("/ui/"):
        response.headers.update(SECURITY_HEADERS)
        if not request.path.startswith("/ui/static/"):
            response.headers["Cache-Control"] = "no-store"
