"""Which partitions this worker owns, and what moves with them.

On revocation the timers pause (nothing is posted for a partition that may be
leaving). When recovery completes, partitions lost since the last assignment
drop their timers and in-flight attempts; partitions gained are scanned and
their timer wheels are rebuilt from the receivers' states, so retries, probes
and expiries resume where the last owner's changelog left them.
"""

from __future__ import annotations

import logging
from typing import Any

from .actor_runner import ActorRunner

log = logging.getLogger(__name__)


class Ownership:
    def __init__(self, app: Any, requests_topic: str, runner: ActorRunner) -> None:
        self._app = app
        self._topic = requests_topic
        self._runner = runner
        self.owned: set[int] = set()
        self.recovered = False

    @property
    def ready(self) -> bool:
        return self.recovered and not self._app.rebalancing

    def writable(self, partition: int) -> bool:
        """This worker may write the partition's entries outside its stream (an outcome made here).

        Not from the start of a rebalance (Faust sets `rebalancing` before it
        flushes and hands partitions over) until the new assignment is recovered.
        """
        return self.recovered and not self._app.rebalancing and partition in self.owned

    async def on_revoked(self, sender: Any = None, revoked: Any = None, **_: Any) -> None:
        self._runner.timers.paused = True
        self.recovered = False

    async def on_recovered(self) -> None:
        actives = {tp.partition for tp in self._app.assignor.assigned_actives() if tp.topic == self._topic}
        lost, gained = self.owned - actives, actives - self.owned
        self.owned = actives
        self._runner.store.forget_cached()  # recovery may have rewritten any partition's entries
        if lost:
            self._runner.timers.drop_partitions(lost)
            await self._runner.deliverer.drop_partitions(lost)
        woken = sum(self._wake_partition(p) for p in sorted(gained))
        self.recovered = True
        self._runner.timers.paused = False
        log.info(
            "partitions owned=%s gained=%s lost=%s timers rebuilt=%d",
            sorted(actives), sorted(gained), sorted(lost), woken,
        )

    def _wake_partition(self, partition: int) -> int:
        """Rebuild the partition's timer wheel from the receivers' states."""
        self._runner.timers.drop_partitions({partition})
        timers = 0
        for state in self._runner.store.states_in_partition(partition):
            self._runner.set_timer(state, partition)
            timers += self._runner.timers.due_at(state.receiver_id, partition) is not None
        return timers
