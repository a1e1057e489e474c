"""Assembles one worker: topology, actor, delivery, timers, web API; runs it."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from pathlib import Path
from typing import Any, cast

from aiokafka import TopicPartition
from mode import Service
from yarl import URL

from web.app import setup_metrics, setup_web, web_middlewares
from web.tracing import add_tracing

from . import collector
from .activity import Activity
from .actor_parts import Outlets, build_actor_parts
from .applied import SharedEnds
from .consume import SOURCE_HEADER, subscribe
from .deliverer import API_SLOTS
from .domain.record_seal import SEAL_HEADER, seal
from .domain.records import WAKE_RECORD, Outcome, encode_outcome
from .domain.tokens import TokenRecord, encode_record
from .ends_reader import EndsReader
from .event_loop import new_event_loop
from .failures import log_failure
from .fanout import FanOut
from .fence import Fence
from .heap import HeapTrimmer
from .http1 import Http1Transport
from .log_format import logging_config
from .logs import library_level
from .metrics import parse_receiver_ids
from .overrides.app import DispatcherApp, QuietWorker
from .overrides.highwaters import client_options, fetched_highwaters
from .ownership import Ownership
from .partitioning import partitioner
from .ports import CannotListen, check_port_free
from .settings import RECORD_OVERHEAD, Settings, SettingsError
from .slow_lane import Pacer, SlowLane
from .subscription_feed import SubscriptionFeed
from .table_writer import ChangelogTable, Fenced, StorageFailed
from .target_guard import TargetGuard
from .timers import PartitionTimers
from .token_feed import TokenFeed
from .topology import TOKEN_PARTITIONS, Topology, build_topology, topic_config, topic_names
from .tracing import setup_tracing
from .transport import AiohttpTransport, Transport
from .web_port import DispatcherPort
from .worker_metrics import LoopLag, worker_registry

# DISPATCHER_HTTP_CLIENT: the lean client by default; aiohttp's is the fallback.
HTTP_CLIENTS: dict[str, type[Http1Transport] | type[AiohttpTransport]] = {
    "http1": Http1Transport,
    "aiohttp": AiohttpTransport,
}

log = logging.getLogger(__name__)

OLD_CLEAN_MARKER = ".clean-shutdown"
STORAGE_FAULT_EXIT = 75  # EX_TEMPFAIL: restart me (on room to write, or elsewhere)
WAKE_LEASE = 30.0
API_HEADERS = [(SOURCE_HEADER, b"api")]  # the metrics' source of an accepted message (consume.py)


class Dispatcher:
    """One worker's parts, wired together; nothing starts until Faust starts."""

    def __init__(self, settings: Settings, transport: Transport | None = None) -> None:
        self.settings = settings
        self.names = topic_names(settings)
        self.topology: Topology = build_topology(settings, web_middlewares(settings))
        app = self.topology.app
        self.guard = TargetGuard(settings.target_policy(), dns=settings.dns_policy())
        pool = settings.slot_pool()
        transport = transport or http_client(settings.http_client)(
            self.guard,
            settings.timeout,
            settings.connect_timeout,
            settings.response_cap,
            sum(pool.limits.values()) + API_SLOTS,
            Path(settings.ca_file) if settings.ca_file else None,
        )
        self.timers = PartitionTimers(self._send_wake, settings.timer_resolution)
        self.partition_of = partitioner(settings.partitions)
        # A stall past half the session may have cost this worker its partitions (stall_fence.py).
        self.fence = Fence(
            settings.session_timeout / 2, max(3 * settings.heartbeat_interval, settings.session_timeout / 2),
            rebalancing=lambda: bool(self.topology.app.rebalancing),
        )
        self.table = ChangelogTable(
            self.topology.actors, settings.changelog_linger_ms / 1000, on_fault=self._on_storage_fault,
            may_write=self.fence.allows,
        )
        self.slow_lane = SlowLane(Pacer(settings.slow_lane_rate))
        outlets = Outlets(self.send_outcome, self._wake_soon, self._send_dead_letter, self.slow_lane.put,
                          self._publish_subscription)
        parts = build_actor_parts(settings, self.table, self.partition_of, transport, self.timers, outlets,
                                  self.names["requests"])
        self.store, self.deliverer, self.runner = parts.store, parts.deliverer, parts.runner
        self.feed = SubscriptionFeed(
            self.names["subscriptions"], settings.partitions, client_options(app, "subscriptions"),
            declare=self.topology.subscriptions.maybe_declare, idle_poll_ms=settings.feed_idle_wait_ms,
        )
        # A tenant's share of the lanes binds while receivers of more than one tenant exist, and until
        # the subscription feed is read (before it, the index cannot tell).
        feed = self.feed
        self.deliverer.pool.shared = lambda: not feed.caught_up.is_set() or feed.index.tenants() > 1
        self.tokens = TokenFeed(
            self.names["tokens"], TOKEN_PARTITIONS, client_options(app, "tokens"),
            declare=self.topology.tokens.maybe_declare, idle_poll_ms=settings.feed_idle_wait_ms,
        )
        self.ownership = Ownership(app, self.names["requests"], self.runner, self.fence)
        self._ends = EndsReader(client_options(app, "ends"))
        self._request_ends = SharedEnds(self._read_request_end)
        self.deliverer.may_post = self.ownership.may_post
        self.runner.may_write = self.fence.allows
        self._subscription_sends: dict[str, asyncio.Future[Any]] = {}  # receiver id -> unacked send
        self._declared = asyncio.Event()  # the dead-letter, subscription and token topics exist
        self.storage_fault: BaseException | None = None
        self._crashing: asyncio.Future[None] | None = None
        self.runner.writable = self.ownership.writable
        self.activity = Activity()  # the developer UI's live tail and per-minute figures
        self.runner.on_attempt = self.activity.attempt
        # internal=True: Faust declares both topics with our partition count
        # before subscribing (a broker that auto-creates would pick its own).
        source = app.topic(
            self.names["requests"], self.names["commands"],
            key_type=bytes, value_type=bytes, partitions=settings.partitions, internal=True,
            config=topic_config(settings),
        )
        subscribe(app, source, self.names["commands"], self.runner)
        self.fanout = FanOut(self.feed, self.produce_requests, self._send_dead_letter,
                             settings.max_record_bytes - RECORD_OVERHEAD)
        self.fanout.register(app, self.topology.events)
        app.flush_hooks.append(self._flush_table)
        self.topology.actors.on_recover(self.ownership.on_recovered)
        app.on_partitions_revoked.connect(self.ownership.on_revoked)  # type: ignore[arg-type]  # mode's stub
        self.slow_lane.deliverer = self.deliverer
        self.loop_lag = LoopLag()
        self.table.ack_seconds = self.deliverer.counts.changelog_seconds.observe
        self.metrics = worker_registry(self, self.loop_lag)  # /metrics, read at scrape time
        self.tracing = setup_tracing()  # off unless OTEL_* asks for traces
        self.deliverer.tracing = self.fanout.tracing = self.tracing
        self.deliverer.trace_receivers = parse_receiver_ids(settings.trace_receivers)
        # The background loops, each a service that owns its task; every loop ends at its stop.
        self.services: list[Service] = [
            self.table, self.fence, self.timers, self.slow_lane, HeapTrimmer(settings.heap_trim_interval),
            self.loop_lag,
        ]
        for service in self.services:
            # Added before the app's own services (consumer, producer, tables), so started before
            # them and stopped after them: the consumer's last commit, which flushes the table
            # (`_flush_table`), still finds the fence ticking and the table's sender there.
            app.add_dependency(service)
        # The feed declares its topic first, which needs the app's producer: it starts once the
        # app has (an app task), and stops with it.
        self.services += [self.feed, self.tokens]
        app.task(self._start_feed)
        app.task(self._settle_collector)
        app.on_before_shutdown.connect(self._on_shutdown)  # type: ignore[arg-type]  # mode's stub
        # Faust's aiohttp driver holds the aiohttp app; the views see the worker through the port only.
        setup_web(cast(Any, app.web).web_app, DispatcherPort(self))
        setup_metrics(cast(Any, app.web).web_app)
        if self.tracing.enabled:
            add_tracing(cast(Any, app.web).web_app, self.tracing)

    @property
    def app(self) -> DispatcherApp:
        return self.topology.app

    # producers ----------------------------------------------------------------

    async def produce_requests(self, records: list[tuple[str, bytes]]) -> None:
        """Produce to the requests topic and wait until every record is acked (marked as the API's:
        a fan-out copy says so in its value), each sealed as a worker's (record_seal.py)."""
        headers = API_HEADERS + self.tracing.record_headers() if self.tracing.enabled else API_HEADERS
        key = self.runner.seal_key
        if key is None:
            await _send_all(self.topology.requests, records, headers)
        else:
            await _send_all(self.topology.requests, records,
                            lambda rid, value: [*headers, (SEAL_HEADER, seal(key, rid, value))])

    async def produce_commands(self, records: list[tuple[str, bytes]]) -> None:
        """Produce the API's configuration and control records to the commands topic (workers only)."""
        await _send_all(self.topology.commands, records)

    async def send_outcome(self, receiver_id: str, partition: int, outcome: Outcome) -> None:
        """Report an outcome to the receiver's actor: at once if its partition is here and settled,
        else through the commands topic (waiting until the broker has it)."""
        if not await self.runner.apply_outcome(receiver_id, partition, outcome):
            await _send(self.topology.commands, receiver_id, encode_outcome(outcome))

    async def _send_wake(self, receiver_id: str, partition: int) -> None:
        """A timer fired: ask the receiver's stream to act (only it may write the table)."""
        if partition not in self.ownership.owned:
            return
        if not self.fence.allows():  # ownership in doubt: ask again once the group has spoken
            self.timers.set(receiver_id, partition, time.time() + 1.0)
            return
        # Should the wake record be lost, the receiver is woken again later.
        self.timers.set(receiver_id, partition, time.time() + WAKE_LEASE)
        await self.topology.commands.send(key=receiver_id.encode(), value=WAKE_RECORD)

    def _wake_soon(self, receiver_id: str, partition: int) -> None:
        """An outcome never reached the actor: wake the receiver so its head is tried again."""
        if partition in self.ownership.owned:
            self.timers.set(receiver_id, partition, time.time())

    def _on_storage_fault(self, exc: BaseException) -> None:
        """A table write was lost: stop the worker, so that no offset is committed past it and the
        partitions go to an owner that rebuilds them from the changelog."""
        self.storage_fault = exc
        reason = StorageFailed(f"a table write was lost: {exc}")
        self._crashing = asyncio.ensure_future(self.app.crash(reason))

    async def _flush_table(self) -> None:
        """Before a commit, and before partitions are handed over: no command is half applied.

        Fenced in a rebalance (a stall cost this worker its partitions): the writes not yet
        sent are dropped instead, never sent late over the next owner's; their records were
        never committed and are read again by whoever owns them next.
        """
        deadline = time.monotonic() + 2 * self.settings.session_timeout
        while not self.fence.allows():  # a commit waits (it must not pass writes made in doubt)
            if self.app.rebalancing:
                async with self.runner.lock:
                    self.table.discard_unsent()
                self.fence.on_revoked()  # dropped writes: no commit until the next assignment
                return
            if time.monotonic() > deadline:
                raise Fenced("ownership still in doubt: this worker stops rather than commit")
            await asyncio.sleep(0.05)
        async with self.runner.lock:
            await self.table.flush()

    async def produce_event(self, event_id: str, record: bytes) -> None:
        """Produce to the events topic and wait until the broker has it (with the trace's context)."""
        await _send(self.topology.events, event_id, record, self.tracing.record_headers() or None)

    async def _publish_subscription(self, receiver_id: str, record: bytes | None) -> None:
        """Hand the record to the producer; the next commit's flush waits for it (as for the table).

        Not waiting for each ack keeps a burst of configures (e.g. a bulk
        registration) from taking one broker round trip each.
        """
        await self._declared.wait()
        fut = await self.topology.subscriptions.send(key=receiver_id.encode(), value=record)
        what = f"could not publish the subscription of receiver_id={receiver_id}"
        fut.add_done_callback(log_failure(log, what))
        self._subscription_sends[receiver_id] = fut
        fut.add_done_callback(lambda done: self._forget_send(receiver_id, done))

    def _forget_send(self, receiver_id: str, done: Any) -> None:
        if self._subscription_sends.get(receiver_id) is done:
            del self._subscription_sends[receiver_id]

    async def subscription_published(self, receiver_id: str) -> None:
        """Wait until the receiver's last subscription change is in the broker (for the API:
        the actor does not wait for it). Raises if that send failed."""
        async with self.runner.lock:  # the command that stored the state may still be publishing
            pending = self._subscription_sends.get(receiver_id)
        if pending is not None:
            await asyncio.shield(pending)

    async def store_token(self, record: TokenRecord) -> TokenRecord:
        """Write a token's record (minted or revoked) and wait until the broker has it; this worker's
        book has it at once (the others once their feed reads it). The record as the book keeps it."""
        await self._declared.wait()
        await _send(self.topology.tokens, record.id, encode_record(record))
        return self.tokens.book.put(record)

    async def _send_dead_letter(self, receiver_id: str, record: bytes) -> None:
        self.activity.dead_letter(receiver_id, record)
        await self._declared.wait()
        await _send(self.topology.dead_letters, receiver_id, record)

    # read your writes: requests applied --------------------------------------------

    async def requests_applied(self, receiver_id: str, wait: float) -> bool:
        """Wait (at most `wait` s) until this worker has applied the receiver's requests partition up
        to its end as of now, so a message accepted before the call is in the table.

        False when the wait ran out, or the partition's ownership changed meanwhile.
        """
        deadline = time.monotonic() + wait
        partition, ownership = self.partition_of(receiver_id), self.ownership
        generation = ownership.generation
        if not (ownership.ready and partition in ownership.owned):
            return False
        try:
            async with asyncio.timeout(wait):
                end = await self._request_ends.end_after(partition)
        except TimeoutError:
            return False
        except Exception as exc:  # noqa: BLE001 - the broker or the consumer: not sure, so not caught up
            log.warning("cannot read the end of requests partition %d (%s: %s)",
                        partition, type(exc).__name__, exc)
            return False
        applied = await self.runner.applied.reached(partition, end, deadline - time.monotonic())
        return applied and ownership.generation == generation and partition in ownership.owned

    async def _read_request_end(self, partition: int) -> int:
        """A requests partition's true end: ListOffsets, raised to what a fetch reports (the embedded
        broker answers ListOffsets short of a multi-record batch's end; see overrides/highwaters.py).
        Asked on a connection of its own, not behind the group consumer's fetch (ends_reader.py)."""
        tp = TopicPartition(self.names["requests"], partition)
        end = (await self._ends.end_offsets([tp])).get(tp, 0)
        if not end:
            return 0
        exact = await fetched_highwaters({tp: end}, fetch_max_wait_ms=self.settings.fetch_max_wait_ms,
                                         **client_options(self.app, "highwaters"))
        return int(exact[tp])

    # ownership ----------------------------------------------------------------

    def owner_url(self, receiver_id: str) -> URL | None:
        """The web URL of the worker that owns this receiver, or None if unknown."""
        partition = self.partition_of(receiver_id)
        if partition in self.ownership.owned:
            return URL(self.app.conf.canonical_url)
        changelog = self.topology.actors.changelog_topic.get_topic_name()
        for url, topics in self.app.router.table_metadata(self.topology.actors.name).items():
            if partition in topics.get(changelog, ()):
                return URL(url)
        return None

    def worker_urls(self) -> list[URL]:
        """Every worker that owns partitions of the receivers' table, this one included."""
        urls = {str(url) for url in self.app.router.table_metadata(self.topology.actors.name)}
        urls.add(str(self.app.conf.canonical_url))
        return sorted(URL(url) for url in urls)

    def is_local(self, receiver_id: str) -> bool:
        return self.partition_of(receiver_id) in self.ownership.owned

    # lifecycle ----------------------------------------------------------------

    async def _start_feed(self) -> None:
        # The topics only ever produced to, declared with the partition count of the others before
        # anything is sent there: a send first would have a broker auto-create it with its own
        # count (the feed then waited for partitions that did not exist), or fail where
        # auto-create is off.
        try:
            await self.topology.dead_letters.maybe_declare()
            await self.topology.subscriptions.maybe_declare()
            await self.topology.tokens.maybe_declare()
        finally:
            self._declared.set()  # a failure crashes the worker; nothing waits for ever
        await self.app.add_runtime_dependency(self.feed)
        await self.app.add_runtime_dependency(self.tokens)

    async def _settle_collector(self) -> None:
        collector.settle()  # the app is built and started: what exists now stays

    async def _on_shutdown(self, sender: Any = None, **_: Any) -> None:
        await self.deliverer.close()
        await self._ends.close()
        self.tracing.shutdown()  # export the spans still buffered

    def stats(self) -> dict[str, Any]:
        return {
            "partitions": sorted(self.ownership.owned),
            "in_flight": self.deliverer.in_flight,
            "delivery": {**self.deliverer.stats(), "slow_lane_queued": len(self.slow_lane)},
            "subscriptions": {"receivers": len(self.feed.index), "caught_up": self.feed.caught_up.is_set()},
            "tokens": {"records": len(self.tokens.book), "caught_up": self.tokens.caught_up.is_set()},
            "timers": len(self.timers),
            "collector": collector.stats(),
            "activity": self.activity.figures(),
            # Ends of requests partitions read for status reads of ids not found (read your writes).
            "end_reads": self._request_ends.reads,
        }


