"""Message lookup, the publish form, and the live tail of this worker's attempts."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
from aiohttp import web
from yarl import URL

from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.ids import check_id
from dispatcher.domain.tokens import may_see

from ..api import publish_event
from .guard import Ui, see_other, session_principal

TAIL_WAIT = 15.0  # s between keep-alive comments while nothing happens
TAIL_LIFETIME = 3600.0  # s one stream lasts at most (the browser's EventSource reconnects by itself)
# Set when the app shuts down: every open tail ends at once (an open tab must not hold the worker up).
TAIL_STOP: web.AppKey[asyncio.Event] = web.AppKey("ui_tail_stop", asyncio.Event)


async def end_tails(app: web.Application) -> None:
    """`on_shutdown`: wake and end every open tail stream now, not after its keep-alive wait."""
    app[TAIL_STOP].set()


async def lookup(ui: Ui) -> web.StreamResponse:
    """The form; with a receiver and a message id, that message's page (on the receiver's owner)."""
    rid, mid = ui.field("receiver_id"), ui.field("message_id")
    if rid and mid:
        check_id(rid, "receiver_id")
        check_id(mid, "message_id")
        return see_other(URL("/ui/receivers") / rid / "messages" / mid)
    if rid:
        check_id(rid, "receiver_id")
        return see_other(URL("/ui/receivers") / rid / "events")
    return ui.render("lookup.html", form={"receiver_id": rid, "message_id": mid})


async def publish(ui: Ui) -> web.StreamResponse:
    """Publish an event to every matching receiver; the page says how many matched (a tenant's session
    publishes its tenant's events, as its token would)."""
    form = {"event_type": ui.field("event_type"), "tenant": ui.field("tenant"),
            "payload": ui.field("payload") or "{}"}
    result = None
    if ui.request.method == "POST":
        try:
            payload = orjson.loads(form["payload"])
        except orjson.JSONDecodeError as exc:
            raise InvalidInput("payload", f"is not JSON: {exc}") from None
        body: dict[str, Any] = {"event_type": form["event_type"], "payload": payload}
        if form["tenant"]:
            body["tenant"] = form["tenant"]
        result = await publish_event(ui.engine, body, ui.principal)
    return ui.render("publish.html", form=form, result=result)


async def tail_page(ui: Ui) -> web.StreamResponse:
    return ui.render("tail.html", receiver_id=ui.field("receiver_id"))


async def tail_stream(ui: Ui) -> web.StreamResponse:
    """Server-sent events: each attempt this worker logs from now on (one receiver's, if asked),
    while the session lasts: it ends when the session expires or its tenant token is revoked."""
    only = ui.field("receiver_id")
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"})
    await response.prepare(ui.request)
    after, _ = await ui.engine.attempts_since(2**62, 0)  # from now on
    stop = ui.request.app[TAIL_STOP]
    ends = time.monotonic() + min(TAIL_LIFETIME, ui.session.expires - time.time())
    stopped = asyncio.ensure_future(stop.wait())
    waiting: asyncio.Future[tuple[int, list[dict[str, Any]]]] | None = None
    try:
        while ui.request.transport is not None and not ui.request.transport.is_closing():  # till the tab goes
            left = ends - time.monotonic()
            if stop.is_set() or left <= 0:
                break
            waiting = asyncio.ensure_future(ui.engine.attempts_since(after, min(TAIL_WAIT, left)))
            await asyncio.wait((waiting, stopped), return_when=asyncio.FIRST_COMPLETED)
            if not waiting.done():  # shutting down
                break
            after, found = waiting.result()
            if await session_principal(ui.engine, ui.session) is None:  # its token revoked or expired
                break
            lines = [f"data: {orjson.dumps(_row(a)).decode()}\n\n" for a in found
                     if (not only or a["receiver_id"] == only) and await _visible(ui, a["receiver_id"])]
            try:
                await response.write("".join(lines).encode() if lines else b": keep-alive\n\n")
            except ConnectionError:
                break
    finally:
        stopped.cancel()
        if waiting is not None:
            waiting.cancel()
    return response


async def _visible(ui: Ui, receiver_id: str) -> bool:
    """A tenant's session tails its tenant's receivers only (their tenant from the subscriptions)."""
    if ui.principal.admin:
        return True
    known, tenant = await ui.engine.receiver_tenant(receiver_id, 0.0)
    return known and may_see(ui.principal, tenant)


def _row(attempt: dict[str, Any]) -> dict[str, Any]:
    keep = ("receiver_id", "number", "kind", "seq", "msg_id", "attempt", "ok", "status", "error",
            "latency_ms", "at", "control")
    return {k: attempt.get(k) for k in keep}

