"""Records on the topics and in the actor table: their types, and their bytes both ways.

Requests topic (key = receiver id, value = JSON object), written by the API or
directly by producers; it carries messages only:
    {"kind": "message", "id"?, "event_type", "payload", "headers"?, "accepted_at"?}
Commands topic (key = receiver id), written by workers only (the API's
configuration and control, delivery outcomes, timer wakes):
    {"kind": "receiver.upsert", "receiver": {...}}
    {"kind": "receiver.control", "action", "reason"}
    {"kind": "outcome", ...} | {"kind": "wake"}
A configuration record on the requests topic is refused (`forbidden_record`):
whoever may enqueue messages must not be able to reroute or delete a receiver.
The checks of single field values are `field_checks.py`'s (re-exported here).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from .delivery_options import DeliveryOptions
from .errors import InvalidInput
from .field_checks import (
    MAX_PAYLOAD_DEPTH,
    MAX_URL_LEN,
    check_depth,
    check_event_type,
    check_url,
    reject_unknown,
)
from .filters import Filter, compile_filter
from .filters import document as filter_document
from .headers import check_headers
from .ids import check_id
from .ordering_keys import check_ordering_key
from .plain import json_to_keep
from .receiver_auth import ReceiverAuth, ServerTls, auth_from_dict, tls_from_dict
from .record_seal import without_unvouched_claims
from .untrusted import producer_time

__all__ = [  # the checks are re-exported: callers import them from here
    "CONTROL_ACTIONS", "FORBIDDEN_ON_REQUESTS", "MAX_PAYLOAD_DEPTH", "MAX_URL_LEN", "WAKE_RECORD", "Command",
    "Message", "Outcome", "ReceiverConfig", "ReceiverControl", "ReceiverUpsert", "Verification",
    "check_depth", "check_event_type", "check_url", "decode_command", "decode_request",
    "encode_backlog_entry", "encode_control_record", "encode_message_record", "encode_outcome",
    "encode_upsert_record", "json_to_keep", "parse_message_spec", "reject_unknown",
]


@dataclass(slots=True, frozen=True)
class Message:
    """One message addressed to one receiver, as accepted."""

    id: str
    receiver_id: str
    event_type: str
    payload: Any
    headers: dict[str, str] = field(default_factory=dict)
    accepted_at: float = 0.0
    replay_of: int | None = None  # the dead-lettered seq this message replays
    from_event: bool = False  # a fan-out copy: its receiver takes it only if created before the event
    time_note: str = ""  # why the producer's accepted_at was not used (the broker's time was)
    traceparent: str = ""  # W3C trace context it arrived with (a Kafka header), for its delivery spans
    ordering_key: str = ""  # a key-ordered receiver keeps messages of one key in order (ordering_keys.py)


@dataclass(slots=True, frozen=True)
class Verification:
    """The endpoint-verification handshake's last result for one URL."""

    status: str  # "passed" or "failed"
    url: str
    at: float
    reason: str = ""


