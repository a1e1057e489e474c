"""Resend a delivered message and recover dead letters by time (what Svix users know).

Both send a copy as a new message at the end of the receiver's backlog: a new
id (webhook-id) and the next seq, so seqs stay contiguous and order holds,
with `replay_of` (header `webhook-replay-of`) naming the seq it copies. Both
run on the receiver's owner and answer once the copies are acked by Kafka.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.ids import check_id, new_id
from dispatcher.domain.records import Message, encode_message_record
from dispatcher.domain.recover import RecoverRequest, parse_recover, recover_page

from .api import _json, read_json
from .engine import ENGINE, Engine
from .receiver_ops import (
    APPLIED_WAIT,
    FILTERED_SEQ,
    MAX_LIST,
    MAX_REPLAY,
    accepted_seq,
    receiver_here,
    requeue,
)
from .routing import owner_routed

MAX_SCAN = 10 * MAX_LIST  # dead letters one recover call reads at most, matching or not


@owner_routed
async def resend(request: web.Request) -> web.Response:
    """Send a delivered message again (kept `DISPATCHER_RETAIN_SECONDS`) as a new message.

    Body (optional): `{"id"}`, the new message's id, so a retried call is not sent twice.
    """
    engine = request.app[ENGINE]
    body = await read_json(request, required=False) if request.can_read_body else None
    new_msg_id = _resend_id(body)
    msg_id = check_id(request.match_info["message_id"], "message_id")
    state, seq = await accepted_seq(engine, request.match_info["receiver_id"], msg_id)
    rid = state.receiver_id
    entry = delivered_entry(engine, rid, seq)
    if _id_given(body):
        await _check_free(engine, rid, new_msg_id, seq)
    msg = Message(new_msg_id, rid, entry["type"], entry["data"], entry.get("headers") or {}, time.time(), seq,
                  ordering_key=entry.get("ordering_key") or "")
    await engine.produce_requests([(rid, encode_message_record(msg))])
    answer = {"id": msg.id, "receiver_id": rid, "resend_of": {"id": msg_id, "seq": seq}}
    return _json(answer, status=202)


def _resend_id(body: object) -> str:
    if body is None:
        return new_id("msg")
    if not isinstance(body, dict):
        raise InvalidInput("body", "must be a JSON object")
    for key in body:
        if key != "id":
            raise InvalidInput(str(key), "is not a known field")
    return new_id("msg") if body.get("id") is None else check_id(body["id"], "id")


def _id_given(body: object) -> bool:
    return isinstance(body, dict) and body.get("id") is not None


async def _check_free(engine: Engine, rid: str, new_msg_id: str, seq: int) -> None:
    """The id asked for the copy must be new on the receiver, or a kept copy's of `seq` (a retried
    call): another message's id would make the copy its duplicate, answered 202 and never sent.

    Checked once every message accepted before the call is applied (a send of that id just before
    counts). Two calls at once with one id for copies of different messages can still race: the
    second is then its duplicate, as two sends of one id are."""
    if not await engine.requests_applied(rid, wait=APPLIED_WAIT):
        raise InvalidInput("id", "this receiver's owner has not applied its latest messages yet "
                           "(it is behind, or moving); retry", code="unavailable", status=503)
    taken = engine.seen_seq(rid, new_msg_id, time.time())
    if taken is None:
        return
    entry = engine.backlog_entry(rid, taken) if taken > 0 else None
    if entry is None or entry.get("replay_of") != seq:  # another message's, or one no longer kept
        raise InvalidInput("id", f"is already the id of seq {taken} of this receiver: give the copy a new "
                           "one, or none", code="conflict", status=409)


def delivered_entry(engine: Engine, rid: str, seq: int) -> Mapping[str, Any]:
    """The kept copy of delivered message `seq`; 409 if it was not delivered, 410 if no longer kept."""
    if seq == FILTERED_SEQ:
        raise _not_delivered("the receiver's filter refused it: it was never delivered")
    if engine.is_pending(rid, seq):
        raise _not_delivered(f"seq {seq} is still pending: it has not been delivered yet")
    if engine.dead_letter(rid, seq) is not None:
        raise _not_delivered(f"seq {seq} was dead-lettered, not delivered: recover or replay it")
    by = engine.superseded_by(rid, seq)
    if by:
        raise _not_delivered(f"seq {seq} was superseded by seq {by} of its ordering key: never delivered")
    found = engine.messages_after(rid, seq - 1, 1)
    if not found or found[0][0].get("seq") != seq or not found[0][0].get("type"):
        retain = engine.settings.policy.retain
        raise InvalidInput("message_id", f"seq {seq} was delivered and is no longer kept "
                           f"(DISPATCHER_RETAIN_SECONDS={retain:g})", code="expired", status=410)
    return found[0][0]


def _not_delivered(why: str) -> InvalidInput:
    return InvalidInput("message_id", why, code="not_delivered", status=409)


@owner_routed
async def recover(request: web.Request) -> web.Response:
    """Send again the dead letters of a time window, one bounded page per call.

    Body: `{"since", "until"?, "after_seq"?, "limit"?}`; times are unix seconds or RFC 3339,
    `until` defaults to now. The answer's `next_after_seq` and `until` continue the recovery.
    """
    engine = request.app[ENGINE]
    rid = receiver_here(engine, request.match_info["receiver_id"]).receiver_id
    ask = parse_recover(await read_json(request), time.time(), MAX_REPLAY)
    chosen, scanned, next_after = _recover_page(engine, rid, ask)
    done = await requeue(engine, rid, chosen)
    answer = {"recovered": len(done["messages"]), **done, "scanned": scanned,
              "next_after_seq": next_after, "since": ask.since, "until": ask.until}
    return _json(answer, status=202)


def _recover_page(
    engine: Engine, rid: str, ask: RecoverRequest
) -> tuple[list[Mapping[str, Any]], int, int | None]:
    """The page's dead letters, how many were read, and the cursor (None: done)."""
    letters: list[dict[str, Any]] = []
    after = ask.after_seq
    while True:
        page = engine.dead_letters(rid, after, MAX_LIST)
        letters += page
        more = len(page) == MAX_LIST
        chosen, next_after = recover_page(letters, ask, more)
        if not more or len(chosen) == ask.limit or len(letters) >= MAX_SCAN:
            return chosen, len(letters), next_after
        after = page[-1]["seq"]