async def _send_all(topic: Any, records: list[tuple[str, bytes]], headers: Any = None) -> None:
    """Produce records keyed by receiver id, then wait until the broker has every one. `headers`: the
    same for every record, or made for each from its receiver id and value."""
    futures = [await topic.send(key=rid.encode(), value=value,
                                headers=headers(rid, value) if callable(headers) else headers)
               for rid, value in records]
    for fut in futures:
        await fut


async def _send(topic: Any, key: str, value: bytes | None, headers: Any = None) -> None:
    """Produce one record and wait until the broker has it (None: a tombstone)."""
    fut = await topic.send(key=key.encode(), value=value, headers=headers)
    await fut


def prepare_data_dir(data_dir: Path) -> None:
    """Keep the local tables, however the last run ended.

    A local store never holds a write its changelog lacks (`table_writer`), so
    after a kill -9 too it is a prefix of the changelog up to the offset it
    records, and recovery reads only the rest. Earlier versions dropped the
    tables after an unclean stop; their marker file is removed.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / OLD_CLEAN_MARKER).unlink(missing_ok=True)


def http_client(name: str) -> type[Http1Transport] | type[AiohttpTransport]:
    kind = HTTP_CLIENTS.get(name)
    if kind is None:
        raise SettingsError(f"DISPATCHER_HTTP_CLIENT={name!r}: must be one of " + ", ".join(HTTP_CLIENTS))
    return kind


def run_worker(settings: Settings) -> int:
    """Run one worker until SIGINT/SIGTERM; return the exit code."""
    try:
        check_port_free(settings.web_host, settings.web_port, "DISPATCHER_WEB_PORT", "DISPATCHER_WEB_HOST",
                        any_port=False)
    except CannotListen as exc:
        print(f"webhook-dispatcher worker: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    loop = new_event_loop(settings.event_loop)
    prepare_data_dir(settings.data_dir)
    dispatcher = Dispatcher(settings)
    worker = QuietWorker(dispatcher.app, loglevel=settings.log_level.upper(), quiet=True, loop=loop,
                         logging_config=logging_config(settings.log_format, settings.log_level))
    worker.library_log_level = library_level(settings.library_log_level)
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except StorageFailed as exc:  # Faust re-raises the crash's reason once it has stopped
        log.critical("worker stopped: %s", exc)
        code = STORAGE_FAULT_EXIT
    else:
        code = 0
    if dispatcher.storage_fault is not None:
        code = STORAGE_FAULT_EXIT
    return code
