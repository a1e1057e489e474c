"""Which partitions this worker owns, and what moves with them.

On revocation the timers pause (nothing is posted for a partition that may be
leaving). When recovery completes, partitions lost since the last assignment
drop their timers and in-flight attempts; partitions gained are scanned and
their timer wheels are rebuilt from the receivers' states, so retries, probes
and expiries resume where the last owner's changelog left them.

The scan runs in the background, in chunks with a pause between them:
reading 100,000 states took 3 s, during which nothing was consumed. Each
receiver's timer is set from its newest state in the same step that reads
it, so a receiver the actor has touched meanwhile keeps the timer the
actor's runner gave it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from .actor_runner import ActorRunner
from .failures import log_failure
from .fence import Fence

log = logging.getLogger(__name__)

CHUNK = 100  # receivers whose timers are rebuilt between two yields (about 5 ms of the event loop)
# A real pause, not sleep(0): the event loop then waits in epoll without the GIL, and the
# consumer's thread gets it. With sleep(0) the rebuild held the GIL for seconds at a time
# (the consumer thread's timers fired 1.3 s late) and records were applied only after it.
PAUSE = 0.002


class Ownership:
    def __init__(
        self, app: Any, requests_topic: str, runner: ActorRunner, fence: Fence | None = None
    ) -> None:
        self._app = app
        self.fence = fence or Fence(float("inf"), 0.0)
        self._topic = requests_topic
        self._runner = runner
        self.owned: set[int] = set()
        self.recovered = False
        self._generation = 0  # bumped by every revocation and recovery: a stale rebuild stops
        self._unbuilt: set[int] = set()  # owned partitions whose timers are not rebuilt yet
        self._rebuild: asyncio.Task[None] | None = None
        self._revoked_at = 0.0
        self.recovery_seconds = 0.0  # the last rebalance, revocation to recovered (for /metrics)

    @property
    def generation(self) -> int:
        """Changes with every revocation and recovery: a wait that saw it change may hold stale answers."""
        return self._generation

    @property
    def ready(self) -> bool:
        return self.recovered and not self._app.rebalancing

    def writable(self, partition: int) -> bool:
        """This worker may write the partition's entries outside its stream (an outcome made here).

        Not from the start of a rebalance (Faust sets `rebalancing` before it
        flushes and hands partitions over) until the new assignment is recovered.
        """
        owned = self.recovered and not self._app.rebalancing and partition in self.owned
        return owned and self.fence.allows()

    def may_post(self, partition: int) -> bool:
        """A POST for the partition may start: it is owned here, and no stall put that in doubt."""
        return partition in self.owned and self.fence.allows()

    async def on_revoked(self, sender: Any = None, revoked: Any = None, **_: Any) -> None:
        self.fence.on_revoked()
        self._runner.timers.paused = True
        self._runner.applied.forget()  # known again from each partition's seek after the recovery
        self.recovered = False
        self._generation += 1
        self._revoked_at = time.monotonic()

    async def on_recovered(self) -> None:
        actives = {tp.partition for tp in self._app.assignor.assigned_actives() if tp.topic == self._topic}
        # After a stall the group may have given every partition to others meanwhile, and some back
        # now: nothing held from before (attempts, timers, cached entries) can be trusted.
        held = set() if self.fence.in_doubt else self.owned
        lost, gained = (self.owned - held) | (self.owned - actives), actives - held
        self.owned = actives
        self._runner.store.forget_cached()  # recovery may have rewritten any partition's entries
        if lost:
            self._runner.applied.forget(lost)  # a record being applied at the revocation marked it
            self._runner.store.hand_over(lost)
            self._runner.timers.drop_partitions(lost)
            self._runner.book.drop_partitions(lost)
            await self._runner.deliverer.drop_partitions(lost)
        self._generation += 1
        # Gained ones, and kept ones whose rebuild a rebalance cut short.
        rebuild = gained | (self._unbuilt & actives)
        self._unbuilt = set(rebuild)
        for partition in rebuild:  # until rebuilt, the runner sets the timers of what it touches
            self._runner.timers.drop_partitions({partition})
        self._runner.book.drop_partitions(rebuild)  # the rebuild counts them again
        if rebuild:
            self._rebuild = asyncio.create_task(self._rebuild_timers(sorted(rebuild), self._generation))
            # On failure its partitions stay unbuilt until the next recovery.
            self._rebuild.add_done_callback(log_failure(log, "timer rebuild failed"))
        self.recovered = True
        if self._revoked_at:
            self.recovery_seconds = time.monotonic() - self._revoked_at
        self.fence.on_assigned()
        self._runner.timers.paused = False
        log.info("partitions owned=%s gained=%s lost=%s; rebuilding the timers of %s",
                 sorted(actives), sorted(gained), sorted(lost), sorted(rebuild))

    def _current(self, generation: int, partition: int) -> bool:
        return generation == self._generation and self.recovered and partition in self.owned

    async def _rebuild_timers(self, partitions: list[int], generation: int) -> None:
        """Rebuild these partitions' timer wheels from the receivers' states, a chunk at a time."""
        started, scanned, timers = time.monotonic(), 0, 0
        store, runner = self._runner.store, self._runner
        for partition in partitions:
            receivers = store.receivers_in_partition(partition)
            in_partition = 0
            while True:
                # Checked before every read: a partition handed over may have its RocksDB closed.
                if not self._current(generation, partition):
                    log.info("timer rebuild stopped by a rebalance after %d receivers", scanned)
                    return
                receiver_id = next(receivers, None)
                if receiver_id is None:
                    break
                # The newest (the runner may have written since the scan began), decoded once and not
                # cached: 100,000 cold states would push the hot ones out of the cache.
                state = store.peek(receiver_id)
                if state is not None:
                    runner.set_timer(state, partition)
                    timers += runner.timers.due_at(state.receiver_id, partition) is not None
                scanned += 1
                in_partition += state is not None
                if scanned % CHUNK == 0:
                    await asyncio.sleep(PAUSE)
            self._unbuilt.discard(partition)
            runner.book.counted(partition, in_partition)
        log.info("timers rebuilt for partitions %s: %d receivers scanned, %d timers, %.1f s",
                 partitions, scanned, timers, time.monotonic() - started)

