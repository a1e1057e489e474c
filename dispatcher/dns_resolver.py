"""Name resolution for deliveries: c-ares lookups, each timed out, cached by TTL, coalesced and capped.

getaddrinfo on a small thread pool lets a few names whose servers never answer
hold every thread, and every new connection then waits behind them. Here a
lookup is a c-ares query on the event loop, and:
- each ends within `DnsPolicy.timeout`, its wait for a slot included;
- at most `DnsPolicy.max_lookups` are in flight per worker;
- concurrent lookups of one name share one query;
- answers are kept for their DNS TTL (clamped), "no such name" briefly;
  a timeout or a server failure is not kept, so a name that recovers is
  seen on the next attempt.
The cache holds raw answers; the target guard checks each against the policy
every time it is handed out.

c-ares reads /etc/hosts before asking the DNS, answers `localhost` with
loopback itself, and keeps its own TTL-bound cache of DNS messages (pycares
offers no switch for it), which never outlives the TTL the DNS gave.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol

import aiodns
from aiohttp.abc import AbstractResolver, ResolveResult

from .domain.dns_cache import Address, DnsCache, DnsPolicy, Entry

_NUMERIC_FLAGS = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV
_ARES_AI_NOSORT = 1 << 7  # c-ares' ARES_AI_NOSORT, which pycares does not export
# c-ares answers for a name that exists without an address of the family, or does not exist.
_NOT_FOUND = {aiodns.error.ARES_ENOTFOUND, aiodns.error.ARES_ENODATA, aiodns.error.ARES_ENONAME}


class ResolveError(OSError):
    """A lookup that gave no address, worded for the attempt log."""

    code = socket.EAI_FAIL

    def __init__(self, message: str) -> None:
        super().__init__(self.code, message)  # aiohttp shows an OSError's strerror, and only that

    def __str__(self) -> str:
        return str(self.strerror)


class NameNotFound(ResolveError):
    """The DNS says the name has no address (NXDOMAIN, or no record): cached briefly."""

    code = socket.EAI_NONAME


class LookupTimeout(ResolveError):
    """A lookup past its timeout. Not a TimeoutError: the clients read that as a connect timeout."""

    code = socket.EAI_AGAIN


class Lookup(Protocol):
    """One DNS question: the addresses of `host` in `family`, and their TTL in seconds."""

    async def __call__(self, host: str, family: int) -> tuple[tuple[Address, ...], float]: ...

    async def close(self) -> None: ...


class AresLookup:
    """Lookups through one c-ares channel, opened on first use (it binds the running loop)."""

    def __init__(
        self, timeout: float, nameservers: Sequence[str] = (), resolvconf_path: str | None = None,
        sort: bool = True,
    ) -> None:
        """`sort`: order answers as RFC 6724 says, as getaddrinfo does, which c-ares learns by
        connecting a UDP socket to each address (no packet leaves; tests turn even that off)."""
        self._timeout = timeout
        self._nameservers = list(nameservers)  # "127.0.0.1:5353" form allowed; empty: the system's
        self._resolvconf_path = resolvconf_path
        self._flags = 0 if sort else _ARES_AI_NOSORT
        self._resolver: aiodns.DNSResolver | None = None

    def _channel(self) -> aiodns.DNSResolver:
        if self._resolver is None:
            options: dict[str, Any] = {}
            if self._resolvconf_path:
                options["resolvconf_path"] = self._resolvconf_path
            # Two tries in the time we wait: one lost UDP packet is not a failed delivery.
            self._resolver = aiodns.DNSResolver(
                self._nameservers or None, timeout=self._timeout / 2, tries=2, **options
            )
        return self._resolver

    async def __call__(self, host: str, family: int) -> tuple[tuple[Address, ...], float]:
        try:
            result = await self._channel().getaddrinfo(
                host, family=socket.AddressFamily(family), type=socket.SOCK_STREAM, flags=self._flags
            )
        except aiodns.error.DNSError as exc:
            raise _lookup_error(host, exc) from None
        addresses = tuple(dict.fromkeys((node.family, _text(node.addr[0])) for node in result.nodes))
        return addresses, min((node.ttl for node in result.nodes), default=0)

    async def close(self) -> None:
        resolver, self._resolver = self._resolver, None
        if resolver is not None:
            await resolver.close()


def _text(address: bytes | str) -> str:
    return address.decode("ascii") if isinstance(address, bytes) else address


def _lookup_error(host: str, exc: aiodns.error.DNSError) -> ResolveError:
    code = exc.args[0] if exc.args else None
    message = exc.args[1] if len(exc.args) > 1 else "DNS lookup failed"
    if code in _NOT_FOUND:
        return NameNotFound(f"{host} does not resolve: {message}")
    if code == aiodns.error.ARES_ETIMEOUT:
        return LookupTimeout(f"DNS lookup of {host} timed out: {message}")
    return ResolveError(f"DNS lookup of {host} failed: {message}")


class CachingResolver(AbstractResolver):
    """aiohttp's resolver interface over a `Lookup`, with the cache, coalescing, cap and timeout."""

    def __init__(self, lookup: Lookup, policy: DnsPolicy | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._lookup = lookup
        self._policy = policy = policy or DnsPolicy()
        self._clock = clock
        self._cache = DnsCache(policy)
        self._slots = asyncio.Semaphore(policy.max_lookups)
        self._pending: dict[tuple[str, int], asyncio.Task[Entry]] = {}

    async def resolve(
        self, host: str, port: int = 0, family: int = socket.AF_UNSPEC
    ) -> list[ResolveResult]:
        literal = _literal(host, port, family)
        if literal is not None:  # no lookup, so no slot: an address is never queued behind names
            return literal
        entry = await self._entry(host.lower(), family)
        if entry.negative:
            raise NameNotFound(entry.reason)
        return [_result(host, address, port) for address in entry.addresses]

    async def _entry(self, host: str, family: int) -> Entry:
        """The cached answer for `host`, or the one lookup of it in flight, or a new lookup."""
        key = (host, family)
        entry = self._cache.get(key, self._clock())
        if entry is not None:
            return entry
        task = self._pending.get(key)
        if task is None:
            task = self._pending[key] = asyncio.create_task(self._fetch(host, family))
            task.add_done_callback(partial(self._settled, key))
        # Shielded: one waiter giving up (its own deadline, a cancel) must not end the others' lookup.
        return await asyncio.shield(task)

    async def _fetch(self, host: str, family: int) -> Entry:
        key = (host, family)
        try:
            async with asyncio.timeout(self._policy.timeout):
                async with self._slots:
                    addresses, ttl = await self._lookup(host, family)
        except TimeoutError:
            raise LookupTimeout(f"DNS lookup of {host} timed out after {self._policy.timeout:g} s") from None
        except NameNotFound as exc:
            return self._cache.put_negative(key, str(exc), self._clock())
        return self._cache.put(key, addresses, ttl, self._clock())

    def _settled(self, key: tuple[str, int], task: asyncio.Task[Entry]) -> None:
        if self._pending.get(key) is task:
            del self._pending[key]
        if not task.cancelled():
            task.exception()  # read here, so a lookup every waiter gave up on is not logged as lost

    async def close(self) -> None:
        """Drop lookups in flight and the channel; a later lookup opens a new one."""
        for task in list(self._pending.values()):
            task.cancel()
        self._pending.clear()
        await self._lookup.close()


def _literal(host: str, port: int, family: int) -> list[ResolveResult] | None:
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return None
    literal_family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    if family not in (socket.AF_UNSPEC, literal_family):
        raise NameNotFound(f"{host} is not an address of the family asked for")
    return [_result(host, (literal_family, host), port)]


def _result(host: str, address: Address, port: int) -> ResolveResult:
    family, text = address
    return ResolveResult(hostname=host, host=text, port=port, family=family, proto=0, flags=_NUMERIC_FLAGS)