@dataclass(slots=True, frozen=True)
class ReceiverConfig:
    """What delivery needs to know about a receiver."""

    id: str
    url: str
    secret: str = field(repr=False)  # `whsec_` (HMAC) or `whsk_` (ed25519); never shown, nor in a repr
    event_types: tuple[str, ...] = ()
    headers: dict[str, str] = field(default_factory=dict, repr=False)  # may carry credentials
    created_at: float = 0.0
    retry: dict[str, Any] | None = None  # validated overrides of the retry policy
    previous_secrets: tuple[tuple[str, float], ...] = field(default=(), repr=False)  # (secret, signs until)
    authorization: str = field(default="", repr=False)  # an Authorization header value the receiver asked for
    verify: bool = False  # hold deliveries until the URL passes the verification handshake
    verification: Verification | None = None
    options: DeliveryOptions = field(default_factory=DeliveryOptions)
    tenant: str | None = None  # set: the receiver gets only this tenant's events
    filter: dict[str, Any] | None = None  # a content filter (filters.py), validated; None: every message
    auth: ReceiverAuth | None = field(default=None, repr=False)  # mTLS or OAuth2 (receiver_auth.py); secret
    tls: ServerTls | None = None  # the CA the receiver's server certificate must chain to (receiver_auth.py)
    transform: dict[str, Any] | None = None  # a json-e template (transform.py), validated; None: as sent
    # as_dict's JSON, made once: the state that holds the config is written twice per delivery
    _json: orjson.Fragment | None = field(default=None, init=False, repr=False, compare=False)
    _filter: Filter | None = field(default=None, init=False, repr=False, compare=False)  # compiled once

    def as_json(self) -> orjson.Fragment:
        """`as_dict` as JSON to embed in a larger document (the config is immutable)."""
        cached = getattr(self, "_json", None)  # `evolve` leaves the slot unset
        if cached is None:
            cached = orjson.Fragment(json_to_keep(self.as_dict()))
            object.__setattr__(self, "_json", cached)
        return cached

    def accepts(self, message: Message) -> bool:
        """The receiver's filter (if any) takes this message."""
        if self.filter is None:
            return True
        compiled = getattr(self, "_filter", None)  # `evolve` leaves the slot unset
        if compiled is None:
            compiled = compile_filter(self.filter, accept_invalid=True)
            object.__setattr__(self, "_filter", compiled)
        return compiled.accepts(filter_document(message.event_type, message.payload, message.headers))

    def active_secrets(self, now: float) -> list[str]:
        """The secrets that sign a request made at `now`: the current one first."""
        return [self.secret] + [s for s, until in self.previous_secrets if until > now]

    @property
    def verified(self) -> bool:
        """Deliveries may go: no handshake asked for, or the current URL passed it."""
        v = self.verification
        return not self.verify or (v is not None and v.status == "passed" and v.url == self.url)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "url": self.url,
            "secret": self.secret,
            "event_types": list(self.event_types),
            "headers": self.headers,
            "created_at": self.created_at,
            "retry": self.retry,
            "previous_secrets": [list(p) for p in self.previous_secrets],
            "authorization": self.authorization,
            "verify": self.verify,
            "verification": asdict(self.verification) if self.verification else None,
            "tenant": self.tenant,
            "filter": self.filter,
            **({"auth": self.auth.as_dict()} if self.auth is not None else {}),
            **({"tls": self.tls.as_dict()} if self.tls is not None else {}),
            **({"transform": self.transform} if self.transform is not None else {}),
            **self.options.as_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReceiverConfig:
        verification = data.get("verification")
        return cls(
            id=data["id"],
            url=data["url"],
            secret=data["secret"],
            event_types=tuple(data.get("event_types") or ()),
            headers=data.get("headers") or {},
            created_at=data.get("created_at", 0.0),
            retry=data.get("retry"),
            previous_secrets=tuple((s, float(t)) for s, t in data.get("previous_secrets") or ()),
            authorization=data.get("authorization") or "",
            verify=bool(data.get("verify", False)),
            verification=Verification(**verification) if verification else None,
            options=DeliveryOptions.from_dict(data),  # takes only its own fields
            tenant=data.get("tenant"),
            filter=data.get("filter"),
            auth=auth_from_dict(data.get("auth")),
            tls=tls_from_dict(data.get("tls")),
            transform=data.get("transform"),
        )


@dataclass(slots=True, frozen=True)
class Outcome:
    """The result of one delivery attempt, sent back to the actor."""

    seq: int
    msg_id: str
    token: str
    ok: bool
    status: int | None
    error: str | None
    latency_ms: float
    at: float
    body_prefix: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    attempt: int = 0  # which attempt of the seq (or which probe) this answers
    probe: bool = False  # a webhook.ping, not a message (seq is 0)
    manual: bool = False  # a ping asked for through the API
    last: int = 0  # the last seq a batch carried (0: `seq` alone)
    heartbeat: bool = False  # a webhook.heartbeat (seq 0; `attempt` is its number)
    transform: str = ""  # the receiver's transform "cancelled" the message, or failed ("error"): no POST


