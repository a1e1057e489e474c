"""What the web layer asks of the engine: one interface, plain data in and out.

Views reach the engine only through `ENGINE` (a typed app key) and only for
what `Engine` declares; `dispatcher/web_port.py` implements it over a worker.
Reads of a receiver's stored data (state, attempts, dead letters, messages)
answer from this worker's partitions only: views call them on the owner,
after `is_local` (or `owner_routed`) said that is this worker.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import ClientSession, web
from yarl import URL

from dispatcher.domain.actor import Policy, ReceiverState
from dispatcher.domain.records import Outcome, ReceiverConfig, Verification
from dispatcher.domain.tokens import TokenRecord


@dataclass(slots=True, frozen=True)
class WebSettings:
    """The worker's settings that views read."""

    api_token: str  # /readyz shows its figures only to a caller with it
    max_payload: int  # bytes of one encoded message or event
    max_request_body: int
    max_batch: int  # messages in one batch (the API caps it at 1,000 as well)
    require_https: bool  # receivers' URLs
    verify_endpoints: bool  # default of a receiver's `verify`
    secret_grace: float  # default seconds a rotated-out secret still signs
    ui_session_ttl: float  # seconds a developer-console session lasts
    policy: Policy  # the actor's: backlog caps, wake times and retention as the actor applies them
    metrics_token: str = ""  # /metrics needs it as a bearer token when set


@dataclass(slots=True, frozen=True)
class InFlight:
    """A receiver's deliveries running on this worker right now."""

    busy: bool  # an attempt is running or waiting for a slot
    seqs: frozenset[int]  # seqs of an unordered receiver being posted or waiting for a slot


