"""Connection slots: in-flight bounds per lane (the worker's budget), per host and per tenant.

A request needs a slot of its lane and one of its host; a tenant's receiver's
request also needs one of its tenant's share of the lane, so one tenant's
silent receivers cannot hold every slot another tenant needs for the whole
delivery timeout. When any is spent it waits here as a small record (at most
one per receiver attempt; the message itself stays in the backlog) until a
slot frees. Hosts (per tenant) with waiters take turns, so one saturated host
or tenant cannot keep the others waiting.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from .errors import InvalidInput

T = TypeVar("T")


class SlotPool(Generic[T]):
    def __init__(
        self, lanes: Mapping[str, int], per_host: int, host_overrides: Mapping[str, int],
        tenant_share: float = 1.0,
    ) -> None:
        self.limits = dict(lanes)
        self.per_host = per_host
        self.host_overrides = dict(host_overrides)
        # The most of a lane one tenant's receivers hold at once ("": untenanted, not capped).
        self.tenant_limits = {lane: max(1, math.floor(n * tenant_share)) for lane, n in lanes.items()}
        self.used: dict[str, int] = dict.fromkeys(lanes, 0)
        self.host_used: dict[str, int] = {}
        self.tenant_used: dict[tuple[str, str], int] = {}  # (lane, tenant) -> slots held
        # lane -> (host, tenant) -> waiters, in turn order
        self._waiting: dict[str, OrderedDict[tuple[str, str], deque[T]]] = {
            lane: OrderedDict() for lane in lanes
        }
        self.waiting = 0

    def host_limit(self, host: str) -> int:
        return self.host_overrides.get(host, self.per_host)

    def _free(self, lane: str, host: str, tenant: str) -> bool:
        return (
            self.used[lane] < self.limits[lane]
            and self.host_used.get(host, 0) < self.host_limit(host)
            and (not tenant or self.tenant_used.get((lane, tenant), 0) < self.tenant_limits[lane])
        )

    def try_acquire(self, lane: str, host: str, tenant: str = "") -> bool:
        if not self._free(lane, host, tenant):
            return False
        self.used[lane] += 1
        self.host_used[host] = self.host_used.get(host, 0) + 1
        if tenant:
            self.tenant_used[lane, tenant] = self.tenant_used.get((lane, tenant), 0) + 1
        return True

    def park(self, lane: str, host: str, item: T, tenant: str = "") -> None:
        self._waiting[lane].setdefault((host, tenant), deque()).append(item)
        self.waiting += 1

    def release(self, lane: str, host: str, tenant: str = "") -> list[tuple[str, str, T]]:
        """Free a slot; return the waiters that now hold one (lane, host, item), to be started."""
        self.used[lane] -= 1
        left = self.host_used[host] - 1
        if left:
            self.host_used[host] = left
        else:
            del self.host_used[host]
        if tenant:
            held = self.tenant_used[lane, tenant] - 1
            if held:
                self.tenant_used[lane, tenant] = held
            else:
                del self.tenant_used[lane, tenant]
        if not self.waiting:
            return []
        started = []
        for wait_lane in (lane, *(other for other in self._waiting if other != lane)):
            started += self._hand_out(wait_lane)
        return started

    def _hand_out(self, lane: str) -> list[tuple[str, str, T]]:
        groups = self._waiting[lane]
        started: list[tuple[str, str, T]] = []
        progress = True
        while progress and groups and self.used[lane] < self.limits[lane]:
            progress = False
            for group in list(groups):
                host, tenant = group
                if not self.try_acquire(lane, host, tenant):
                    if self.used[lane] >= self.limits[lane]:
                        break
                    continue
                queue = groups[group]
                started.append((lane, host, queue.popleft()))
                self.waiting -= 1
                progress = True
                if queue:
                    groups.move_to_end(group)  # other groups go first next time
                else:
                    del groups[group]
        return started

    def drop(self, doomed: Callable[[T], bool]) -> int:
        """Forget waiters (their partition went elsewhere); return how many."""
        dropped = 0
        for groups in self._waiting.values():
            for group in list(groups):
                queue = groups[group]
                kept = deque(item for item in queue if not doomed(item))
                dropped += len(queue) - len(kept)
                if kept:
                    groups[group] = kept
                else:
                    del groups[group]
        self.waiting -= dropped
        return dropped


def parse_host_limits(raw: str, name: str) -> dict[str, int]:
    """`host=limit,host=limit` (hosts lower-cased) for per-host overrides."""
    limits: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        host, sep, value = item.rpartition("=")
        if not sep or not host.strip():
            raise InvalidInput(name, f"{item!r} is not host=limit")
        try:
            limit = int(value)
        except ValueError:
            raise InvalidInput(name, f"{item!r}: the limit must be a whole number") from None
        if limit < 1:
            raise InvalidInput(name, f"{item!r}: the limit must be at least 1")
        limits[host.strip().lower().strip("[]")] = limit
    return limits
