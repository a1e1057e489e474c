"""Python clients: `DispatcherClient` for the HTTP API, `DispatcherProducer` for Kafka.

    async with DispatcherClient("http://127.0.0.1:8080", token) as api:
        receiver = await api.create_receiver("https://example.com/hooks", event_types=["invoice.*"])
        await api.send_message(receiver["id"], "invoice.paid", {"amount": 5})
        await api.publish_event("invoice.paid", {"amount": 5}, tenant="acme")

    async with DispatcherProducer("kafka-1:9092") as producer:   # acks=all
        await producer.send_message("rcv_...", "invoice.paid", {"amount": 5}, id="inv-42-paid")

A tenant token (`wdt_...`, from `create_token` with the admin token) works
as `token` too: the client then reaches its tenant's receivers only.

Errors from the API raise `ApiError` with the status and the `{"code", "field",
"message"}` the API answered. The producer writes exactly what the API would:
the same record format and key (the receiver id for messages, the event id for
events, with Kafka's default partitioner), so the worker cannot tell them apart.

`OPERATIONS` maps each operationId of web/openapi.json to the client method
that calls it; a test holds the two together.
"""

from __future__ import annotations

import asyncio
import enum
import time
from types import TracebackType
from typing import Any, Literal
from urllib.parse import quote

import aiohttp
import orjson
from aiokafka import AIOKafkaProducer
from yarl import URL

from .domain.events import Event, encode_event
from .domain.ids import new_id
from .domain.ordering_keys import check_ordering_key
from .domain.records import Message, encode_message_record

OPERATIONS: dict[str, str] = {
    "getHealth": "health",
    "getReady": "ready",
    "getOpenApiDocument": "openapi",
    "listReceivers": "list_receivers",
    "createReceiver": "create_receiver",
    "getReceiver": "get_receiver",
    "updateReceiver": "update_receiver",
    "deleteReceiver": "delete_receiver",
    "getReceiverState": "receiver_state",
    "resetReceiverState": "reset_receiver_state",
    "listReceiverEvents": "receiver_events",
    "getMessageStatus": "message_status",
    "pingReceiver": "ping",
    "listAttempts": "attempts",
    "getLastResponse": "last_response",
    "listDeadLetters": "dead_letters",
    "replayDeadLetters": "replay",
    "resendMessage": "resend",
    "recoverDeadLetters": "recover",
    "rotateReceiverSecret": "rotate_secret",
    "verifyReceiver": "verify",
    "testReceiverTransform": "transform_test",
    "pauseReceiver": "pause",
    "resumeReceiver": "resume",
    "enableReceiver": "enable",
    "disableReceiver": "disable",
    "sendMessage": "send_message",
    "sendMessageBatch": "send_messages",
    "publishEvent": "publish_event",
    "listTokens": "list_tokens",
    "createToken": "create_token",
    "revokeToken": "revoke_token",
}

# The API's code for "no such receiver"; last-response answers 404 `no_attempt` for "no attempt yet".
UNKNOWN_RECEIVER = "not_found"
NO_ATTEMPT = "no_attempt"
# A 503 with this code means the id's owner is moving (a rebalance): the API says retry.
UNAVAILABLE = "unavailable"
UNAVAILABLE_WAITS = (0.25, 0.75)  # seconds before the 2nd and 3rd try of a GET answered 503 unavailable
UNAVAILABLE_WITHIN = 2.0  # no further try starts this many seconds after the first
CONTROL_ACTIONS = ("pause", "resume", "enable", "disable")
ERROR_TEXT_MAX = 2000  # characters of a non-JSON error body (a proxy's HTML page) kept in the message

Signing = Literal["hmac-sha256", "ed25519"]
Ordering = Literal["strict", "none", "key"]
Overflow = Literal["", "dead_letter_oldest", "reject"]
Concurrency = Literal["adaptive", "fixed"]
DeliveryControl = Literal["obey", "ignore"]


class Unset(enum.Enum):
    """The default of a receiver field that is not sent (None is sent, as JSON null)."""

    UNSET = "UNSET"


UNSET = Unset.UNSET


class ApiError(Exception):
    def __init__(self, status: int, code: str, field: str, message: str) -> None:
        super().__init__(f"{status} {code}: {field}: {message}")
        self.status, self.code, self.field, self.message = status, code, field, message


