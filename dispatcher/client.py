"""Python clients: `DispatcherClient` for the HTTP API, `DispatcherProducer` for Kafka.

    async with DispatcherClient("http://127.0.0.1:8080", token) as api:
        receiver = await api.create_receiver("https://example.com/hooks", event_types=["invoice.*"])
        await api.send_message(receiver["id"], "invoice.paid", {"amount": 5})
        await api.publish_event("invoice.paid", {"amount": 5}, tenant="acme")

    async with DispatcherProducer("kafka-1:9092") as producer:   # acks=all
        await producer.send_message("rcv_...", "invoice.paid", {"amount": 5}, id="inv-42-paid")

Errors from the API raise `ApiError` with the status and the `{"code", "field",
"message"}` the API answered. The producer writes exactly what the API would:
the same record format and key (the receiver id for messages, the event id for
events, with Kafka's default partitioner), so the worker cannot tell them apart.
"""

from __future__ import annotations

import time
from types import TracebackType
from typing import Any

import aiohttp
import orjson
from aiokafka import AIOKafkaProducer

from .domain.events import Event, encode_event
from .domain.ids import new_id
from .domain.records import Message, encode_message_record


class ApiError(Exception):
    def __init__(self, status: int, code: str, field: str, message: str) -> None:
        super().__init__(f"{status} {code}: {field}: {message}")
        self.status, self.code, self.field, self.message = status, code, field, message


class DispatcherClient:
    """Typed async methods over `/v1`; one aiohttp session, closed by `close()` or `async with`."""

    def __init__(self, base_url: str, token: str, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
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

    async def request(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        """Call the API; return the decoded answer, or raise `ApiError`."""
        query = {k: str(v) for k, v in params.items() if v is not None}
        data = orjson.dumps(body) if body is not None else None
        async with self._session.request(method, self.base_url + path, data=data, params=query) as resp:
            raw = await resp.read()
            answer = orjson.loads(raw) if raw else None
            if resp.status >= 400:
                error = (answer or {}).get("error", {}) if isinstance(answer, dict) else {}
                raise ApiError(resp.status, error.get("code", "error"), error.get("field", ""),
                               error.get("message", raw.decode("utf-8", "replace")[:200]))
            return answer

    # receivers -------------------------------------------------------------------

    async def create_receiver(self, url: str, **fields: Any) -> dict[str, Any]:
        """Create (or, with an existing `id`, replace) a receiver; the answer holds its new secret."""
        return await self.request("POST", "/v1/receivers", {"url": url, **_present(fields)})

    async def list_receivers(
        self, *, tenant: str | None = None, event_type: str | None = None, status: str | None = None,
        disabled: bool | None = None, cursor: str | None = None, limit: int = 100,
    ) -> dict[str, Any]:
        """One page, in id order: `{"receivers": [...], "next_cursor"}` (None on the last page)."""
        flag = None if disabled is None else str(disabled).lower()
        return await self.request("GET", "/v1/receivers", tenant=tenant, event_type=event_type, status=status,
                                  disabled=flag, cursor=cursor, limit=limit)

    async def get_receiver(self, receiver_id: str) -> dict[str, Any]:
        return await self.request("GET", f"/v1/receivers/{receiver_id}")

    async def patch_receiver(self, receiver_id: str, **fields: Any) -> dict[str, Any]:
        return await self.request("PATCH", f"/v1/receivers/{receiver_id}", fields)

    async def delete_receiver(self, receiver_id: str) -> dict[str, Any]:
        return await self.request("DELETE", f"/v1/receivers/{receiver_id}")

    async def receiver_state(self, receiver_id: str) -> dict[str, Any]:
        return await self.request("GET", f"/v1/receivers/{receiver_id}/state")

    async def control(self, receiver_id: str, action: str, reason: str = "") -> dict[str, Any]:
        """`pause`, `resume`, `enable` or `disable`."""
        return await self.request("POST", f"/v1/receivers/{receiver_id}/{action}", {"reason": reason})

    async def attempts(self, receiver_id: str, limit: int = 50) -> list[dict[str, Any]]:
        return (await self.request("GET", f"/v1/receivers/{receiver_id}/attempts", limit=limit))["attempts"]

    async def dead_letters(self, receiver_id: str, after_seq: int = 0, limit: int = 100) -> dict[str, Any]:
        path = f"/v1/receivers/{receiver_id}/dead-letters"
        return await self.request("GET", path, after_seq=after_seq, limit=limit)

    async def replay(self, receiver_id: str, **selector: Any) -> dict[str, Any]:
        """Replay dead letters: all, or `from_seq`/`to_seq`, or `since`/`until`; `limit` caps one call."""
        return await self.request("POST", f"/v1/receivers/{receiver_id}/replay", _present(selector))

    # messages and events ----------------------------------------------------------

    async def send_message(
        self, receiver_id: str, event_type: str, payload: Any, *, id: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        body = {"receiver_id": receiver_id, "event_type": event_type, "payload": payload}
        body |= _present({"id": id, "headers": headers})
        return await self.request("POST", "/v1/messages", body)

    async def send_messages(self, messages: list[dict[str, Any]]) -> list[str]:
        """Up to 1,000 at once, all or none; returns their ids."""
        return (await self.request("POST", "/v1/messages/batch", {"messages": messages}))["ids"]

    async def message_status(self, receiver_id: str, message_id: str) -> dict[str, Any]:
        return await self.request("GET", f"/v1/receivers/{receiver_id}/messages/{message_id}")

    async def publish_event(
        self, event_type: str, payload: Any, *, tenant: str | None = None, id: str | None = None
    ) -> dict[str, Any]:
        body = {"event_type": event_type, "payload": payload, **_present({"tenant": tenant, "id": id})}
        return await self.request("POST", "/v1/events", body)


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
        headers: dict[str, str] | None = None,
    ) -> str:
        """Produce one message (keyed by receiver id); returns its id once the broker has it."""
        msg = Message(id or new_id("msg"), receiver_id, event_type, payload, headers or {}, time.time())
        record = encode_message_record(msg)
        await self._producer.send_and_wait(self.requests_topic, record, receiver_id.encode())
        return msg.id

    async def publish_event(
        self, event_type: str, payload: Any, *, tenant: str | None = None, id: str | None = None
    ) -> str:
        """Produce one event for fan-out (keyed by event id); returns its id once the broker has it."""
        event = Event(id or new_id("evt"), event_type, payload, tenant, time.time())
        await self._producer.send_and_wait(self.events_topic, encode_event(event), event.id.encode())
        return event.id


def _present(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}
