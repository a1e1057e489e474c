"""SSRF enforcement at connect time, on the addresses actually dialled.

Three checks, each on what aiohttp will really use:
- `check_url` at registration: literal hosts against the policy, names resolved
  once, so a bad URL is a clear 422 before anything is stored;
- `GuardedResolver`: every name is resolved once per connection (aiohttp then
  dials only what the resolver returned), and denied addresses are dropped, so
  a name that rebinds to an internal address between checks still fails. The
  answers may come from the resolver's TTL cache (`dns_resolver.py`), but the
  policy check is made on every one of them, every time;
- `socket_factory`: the last word before `connect()`, on the socket address
  itself, which also covers IP-literal hosts (aiohttp never calls a resolver
  for those).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from typing import Any

from aiohttp.abc import AbstractResolver, ResolveResult

from .dns_resolver import AresLookup, CachingResolver
from .domain.addresses import IPAddress, TargetPolicy, check_literal_target, parse_target
from .domain.dns_cache import DnsPolicy
from .domain.errors import InvalidInput
from .domain.untrusted import one_line

log = logging.getLogger(__name__)


class BlockedTarget(OSError):
    """A connection the target policy refuses; never retried into a success."""


class TargetGuard:
    def __init__(
        self, policy: TargetPolicy, resolver: AbstractResolver | None = None, dns: DnsPolicy | None = None
    ) -> None:
        """`resolver` replaces the default c-ares one (cached, coalesced, capped, timed out by `dns`)."""
        self.policy = policy
        self._resolver = resolver
        self._dns = dns or DnsPolicy()

    def _inner(self) -> AbstractResolver:
        if self._resolver is None:
            self._resolver = CachingResolver(AresLookup(self._dns.timeout), self._dns)
        return self._resolver

    async def resolve_allowed(
        self, host: str, port: int, family: int = socket.AF_UNSPEC
    ) -> list[ResolveResult]:
        """Resolve `host` once and keep only the addresses the policy allows.

        The answers may come from a cache; this check never does, so it runs on every call.
        """
        answers = await self._inner().resolve(host, port, socket.AddressFamily(family))
        allowed: list[ResolveResult] = []
        refused: list[str] = []
        for answer in answers:
            reason = self.policy.refusal(_address(answer["host"]), port)
            if reason:
                refused.append(reason)
            else:
                allowed.append(answer)
        if not allowed:
            raise BlockedTarget(f"blocked: {host} resolves only to refused addresses ({'; '.join(refused)})")
        return allowed

    async def check_url(self, url: str, field: str = "url") -> None:
        """Refuse, naming `field`, a URL whose host is or resolves only to refused addresses.

        A name that does not resolve now is accepted: DNS may be briefly down,
        and every delivery checks again.
        """
        target = parse_target(url, field)
        check_literal_target(target, self.policy, field)
        if target.address is not None:
            return
        try:
            await self.resolve_allowed(target.host, target.port)
        except BlockedTarget as exc:
            raise InvalidInput(field, f"not an allowed target: {exc}", code="forbidden_target") from exc
        except OSError as exc:
            log.info("receiver host %s does not resolve yet: %s", one_line(target.host), one_line(str(exc)))

    def socket_factory(self, addr_info: tuple[Any, ...]) -> socket.socket:
        """Make the socket for one dial, unless its address is refused."""
        family, type_, proto, _, sockaddr = addr_info
        reason = self.policy.refusal(_address(sockaddr[0]), sockaddr[1])
        if reason:
            raise BlockedTarget(f"blocked: {reason}")
        return socket.socket(family=family, type=type_, proto=proto)

    def resolver(self) -> AbstractResolver:
        return GuardedResolver(self)

    async def close(self) -> None:
        if self._resolver is not None:
            await self._resolver.close()


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver hook: answers only with addresses the policy allows."""

    def __init__(self, guard: TargetGuard) -> None:
        self._guard = guard

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_UNSPEC) -> list[ResolveResult]:
        return await self._guard.resolve_allowed(host, port, family)

    async def close(self) -> None:
        await self._guard.close()


def _address(host: str) -> IPAddress:
    return ipaddress.ip_address(host.split("%", 1)[0])
