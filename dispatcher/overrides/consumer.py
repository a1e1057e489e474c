"""Faust's aiokafka consumer, changed where a record could be lost, skipped or applied twice.

What it changes, each with the failure that made it necessary:

- `_ConsumerThread._highwaters`: a changelog's end is what a fetch reports
  (`highwaters.py`), whatever ListOffsets answers.
- `_ConsumerThread` builds aiokafka's consumer with our fetch wait (Faust
  hardcodes 1,500 ms) and adapts it after every fetch (`fetcher.py`), and
  makes its group coordinator leave the group on a clean stop from the
  embedded broker's generation 0 too (`leave.py`), or, as a static member,
  hand its membership to its restart (`resume.py`).
- `_Consumer` hands every record of a strict partition over once and in
  order, reading skipped offsets again, and never commits past an offset that
  was not processed (`_new_offset`).
- `_Consumer._drain_messages` is Faust's fetch loop with those checks, and with
  records of a direct source applied in it (`_apply_direct`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import aiokafka as faust_aiokafka

from .. import __version__
from ..membership import FILE_NAME as TICKET_FILE
from .fetcher import adapt_fetch_wait
from .highwaters import client_options, fetched_highwaters
from .leave import leave_on_stop
from .resume import hand_over_on_stop

if TYPE_CHECKING:
    from .app import DispatcherApp

log = logging.getLogger(__name__)


def _ours(app: Any) -> DispatcherApp:
    """Faust types its parts' app as `AppT`; ours is always a `DispatcherApp`."""
    return cast("DispatcherApp", app)


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        # Read by AIOKafkaConsumer.start() when it builds its fetcher.
        consumer._fetch_max_wait_ms = _ours(self.app).fetch_max_wait_ms
        return consumer

    async def on_start(self) -> None:
        await super().on_start()
        consumer = self._ensure_consumer()
        adapt_fetch_wait(consumer, idle_cap_ms=_ours(self.app).fetch_idle_wait_ms)
        leave_on_stop(consumer)
        hand_over_on_stop(consumer, Path(self.app.conf.appdir) / TICKET_FILE,
                          url=str(self.app.conf.canonical_url), build=__version__)

    async def _highwaters(self, partitions: Iterable[Any]) -> Mapping[Any, int]:
        """Faust's ListOffsets answers, raised to what a fetch from each end - 1 reports.

        Table recovery reads a changelog up to these ends, so an end short of the
        true one leaves the last records unread: a state older than its changelog,
        and seqs given again to other messages (6 kill -9 cycles of 2 workers on
        the embedded broker, which answers ListOffsets with the last batch's base
        offset + 1, reused 8). Always asked: on Kafka the two agree, and it costs
        one small fetch per non-empty partition per recovery.
        """
        ends = dict(await super()._highwaters(list(partitions)))
        if self.consumer.in_transaction:
            return ends
        return {**ends, **await self._fetched_highwaters({tp: end for tp, end in ends.items() if end})}

    async def _fetched_highwaters(self, ends: dict[Any, int]) -> dict[Any, int]:
        options = client_options(self.app, "highwaters")
        return await fetched_highwaters(ends, fetch_max_wait_ms=_ours(self.app).fetch_max_wait_ms, **options)



