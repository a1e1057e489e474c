"""Connection slots: in-flight bounds per lane (the worker's budget) and per host.

A request needs a slot of its lane and one of its host. When either is spent
it waits here as a small record (at most one per receiver attempt; the
message itself stays in the backlog) until a slot frees. Hosts with waiters
take turns, so one saturated host cannot keep the others waiting.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from .errors import InvalidInput

T = TypeVar("T")


class SlotPool(Generic[T]):
    def __init__(self, lanes: Mapping[str, int], per_host: int, host_overrides: Mapping[str, int]) -> None:
        self.limits = dict(lanes)
        self.per_host = per_host
        self.host_overrides = dict(host_overrides)
        self.used: dict[str, int] = dict.fromkeys(lanes, 0)
        self.host_used: dict[str, int] = {}
        # lane -> host -> waiters of that host, hosts in turn order
        self._waiting: dict[str, OrderedDict[str, deque[T]]] = {lane: OrderedDict() for lane in lanes}
        self.waiting = 0

    def host_limit(self, host: str) -> int:
        return self.host_overrides.get(host, self.per_host)

    def _free(self, lane: str, host: str) -> bool:
        return self.used[lane] < self.limits[lane] and self.host_used.get(host, 0) < self.host_limit(host)

    def try_acquire(self, lane: str, host: str) -> bool:
        if not self._free(lane, host):
            return False
        self.used[lane] += 1
        self.host_used[host] = self.host_used.get(host, 0) + 1
        return True

    def park(self, lane: str, host: str, item: T) -> None:
        self._waiting[lane].setdefault(host, deque()).append(item)
        self.waiting += 1

    def release(self, lane: str, host: str) -> list[tuple[str, str, T]]:
        """Free a slot; return the waiters that now hold one (lane, host, item), to be started."""
        self.used[lane] -= 1
        left = self.host_used[host] - 1
        if left:
            self.host_used[host] = left
        else:
            del self.host_used[host]
        if not self.waiting:
            return []
        started = []
        for wait_lane in (lane, *(other for other in self._waiting if other != lane)):
            started += self._hand_out(wait_lane)
        return started

    def _hand_out(self, lane: str) -> list[tuple[str, str, T]]:
        hosts = self._waiting[lane]
        started: list[tuple[str, str, T]] = []
        progress = True
        while progress and hosts and self.used[lane] < self.limits[lane]:
            progress = False
            for host in list(hosts):
                if not self.try_acquire(lane, host):
                    if self.used[lane] >= self.limits[lane]:
                        break
                    continue
                queue = hosts[host]
                started.append((lane, host, queue.popleft()))
                self.waiting -= 1
                progress = True
                if queue:
                    hosts.move_to_end(host)  # other hosts go first next time
                else:
                    del hosts[host]
        return started

    def drop(self, doomed: Callable[[T], bool]) -> int:
        """Forget waiters (their partition went elsewhere); return how many."""
        dropped = 0
        for hosts in self._waiting.values():
            for host in list(hosts):
                queue = hosts[host]
                kept = deque(item for item in queue if not doomed(item))
                dropped += len(queue) - len(kept)
                if kept:
                    hosts[host] = kept
                else:
                    del hosts[host]
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
