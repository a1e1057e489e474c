"""One receiver's page and its actions, answered by its owner (`page(..., owned=True)`), each through
the function its API call uses."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import orjson
from aiohttp import web
from yarl import URL

from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.ids import check_id

from ..api import accept_message
from ..receiver_ops import (
    apply_control,
    delete,
    events_view,
    message_view,
    ping_receiver,
    receiver_here,
    receiver_view,
    replay_letters,
)
from ..receiver_security import rotate_with, verify_again
from .charts import sparkline
from .guard import Ui, int_field, number_field, see_other

ATTEMPTS_SHOWN = 50
EVENTS_PAGE = 50
SEARCH_READ = 1000  # messages a payload search reads for one page
SEARCH_BYTES = 8 * 2**20  # payload JSON a search examines for one page; then it stops with a cursor
LETTERS_SHOWN = 100
NOTICES = {  # what `?done=` may say after an action (never text from the request)
    "pause": "Paused: new messages are held until you resume.",
    "resume": "Resumed: held messages are delivered in order.",
    "disable": "Disabled.", "enable": "Enabled.",
    "verify": "Verification ran; see its result below.",
}


def _rid(ui: Ui) -> str:
    return ui.request.match_info["receiver_id"]


async def receiver_page(ui: Ui, **extra: Any) -> web.Response:
    """Config (no secrets), live state, last response, attempt log with its sparkline, dead letters."""
    engine, now = ui.engine, time.time()
    state = receiver_here(engine, _rid(ui))
    view = receiver_view(engine, state, now)
    attempts = engine.attempts(state.receiver_id, state.attempt_no, ATTEMPTS_SHOWN)
    letters = engine.dead_letters(state.receiver_id, 0, LETTERS_SHOWN)
    notice = NOTICES.get(ui.request.query.get("done", ""), "")
    extra.update(_outcome_of(ui.request.query))
    return ui.render(
        "receiver.html", r=view, s=view["state"], attempts=attempts, bars=sparkline(attempts[::-1]),
        letters=letters, notice=notice, now=now, **extra,
    )


def _outcome_of(query: Any) -> dict[str, Any]:
    """What a redirected action reported (POST, then GET: a reload never repeats it), checked."""
    done = query.get("done", "")
    if done == "sent":
        return {"sent": {"id": check_id(query.get("message_id", ""), "message_id")}}
    if done == "replayed":
        return {"replayed": {"replayed": int_field(query.get("count", "0"), "count"),
                             "skipped": int_field(query.get("skipped", "0"), "skipped")}}
    return {}


async def control(ui: Ui) -> web.StreamResponse:
    action = ui.request.match_info["action"]
    if action not in ("pause", "resume", "enable", "disable"):
        raise InvalidInput("action", "must be pause, resume, enable or disable", code="not_found", status=404)
    state = receiver_here(ui.engine, _rid(ui))
    await apply_control(ui.engine, state.receiver_id, action, ui.field("reason")[:500])
    return _back(ui, action)


def _back(ui: Ui, done: str, **facts: str | int) -> web.Response:
    return see_other(URL(f"/ui/receivers/{_rid(ui)}").with_query(done=done, **facts))


async def ping(ui: Ui) -> web.StreamResponse:
    """Ping now and show the answer on the page."""
    answer = await ping_receiver(ui.engine, receiver_here(ui.engine, _rid(ui)))
    return await receiver_page(ui, ping=answer)


async def verify(ui: Ui) -> web.StreamResponse:
    await verify_again(ui.engine, receiver_here(ui.engine, _rid(ui)).config)
    return _back(ui, "verify")


async def rotate(ui: Ui) -> web.StreamResponse:
    """Rotate and show the new secret this once (a page never cached, never shown again)."""
    config = receiver_here(ui.engine, _rid(ui)).config
    body: dict[str, Any] = {}
    if ui.field("grace_seconds"):
        body["grace_seconds"] = number_field(ui.field("grace_seconds"), "grace_seconds")
    answer = await rotate_with(ui.engine, config, body)
    return ui.render("secret.html", r=answer, secret=answer.get("secret") or answer.get("public_key", ""))


async def send_test(ui: Ui) -> web.StreamResponse:
    """Send a message of the given event type and JSON payload; the page shows its id."""
    try:
        payload = orjson.loads(ui.field("payload") or "{}")
    except orjson.JSONDecodeError as exc:
        raise InvalidInput("payload", f"is not JSON: {exc}") from None
    event_type = ui.field("event_type") or "webhook.test"
    body = {"receiver_id": _rid(ui), "event_type": event_type, "payload": payload}
    sent = await accept_message(ui.engine, body, ui.principal)
    return _back(ui, "sent", message_id=sent["id"])


async def replay(ui: Ui) -> web.StreamResponse:
    """Replay every dead letter, a seq range, or those since a time (UTC, from the form)."""
    body: dict[str, Any] = {}
    which = ui.field("which", "all")
    if which == "range":
        body = {"from_seq": int_field(ui.field("from_seq"), "from_seq"),
                "to_seq": int_field(ui.field("to_seq"), "to_seq")}
    elif which == "since":
        body = {"since": _since(ui.field("since"))}
    rid = receiver_here(ui.engine, _rid(ui)).receiver_id
    answer = await replay_letters(ui.engine, rid, body)
    return _back(ui, "replayed", count=answer["replayed"], skipped=len(answer["skipped_seqs"]))


async def delete_receiver(ui: Ui) -> web.StreamResponse:
    """Delete once the id is typed again."""
    state = receiver_here(ui.engine, _rid(ui))
    if ui.field("confirm") != state.receiver_id:
        raise InvalidInput("confirm", "type the receiver's id to delete it")
    answer, _ = await delete(ui.engine, state)
    return ui.render("deleted.html", answer=answer)


async def message(ui: Ui) -> web.StreamResponse:
    """A message's status, seq, payload (while kept) and its attempts still in the log, oldest first."""
    rid = _rid(ui)
    found = await message_view(ui.engine, rid, ui.request.match_info["message_id"])
    seq = found["seq"]  # None: filtered, never stored nor attempted
    entry = ui.engine.backlog_entry(rid, seq) if seq is not None else None
    payload = orjson.dumps(entry["data"], option=orjson.OPT_INDENT_2).decode() if entry else None
    state = receiver_here(ui.engine, rid)
    logged = ui.engine.attempts(rid, state.attempt_no, ATTEMPTS_SHOWN) if seq is not None else []
    timeline = [a for a in reversed(logged) if a.get("msg_id") == found["id"]
                or (a.get("seq") and a["seq"] <= seq <= (a.get("last") or a["seq"]))]
    return ui.render("message.html", m=found, payload=payload, entry=entry, timeline=timeline)


