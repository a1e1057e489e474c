"""Connection slots: in-flight bounds per lane (the worker's budget), per host and per tenant.

A request needs a slot of its lane and one of its host. While receivers of more
than one tenant exist (untenanted ones counting as one), a tenant's receiver's
request also needs one of its tenant's share of the lane, so one tenant's
silent receivers cannot hold every slot the others need for the whole delivery
timeout; a deployment of one tenant keeps the whole lane. When any is spent the
request waits here as a small record (at most one per receiver attempt; the
message itself stays in the backlog) until a slot frees. Tenants with waiters
take turns, and so do each tenant's hosts, so one saturated host or tenant
cannot keep the others waiting.

No slot event costs a pass over the waiters: a tenant found at its share leaves
the turns until one of its slots frees, and a tenant's host found at its limit
waits apart until that host frees one (`_Waiters`), so neither thousands of
one tenant's hosts nor thousands of tenants on one busy host are looked at
again on every release.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from .errors import InvalidInput

T = TypeVar("T")


class _Waiters(Generic[T]):
    """One lane's waiters, each in exactly one place: a tenant's open hosts (`hosts`), or apart behind
    a host at its limit (`behind_host`). `turns` holds the tenants that may have a waiter to start,
    in turn order; a tenant at its share is out of it (`at_share`) until it frees a slot."""

    def __init__(self) -> None:
        self.turns: OrderedDict[str, None] = OrderedDict()
        self.hosts: dict[str, OrderedDict[str, deque[T]]] = {}  # tenant -> host -> waiters, in turn order
        self.behind_host: dict[str, OrderedDict[str, deque[T]]] = {}  # host -> tenant -> waiters
        self.at_share: set[str] = set()

    def add(self, tenant: str, host: str, item: T, host_full: bool, at_share: bool) -> None:
        """A new waiter, filed where it belongs now: behind its host if that is full, out of the turns
        if its tenant is at its share (so no release has to find that out first)."""
        behind = self.behind_host.get(host)
        apart = behind.get(tenant) if behind is not None else None
        if apart is not None:  # its tenant waits behind that host already: in line there
            apart.append(item)
            return
        hosts = self.hosts.get(tenant)
        if host_full and (hosts is None or host not in hosts):
            self.behind_host.setdefault(host, OrderedDict())[tenant] = deque((item,))
            return
        if hosts is None:
            hosts = self.hosts[tenant] = OrderedDict()
        hosts.setdefault(host, deque()).append(item)
        if at_share:
            self.turns.pop(tenant, None)
            self.at_share.add(tenant)
        elif tenant not in self.at_share:
            self.turns.setdefault(tenant, None)

    def reopen(self, tenant: str, host: str, queue: deque[T]) -> None:
        """Waiters kept apart go back among their tenant's hosts."""
        hosts = self.hosts.setdefault(tenant, OrderedDict())
        hosts.setdefault(host, deque()).extend(queue)
        if tenant not in self.at_share:
            self.turns.setdefault(tenant, None)


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
        self._was_shared = True
        self.used: dict[str, int] = dict.fromkeys(lanes, 0)
        self.host_used: dict[str, int] = {}
        self.tenant_used: dict[tuple[str, str], int] = {}  # (lane, tenant) -> slots held
        self._waiting: dict[str, _Waiters[T]] = {lane: _Waiters() for lane in lanes}
        # lane -> hosts that freed a slot while tenants waited behind them, and the lane had no room
        self._unfilled: dict[str, OrderedDict[str, None]] = {lane: OrderedDict() for lane in lanes}
        self.waiting = 0

    def host_limit(self, host: str) -> int:
        return self.host_overrides.get(host, self.per_host)

    def _host_full(self, host: str) -> bool:
        return self.host_used.get(host, 0) >= self.host_limit(host)

    def _at_share(self, lane: str, tenant: str) -> bool:
        return bool(tenant) and self.tenant_used.get((lane, tenant), 0) >= self.tenant_limits[lane] \
            and self.shared()

    def try_acquire(self, lane: str, host: str, tenant: str = "") -> bool:
        if self.used[lane] >= self.limits[lane] or self._host_full(host) or self._at_share(lane, tenant):
            return False
        self.used[lane] += 1
        self.host_used[host] = self.host_used.get(host, 0) + 1
        if tenant:
            self.tenant_used[lane, tenant] = self.tenant_used.get((lane, tenant), 0) + 1
        return True

    def park(self, lane: str, host: str, item: T, tenant: str = "") -> None:
        self._share_check()  # what `at_share` means here is what the next check compares with
        self._waiting[lane].add(tenant, host, item, self._host_full(host), self._at_share(lane, tenant))
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
            waiters = self._waiting[lane]
            if tenant in waiters.at_share and not self._at_share(lane, tenant):
                waiters.at_share.discard(tenant)
                if tenant in waiters.hosts:
                    waiters.turns[tenant] = None
        if not self.waiting:
            return []
        self._share_check()
        for wait_lane, waiters in self._waiting.items():  # the host has room again, in every lane:
            self._reopen_one(wait_lane, host)  # its first tenant set apart takes its turn now,
            if waiters.behind_host.get(host):  # and the next ones if that one does not use it
                self._unfilled[wait_lane][host] = None
        started: list[tuple[str, str, T]] = []
        for wait_lane in sorted(self._waiting, key=lambda name: name != lane):
            started += self._drain(wait_lane)
        return started

    def _drain(self, lane: str) -> list[tuple[str, str, T]]:
        """Start what can start in `lane`: its tenants in turn, then, while the lane has room, the tenants
        kept apart behind hosts that have freed a slot since (`_unfilled`), one at a time: the first one
        reopened may have spent its share on another host meanwhile. Each round starts a waiter, or
        moves a tenant's waiters out from behind a host, or forgets a host: it ends."""
        started = self._hand_out(lane)
        waiters, pending = self._waiting[lane], self._unfilled[lane]
        while pending and self.used[lane] < self.limits[lane]:
            host = next(iter(pending))
            if not waiters.behind_host.get(host) or self._host_full(host):
                del pending[host]
                continue
            self._reopen_one(lane, host)
            started += self._hand_out(lane)
        return started

    def _share_check(self) -> None:
        """The share stopped applying: the tenants out of the turns for it are back in them."""
        if self._was_shared and not self.shared():
            for waiters in self._waiting.values():
                for tenant in waiters.at_share:
                    if tenant in waiters.hosts:
                        waiters.turns[tenant] = None
                waiters.at_share.clear()
        self._was_shared = self.shared()

    def share_turned_off(self) -> bool:
        return self._was_shared and not self.shared()

    def hand_out(self) -> list[tuple[str, str, T]]:
        """Start every waiter that can hold a slot now. For when no slot freed but waiters may start:
        the share stopped applying, or waiters were dropped (one given a host's freed slot among them).
        It looks at every host waiters are kept apart behind: not for each release."""
        self._share_check()
        started: list[tuple[str, str, T]] = []
        for lane, waiters in self._waiting.items():
            self._unfilled[lane].update(dict.fromkeys(waiters.behind_host))
            started += self._drain(lane)
        return started

    def _reopen_one(self, lane: str, host: str) -> None:
        """A host freed a slot: the first tenant kept apart behind it that may use it gets its waiters
        back; tenants at their share on the way rejoin their own (they start once they free a slot)."""
        waiters = self._waiting[lane]
        apart = waiters.behind_host.get(host)
        while apart:
            tenant, queue = apart.popitem(last=False)
            waiters.reopen(tenant, host, queue)
            if not self._at_share(lane, tenant):
                break
            waiters.turns.pop(tenant, None)
            waiters.at_share.add(tenant)
        if apart is not None and not apart:
            del waiters.behind_host[host]

    def _hand_out(self, lane: str) -> list[tuple[str, str, T]]:
        """One slot for each tenant in turn that can take one, until the lane is full or none can.
        Each step starts a waiter or takes a tenant or host out of the turns until it frees a slot."""
        waiters = self._waiting[lane]
        started: list[tuple[str, str, T]] = []
        while waiters.turns and self.used[lane] < self.limits[lane]:
            tenant = next(iter(waiters.turns))
            if self._at_share(lane, tenant):
                del waiters.turns[tenant]
                waiters.at_share.add(tenant)
                continue
            got = self._next_of(waiters, lane, tenant)
            if got is None:  # every host it waits on is at its limit
                del waiters.turns[tenant]
                continue
            started.append(got)
            if tenant in waiters.hosts:
                waiters.turns.move_to_end(tenant)  # other tenants go first next time
            else:
                del waiters.turns[tenant]
        return started

    def _next_of(self, waiters: _Waiters[T], lane: str, tenant: str) -> tuple[str, str, T] | None:
        """The tenant's first waiter whose host has room, given a slot; full hosts it passes wait apart."""
        hosts = waiters.hosts[tenant]
        while hosts:
            host = next(iter(hosts))
            if self._host_full(host):
                waiters.behind_host.setdefault(host, OrderedDict())[tenant] = hosts.pop(host)
                continue
            acquired = self.try_acquire(lane, host, tenant)
            assert acquired, "the lane, the host and the share had room"
            queue = hosts[host]
            item = queue.popleft()
            self.waiting -= 1
            if queue:
                hosts.move_to_end(host)  # the tenant's other hosts go first next time
            else:
                del hosts[host]
            if not hosts:
                del waiters.hosts[tenant]
            return lane, host, item
        del waiters.hosts[tenant]
        return None

    def drop(self, doomed: Callable[[T], bool]) -> int:
        """Forget waiters (their partition went elsewhere); return how many. The caller then hands out
        (`hand_out`): a tenant given a host's freed slot may have been dropped with its waiters."""
        dropped = 0
        for waiters in self._waiting.values():
            for groups in (*waiters.hosts.values(), *waiters.behind_host.values()):
                for key in list(groups):
                    queue = groups[key]
                    kept = deque(item for item in queue if not doomed(item))
                    dropped += len(queue) - len(kept)
                    if kept:
                        groups[key] = kept
                    else:
                        del groups[key]
            for table in (waiters.hosts, waiters.behind_host):
                for key in [key for key, groups in table.items() if not groups]:
                    del table[key]
            for tenant in [t for t in waiters.turns if t not in waiters.hosts]:
                del waiters.turns[tenant]
            waiters.at_share.intersection_update(waiters.hosts)
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
