"""The stall fence: after the event loop stood still, this worker's ownership is in doubt.

A worker stopped past its session timeout (SIGSTOP, a long GC, a VM pause)
is dropped from the consumer group and its partitions go to another worker,
but it learns that only at its next heartbeat. Until then it would go on
writing changelogs and POSTing for receivers it no longer owns. The loop
ticks every fraction of a second; a gap longer than `stall_limit` between
ticks means the worker may have been away long enough to lose its
partitions, so from the moment the gap is seen (before any other work of the
resumed loop can check) the fence holds: no table write, no new POST. It
lifts when the group assigns partitions again (the assignment is then what
the group says), or, if no rebalance began within `release_after`, because
the membership evidently survived.

Pure: the caller passes the time.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class StallFence:
    stall_limit: float  # seconds the loop may stand still before ownership is in doubt
    release_after: float  # no rebalance within this after the stall: the membership survived
    last_tick: float = 0.0  # 0: not started (nothing to judge yet)
    fenced_at: float | None = None
    stalled_for: float = 0.0  # the gap that engaged the fence
    revoked: bool = False  # a rebalance began while fenced: only an assignment lifts it

    def tick(self, now: float) -> None:
        """The loop is running: called every fraction of a second."""
        self._judge(now)
        self.last_tick = now

    def allows(self, now: float, rebalancing: bool = False) -> bool:
        """May this worker write its tables and start POSTs now? (`rebalancing`: the group's
        rebalance has begun, before the revocation is signalled: time no longer lifts the fence.)"""
        self._judge(now)
        if self.fenced_at is None:
            return True
        if rebalancing:
            self.revoked = True
        if not self.revoked and now - self.fenced_at >= self.release_after:
            self.fenced_at = None  # no rebalance came: the group never dropped us
            return True
        return False

    @property
    def in_doubt(self) -> bool:
        """Engaged and not lifted by time: whatever this worker held may have been another's since."""
        return self.fenced_at is not None

    def on_revoked(self) -> None:
        if self.fenced_at is not None:
            self.revoked = True

    def on_assigned(self, now: float) -> None:
        """The group's new assignment is recovered: ownership is known again."""
        self.fenced_at, self.revoked = None, False
        self.last_tick = now

    def _judge(self, now: float) -> None:
        if self.fenced_at is None and self.last_tick and now - self.last_tick > self.stall_limit:
            self.fenced_at, self.stalled_for, self.revoked = now, now - self.last_tick, False