def segment(value: str) -> str:
    """`value` as one URL path segment: a `/`, `%`, `?`, `#`, `.` or `..` in it cannot change the route."""
    if not value:
        raise ValueError("an id in a URL path must not be empty")
    if value in (".", ".."):  # dot segments are resolved away by URL normalisation unless encoded
        return value.replace(".", "%2E")
    return quote(value, safe="")


def _receiver_path(receiver_id: str, tail: str = "") -> str:
    return f"/v1/receivers/{segment(receiver_id)}{tail}"


def error_of(status: int, raw: bytes) -> ApiError:
    """The API's `{"error": {code, field, message}}`, or any other body (a proxy's HTML page) as text."""
    try:
        answer = orjson.loads(raw)
    except orjson.JSONDecodeError:
        answer = None
    error = answer.get("error") if isinstance(answer, dict) else None
    if isinstance(error, dict):
        return ApiError(status, str(error.get("code", "error")), str(error.get("field", "")),
                        str(error.get("message", "")))
    text = raw.decode("utf-8", "replace").strip()
    if len(text) > ERROR_TEXT_MAX:
        text = text[:ERROR_TEXT_MAX] + f"... ({len(text) - ERROR_TEXT_MAX} more characters)"
    return ApiError(status, "error", "", text)


class DispatcherClient:
    """Typed async methods over the HTTP API; one aiohttp session, closed by `close()` or `async with`."""

    def __init__(self, base_url: str, token: str, timeout: float = 30.0) -> None:
        self.base_url = str(URL(base_url.rstrip("/")))  # encoded once; paths are joined to it as encoded text
        self._session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            timeout=aiohttp.ClientTimeout(total=timeout),
        )

    async def __aenter__(self) -> DispatcherClient:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._session.close()

    async def request(
        self, method: str, path: str, body: Any = None, *, accept: tuple[int, ...] = (), **params: Any
    ) -> Any:
        """Call the API: the decoded answer; `ApiError` for a status >= 400 that is not in `accept`.

        `path` is sent as it is (already encoded: build it with `segment()`). A GET answered 503
        `unavailable` (the owner is moving) is tried again, up to 3 tries within about 2 s.
        """
        query = {k: str(v) for k, v in params.items() if v is not None}
        data = orjson.dumps(body) if body is not None else None
        url = URL(self.base_url + path, encoded=True)
        started = time.monotonic()
        for wait in UNAVAILABLE_WAITS:
            try:
                return await self._send(method, url, data, query, accept)
            except ApiError as exc:
                if not _retry_unavailable(method, exc, wait, time.monotonic() - started):
                    raise
            await asyncio.sleep(wait)
        return await self._send(method, url, data, query, accept)  # the last try

    async def _send(
        self, method: str, url: URL, data: bytes | None, query: dict[str, str], accept: tuple[int, ...]
    ) -> Any:
        async with self._session.request(method, url, data=data, params=query) as resp:
            raw = await resp.read()
            if resp.status >= 400 and resp.status not in accept:
                raise error_of(resp.status, raw)
            try:
                return orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                raise ApiError(resp.status, "invalid_response", "", "the answer is not JSON: "
                               + raw.decode("utf-8", "replace")[:ERROR_TEXT_MAX]) from None

    # the worker --------------------------------------------------------------------

    async def health(self) -> dict[str, Any]:
        """GET /healthz: `{"status": "ok"}` while the process lives."""
        return await self.request("GET", "/healthz")

    async def ready(self) -> dict[str, Any]:
        """GET /readyz: `status` ready or starting (a 503 is returned, not raised), and the figures."""
        return await self.request("GET", "/readyz", accept=(503,))

    async def openapi(self) -> dict[str, Any]:
        """GET /openapi.json: the API's OpenAPI 3.1 document."""
        return await self.request("GET", "/openapi.json")

    # receivers -------------------------------------------------------------------

    async def create_receiver(
        self, url: str, *, id: str | Unset = UNSET, event_types: list[str] | Unset = UNSET,
        tenant: str | Unset | None = UNSET, secret: str | Unset = UNSET, signing: Signing | Unset = UNSET,
        headers: dict[str, str] | Unset = UNSET, authorization: str | Unset = UNSET,
        verify: bool | Unset = UNSET, retry: dict[str, Any] | Unset | None = UNSET,
        ordering: Ordering | Unset = UNSET, max_in_flight: int | Unset = UNSET,
        rate_limit: float | Unset | None = UNSET, batch_max: int | Unset = UNSET,
        batch_max_bytes: int | Unset = UNSET, backlog_max: int | Unset = UNSET,
        backlog_max_bytes: int | Unset = UNSET, backlog_overflow: Overflow | Unset = UNSET,
        concurrency: Concurrency | Unset = UNSET, delivery_control: DeliveryControl | Unset = UNSET,
        heartbeat_interval: float | Unset | None = UNSET, coalesce: bool | Unset = UNSET,
        filter: dict[str, Any] | Unset | None = UNSET, auth: dict[str, Any] | Unset | None = UNSET,
        tls: dict[str, str] | Unset | None = UNSET, transform: dict[str, Any] | Unset | None = UNSET,
        **extra: Any,
    ) -> dict[str, Any]:
        """Create (or, with an existing `id`, replace) a receiver: its view, with the new secret shown once.

        Fields left UNSET are not sent; `extra` passes fields this client does not name yet.
        `auth`: `{"type": "mtls", "certificate", "private_key"}` or `{"type": "oauth2", "token_url",
        "client_id", "client_secret", "scope"?, "audience"?, "client_auth"?}` (the key and the
        secret are never shown again). `tls`: `{"ca": PEM}`, the only CA the receiver's certificate
        may chain to.
        """
        fields = {
            "url": url, "id": id, "event_types": event_types, "tenant": tenant, "secret": secret,
            "signing": signing, "headers": headers, "authorization": authorization, "verify": verify,
            "retry": retry, "ordering": ordering, "max_in_flight": max_in_flight, "rate_limit": rate_limit,
            "batch_max": batch_max, "batch_max_bytes": batch_max_bytes, "backlog_max": backlog_max,
            "backlog_max_bytes": backlog_max_bytes, "backlog_overflow": backlog_overflow,
            "concurrency": concurrency, "delivery_control": delivery_control,
            "heartbeat_interval": heartbeat_interval, "filter": filter, "coalesce": coalesce,
            "auth": auth, "tls": tls, "transform": transform,
        }
        return await self.request("POST", "/v1/receivers", {**_given(fields), **extra})

    async def update_receiver(
        self, receiver_id: str, *, url: str | Unset = UNSET, event_types: list[str] | Unset = UNSET,
        tenant: str | Unset | None = UNSET, secret: str | Unset = UNSET, signing: Signing | Unset = UNSET,
        headers: dict[str, str] | Unset = UNSET, authorization: str | Unset = UNSET,
        verify: bool | Unset = UNSET, retry: dict[str, Any] | Unset | None = UNSET,
        ordering: Ordering | Unset = UNSET, max_in_flight: int | Unset = UNSET,
        rate_limit: float | Unset | None = UNSET, batch_max: int | Unset = UNSET,
        batch_max_bytes: int | Unset = UNSET, backlog_max: int | Unset = UNSET,
        backlog_max_bytes: int | Unset = UNSET, backlog_overflow: Overflow | Unset = UNSET,
        concurrency: Concurrency | Unset = UNSET, delivery_control: DeliveryControl | Unset = UNSET,
        heartbeat_interval: float | Unset | None = UNSET, coalesce: bool | Unset = UNSET,
        filter: dict[str, Any] | Unset | None = UNSET, auth: dict[str, Any] | Unset | None = UNSET,
        tls: dict[str, str] | Unset | None = UNSET, transform: dict[str, Any] | Unset | None = UNSET,
        **extra: Any,
    ) -> dict[str, Any]:
        """PATCH the named fields (None sends null: `tenant=None` clears it): the receiver's view.

        A new `secret` or `signing` kind is shown once in the answer, as on create.
        """
        fields = {
            "url": url, "event_types": event_types, "tenant": tenant, "secret": secret,
            "signing": signing, "headers": headers, "authorization": authorization, "verify": verify,
            "retry": retry, "ordering": ordering, "max_in_flight": max_in_flight, "rate_limit": rate_limit,
            "batch_max": batch_max, "batch_max_bytes": batch_max_bytes, "backlog_max": backlog_max,
            "backlog_max_bytes": backlog_max_bytes, "backlog_overflow": backlog_overflow,
            "concurrency": concurrency, "delivery_control": delivery_control,
            "heartbeat_interval": heartbeat_interval, "filter": filter, "coalesce": coalesce,
            "auth": auth, "tls": tls, "transform": transform,
        }
        return await self.request("PATCH", _receiver_path(receiver_id), {**_given(fields), **extra})

    patch_receiver = update_receiver  # the name before 0.2

    async def list_receivers(
        self, *, tenant: str | None = None, event_type: str | None = None, status: str | None = None,
        disabled: bool | None = None, search: str | None = None, cursor: str | None = None, limit: int = 100,
    ) -> dict[str, Any]:
        """One page, in id order: `{"receivers": [...], "next_cursor"}` (None on the last page).

        `search`: text the id or URL contains; a page may come back short or empty while
        `next_cursor` is not None (each worker reads a bounded number of receivers a page).
        """
        flag = None if disabled is None else str(disabled).lower()
        return await self.request("GET", "/v1/receivers", tenant=tenant, event_type=event_type, status=status,
                                  disabled=flag, search=search, cursor=cursor, limit=limit)

    async def get_receiver(self, receiver_id: str) -> dict[str, Any]:
        """The receiver's config (no secrets) with its delivery `state`."""
        return await self.request("GET", _receiver_path(receiver_id))

    async def delete_receiver(self, receiver_id: str) -> dict[str, Any]:
        """Dead-letter the backlog and remove the receiver: `deleted` true, or false while still going."""
        return await self.request("DELETE", _receiver_path(receiver_id))

    async def receiver_state(self, receiver_id: str) -> dict[str, Any]:
        """The actor's live state, read on the worker that owns it (`owner`)."""
        return await self.request("GET", _receiver_path(receiver_id, "/state"))

    async def reset_receiver_state(self, receiver_id: str) -> dict[str, Any]:
        """Dead-letter the backlog and drop counters and history (for testing): the fresh state.

        The config stays and seqs carry on. While a big backlog is still going, `status` is `resetting`.
        """
        return await self.request("DELETE", _receiver_path(receiver_id, "/state"), confirm="reset")

    async def control(self, receiver_id: str, action: str, reason: str = "") -> dict[str, Any]:
        """`pause`, `resume`, `enable` or `disable`, applied: the receiver's view."""
        if action not in CONTROL_ACTIONS:
            raise ValueError(f"action must be one of {', '.join(CONTROL_ACTIONS)}, not {action!r}")
        return await self.request("POST", _receiver_path(receiver_id, "/" + action), {"reason": reason})

    async def pause(self, receiver_id: str, reason: str = "") -> dict[str, Any]:
        """Hold deliveries (messages are still taken in): the receiver's view."""
        return await self.control(receiver_id, "pause", reason)

    async def resume(self, receiver_id: str, reason: str = "") -> dict[str, Any]:
        """Deliver again after a pause: the receiver's view."""
        return await self.control(receiver_id, "resume", reason)

    async def enable(self, receiver_id: str, reason: str = "") -> dict[str, Any]:
        """Deliver again after a disable: the receiver's view."""
        return await self.control(receiver_id, "enable", reason)

    async def disable(self, receiver_id: str, reason: str = "") -> dict[str, Any]:
        """Stop delivering, with a reason shown in its state: the receiver's view."""
        return await self.control(receiver_id, "disable", reason)

    async def rotate_secret(
        self, receiver_id: str, *, grace_seconds: float | None = None, signing: Signing | None = None,
        secret: str | None = None,
    ) -> dict[str, Any]:
        """Sign with a new secret (given, or made); the old one also signs for `grace_seconds` (default 24 h).

        The answer is the receiver's view with the new `secret` (or `public_key`), shown this once.
        """
        body = _present({"grace_seconds": grace_seconds, "signing": signing, "secret": secret})
        return await self.request("POST", _receiver_path(receiver_id, "/secrets/rotate"), body)

    async def verify(self, receiver_id: str) -> dict[str, Any]:
        """Run the verification handshake again: the receiver's view, with `verified` and `verification`.

        A receiver whose `verify` is false answers 409 `verification_off`.
        """
        return await self.request("POST", _receiver_path(receiver_id, "/verify"))

    async def transform_test(
        self, receiver_id: str, payload: Any, *, event_type: str | None = None,
        headers: dict[str, str] | None = None, transform: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Run the receiver's transform (or `transform`, not saved) on a sample; nothing is sent.

        The answer: `cancel`, `body` (what would be POSTed), `headers` (the transform's), `path`
        and `url`. A failing template answers 422 `transform_error`, its field naming the part.
        """
        body = {"payload": payload,
                **_present({"event_type": event_type, "headers": headers, "transform": transform})}
        return await self.request("POST", _receiver_path(receiver_id, "/transform/test"), body)

    async def ping(self, receiver_id: str) -> dict[str, Any]:
        """Send a `webhook.ping` now: `ok`, `status`, `error`, `latency_ms`, `headers`, `body_prefix`."""
        return await self.request("POST", _receiver_path(receiver_id, "/ping"))

    async def attempts(self, receiver_id: str, limit: int = 50) -> list[dict[str, Any]]:
        """The attempt log, newest first."""
        return (await self.request("GET", _receiver_path(receiver_id, "/attempts"), limit=limit))["attempts"]

    async def last_response(self, receiver_id: str) -> dict[str, Any] | None:
        """The newest attempt, or None before the first one; any other 404 (an unknown receiver, another
        server's page) raises `ApiError`."""
        try:
            return await self.request("GET", _receiver_path(receiver_id, "/last-response"))
        except ApiError as exc:
            if exc.status == 404 and exc.code == NO_ATTEMPT:
                return None
            raise

    async def receiver_events(self, receiver_id: str, after_seq: int = 0, limit: int = 100) -> dict[str, Any]:
        """Catch-up, in seq order: `{"events": [...], "next_after_seq", "retained_seconds"}`.

        Each event has the delivered body's fields (`seq`, `id`, `type`, `timestamp`, `data`), its
        `status` (pending, delivered, dead_lettered, cancelled) and `settled_at`; `next_after_seq` is None on
        the last page. Settled messages are kept `retained_seconds`.
        """
        path = _receiver_path(receiver_id, "/events")
        return await self.request("GET", path, after_seq=after_seq, limit=limit)

    async def dead_letters(self, receiver_id: str, after_seq: int = 0, limit: int = 100) -> dict[str, Any]:
        """Dead letters in seq order: `{"dead_letters": [...], "next_after_seq"}` (None on the last page)."""
        path = _receiver_path(receiver_id, "/dead-letters")
        return await self.request("GET", path, after_seq=after_seq, limit=limit)

    async def replay(
        self, receiver_id: str, *, from_seq: int | None = None, to_seq: int | None = None,
        since: float | None = None, until: float | None = None, limit: int | None = None,
    ) -> dict[str, Any]:
        """Replay dead letters as new messages: `{"replayed", "messages", "skipped_seqs"}`.

        All of them, or a seq range, or a dead-letter time range (epoch seconds); `limit` caps one call.
        """
        selector = {"from_seq": from_seq, "to_seq": to_seq, "since": since, "until": until, "limit": limit}
        return await self.request("POST", _receiver_path(receiver_id, "/replay"), _present(selector))

    async def resend(self, receiver_id: str, message_id: str, *, id: str | None = None) -> dict[str, Any]:
        """Send a delivered, still kept message again as a new message (next seq, `webhook-replay-of`):
        `{"id", "receiver_id", "resend_of": {"id", "seq"}}`. `id` names the new message (idempotent)."""
        path = _receiver_path(receiver_id, f"/messages/{segment(message_id)}/resend")
        return await self.request("POST", path, _present({"id": id}))

    async def recover(
        self, receiver_id: str, since: float | str, *, until: float | str | None = None,
        after_seq: int | None = None, limit: int | None = None,
    ) -> dict[str, Any]:
        """One page of a recovery: dead letters of `since`..`until` (unix seconds or RFC 3339; until
        defaults to now) sent again. `{"recovered", "messages", "skipped_seqs", "scanned",
        "next_after_seq", "since", "until"}`; call again with `next_after_seq` and `until` until None."""
        selector = {"since": since, "until": until, "after_seq": after_seq, "limit": limit}
        return await self.request("POST", _receiver_path(receiver_id, "/recover"), _present(selector))

    # messages and events ----------------------------------------------------------

    async def send_message(
        self, receiver_id: str, event_type: str, payload: Any, *, id: str | None = None,
        headers: dict[str, str] | None = None, ordering_key: str | None = None,
    ) -> dict[str, Any]:
        """Send one message (`id` is the idempotency key): `{"id", "receiver_id"}` once accepted.

        `ordering_key`: a key-ordered receiver keeps the messages of one key in order."""
        body = {"receiver_id": receiver_id, "event_type": event_type, "payload": payload}
        body |= _present({"id": id, "headers": headers, "ordering_key": ordering_key})
        return await self.request("POST", "/v1/messages", body)

    async def send_messages(self, messages: list[dict[str, Any]]) -> list[str]:
        """Up to 1,000 messages (`receiver_id`, `event_type`, `payload`, ...), all or none: their ids."""
        return (await self.request("POST", "/v1/messages/batch", {"messages": messages}))["ids"]

    async def message_status(self, receiver_id: str, message_id: str) -> dict[str, Any]:
        """`status` pending, delivered or dead_lettered, with its `seq` (and the reason, if dead-lettered)."""
        return await self.request("GET", _receiver_path(receiver_id, "/messages/" + segment(message_id)))

    async def publish_event(
        self, event_type: str, payload: Any, *, tenant: str | None = None, id: str | None = None,
        ordering_key: str | None = None,
    ) -> dict[str, Any]:
        """Publish an event to its subscribers: `{"id", "event_type", "receivers"}` (how many subscribe)."""
        fields = _present({"tenant": tenant, "id": id, "ordering_key": ordering_key})
        body = {"event_type": event_type, "payload": payload, **fields}
        return await self.request("POST", "/v1/events", body)


    # tenant tokens (the admin token only) ------------------------------------------------

    async def create_token(
        self, tenant: str, *, name: str | None = None, expires_at: float | str | None = None
    ) -> dict[str, Any]:
        """Mint a token for `tenant`: its record (`id`, `tenant`, `name`, `created_at`, `expires_at`,
        `status`, `prefix`, `last4`) and `token`, the plaintext, shown in this answer only: keep it.
        `expires_at`: unix seconds or RFC 3339 (default: never)."""
        body = {"tenant": tenant, **_present({"name": name, "expires_at": expires_at})}
        return await self.request("POST", "/v1/tokens", body)

    async def list_tokens(self, *, tenant: str | None = None) -> list[dict[str, Any]]:
        """Every token (one tenant's with `tenant`), revoked and expired ones too, in the order minted:
        records as `create_token` answers them without `token` (never a secret nor its hash)."""
        return (await self.request("GET", "/v1/tokens", tenant=tenant))["tokens"]

    async def revoke_token(self, token_id: str) -> dict[str, Any]:
        """Revoke a token for good: its record, `status` revoked (also when it already was)."""
        return await self.request("DELETE", f"/v1/tokens/{segment(token_id)}")


class DispatcherProducer:
    """Writes messages and events straight to Kafka (acks=all), as the API would."""

    def __init__(self, bootstrap_servers: str | list[str], app_id: str = "webhook-dispatcher",
                 **producer: Any) -> None:
        self.requests_topic = f"{app_id}.requests"
        self.events_topic = f"{app_id}.events"
        self._producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, acks="all", **producer)

    async def __aenter__(self) -> DispatcherProducer:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def send_message(
        self, receiver_id: str, event_type: str, payload: Any, *, id: str | None = None,
        headers: dict[str, str] | None = None, ordering_key: str | None = None,
    ) -> str:
        """Produce one message (keyed by receiver id); returns its id once the broker has it."""
        key = check_ordering_key(ordering_key, "ordering_key")
        msg = Message(id or new_id("msg"), receiver_id, event_type, payload, headers or {}, time.time(),
                      ordering_key=key)
        record = encode_message_record(msg)
        await self._producer.send_and_wait(self.requests_topic, record, receiver_id.encode())
        return msg.id

    async def publish_event(
        self, event_type: str, payload: Any, *, tenant: str | None = None, id: str | None = None,
        ordering_key: str | None = None,
    ) -> str:
        """Produce one event for fan-out (keyed by event id); returns its id once the broker has it."""
        key = check_ordering_key(ordering_key, "ordering_key")
        event = Event(id or new_id("evt"), event_type, payload, tenant, time.time(), ordering_key=key)
        await self._producer.send_and_wait(self.events_topic, encode_event(event), event.id.encode())
        return event.id


def _retry_unavailable(method: str, exc: ApiError, wait: float, elapsed: float) -> bool:
    """Whether a GET answered 503 `unavailable` (the owner is moving) is worth another try after `wait`."""
    if method != "GET" or exc.status != 503 or exc.code != UNAVAILABLE:
        return False
    return elapsed + wait < UNAVAILABLE_WITHIN


def _present(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


def _given(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not UNSET}