class Engine(Protocol):
    """Everything the HTTP API needs from the worker it runs in."""

    # settings and this worker --------------------------------------------------------------------

    @property
    def settings(self) -> WebSettings: ...

    def ready(self) -> bool:
        """This worker has recovered its partitions and no rebalance is under way."""
        ...

    def stats(self) -> dict[str, Any]:
        """The worker's figures for /readyz (partitions, in-flight deliveries, subscriptions...)."""
        ...

    async def metrics(self) -> bytes:
        """The worker's metrics in the Prometheus text format, computed now."""
        ...

    # ownership: where a receiver's requests are answered -----------------------------------------

    def partition_of(self, receiver_id: str) -> int: ...

    def is_local(self, receiver_id: str) -> bool:
        """This worker owns the receiver's partition."""
        ...

    def may_post(self, receiver_id: str) -> bool:
        """A POST for the receiver may start here: owned, and no stall put that in doubt."""
        ...

    def owner_url(self, receiver_id: str) -> URL | None:
        """The web URL of the worker that owns the receiver, or None while that is unknown."""
        ...

    def own_url(self) -> URL:
        """This worker's web URL, as other workers reach it."""
        ...

    def worker_urls(self) -> list[URL]:
        """Every worker that owns partitions of the receivers, this one included."""
        ...

    @property
    def http_client(self) -> ClientSession:
        """The worker's client session, for requests to other workers."""
        ...

    # a receiver's stored data (on its owner) -----------------------------------------------------

    def receiver_state(self, receiver_id: str) -> ReceiverState | None: ...

    def receiver_states_after(self, after: str) -> list[Iterable[ReceiverState]]:
        """Per partition owned here (in partition order): its receivers with ids above `after`, in
        id order, read lazily."""
        ...

    def in_flight(self, receiver_id: str) -> InFlight: ...

    def attempts(self, receiver_id: str, newest: int, limit: int) -> list[dict[str, Any]]:
        """Up to `limit` entries of the attempt log, newest (number `newest`) first."""
        ...

    def dead_letters(self, receiver_id: str, after_seq: int, limit: int) -> list[dict[str, Any]]:
        """Up to `limit` dead letters with seqs above `after_seq`, in seq order."""
        ...

    def dead_letter(self, receiver_id: str, seq: int) -> dict[str, Any] | None: ...

    def messages_after(
        self, receiver_id: str, after_seq: int, limit: int
    ) -> list[tuple[dict[str, Any], float | None]]:
        """Up to `limit` kept and buffered messages above `after_seq` in seq order, each with when it
        settled (None: still buffered)."""
        ...

    def seen_seq(self, receiver_id: str, message_id: str, now: float) -> int | None:
        """The seq given to `message_id`, while the dedup window remembers it."""
        ...

    def backlog_entry(self, receiver_id: str, seq: int) -> dict[str, Any] | None: ...

    def message_cancelled(self, receiver_id: str, message_id: str) -> bool:
        """The receiver's transform cancelled the message (while the dedup window remembers it)."""
        ...

    def is_pending(self, receiver_id: str, seq: int) -> bool:
        """The message is stored and not settled yet."""
        ...

    def superseded_by(self, receiver_id: str, seq: int) -> int:
        """The newer seq of its key that message `seq` gave way to (coalescing); 0 if it did not."""
        ...

    def last_write(self) -> int:
        """The number of the newest write to the receivers' table on this worker (of any receiver)."""
        ...

    def durable_through(self, receiver_id: str, number: int) -> bool | None:
        """The receiver's partition has every write up to `number` in its changelog; None: one of them
        was dropped unsent (a rebalance under a stall) and never will be."""
        ...

    async def requests_applied(self, receiver_id: str, wait: float) -> bool:
        """Wait (at most `wait` s) until this owner has applied the receiver's requests partition up to
        its end as of the call: a message accepted before it is then in the table. False when the wait
        ran out or the partition's ownership changed meanwhile."""
        ...

    # writes: records the receivers' streams apply ------------------------------------------------

    async def produce_requests(self, records: list[tuple[str, bytes]]) -> None:
        """Produce messages keyed by receiver id; returns once the broker has every one."""
        ...

    async def produce_commands(self, records: list[tuple[str, bytes]]) -> None:
        """Produce configuration and control records keyed by receiver id; returns once acked."""
        ...

    async def produce_event(self, event_id: str, record: bytes) -> None:
        """Produce an event for fan-out; returns once the broker has it."""
        ...

    async def subscription_published(self, receiver_id: str) -> None:
        """Wait until the receiver's last subscription change is in the broker; raises if it failed."""
        ...

    async def count_subscribers(
        self, event_type: str, tenant: str | None, wait: float, payload: Any = None, own_only: bool = False
    ) -> int:
        """Receivers an event would go to (their filters run over `payload`), once the subscriptions are
        read up to now (at most `wait` s); `own_only`: only those of `tenant` (not untenanted ones)."""
        ...

    async def receiver_tenant(self, receiver_id: str, wait: float) -> tuple[bool, str | None]:
        """Whether the receiver exists as every worker's copy of the subscriptions says, and its tenant;
        an id not found there is looked for again once they are read up to now (at most `wait` s)."""
        ...

    # tenant tokens (every worker holds every token's record) -------------------------------------

    async def find_token(self, token_id: str, wait: float) -> TokenRecord | None:
        """The token's record; an id not found is looked for again once the tokens are read up to now
        (at most `wait` s), so a token minted on another worker a moment ago is found."""
        ...

    async def store_token(self, record: TokenRecord) -> TokenRecord:
        """Write a minted or revoked token's record; once the broker has it, this worker's book has it
        (the others' once their feed reads it). The record as the book keeps it."""
        ...

    async def list_tokens(self, wait: float) -> list[TokenRecord]:
        """Every token's record in id order, once the tokens are read up to now (at most `wait` s)."""
        ...

    # requests to a receiver's endpoint -----------------------------------------------------------

    async def check_url(self, url: str, field: str = "url") -> None:
        """Raise InvalidInput (naming `field`) if the target guard refuses the URL."""
        ...

    async def verify(self, config: ReceiverConfig) -> Verification:
        """Run the endpoint-verification handshake against the receiver's URL."""
        ...

    async def ping(self, receiver_id: str, config: ReceiverConfig) -> Outcome:
        """POST a `webhook.ping` now and report its outcome to the receiver's actor (attempt log,
        circuit)."""
        ...

    # this worker's recent activity (the developer UI's live tail) ---------------------------------

    async def receiver_survey(self, top: int) -> dict[str, Any]:
        """This worker's receivers by status, and the `top` with the oldest undelivered message
        (`receiver_id`, `age` s): the figures /metrics reports, from the same book."""
        ...

    async def attempts_since(self, after: int, wait: float) -> tuple[int, list[dict[str, Any]]]:
        """Attempts this worker logged, numbered above `after` (oldest first, the newest few hundred
        kept), waiting at most `wait` s for one; and the newest number."""
        ...


ENGINE: web.AppKey[Engine] = web.AppKey("engine")