@dataclass(slots=True, frozen=True)
class ReceiverControl:
    """`pause`, `resume`, `enable` or `disable` a receiver (written by the API)."""

    action: str
    reason: str = ""


CONTROL_ACTIONS = ("pause", "resume", "enable", "disable", "delete", "reset")


def parse_message_spec(body: object, prefix: str, make_id: Any, now: float) -> Message:
    """Validate one message of `POST /v1/messages`; `prefix` qualifies field names."""
    if not isinstance(body, dict):
        raise InvalidInput(prefix or "body", "must be a JSON object")
    reject_unknown(body, {"receiver_id", "event_type", "payload", "id", "headers", "ordering_key"}, prefix)
    receiver_id = check_id(body.get("receiver_id"), prefix + "receiver_id")
    event_type = check_event_type(body.get("event_type"), prefix + "event_type")
    if "payload" not in body:
        raise InvalidInput(prefix + "payload", "is required")
    check_depth(body["payload"], prefix + "payload")
    msg_id = check_id(body["id"], prefix + "id") if "id" in body else make_id()
    headers = check_headers(body.get("headers"), prefix + "headers")
    key = check_ordering_key(body.get("ordering_key"), prefix + "ordering_key")
    return Message(msg_id, receiver_id, event_type, body["payload"], headers, now, ordering_key=key)


def encode_message_record(msg: Message) -> bytes:
    """The requests-topic record for one message (the API's and producers' format)."""
    record: dict[str, Any] = {
        "kind": "message",
        "id": msg.id,
        "event_type": msg.event_type,
        "payload": msg.payload,
        "accepted_at": msg.accepted_at,
    }
    if msg.headers:
        record["headers"] = msg.headers
    if msg.replay_of is not None:
        record["replay_of"] = msg.replay_of
    if msg.from_event:
        record["from_event"] = True
    if msg.time_note:
        record["time_note"] = msg.time_note
    if msg.ordering_key:
        record["ordering_key"] = msg.ordering_key
    return orjson.dumps(record)


@dataclass(slots=True, frozen=True)
class ReceiverUpsert:
    """A receiver's config to apply; `if_absent`: only if no receiver has the id yet (a create)."""

    config: ReceiverConfig
    if_absent: bool = False


def encode_upsert_record(config: ReceiverConfig, if_absent: bool = False) -> bytes:
    record: dict[str, Any] = {"kind": "receiver.upsert", "receiver": config.as_dict()}
    if if_absent:
        record["if_absent"] = True
    return orjson.dumps(record)


def encode_control_record(control: ReceiverControl) -> bytes:
    return orjson.dumps({"kind": "receiver.control", "action": control.action, "reason": control.reason})


FORBIDDEN_ON_REQUESTS = ("receiver.upsert", "receiver.control")


def decode_request(
    receiver_id: str, raw: bytes, fallback_id: str, fallback_time: float,
    vouched: Callable[[], bool] = lambda: False,
) -> Message:
    """Parse a requests-topic record (a message); raise InvalidInput with the field at fault.

    `fallback_id` names a message that came without an id (direct producers), so
    a replay of the same record gets the same id and is deduplicated.
    `fallback_time` is the broker's timestamp, used when `accepted_at` is
    missing or out of range (the message status then says so).
    `vouched`: did a worker write it (`record_seal.without_unvouched_claims`)?
    """
    data = _json_object(raw)
    kind = data.get("kind", "message")
    if kind in FORBIDDEN_ON_REQUESTS:
        raise InvalidInput(
            "kind", f"{kind} records are taken only from the workers' commands topic", "forbidden_record"
        )
    if kind != "message":
        raise InvalidInput("kind", f"unknown record kind {str(kind)[:64]!r}", code="malformed")
    data = without_unvouched_claims(data, vouched)
    try:
        return _decode_message(receiver_id, data, fallback_id, fallback_time)
    except InvalidInput as exc:  # every bad record is dead-lettered as "malformed"
        raise InvalidInput(exc.field, exc.message, code="malformed") from exc


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput("value", f"not JSON: {exc}", code="malformed") from exc
    if not isinstance(data, dict):
        raise InvalidInput("value", "must be a JSON object", code="malformed")
    return data


