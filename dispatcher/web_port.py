"""The web layer's `Engine`, implemented over one worker's parts.

The one place that knows which part of a `Dispatcher` answers what the API
asks: the views see `web.engine.Engine` only.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from aiohttp import ClientSession
from yarl import URL

from web.engine import Engine, InFlight, WebSettings

from .domain.actor import Policy, ReceiverState
from .domain.filters import document as filter_document
from .domain.records import Outcome, ReceiverConfig, Verification
from .domain.tokens import TokenRecord
from .metrics import survey_in_chunks
from .settings import Settings

if TYPE_CHECKING:
    from .worker import Dispatcher


def web_settings(settings: Settings, policy: Policy) -> WebSettings:
    """The settings views read, from the worker's settings and its actor's policy."""
    return WebSettings(
        api_token=settings.api_token,
        max_payload=settings.max_payload,
        max_request_body=settings.max_request_body,
        max_batch=settings.max_batch,
        require_https=settings.require_https,
        verify_endpoints=settings.verify_endpoints,
        secret_grace=settings.secret_grace,
        ui_session_ttl=settings.ui_session_ttl,
        policy=policy,
        metrics_token=settings.metrics_token,
    )


class DispatcherPort:
    """`Engine` over a `Dispatcher`: each answer from the part that holds it."""

    def __init__(self, dispatcher: Dispatcher) -> None:
        self._dispatcher = dispatcher
        # Both are fixed when the worker is built; the actor runs with this very policy.
        self._settings = web_settings(dispatcher.settings, dispatcher.runner.policy)

    @property
    def settings(self) -> WebSettings:
        return self._settings

    def ready(self) -> bool:
        return self._dispatcher.ownership.ready

    def stats(self) -> dict[str, Any]:
        return self._dispatcher.stats()

    async def metrics(self) -> bytes:
        return await self._dispatcher.metrics.render()

    # ownership -----------------------------------------------------------------------------------

    def partition_of(self, receiver_id: str) -> int:
        return self._dispatcher.partition_of(receiver_id)

    def is_local(self, receiver_id: str) -> bool:
        return self._dispatcher.is_local(receiver_id)

    def may_post(self, receiver_id: str) -> bool:
        return self._dispatcher.ownership.may_post(self.partition_of(receiver_id))

    def owner_url(self, receiver_id: str) -> URL | None:
        return self._dispatcher.owner_url(receiver_id)

    def own_url(self) -> URL:
        return URL(self._dispatcher.app.conf.canonical_url)

    def worker_urls(self) -> list[URL]:
        return self._dispatcher.worker_urls()

    @property
    def http_client(self) -> ClientSession:
        return self._dispatcher.app.http_client

    # a receiver's stored data --------------------------------------------------------------------

    def receiver_state(self, receiver_id: str) -> ReceiverState | None:
        return self._dispatcher.store.load(receiver_id)

    def receiver_states_after(self, after: str) -> list[Iterable[ReceiverState]]:
        owned = sorted(self._dispatcher.ownership.owned)
        return [self._dispatcher.store.states_after(partition, after) for partition in owned]

    def in_flight(self, receiver_id: str) -> InFlight:
        deliverer = self._dispatcher.deliverer
        return InFlight(deliverer.busy(receiver_id), deliverer.in_flight_seqs(receiver_id))

    def attempts(self, receiver_id: str, newest: int, limit: int) -> list[dict[str, Any]]:
        return self._dispatcher.store.attempts(receiver_id, newest, limit)

    def dead_letters(self, receiver_id: str, after_seq: int, limit: int) -> list[dict[str, Any]]:
        partition = self.partition_of(receiver_id)
        return self._dispatcher.store.dead_letters(receiver_id, partition, after_seq, limit)

    def dead_letter(self, receiver_id: str, seq: int) -> dict[str, Any] | None:
        return self._dispatcher.store.dead_letter(receiver_id, seq)

    def messages_after(
        self, receiver_id: str, after_seq: int, limit: int
    ) -> list[tuple[dict[str, Any], float | None]]:
        partition = self.partition_of(receiver_id)
        return self._dispatcher.store.messages_after(receiver_id, partition, after_seq, limit)

    def seen_seq(self, receiver_id: str, message_id: str, now: float) -> int | None:
        return self._dispatcher.store.seen_seq(receiver_id, message_id, now)

    def backlog_entry(self, receiver_id: str, seq: int) -> dict[str, Any] | None:
        return self._dispatcher.store.get_backlog(receiver_id, seq)

    def message_cancelled(self, receiver_id: str, message_id: str) -> bool:
        return self._dispatcher.store.cancelled(receiver_id, message_id)

    def is_pending(self, receiver_id: str, seq: int) -> bool:
        return self._dispatcher.store.pending(receiver_id, seq)

    def superseded_by(self, receiver_id: str, seq: int) -> int:
        return self._dispatcher.store.superseded_by(receiver_id, seq)

    def last_write(self) -> int:
        return self._dispatcher.store.last_write()

    def durable_through(self, receiver_id: str, number: int) -> bool | None:
        return self._dispatcher.store.durable_through(receiver_id, number)

    async def requests_applied(self, receiver_id: str, wait: float) -> bool:
        return await self._dispatcher.requests_applied(receiver_id, wait)

    # writes --------------------------------------------------------------------------------------

    async def produce_requests(self, records: list[tuple[str, bytes]]) -> None:
        await self._dispatcher.produce_requests(records)

    async def produce_commands(self, records: list[tuple[str, bytes]]) -> None:
        await self._dispatcher.produce_commands(records)

    async def produce_event(self, event_id: str, record: bytes) -> None:
        await self._dispatcher.produce_event(event_id, record)

    async def subscription_published(self, receiver_id: str) -> None:
        await self._dispatcher.subscription_published(receiver_id)

    async def count_subscribers(
        self, event_type: str, tenant: str | None, wait: float, payload: Any = None, own_only: bool = False
    ) -> int:
        feed = self._dispatcher.feed
        await feed.sync(time.monotonic(), wait)  # receivers created just before count
        found = feed.index.match(event_type, tenant, filter_document(event_type, payload, None))
        if own_only:
            return sum(1 for rid in found if feed.index.tenant_of(rid) == (tenant,))
        return len(found)

    async def receiver_tenant(self, receiver_id: str, wait: float) -> tuple[bool, str | None]:
        feed = self._dispatcher.feed
        found = feed.index.tenant_of(receiver_id)
        if found is None:
            await feed.sync(time.monotonic(), wait)  # created a moment ago, on another worker
            found = feed.index.tenant_of(receiver_id)
        return (False, None) if found is None else (True, found[0])

    # tenant tokens -------------------------------------------------------------------------------

    async def find_token(self, token_id: str, wait: float) -> TokenRecord | None:
        feed = self._dispatcher.tokens
        record = feed.book.get(token_id)
        if record is None:
            await feed.sync(time.monotonic(), wait)  # minted a moment ago, on another worker
            record = feed.book.get(token_id)
        return record

    async def store_token(self, record: TokenRecord) -> TokenRecord:
        return await self._dispatcher.store_token(record)

    async def list_tokens(self, wait: float) -> list[TokenRecord]:
        feed = self._dispatcher.tokens
        await feed.sync(time.monotonic(), wait)
        return feed.book.listed()

    # requests to a receiver's endpoint -----------------------------------------------------------

    async def check_url(self, url: str, field: str = "url") -> None:
        await self._dispatcher.guard.check_url(url, field)

    async def verify(self, config: ReceiverConfig) -> Verification:
        return await self._dispatcher.deliverer.verify(config)

    async def ping(self, receiver_id: str, config: ReceiverConfig) -> Outcome:
        dispatcher = self._dispatcher
        outcome = await dispatcher.deliverer.ping(receiver_id, config)
        # Into the attempt log like any attempt; a 2xx may close an open circuit.
        await dispatcher.send_outcome(receiver_id, self.partition_of(receiver_id), outcome)
        return outcome

    async def attempts_since(self, after: int, wait: float) -> tuple[int, list[dict[str, Any]]]:
        return await self._dispatcher.activity.wait_since(after, wait)

    async def receiver_survey(self, top: int) -> dict[str, Any]:
        survey = await survey_in_chunks(self._dispatcher.runner.book, top, frozenset())
        now = time.time()
        oldest = [{"receiver_id": rid, "age": round(now - lag.oldest, 3)} for rid, lag in survey.chosen]
        return {"by_status": dict(survey.statuses), "oldest": oldest}


if TYPE_CHECKING:

    def _conforms(dispatcher: Dispatcher) -> Engine:
        """Never called: mypy checks here that the port is an `Engine` (tests/unit/test_web_boundary.py
        runs it)."""
        return DispatcherPort(dispatcher)