async def events(ui: Ui) -> web.StreamResponse:
    """The catch-up browser: messages after a seq, a page at a time; `q` keeps those whose type or
    payload holds the text (any case), reading at most `SEARCH_READ` messages and `SEARCH_BYTES` of
    payload JSON a page (then the page says where it stopped and links on), yielding between pages."""
    after = int_field(ui.field("after_seq") or "0", "after_seq")
    text = ui.field("q")[:200]
    rid = receiver_here(ui.engine, _rid(ui)).receiver_id
    shown: list[dict[str, Any]] = []
    examined, read_bytes, stopped = 0, 0, 0
    found = events_view(ui.engine, rid, after, EVENTS_PAGE)
    next_after = found["next_after_seq"]
    for page_no in range(SEARCH_READ // EVENTS_PAGE):
        if page_no:
            await asyncio.sleep(0)  # a long search must not hold the event loop
            found = events_view(ui.engine, rid, next_after, EVENTS_PAGE)
            next_after = found["next_after_seq"]
        for event in found["events"]:
            raw = orjson.dumps(event["data"])
            event["data_json"] = raw.decode()
            examined += 1
            read_bytes += len(raw)
            if not text or text.lower() in (event["type"] + event["data_json"]).lower():
                shown.append(event)
            if text and read_bytes >= SEARCH_BYTES and event is not found["events"][-1]:
                stopped, next_after = examined, event["seq"]  # go on from here
                break
        if stopped or not text or len(shown) >= EVENTS_PAGE or next_after is None:
            break
        if read_bytes >= SEARCH_BYTES:
            stopped = examined
            break
    return ui.render("events.html", rid=rid, found={**found, "events": shown, "next_after_seq": next_after},
                     after=after, q=text, stopped=stopped)


def _since(text: str) -> float:
    """A `datetime-local` value (read as UTC), or epoch seconds."""
    try:
        return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return number_field(text, "since")
