"""Per-receiver operations: state, pause/resume/enable/disable, ping, attempts, dead letters, replay.

Every handler runs on the worker that owns the receiver's partition (the
others proxy there), because that worker's table holds the receiver.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiohttp import web

from dispatcher.domain import actor
from dispatcher.domain.actor import STATUSES as STATUSES  # re-exported: web/openapi.py lists them
from dispatcher.domain.actor import ReceiverState
from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.ids import check_id, new_id
from dispatcher.domain.receiver_spec import public_view
from dispatcher.domain.records import (
    CONTROL_ACTIONS,
    Message,
    ReceiverControl,
    encode_control_record,
    encode_message_record,
)
from dispatcher.domain.webhook import iso_timestamp
from dispatcher.domain.window import parked

from .api import _json, poll_state, read_json, subscription_published, wait_applied
from .engine import ENGINE, Engine
from .routing import owner_routed, require_sure_ownership
from .scopes import not_found

MAX_LIST = 1000
MAX_REPLAY = 10_000
# Seconds a status read of an id not found waits for the owner to apply what was accepted before it.
APPLIED_WAIT = 5.0


def _receiver(engine: Engine, request: web.Request) -> ReceiverState:
    return receiver_here(engine, request.match_info["receiver_id"])


def receiver_here(engine: Engine, receiver_id: str) -> ReceiverState:
    """The receiver's state on its owner (this worker); 404 for an unknown id, 503 while it moves."""
    rid = check_id(receiver_id, "receiver_id")
    state = engine.receiver_state(rid)
    if state is None and not engine.ready():
        # Its partition is being handed over: what this worker lacks may be the next owner's.
        raise InvalidInput("receiver_id", "the owner of this receiver is moving (rebalance); retry",
                           code="unavailable", status=503)
    if state is None:
        raise not_found(rid)
    return state


def receiver_view(engine: Engine, state: ReceiverState, now: float) -> dict[str, Any]:
    """A receiver's config (without its secret) and its delivery state."""
    config = public_view(state.config, now, engine.settings.policy)
    breaker = state.breaker
    head = state.head
    latest = engine.attempts(state.receiver_id, state.attempt_no, 1)
    in_flight = engine.in_flight(state.receiver_id)
    busy, sending = in_flight.busy, in_flight.seqs
    wake = actor.next_wake(state, engine.settings.policy, busy, sending)
    behind = parked(state.window)  # key-ordered: waiting for an earlier message of their key
    return {
        **config,
        "partition": engine.partition_of(state.receiver_id),
        "state": {
            "status": actor.status(state),
            "paused": state.paused,
            "disabled": state.disabled,
            "disabled_reason": state.disabled_reason or None,
            "circuit": breaker.circuit.value,
            "consecutive_failures": breaker.consecutive,
            "failure_ratio": round(breaker.failure_ratio(), 3),
            "next_probe_at": breaker.probe_at or None,
            "next_seq": state.next_seq,
            "delivered_seq": state.delivered_seq,
            "head_seq": head,
            "head_attempts": state.attempts if head else 0,
            "next_attempt_at": state.next_attempt_at or None,
            "next_wake_at": wake,
            "backlog": state.backlog,
            "oldest_undelivered_age": round(now - state.head_accepted_at, 3)
            if head and state.head_accepted_at
            else None,
            "failing_since": state.failing_since or None,
            "in_flight": busy,
            # unordered and key-ordered receivers: the messages started and not yet settled
            "window": [
                {"seq": slot.seq, "attempts": slot.attempts, "next_attempt_at": slot.next_attempt_at or None,
                 "posting": slot.seq in sending, "behind_key": slot.seq in behind}
                for slot in state.window
            ],
            "delivered": state.delivered,
            "failed_attempts": state.failed_attempts,
            "dead_lettered": state.dead_lettered,
            "backlog_bytes": state.backlog_bytes,
            "concurrency": concurrency_view(state),
            "delivery_control": {"mode": state.config.options.delivery_control, **state.asked.view(now)},
            "heartbeat": heartbeat_view(state, busy),
            "lane": state.health.view(),
            "last_response": latest[0] if latest else None,
        },
    }


