"""Message lookup, the publish form, and the live tail of this worker's attempts."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web
from yarl import URL

from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.ids import check_id

from ..api import publish_event
from .guard import Ui, see_other

TAIL_WAIT = 15.0  # s between keep-alive comments while nothing happens


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
    """Publish an event to every matching receiver; the page says how many matched."""
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
        result = await publish_event(ui.engine, body)
    return ui.render("publish.html", form=form, result=result)


async def tail_page(ui: Ui) -> web.StreamResponse:
    return ui.render("tail.html", receiver_id=ui.field("receiver_id"))


async def tail_stream(ui: Ui) -> web.StreamResponse:
    """Server-sent events: each attempt this worker logs from now on (one receiver's, if asked)."""
    only = ui.field("receiver_id")
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"})
    await response.prepare(ui.request)
    after, _ = await ui.engine.attempts_since(2**62, 0)  # from now on
    while ui.request.transport is not None and not ui.request.transport.is_closing():  # till the tab goes
        after, found = await ui.engine.attempts_since(after, TAIL_WAIT)
        lines = [f"data: {orjson.dumps(_row(a)).decode()}\n\n" for a in found
                 if not only or a["receiver_id"] == only]
        try:
            await response.write("".join(lines).encode() if lines else b": keep-alive\n\n")
        except ConnectionError:
            break
    return response


def _row(attempt: dict[str, Any]) -> dict[str, Any]:
    keep = ("receiver_id", "number", "kind", "seq", "msg_id", "attempt", "ok", "status", "error",
            "latency_ms", "at")
    return {k: attempt.get(k) for k in keep}