def _decode_upsert(receiver_id: str, data: dict[str, Any]) -> ReceiverConfig:
    try:
        config = ReceiverConfig.from_dict(data["receiver"])
    except (KeyError, TypeError, ValueError) as exc:
        # The exception's text could quote a secret: only its type is kept.
        why = f"incomplete receiver record ({type(exc).__name__})"
        raise InvalidInput("receiver", why, "malformed") from exc
    if config.id != receiver_id:
        raise InvalidInput("receiver.id", "does not match the record key", code="malformed")
    return config


def _decode_message(
    receiver_id: str, data: dict[str, Any], fallback_id: str, fallback_time: float
) -> Message:
    check_id(receiver_id, "key")
    if data.get("receiver_id", receiver_id) != receiver_id:
        raise InvalidInput("receiver_id", "does not match the record key", code="malformed")
    msg_id = check_id(data["id"], "id") if data.get("id") is not None else fallback_id
    event_type = check_event_type(data.get("event_type"), "event_type")
    if "payload" not in data:
        raise InvalidInput("payload", "is required", code="malformed")
    check_depth(data["payload"], "payload")
    headers = check_headers(data.get("headers"), "headers")
    accepted_at, note = producer_time(data.get("accepted_at"), fallback_time)
    carried = data.get("time_note")  # a fan-out copy carries its event's
    if not note and isinstance(carried, str):
        note = carried[:300]
    replay_of = data.get("replay_of")
    if replay_of is not None and (not isinstance(replay_of, int) or isinstance(replay_of, bool)):
        raise InvalidInput("replay_of", "must be a seq number", code="malformed")
    return Message(
        msg_id, receiver_id, event_type, data["payload"], headers, accepted_at, replay_of,
        data.get("from_event") is True, note,
        ordering_key=check_ordering_key(data.get("ordering_key"), "ordering_key"),
    )


def encode_outcome(outcome: Outcome) -> bytes:
    data = {"kind": "outcome", **{k: getattr(outcome, k) for k in Outcome.__slots__}}
    return orjson.dumps(data)


WAKE_RECORD = orjson.dumps({"kind": "wake"})


Command = Outcome | ReceiverUpsert | ReceiverControl | None


def decode_command(receiver_id: str, raw: bytes) -> Command:
    """Parse a commands-topic record (written only by workers); None is a wake-up."""
    data = _json_object(raw)
    kind = data.pop("kind", None)
    if kind == "wake":
        return None
    if kind == "receiver.upsert":
        return ReceiverUpsert(_decode_upsert(receiver_id, data), data.get("if_absent") is True)
    if kind == "receiver.control":
        action = data.get("action")
        if action not in CONTROL_ACTIONS:
            raise InvalidInput("action", f"must be one of {', '.join(CONTROL_ACTIONS)}", code="malformed")
        return ReceiverControl(action, str(data.get("reason") or ""))
    if kind != "outcome":
        raise InvalidInput("kind", f"unknown command {str(kind)[:64]!r}", code="malformed")
    try:
        # Fields a newer version added are dropped: outcomes cross versions during a rolling upgrade.
        return Outcome(**{k: v for k, v in data.items() if k in _OUTCOME_FIELDS})
    except TypeError as exc:
        raise InvalidInput("outcome", f"unreadable outcome: {exc}", code="malformed") from exc


_OUTCOME_FIELDS = frozenset(Outcome.__slots__)


def encode_backlog_entry(msg: Message, seq: int) -> bytes:
    """A buffered message as stored in the actor table."""
    return orjson.dumps(
        {
            "id": msg.id,
            "seq": seq,
            "type": msg.event_type,
            "data": msg.payload,
            "headers": msg.headers,
            "accepted_at": msg.accepted_at,
            "replay_of": msg.replay_of,
            **({"time_note": msg.time_note} if msg.time_note else {}),
            **({"traceparent": msg.traceparent} if msg.traceparent else {}),
            **({"ordering_key": msg.ordering_key} if msg.ordering_key else {}),
        }
    )
