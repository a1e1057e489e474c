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
from dataclasses import dataclass, replace
from typing import Any

from .domain.ids import new_id
from .domain.records import Outcome, ReceiverConfig, Verification
from .domain.verification import challenge_headers, judge, new_challenge
from .domain.webhook import build_body, build_headers, build_ping, build_ping_headers
from .transport import DeliveryError, Transport, cancel_quietly

log = logging.getLogger(__name__)

SendOutcome = Callable[[str, Outcome], Awaitable[None]]
LostOutcome = Callable[[str, int], None]  # (receiver id, partition): wake it to try again
REPORT_TRIES = 4


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
        on_lost_outcome: LostOutcome,
        clock: Callable[[], float] = time.time,
        report_backoff: float = 0.5,
    ) -> None:
        self._transport = transport
        self._send_outcome = send_outcome
        self._on_lost_outcome = on_lost_outcome
        self._report_backoff = report_backoff
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
        token = self._next_token()
        task = asyncio.create_task(self._attempt(receiver_id, token, config, entry, attempt))
        self._inflight[receiver_id] = InFlight(token, partition, task)

    def start_probe(self, receiver_id: str, partition: int, config: ReceiverConfig, number: int) -> None:
        """Send a `webhook.ping` in the receiver's one slot (its circuit is open)."""
        if receiver_id in self._inflight:
            return
        token = self._next_token()
        task = asyncio.create_task(self._probe(receiver_id, token, config, number))
        self._inflight[receiver_id] = InFlight(token, partition, task)

    async def ping(self, receiver_id: str, config: ReceiverConfig) -> Outcome:
        """A ping asked for through the API: posted now, outside the receiver's slot."""
        async with self._slots:
            outcome = await self._post_ping(receiver_id, "manual", config)
        return replace(outcome, manual=True)

    async def verify(self, config: ReceiverConfig) -> Verification:
        """Run the endpoint-verification handshake against `config.url` (asked for through the API)."""
        now = self._clock()
        challenge = new_challenge(secrets.token_bytes(24))
        headers = challenge_headers(config, challenge, new_id("verify"), now)
        async with self._slots:
            try:
                resp = await self._transport.request("GET", config.url, headers)
            except DeliveryError as exc:
                result = judge(config, challenge, None, b"", str(exc), self._clock())
            else:
                result = judge(config, challenge, resp.status, resp.body_prefix, None, self._clock())
        log.info("verification receiver_id=%s status=%s %s", config.id, result.status, result.reason)
        return result

    def release(self, receiver_id: str, token: str) -> None:
        """The actor has the outcome of `token`; the receiver may get its next attempt."""
        current = self._inflight.get(receiver_id)
        if current is not None and current.token == token:
            del self._inflight[receiver_id]

    def _next_token(self) -> str:
        self._counter += 1
        return f"{self._incarnation}-{self._counter}"

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
            outcome = replace(await self._post(token, config, entry), attempt=attempt)
        _log_outcome(receiver_id, entry, attempt, outcome)
        await self._report(receiver_id, token, outcome, f"msg_id={entry['id']} seq={entry['seq']}")

    async def _probe(self, receiver_id: str, token: str, config: ReceiverConfig, number: int) -> None:
        async with self._slots:
            outcome = replace(await self._post_ping(receiver_id, token, config), attempt=number)
        log.info(
            "probe receiver_id=%s number=%d status=%s error=%s",
            receiver_id, number, outcome.status, outcome.error,
        )
        await self._report(receiver_id, token, outcome, "probe")

    async def _report(self, receiver_id: str, token: str, outcome: Outcome, what: str) -> None:
        """Send the outcome to the actor, a few times if need be.

        Should every send fail, the actor never learns of this attempt: the slot
        is freed and the receiver woken, so the attempt is made again (same seq
        and attempt number; a late copy of this outcome is then ignored as stale).
        """
        delay = self._report_backoff
        for tries in range(1, REPORT_TRIES + 1):
            try:
                await self._send_outcome(receiver_id, outcome)
                return
            except Exception:
                log.warning(
                    "could not report outcome receiver_id=%s %s attempt=%d (try %d of %d)",
                    receiver_id, what, outcome.attempt, tries, REPORT_TRIES, exc_info=True,
                )
            if tries < REPORT_TRIES:
                await asyncio.sleep(delay)
                delay *= 2
        current = self._inflight.get(receiver_id)
        if current is not None and current.token == token:
            del self._inflight[receiver_id]
            log.error("outcome lost receiver_id=%s %s attempt=%d: the attempt will be made again",
                      receiver_id, what, outcome.attempt)
            self._on_lost_outcome(receiver_id, current.partition)

    async def _post_ping(self, receiver_id: str, token: str, config: ReceiverConfig) -> Outcome:
        started = self._clock()
        ping_id = new_id("ping")
        body = build_ping(receiver_id, started)
        headers = build_ping_headers(config, ping_id, body, started)
        outcome = await self._timed_post(token, config, headers, body, 0, ping_id)
        return replace(outcome, probe=True)

    async def _post(self, token: str, config: ReceiverConfig, entry: dict[str, Any]) -> Outcome:
        try:
            body = build_body(entry)
            headers = build_headers(config, entry, body, self._clock())
        except Exception as exc:
            log.exception("cannot build request msg_id=%s seq=%s", entry.get("id"), entry.get("seq"))
            error = f"internal: {exc}"
            return Outcome(entry["seq"], entry["id"], token, False, None, error, 0.0, self._clock())
        return await self._timed_post(token, config, headers, body, entry["seq"], entry["id"])

    async def _timed_post(
        self, token: str, config: ReceiverConfig, headers: dict[str, str], body: bytes, seq: int, msg_id: str
    ) -> Outcome:
        started = self._clock()
        status: int | None = None
        error: str | None = None
        prefix = b""
        resp_headers: dict[str, str] = {}
        try:
            resp = await self._transport.post(config.url, headers, body)
            status, resp_headers, prefix = resp.status, resp.headers, resp.body_prefix
        except DeliveryError as exc:
            error = str(exc)
        except Exception as exc:
            log.exception("delivery failed msg_id=%s seq=%s", msg_id, seq)
            error = f"internal: {type(exc).__name__}: {exc}"
        finished = self._clock()
        return Outcome(
            seq=seq,
            msg_id=msg_id,
            token=token,
            ok=status is not None and 200 <= status < 300,
            status=status,
            error=error,
            latency_ms=(finished - started) * 1000,
            at=finished,
            body_prefix=prefix[:1024].decode("utf-8", "replace"),
            headers=resp_headers,
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
