"""Connection slots: in-flight bounds per lane (the worker's budget), per host and per tenant.

A request needs a slot of its lane and one of its host. While receivers of more
than one tenant exist (untenanted ones counting as one), a tenant's receiver's
request also needs one of its tenant's share of the lane, so one tenant's
silent receivers cannot hold every slot the others need for the whole delivery
timeout; a deployment of one tenant keeps the whole lane. When any is spent the
request waits here as a small record (at most one per receiver attempt; the
message itself stays in the backlog) until a slot frees. Tenants with waiters
take turns, and so do each tenant's hosts, so one saturated host or tenant
cannot keep the others waiting; a tenant at its share is passed over at once,
however many hosts it waits on.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from .errors import InvalidInput

T = TypeVar("T")
Hosts = OrderedDict[str, deque[T]]  # host -> waiters, in turn order


class SlotPool(Generic[T]):
    def __init__(
        self, lanes: Mapping[str, int], per_host: int, host_overrides: Mapping[str, int],
        tenant_share: float = 1.0,
    ) -> None:
        self.limits = dict(lanes)
        self.per_host = per_host
        self.host_overrides = dict(host_overrides)
        # The most of a lane one tenant's receivers hold at once ("": untenanted, not capped) ...
        self.tenant_limits = {lane: max(1, math.floor(n * tenant_share)) for lane, n in lanes.items()}
        # ... while receivers of more than one tenant exist (the worker sets this from its index).
        self.shared: Callable[[], bool] = lambda: True
        self.used: dict[str, int] = dict.fromkeys(lanes, 0)
        self.host_used: dict[str, int] = {}
        self.tenant_used: dict[tuple[str, str], int] = {}  # (lane, tenant) -> slots held
        # lane -> tenant -> host -> waiters, tenants and hosts in turn order
        self._waiting: dict[str, OrderedDict[str, Hosts[T]]] = {lane: OrderedDict() for lane in lanes}
        self.waiting = 0

    def host_limit(self, host: str) -> int:
        return self.host_overrides.get(host, self.per_host)

    def _at_share(self, lane: str, tenant: str) -> bool:
        return bool(tenant) and self.tenant_used.get((lane, tenant), 0) >= self.tenant_limits[lane] \
            and self.shared()

    def try_acquire(self, lane: str, host: str, tenant: str = "") -> bool:
        if self.used[lane] >= self.limits[lane] or self.host_used.get(host, 0) >= self.host_limit(host) \
                or self._at_share(lane, tenant):
            return False
        self.used[lane] += 1
        self.host_used[host] = self.host_used.get(host, 0) + 1
        if tenant:
            self.tenant_used[lane, tenant] = self.tenant_used.get((lane, tenant), 0) + 1
        return True

    def park(self, lane: str, host: str, item: T, tenant: str = "") -> None:
        self._waiting[lane].setdefault(tenant, OrderedDict()).setdefault(host, deque()).append(item)
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
        """Hand free slots of `lane` to its waiters: a turn is one slot for each tenant that can take one."""
        tenants = self._waiting[lane]
        started: list[tuple[str, str, T]] = []
        progress = True
        while progress and tenants and self.used[lane] < self.limits[lane]:
            progress = False
            for tenant in list(tenants):
                if self._at_share(lane, tenant):
                    continue
                hosts = tenants[tenant]
                got = self._next_of(lane, tenant, hosts)
                if not hosts:
                    del tenants[tenant]
                if got is None:
                    if self.used[lane] >= self.limits[lane]:
                        break
                    continue
                started.append(got)
                progress = True
                if tenant in tenants:
                    tenants.move_to_end(tenant)  # other tenants go first next time
        return started

    def _next_of(self, lane: str, tenant: str, hosts: Hosts[T]) -> tuple[str, str, T] | None:
        """The first of the tenant's waiters whose host has room, given a slot; None if none can."""
        for host in list(hosts):
            if not self.try_acquire(lane, host, tenant):
                if self.used[lane] >= self.limits[lane] or self._at_share(lane, tenant):
                    return None
                continue  # the host is at its limit: the next host
            queue = hosts[host]
            item = queue.popleft()
            self.waiting -= 1
            if queue:
                hosts.move_to_end(host)  # the tenant's other hosts go first next time
            else:
                del hosts[host]
            return lane, host, item
        return None

    def drop(self, doomed: Callable[[T], bool]) -> int:
        """Forget waiters (their partition went elsewhere); return how many."""
        dropped = 0
        for tenants in self._waiting.values():
            for tenant in list(tenants):
                hosts = tenants[tenant]
                for host in list(hosts):
                    queue = hosts[host]
                    kept = deque(item for item in queue if not doomed(item))
                    dropped += len(queue) - len(kept)
                    if kept:
                        hosts[host] = kept
                    else:
                        del hosts[host]
                if not hosts:
                    del tenants[tenant]
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