def concurrency_view(state: ReceiverState) -> dict[str, Any] | None:
    """An unordered receiver's in-flight window (None for an ordered one: one at a time)."""
    options = state.config.options
    if options.ordered:
        return None
    view = state.congestion.view(options.max_in_flight, options.concurrency)
    view["window"] = state.in_flight_limit  # what the receiver asked for caps it too
    return view


def heartbeat_view(state: ReceiverState, busy: bool) -> dict[str, Any] | None:
    interval = state.config.options.heartbeat_interval
    if not interval:
        return None
    due = None if busy else actor.heartbeat_due(state)
    return {"interval": interval, "sent": state.heartbeats, "last_at": state.heartbeat_at or None,
            "next_at": due}


@owner_routed
async def get_receiver(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    return _json(receiver_view(engine, _receiver(engine, request), time.time()))


@owner_routed
async def delete_receiver(request: web.Request) -> web.Response:
    """Delete a receiver: its backlog is dead-lettered (`receiver_deleted`), then everything goes.

    200 once it is gone; 202 while a big backlog is still being dead-lettered.
    """
    engine = request.app[ENGINE]
    body, status = await delete(engine, _receiver(engine, request))
    return _json(body, status=status)


async def delete(engine: Engine, state: ReceiverState) -> tuple[dict[str, Any], int]:
    """Delete the receiver (the API's and the UI's): the answer's body and status (200 gone, 202 deleting)."""
    rid = state.receiver_id
    if not state.deleting:
        await engine.produce_commands([(rid, encode_control_record(ReceiverControl("delete")))])
    _, current = await poll_state(engine, rid, lambda s: s is None)
    if current is None:
        await subscription_published(engine, rid)  # an event published next passes it by
        return {"id": rid, "deleted": True, "dead_lettered": state.backlog}, 200
    return {"id": rid, "deleted": False, "status": "deleting", "backlog": current.backlog}, 202


@owner_routed
async def reset_state(request: web.Request) -> web.Response:
    """`?confirm=reset`: dead-letter the backlog (`state_reset`), then start afresh (for testing).

    Counters, circuit, lane, attempt log and kept settled messages go; dead letters
    stay, the reset's own included (without one, a settled message reads delivered);
    the config stays and seqs carry on, so a message id is never given a second seq.
    """
    engine = request.app[ENGINE]
    state = _receiver(engine, request)
    if request.query.get("confirm") != "reset":
        raise InvalidInput("confirm", "must be 'reset': this drops the receiver's backlog and history")
    rid = state.receiver_id
    if state.deleting:
        raise InvalidInput("receiver_id", "is being deleted", code="conflict", status=409)
    if not state.resetting:
        await engine.produce_commands([(rid, encode_control_record(ReceiverControl("reset")))])
    def afresh(current: ReceiverState | None) -> bool:
        return current is not None and not current.resetting and current.active_since > state.active_since

    done, current = await poll_state(engine, rid, afresh)
    if done and current is not None:
        return _json(receiver_view(engine, current, time.time())["state"])
    return _json({"receiver_id": rid, "status": "resetting"}, status=202)


@owner_routed
async def get_state(request: web.Request) -> web.Response:
    """The actor's live state, read on the worker that owns the receiver (`owner` names it)."""
    engine = request.app[ENGINE]
    view = receiver_view(engine, _receiver(engine, request), time.time())
    owner = str(engine.own_url())
    return _json({"receiver_id": view["id"], "partition": view["partition"], "owner": owner, **view["state"]})


@owner_routed
async def events_after(request: web.Request) -> web.Response:
    """Catch-up: the receiver's messages above `after_seq`, settled ones kept `DISPATCHER_RETAIN_SECONDS`.

    Each has the body fields a delivery carries (`seq`, `id`, `type`, `timestamp`,
    `data`) and its `status`: pending, delivered or dead_lettered.
    """
    engine = request.app[ENGINE]
    state = _receiver(engine, request)
    after = _int_param(request, "after_seq", 0, 0, 2**62)
    limit = _int_param(request, "limit", 100, 1, MAX_LIST)
    return _json(events_view(engine, state.receiver_id, after, limit))


def events_view(engine: Engine, rid: str, after: int, limit: int) -> dict[str, Any]:
    """The catch-up answer: up to `limit` of the receiver's messages above seq `after`."""
    found = engine.messages_after(rid, after, limit)
    events = []
    for entry, settled_at in found:
        seq = entry["seq"]
        if settled_at is None:
            status = "pending"
        elif engine.dead_letter(rid, seq) is not None:
            status = "dead_lettered"
        elif engine.superseded_by(rid, seq):
            status = "superseded"
        else:  # or cancelled by the receiver's transform: settled, never posted
            status = "cancelled" if engine.message_cancelled(rid, entry["id"]) else "delivered"
        when = iso_timestamp(entry["accepted_at"])
        events.append({"seq": seq, "id": entry["id"], "type": entry["type"], "timestamp": when,
                       "data": entry["data"], "status": status, "settled_at": settled_at})
    next_after = events[-1]["seq"] if len(events) == limit else None
    retained = engine.settings.policy.retain
    return {"events": events, "next_after_seq": next_after, "retained_seconds": retained}


@owner_routed
async def message_status(request: web.Request) -> web.Response:
    """`pending`, `delivered` or `dead_lettered`, with its seq, for a message id within the dedup window;
    `filtered` (no seq) for one the receiver's content filter refused.

    An id not found yet may be accepted and not applied: it is looked up again once this owner has
    applied the receiver's requests up to their end (at most `APPLIED_WAIT`), and only then unknown.
    """
    engine = request.app[ENGINE]
    match = request.match_info
    return _json(await message_view(engine, match["receiver_id"], match["message_id"]))


async def message_view(engine: Engine, receiver_id: str, message_id: str) -> dict[str, Any]:
    """A message's status answer (the API's and the UI's), on the receiver's owner."""
    msg_id = check_id(message_id, "message_id")
    state, seq = await accepted_seq(engine, receiver_id, msg_id)
    rid = state.receiver_id
    if seq == FILTERED_SEQ:
        return {"id": msg_id, "receiver_id": rid, "seq": None, "status": "filtered"}
    body: dict[str, Any] = {"id": msg_id, "receiver_id": rid, "seq": seq}
    entry = engine.backlog_entry(rid, seq)
    if entry is not None and entry.get("time_note"):
        body["time_note"] = entry["time_note"]  # the producer's accepted_at was not used, and why
    if engine.is_pending(rid, seq):
        window = {slot.seq: slot for slot in state.window}
        attempts = window[seq].attempts if seq in window else (state.attempts if seq == state.head else 0)
        return {**body, "status": "pending", "attempts": attempts}
    letter = engine.dead_letter(rid, seq)
    if letter is not None:
        reason = {k: letter[k] for k in ("reason", "detail", "at")}
        return {**body, "status": "dead_lettered", **reason}
    by = engine.superseded_by(rid, seq)
    if by:
        return {**body, "status": "superseded", "superseded_by": by}
    if engine.message_cancelled(rid, msg_id):
        return {**body, "status": "cancelled"}  # by the receiver's transform: settled, never posted
    return {**body, "status": "delivered"}


async def accepted_seq(engine: Engine, receiver_id: str, msg_id: str) -> tuple[ReceiverState, int]:
    """The receiver's state and the seq it gave `msg_id`; 404 only once every message accepted before
    this request is applied (503 if that is not sure within `APPLIED_WAIT`)."""
    state = receiver_here(engine, receiver_id)
    seq = _seq_of(engine, state, msg_id)
    if seq is None:
        if not await engine.requests_applied(state.receiver_id, wait=APPLIED_WAIT):
            raise InvalidInput("message_id", "this receiver's owner has not applied its latest messages "
                               "yet (it is behind, or moving); retry", code="unavailable", status=503)
        state = receiver_here(engine, receiver_id)
        seq = _seq_of(engine, state, msg_id)
    if seq is None:
        why = "not known (never accepted, or older than the dedup window)"
        raise InvalidInput("message_id", why, code="not_found", status=404)
    return state, seq


FILTERED_SEQ = 0  # the dedup entry of a message the receiver's filter refused (seqs start at 1)


def _seq_of(engine: Engine, state: ReceiverState, msg_id: str) -> int | None:
    """The seq the receiver gave `msg_id`, once its state has moved past it (within the dedup window)."""
    seq = engine.seen_seq(state.receiver_id, msg_id, time.time())
    return None if seq is None or seq >= state.next_seq else seq


# What a control record changes, to know when the owner has applied it.
APPLIED: dict[str, Callable[[ReceiverState], bool]] = {
    "pause": lambda s: s.paused,
    "resume": lambda s: not s.paused,
    "enable": lambda s: not s.disabled,
    "disable": lambda s: s.disabled,
}


async def apply_control(engine: Engine, receiver_id: str, action: str, reason: str = "") -> ReceiverState:
    """Pause, resume, enable or disable through the receiver's stream; the state once applied."""
    record = encode_control_record(ReceiverControl(action, reason))
    await engine.produce_commands([(receiver_id, record)])
    return await wait_applied(engine, receiver_id, APPLIED[action])


def control_handler(action: str) -> Callable[[web.Request], Any]:
    """POST /v1/receivers/{id}/<action>: applied by the receiver's stream; answers when applied."""
    assert action in CONTROL_ACTIONS

    @owner_routed
    async def control(request: web.Request) -> web.Response:
        engine = request.app[ENGINE]
        state = _receiver(engine, request)
        reason = ""
        if request.can_read_body:
            body = await read_json(request)
            if not isinstance(body, dict):
                raise InvalidInput("body", "must be a JSON object")
            reason = body.get("reason", "")
            if not isinstance(reason, str) or len(reason) > 500:
                raise InvalidInput("reason", "must be a string of at most 500 characters")
        state = await apply_control(engine, state.receiver_id, action, reason)
        return _json(receiver_view(engine, state, time.time()))

    return control


@owner_routed
async def ping(request: web.Request) -> web.Response:
    """Send a `webhook.ping` now and answer with the receiver's response."""
    engine = request.app[ENGINE]
    return _json(await ping_receiver(engine, _receiver(engine, request)))


async def ping_receiver(engine: Engine, state: ReceiverState) -> dict[str, Any]:
    """POST a `webhook.ping` now; the receiver's answer (the API's and the UI's)."""
    require_sure_ownership(engine, state.receiver_id)
    outcome = await engine.ping(state.receiver_id, state.config)
    return {
        "ok": outcome.ok,
        "status": outcome.status,
        "error": outcome.error,
        "latency_ms": round(outcome.latency_ms, 3),
        "headers": outcome.headers,
        "body_prefix": outcome.body_prefix,
    }


@owner_routed
async def attempts(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    state = _receiver(engine, request)
    limit = _int_param(request, "limit", 50, 1, MAX_LIST)
    return _json({"attempts": engine.attempts(state.receiver_id, state.attempt_no, limit)})


@owner_routed
async def last_response(request: web.Request) -> web.Response:
    """The newest attempt; 404 `no_attempt` for a receiver that has had none (`not_found`: no receiver)."""
    engine = request.app[ENGINE]
    state = _receiver(engine, request)
    latest = engine.attempts(state.receiver_id, state.attempt_no, 1)
    if not latest:  # the receiver exists: its own code, so callers do not take it for an unknown id
        raise InvalidInput("receiver_id", "no attempt yet", code="no_attempt", status=404)
    return _json(latest[0])


@owner_routed
async def dead_letters(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    state = _receiver(engine, request)
    after = _int_param(request, "after_seq", 0, 0, 2**62)
    limit = _int_param(request, "limit", 100, 1, MAX_LIST)
    rid = state.receiver_id
    found = engine.dead_letters(rid, after, limit)
    return _json(
        {"dead_letters": found, "next_after_seq": found[-1]["seq"] if len(found) == limit else None}
    )


@owner_routed
async def replay(request: web.Request) -> web.Response:
    """Re-enqueue dead letters as new messages (new ids, new seqs) that name the seq they replay.

    Body: `{}` (all), `{"from_seq", "to_seq"}` or `{"since", "until"}` (dead-letter
    time, epoch seconds); `limit` caps one call (default and max 10,000).
    """
    engine = request.app[ENGINE]
    state = _receiver(engine, request)
    body = await read_json(request) if request.can_read_body else {}
    return _json(await replay_letters(engine, state.receiver_id, body), status=202)


async def replay_letters(engine: Engine, rid: str, body: object) -> dict[str, Any]:
    """Replay the dead letters `body` picks (see `replay`); what was replayed and skipped."""
    pick, limit = _replay_filter(body)
    chosen: list[dict[str, Any]] = []
    after = 0
    while len(chosen) < limit:
        page = engine.dead_letters(rid, after, MAX_LIST)
        chosen += [letter for letter in page if pick(letter)][: limit - len(chosen)]
        if len(page) < MAX_LIST:
            break
        after = page[-1]["seq"]
    done = await requeue(engine, rid, chosen)
    return {"replayed": len(done["messages"]), **done}


async def requeue(engine: Engine, rid: str, letters: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Send dead letters again as new messages naming the seq they copy (replay and recover);
    `{"messages": [{"replay_of", "original_id", "id"}], "skipped_seqs"}` once Kafka has them."""
    now = time.time()
    records, sent, skipped = [], [], []
    for letter in letters:
        original = _whole(engine, rid, letter)
        if original is None:  # nothing whole to send again (a copy without its data would read as delivered)
            skipped.append(letter["seq"])
            continue
        msg = Message(
            new_id("msg"), rid, original["type"], original["data"], original.get("headers") or {},
            now, letter["seq"], ordering_key=original.get("ordering_key") or "",
        )
        records.append((rid, encode_message_record(msg)))
        sent.append({"replay_of": letter["seq"], "original_id": letter["msg_id"], "id": msg.id})
    await engine.produce_requests(records)
    return {"messages": sent, "skipped_seqs": skipped}


def _whole(engine: Engine, rid: str, letter: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The letter's message whole: as the letter keeps it, or, where the letter kept only a summary
    of data over its cap (512 KiB), the receiver's own copy while it is kept (`DISPATCHER_RETAIN_SECONDS`).
    None: its backlog entry was lost, or the data is no longer kept anywhere."""
    original = letter["message"]
    if not original.get("type"):
        return None
    if "data_summary" not in original:
        return original
    kept = engine.backlog_entry(rid, letter["seq"])
    return kept if kept is not None and kept.get("id") == letter["msg_id"] and "data" in kept else None


def _replay_filter(body: object) -> tuple[Callable[[dict[str, Any]], bool], int]:
    if not isinstance(body, dict):
        raise InvalidInput("body", "must be a JSON object")
    for key in body:
        if key not in ("from_seq", "to_seq", "since", "until", "limit"):
            raise InvalidInput(str(key), "is not a known field")
    lo_seq = _number(body, "from_seq", 0)
    hi_seq = _number(body, "to_seq", float("inf"))
    since = _number(body, "since", 0)
    until = _number(body, "until", float("inf"))
    limit = int(_number(body, "limit", MAX_REPLAY))
    if not 1 <= limit <= MAX_REPLAY:
        raise InvalidInput("limit", f"must be 1..{MAX_REPLAY}")
    if lo_seq > hi_seq:
        raise InvalidInput("to_seq", "must not be below from_seq")
    if since > until:
        raise InvalidInput("until", "must not be before since")

    def pick(letter: dict[str, Any]) -> bool:
        seq: int = letter["seq"]
        at: float = letter["at"]
        return lo_seq <= seq <= hi_seq and since <= at <= until

    return pick, limit


def _number(body: dict[str, Any], name: str, default: float) -> float:
    value = body.get(name, default)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        raise InvalidInput(name, "must be a non-negative number")
    return value


def _int_param(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    # ASCII digits only: int() also takes "1_000", " 12 " and other scripts' digits ("١٢")
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 20):
        raise InvalidInput(name, f"must be an integer {low}..{high}")
    value = int(raw)
    if not low <= value <= high:
        raise InvalidInput(name, f"must be an integer {low}..{high}")
    return value
