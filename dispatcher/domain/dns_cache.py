"""DNS answers kept as long as their TTL says: pure bookkeeping, `now` passed in.

The cache holds raw answers, never a verdict: the target guard checks every
address against the policy each time it is handed out, so an answer cached
under one policy can never let a connection through another.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from .errors import InvalidInput

Address = tuple[int, str]  # (address family, address text), as a resolver returned it


@dataclass(slots=True, frozen=True)
class DnsPolicy:
    """How names are resolved for deliveries; each bound keeps one hostile name from costing the rest."""

    timeout: float = 5.0  # one lookup, its wait for a slot included
    max_lookups: int = 64  # lookups in flight per worker
    # A TTL of 0 would mean a lookup per connection; a day-long one would pin
    # an address long after its owner moved it.
    min_ttl: float = 1.0
    max_ttl: float = 300.0
    negative_ttl: float = 5.0  # how long "no such name" is believed
    max_entries: int = 10_000

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise InvalidInput("DISPATCHER_DNS_TIMEOUT", "must be more than 0 seconds")
        if self.max_lookups < 1:
            raise InvalidInput("DISPATCHER_DNS_MAX_LOOKUPS", "must be at least 1")
        if not 0 <= self.min_ttl <= self.max_ttl or self.negative_ttl < 0 or self.max_entries < 1:
            raise InvalidInput("dns", "TTL bounds must be 0 <= min <= max, negative TTL >= 0, entries >= 1")

    def ttl(self, dns_ttl: float) -> float:
        """The DNS TTL clamped to [min_ttl, max_ttl]."""
        return min(max(dns_ttl, self.min_ttl), self.max_ttl)


@dataclass(slots=True, frozen=True)
class Entry:
    """One name's answer: its addresses, or none and why (a negative answer)."""

    addresses: tuple[Address, ...]
    expires: float
    reason: str = ""

    @property
    def negative(self) -> bool:
        return not self.addresses


class DnsCache:
    """Answers by key until they expire; the oldest entry makes room when full."""

    def __init__(self, policy: DnsPolicy) -> None:
        self._policy = policy
        self._entries: dict[Hashable, Entry] = {}  # in insertion order: the first is the oldest

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable, now: float) -> Entry | None:
        """The live entry for `key`, or None (an expired one is dropped)."""
        entry = self._entries.get(key)
        if entry is not None and entry.expires <= now:
            del self._entries[key]
            return None
        return entry

    def put(self, key: Hashable, addresses: tuple[Address, ...], dns_ttl: float, now: float) -> Entry:
        """Keep addresses for their clamped TTL; no addresses is a negative answer."""
        if not addresses:
            return self.put_negative(key, "no address", now)
        return self._store(key, Entry(addresses, now + self._policy.ttl(dns_ttl)))

    def put_negative(self, key: Hashable, reason: str, now: float) -> Entry:
        """Remember briefly that `key` has no address, so a missing name costs one lookup, not one each."""
        return self._store(key, Entry((), now + self._policy.negative_ttl, reason))

    def _store(self, key: Hashable, entry: Entry) -> Entry:
        self._entries.pop(key, None)  # a refreshed entry moves to the young end
        if len(self._entries) >= self._policy.max_entries:
            del self._entries[next(iter(self._entries))]
        self._entries[key] = entry
        return entry