class _Consumer(faust_aiokafka.Consumer):
    """Faust's consumer, except that every record of a strict partition is read once, in order.

    Faust treats a jump in a source partition's offsets as a "gap" (compaction,
    transaction markers) and acks the skipped offsets, so the next commit
    passes over them; and records fetched before a seek can still be handed to
    the agent or to table recovery after it. In the kill -9 chaos test both
    happened right after rebalances: requests were skipped and never processed
    (accepted messages lost), and recovery ended early on a stale changelog
    record. Strict partitions are our agent's sources (requests, commands: no
    compaction, no transactions) and, on a broker that never compacts
    (`contiguous_changelogs`, the embedded one), the changelogs. For them:
    every seek sets the next expected offset before it is made; a record below
    it is dropped, and a jump past it seeks back and reads the skipped records
    again (after `READ_AGAIN_TRIES` at one offset it gives up, logs an error
    and lets the commit pass). Only while Faust's own seek after recovery runs
    (its offsets not known yet) is everything that arrives dropped; the source
    partitions are sought again after it (`perform_seek`).
    """

    READ_AGAIN_TRIES = 10
    REAPPLY_PAUSE = 1.0  # seconds before a record whose apply raised is read again

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._expected: dict[Any, int | None] = {}  # strict partition -> next offset to hand over
        self._seeking: set[Any] = set()
        self._tries: dict[tuple[Any, int], int] = {}
        self._strict_topics: dict[str, bool] = {}
        self._reread_at: dict[tuple[Any, int], float] = {}
        self._rereads: set[asyncio.Task[None]] = set()
        self._interrupt: asyncio.Future[Any] | None = None  # done once the flow is suspended or we stop

    def _new_consumer_thread(self) -> _ConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    def _strict(self, topic: str) -> bool:
        strict = self._strict_topics.get(topic)
        if strict is None:
            strict = self.app.topics.acks_enabled_for(topic) or _ours(self.app).contiguous_changelogs
            self._strict_topics[topic] = strict
        return strict

    async def perform_seek(self) -> None:
        """Faust's seek to the committed offsets, then one seek of every source partition at once.

        Faust seeks partition by partition, each after its own committed-offset
        request, while fetching goes on; what arrives meanwhile is dropped (it may
        predate the seek), including records fetched after a partition's own seek,
        which would then never come again (in the 100,000-receiver recovery bench,
        three partitions' records were never processed). Faust also leaves a
        partition with no committed offset where its fetch was. So the source
        partitions are sought again together, to the committed offset or, without
        one, to their earliest. That last seek is judged by offset, not by time:
        the expected offsets are set first, so whatever arrives around it, fetched
        before or after, is handed over if it is the next record, dropped if older,
        and read again from the expected one if it jumps ahead. (Dropping by time
        lost records once in CI: a fetch result that raced the seek's completion
        was dropped after the position had passed it.)
        """
        tps = set(self.assignment())
        targets: dict[Any, int] = {}
        self._seeking |= tps
        try:
            await super().perform_seek()
            sources = self.app.topics.acks_enabled_for
            committed = {tp: self._read_offset.get(tp) for tp in tps if sources(tp.topic)}
            uncommitted = [tp for tp, offset in committed.items() if offset is None]
            starts = await self.earliest_offsets(*uncommitted) if uncommitted else {}
            if uncommitted:
                log.info("no committed offset for %d source partitions: reading them from their start",
                         len(uncommitted))
            targets = {tp: starts.get(tp, 0) if at is None else at for tp, at in committed.items()}
            for tp in tps:  # the next offset to hand over (None: not known)
                self._expected[tp] = targets[tp] if tp in targets else self._read_offset.get(tp)
            self._positioned(targets)
        finally:
            self._seeking -= tps
        if targets:
            await super().seek_wait(targets)

    async def seek_wait(self, partitions: Mapping[Any, int]) -> None:
        # Expectation first: what arrives around the seek is judged by its offset (see perform_seek).
        self._expected.update(partitions)
        self._positioned(partitions)
        await super().seek_wait(partitions)

    async def seek(self, partition: Any, offset: int) -> None:
        self._expected[partition] = offset
        self._positioned({partition: offset})
        await super().seek(partition, offset)

    def _positioned(self, offsets: Mapping[Any, int]) -> None:
        """Tell the app's seek hooks where a direct source's partitions are read from next."""
        app = _ours(self.app)
        for tp, offset in offsets.items():
            if tp.topic in app.direct_sources and offset is not None:
                for hook in app.seek_hooks:
                    hook(tp, offset)

    def _new_offset(self, tp: Any) -> int | None:
        """Faust's next offset to commit, but never past an unacked offset right after the committed one.

        Faust lets the first acked offset lie one past the committed offset (it reads
        the committed offset as the last one processed; Kafka's is the next one to
        read), so a commit could pass over that offset unprocessed. In the kill -9
        chaos test that lost a single message after a restart. The agent processes a
        partition in order, so a later offset acked before that one means it never
        reached the agent: the commit waits, and the partition is read again from it.
        """
        acked, committed = self._acked[tp], self._committed_offset[tp]
        if acked and committed is not None and not self._gap[tp] and min(acked) > committed:
            now = time.monotonic()
            if tp not in self._seeking and now - self._reread_at.get((tp, committed), -60.0) > 10.0:
                log.warning("offset %d of %s[%d] was never processed: reading from it again",
                            committed, tp.topic, tp.partition)
                self._reread_at[(tp, committed)] = now  # once per 10 s: the agent may be behind
                task = asyncio.ensure_future(self.seek_wait({tp: committed}))
                self._rereads.add(task)
                task.add_done_callback(self._rereads.discard)
            return None
        return super()._new_offset(tp)

    async def _read_again(self, tp: Any, expected: int, got: int) -> bool:
        """Seek back to `expected`; False once that has not helped a few times."""
        key = (tp, expected)
        self._tries[key] = tries = self._tries.get(key, 0) + 1
        if tries > self.READ_AGAIN_TRIES:
            log.error("offsets %d..%d of %s[%d] cannot be read (%d tries): skipping them",
                      expected, got - 1, tp.topic, tp.partition, tries - 1)
            del self._tries[key]
            await self._add_gap(tp, expected, got - 1)  # so commits can pass them
            return False
        log.warning("offsets %d..%d of %s[%d] were skipped by the fetch: reading them again",
                    expected, got - 1, tp.topic, tp.partition)
        await self.seek_wait({tp: expected})
        return True

    async def _hand_over(self, delivery: Awaitable[None]) -> None:
        """Faust's `wait_first(callback(message), suspend_flow.wait())`, with one task per record.

        Faust's wait makes four tasks per record (the callback, the suspension,
        and the stop and crash events) and cancels three; here a record has the
        callback's task and one interruption future shared by every record
        until it fires (less than half the cost: docs/benchmarks.md).
        """
        task = asyncio.ensure_future(delivery)
        interrupt = self._interrupt
        if interrupt is None or interrupt.done():
            interrupt = self._interrupt = asyncio.ensure_future(self.wait_first(self.suspend_flow.wait()))
        await asyncio.wait((task, interrupt), return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()  # its exception, as wait_first raises it
        else:
            task.cancel()

    async def _apply_direct(self, apply: Callable[[Any], Awaitable[None]], message: Any) -> bool:
        """Apply a record of a direct source here, in the fetcher: what Faust's conductor, stream and
        agent would do, without their per-record task, queue and event.

        Acked only once applied, as the stream acks the event the agent is done
        with. False when it was not applied: the flow stopped for a rebalance
        (whose seek reads it again), or applying it raised; then the partition is
        read again from it after a pause, so nothing behind it goes first.
        """
        app = self.app
        if not (self.flow_active and app.flow_control.is_active()):
            return False
        if message.generation_id != app.consumer_generation_id:
            return False
        await app.producer.buffer.wait_until_ebb()
        self.track_message(message)  # a rebalance waits for it (`wait_empty`)
        try:
            await apply(message)
        except Exception:
            log.exception("cannot apply %s[%d]@%d: reading it again in %.0f s",
                          message.topic, message.partition, message.offset, self.REAPPLY_PAUSE)
            self._unacked_messages.discard(message)
            await asyncio.sleep(self.REAPPLY_PAUSE)
            try:
                await self.seek_wait({message.tp: message.offset})
            except Exception:  # e.g. the partition went in a rebalance, whose own seek reads it again
                log.exception("cannot seek %s[%d] back to %d",
                              message.topic, message.partition, message.offset)
            return False
        else:
            self.ack(message)
            # What the stream's sensor records: Faust's slow-processing check reads it.
            app.monitor.stream_inbound_time[message.tp] = time.monotonic()
            return True
        finally:
            app.sensors.on_message_out(message.tp, message.offset, message)  # as the stream's last ack

    async def _drain_messages(self, fetcher: Any) -> None:  # pragma: no cover - Faust's loop, see above
        callback = self.callback
        direct_sources = _ours(self.app).direct_sources
        getmany = self.getmany
        consumer_should_stop = self._stopped.is_set
        fetcher_should_stop = fetcher._stopped.is_set
        get_read_offset = self._read_offset.__getitem__
        set_read_offset = self._read_offset.__setitem__
        num_since_yield = 0
        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                self.diag.set_flag(CONSUMER_FETCHING)
                ait = getmany(timeout=1.0)
                await self.sleep(0)
                if self.should_stop:
                    continue
                reading_again: set[Any] = set()  # the rest of this batch of theirs is read again
                async for tp, message in ait:
                    num_since_yield += 1
                    if num_since_yield > 100:
                        await asyncio.sleep(0)
                        num_since_yield = 0
                    offset = message.offset
                    if self._strict(message.topic):
                        if tp in self._seeking or tp in reading_again:
                            continue  # fetched before the seek: it will come again
                        expected = self._expected.get(tp)
                        if expected is not None and offset < expected:
                            continue  # already handed over
                        skipped = expected is not None and offset > expected
                        if skipped and await self._read_again(tp, cast(int, expected), offset):
                            reading_again.add(tp)
                            continue
                    else:
                        r_offset = get_read_offset(tp)
                        if r_offset is not None and offset < r_offset:
                            continue
                    if self._commit_every is not None and self._n_acked >= self._commit_every:
                        self._n_acked = 0
                        await self.commit()
                    direct = direct_sources.get(message.topic)
                    if direct is None:
                        await self._hand_over(callback(message))
                    elif not await self._apply_direct(direct, message):
                        reading_again.add(tp)  # not applied: read again from it (seek or jump)
                        continue
                    set_read_offset(tp, offset)
                    self._expected[tp] = offset + 1
                    if self._tries:
                        self._tries.pop((tp, offset), None)
                self.diag.unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                self.log.info("Broker stopped consumer, shutting down...")
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                self.log.debug("Consumer shutting down for user cancel.")
                return
            raise
        except Exception as exc:
            self.log.exception("Drain messages raised: %r", exc)
            raise
        finally:
            self.diag.unset_flag(CONSUMER_FETCHING)
