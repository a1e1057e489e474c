"""Runs delivery attempts off the stream and reports each outcome to the actor.

An attempt never blocks the partition's stream: it runs in its own task, and
its outcome goes back through the commands topic, so only the stream that owns
the receiver's partition writes its state. At most one attempt per receiver is
in flight on this worker (ordered receivers).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .domain.records import Outcome, ReceiverConfig
from .domain.webhook import build_body, build_headers
from .transport import DeliveryError, Transport, cancel_quietly

log = logging.getLogger(__name__)

SendOutcome = Callable[[str, Outcome], Awaitable[None]]


@dataclass(slots=True)
class InFlight:
    token: str
    partition: int
    task: asyncio.Task[None]


class Deliverer:
    def __init__(
        self,
        transport: Transport,
        send_outcome: SendOutcome,
        max_in_flight: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._transport = transport
        self._send_outcome = send_outcome
        self._slots = asyncio.Semaphore(max_in_flight)
        self._clock = clock
        self._inflight: dict[str, InFlight] = {}
        # Tokens tell this worker's outcomes from those of an earlier owner.
        self._incarnation = secrets.token_hex(4)
        self._counter = 0

    def busy(self, receiver_id: str) -> bool:
        return receiver_id in self._inflight

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    def start(
        self, receiver_id: str, partition: int, config: ReceiverConfig, entry: dict[str, Any], attempt: int
    ) -> None:
        """Start one attempt of `entry` unless the receiver already has one in flight."""
        if receiver_id in self._inflight:
            return
        self._counter += 1
        token = f"{self._incarnation}-{self._counter}"
        task = asyncio.create_task(self._attempt(receiver_id, token, config, entry, attempt))
        self._inflight[receiver_id] = InFlight(token, partition, task)

    def release(self, receiver_id: str, token: str) -> None:
        """The actor has the outcome of `token`; the receiver may get its next attempt."""
        current = self._inflight.get(receiver_id)
        if current is not None and current.token == token:
            del self._inflight[receiver_id]

    async def drop_partitions(self, partitions: set[int]) -> None:
        """Cancel attempts of receivers whose partition this worker no longer owns."""
        lost = [rid for rid, f in self._inflight.items() if f.partition in partitions]
        for rid in lost:
            await cancel_quietly(self._inflight.pop(rid).task)

    async def close(self) -> None:
        await self.drop_partitions({f.partition for f in self._inflight.values()})
        await self._transport.close()

    async def _attempt(
        self, receiver_id: str, token: str, config: ReceiverConfig, entry: dict[str, Any], attempt: int
    ) -> None:
        async with self._slots:
            outcome = await self._post(token, config, entry)
        _log_outcome(receiver_id, entry, attempt, outcome)
        try:
            await self._send_outcome(receiver_id, outcome)
        except Exception:
            log.exception(
                "could not report outcome msg_id=%s receiver_id=%s seq=%s attempt=%d",
                entry["id"], receiver_id, entry["seq"], attempt,
            )

    async def _post(self, token: str, config: ReceiverConfig, entry: dict[str, Any]) -> Outcome:
        started = self._clock()
        status: int | None = None
        error: str | None = None
        prefix = b""
        headers: dict[str, str] = {}
        try:
            body = build_body(entry)
            req_headers = build_headers(config.secret, entry, body, int(started), config.headers)
            resp = await self._transport.post(config.url, req_headers, body)
            status, headers, prefix = resp.status, resp.headers, resp.body_prefix
        except DeliveryError as exc:
            error = str(exc)
        except Exception as exc:
            log.exception("delivery failed msg_id=%s", entry.get("id"))
            error = f"internal: {type(exc).__name__}: {exc}"
        finished = self._clock()
        return Outcome(
            seq=entry["seq"],
            msg_id=entry["id"],
            token=token,
            ok=status is not None and 200 <= status < 300,
            status=status,
            error=error,
            latency_ms=(finished - started) * 1000,
            at=finished,
            body_prefix=prefix[:1024].decode("utf-8", "replace"),
            headers=headers,
        )


def _log_outcome(receiver_id: str, entry: dict[str, Any], attempt: int, outcome: Outcome) -> None:
    if outcome.ok:
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "delivered msg_id=%s receiver_id=%s seq=%s attempt=%d status=%s",
                entry["id"], receiver_id, entry["seq"], attempt, outcome.status,
            )
        return
    log.warning(
        "attempt failed msg_id=%s receiver_id=%s seq=%s attempt=%d status=%s error=%s",
        entry["id"], receiver_id, entry["seq"], attempt, outcome.status, outcome.error,
    )
