"""The DNS cache (TTL, clamp, negative answers, eviction) and the resolver's coalescing and cap.

The cache is pure and driven with `now`; the resolver runs on a scripted lookup
and a fake clock, so nothing here touches a socket or waits on a TTL.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import aiodns
import pytest

from dispatcher.dns_resolver import CachingResolver, LookupTimeout, NameNotFound, ResolveError, _lookup_error
from dispatcher.domain.dns_cache import Address, DnsCache, DnsPolicy
from dispatcher.domain.errors import InvalidInput
from dispatcher.settings import Settings, SettingsError

V4 = socket.AF_INET
ONE: tuple[Address, ...] = ((V4, "192.0.2.10"),)


# the pure cache ---------------------------------------------------------------


@pytest.mark.parametrize(("dns_ttl", "kept"), [(0, 1.0), (0.2, 1.0), (1, 1.0), (42, 42.0), (300, 300.0),
                                               (86_400, 300.0)])
def test_ttl_is_clamped_to_the_policy_bounds(dns_ttl: float, kept: float) -> None:
    assert DnsPolicy(min_ttl=1.0, max_ttl=300.0).ttl(dns_ttl) == kept


def test_an_answer_lives_exactly_its_ttl() -> None:
    cache = DnsCache(DnsPolicy())
    cache.put("a", ONE, dns_ttl=30, now=100.0)
    assert cache.get("a", 129.999) is not None
    assert cache.get("a", 129.999).addresses == ONE  # type: ignore[union-attr]
    assert cache.get("a", 130.0) is None
    assert len(cache) == 0  # the expired entry is dropped, not kept around


def test_a_zero_ttl_still_spares_a_lookup_per_connection_and_a_huge_one_is_capped() -> None:
    cache = DnsCache(DnsPolicy(min_ttl=1.0, max_ttl=300.0))
    cache.put("zero", ONE, dns_ttl=0, now=0.0)
    cache.put("day", ONE, dns_ttl=86_400, now=0.0)
    assert cache.get("zero", 0.9) is not None and cache.get("zero", 1.0) is None
    assert cache.get("day", 299.0) is not None and cache.get("day", 300.0) is None


def test_negative_answers_are_kept_briefly_with_their_reason() -> None:
    cache = DnsCache(DnsPolicy(negative_ttl=5.0))
    entry = cache.put_negative("gone", "gone does not resolve", now=10.0)
    assert entry.negative and entry.reason == "gone does not resolve"
    assert cache.get("gone", 14.9) == entry
    assert cache.get("gone", 15.0) is None
    assert cache.put("empty", (), dns_ttl=300, now=0.0).negative  # no address at all is negative too
    assert cache.get("empty", 5.0) is None


def test_a_full_cache_drops_its_oldest_entry_and_a_refresh_counts_as_new() -> None:
    cache = DnsCache(DnsPolicy(max_entries=2))
    cache.put("a", ONE, 60, now=0.0)
    cache.put("b", ONE, 60, now=0.0)
    cache.put("a", ONE, 60, now=1.0)  # refreshed: now the youngest
    cache.put("c", ONE, 60, now=2.0)
    assert len(cache) == 2
    assert cache.get("b", 2.0) is None and cache.get("a", 2.0) is not None and cache.get("c", 2.0) is not None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"timeout": 0}, "DISPATCHER_DNS_TIMEOUT"), ({"max_lookups": 0}, "DISPATCHER_DNS_MAX_LOOKUPS"),
     ({"min_ttl": 10, "max_ttl": 5}, "dns"), ({"negative_ttl": -1}, "dns")],
)
def test_bad_dns_policies_are_refused_naming_the_setting(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        DnsPolicy(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


# the resolver over a scripted lookup ---------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class ScriptedLookup:
    """A lookup whose answers the test releases: each call waits on a future per name."""

    def __init__(self, stubborn: frozenset[str] = frozenset()) -> None:
        self.calls: list[str] = []
        self.waiting: dict[str, asyncio.Future[tuple[tuple[Address, ...], float]]] = {}
        self.closed = False
        self.stubborn = stubborn  # names whose lookup outlives a cancel: it keeps its slot until answered

    async def __call__(self, host: str, family: int) -> tuple[tuple[Address, ...], float]:
        self.calls.append(host)
        future = self.waiting[host] = asyncio.get_running_loop().create_future()
        try:
            while True:
                try:
                    return await asyncio.shield(future)
                except asyncio.CancelledError:
                    if host not in self.stubborn:
                        raise
        finally:
            del self.waiting[host]

    def answer(self, host: str, addresses: tuple[Address, ...] = ONE, ttl: float = 60) -> None:
        self.waiting[host].set_result((addresses, ttl))

    def fail(self, host: str, exc: Exception) -> None:
        self.waiting[host].set_exception(exc)

    async def close(self) -> None:
        self.closed = True


async def until(condition: Callable[[], bool]) -> None:
    """Let the loop run until `condition` holds; a bounded number of turns, never a timed sleep."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


def rig(**policy: float) -> tuple[CachingResolver, ScriptedLookup, Clock]:
    lookup, clock = ScriptedLookup(), Clock()
    return CachingResolver(lookup, DnsPolicy(**policy), clock), lookup, clock  # type: ignore[arg-type]


async def resolved(resolver: CachingResolver, lookup: ScriptedLookup, host: str, **answer: object) -> list:
    task = asyncio.create_task(resolver.resolve(host, 443))
    await until(lambda: host in lookup.waiting)
    lookup.answer(host, **answer)  # type: ignore[arg-type]
    return await task


async def test_a_cached_answer_is_served_until_its_ttl_then_looked_up_again() -> None:
    resolver, lookup, clock = rig()
    answers = await resolved(resolver, lookup, "a.example", ttl=30)
    assert [(a["host"], a["port"], a["family"]) for a in answers] == [("192.0.2.10", 443, V4)]
    clock.now += 29.9
    assert (await resolver.resolve("A.example", 80))[0]["port"] == 80  # names are case-blind
    assert lookup.calls == ["a.example"]
    clock.now += 0.1
    await resolved(resolver, lookup, "a.example")
    assert lookup.calls == ["a.example", "a.example"]


async def test_no_such_name_is_cached_briefly_a_failure_not_at_all() -> None:
    resolver, lookup, clock = rig(negative_ttl=5.0)
    task = asyncio.create_task(resolver.resolve("gone.example"))
    await until(lambda: "gone.example" in lookup.waiting)
    lookup.fail("gone.example", NameNotFound("gone.example does not resolve"))
    with pytest.raises(NameNotFound, match="does not resolve"):
        await task
    with pytest.raises(NameNotFound):
        await resolver.resolve("gone.example")
    assert lookup.calls == ["gone.example"]
    clock.now += 5.0
    await resolved(resolver, lookup, "gone.example")  # believed no longer than negative_ttl

    task = asyncio.create_task(resolver.resolve("flaky.example"))
    await until(lambda: "flaky.example" in lookup.waiting)
    lookup.fail("flaky.example", OSError("SERVFAIL"))
    with pytest.raises(OSError, match="SERVFAIL"):
        await task
    await resolved(resolver, lookup, "flaky.example")  # asked again at once
    assert lookup.calls.count("flaky.example") == 2


async def test_concurrent_lookups_of_one_name_are_one_query() -> None:
    resolver, lookup, _ = rig()
    tasks = [asyncio.create_task(resolver.resolve("busy.example", 443)) for _ in range(50)]
    await until(lambda: "busy.example" in lookup.waiting)
    tasks[0].cancel()  # one waiter giving up does not end the lookup for the others
    await until(lambda: tasks[0].done())
    lookup.answer("busy.example")
    results = await asyncio.gather(*tasks[1:])
    assert lookup.calls == ["busy.example"]
    assert all(r[0]["host"] == "192.0.2.10" for r in results)


async def test_lookups_in_flight_are_capped_and_a_slot_frees_for_the_next() -> None:
    resolver, lookup, _ = rig(max_lookups=2)
    tasks = {name: asyncio.create_task(resolver.resolve(name)) for name in ["s1", "s2", "s3"]}
    await until(lambda: len(lookup.waiting) == 2)
    for _ in range(10):
        await asyncio.sleep(0)
    assert sorted(lookup.calls) == ["s1", "s2"]  # the third waits for a slot
    lookup.answer("s1")
    await until(lambda: "s3" in lookup.waiting)
    lookup.answer("s2")
    lookup.answer("s3")
    assert all(r for r in await asyncio.gather(*tasks.values()))


async def test_a_lookup_that_never_answers_ends_at_its_timeout_and_frees_its_slot() -> None:
    resolver, lookup, _ = rig(max_lookups=1, timeout=0.05)
    with pytest.raises(LookupTimeout, match=r"silent\.example timed out after 0\.05 s"):
        await resolver.resolve("silent.example")
    assert not lookup.waiting  # the lookup itself was ended, not left behind
    await resolved(resolver, lookup, "next.example")
    assert not isinstance(LookupTimeout("x"), TimeoutError)  # the clients read TimeoutError as connect


async def test_a_lookup_waiting_for_the_cap_still_times_out_and_is_not_cached() -> None:
    lookup = ScriptedLookup(stubborn=frozenset({"stuck.example"}))  # holds the only slot until answered
    resolver = CachingResolver(lookup, DnsPolicy(max_lookups=1, timeout=0.05), Clock())
    stuck = asyncio.create_task(resolver.resolve("stuck.example"))
    await until(lambda: "stuck.example" in lookup.waiting)
    with pytest.raises(LookupTimeout, match=r"queued\.example timed out"):
        await resolver.resolve("queued.example")
    assert lookup.calls == ["stuck.example"]  # never had a slot: the wait alone used up its timeout
    lookup.answer("stuck.example")
    assert (await stuck)[0]["host"] == "192.0.2.10"
    await resolved(resolver, lookup, "queued.example")  # the timeout was not cached
    assert lookup.calls == ["stuck.example", "queued.example"]


async def test_addresses_skip_the_lookup_the_cache_and_the_cap() -> None:
    resolver, lookup, _ = rig(max_lookups=1)
    stuck = asyncio.create_task(resolver.resolve("stuck.example"))
    await until(lambda: "stuck.example" in lookup.waiting)
    v4 = await resolver.resolve("127.0.0.1", 8080)
    v6 = await resolver.resolve("::1", 8080)
    assert [(a["host"], a["family"]) for a in v4 + v6] == [("127.0.0.1", V4), ("::1", socket.AF_INET6)]
    with pytest.raises(NameNotFound):
        await resolver.resolve("::1", 8080, socket.AF_INET)
    assert lookup.calls == ["stuck.example"]
    lookup.answer("stuck.example")
    await stuck


async def test_close_ends_lookups_in_flight_and_the_lookup() -> None:
    resolver, lookup, _ = rig()
    task = asyncio.create_task(resolver.resolve("slow.example"))
    await until(lambda: "slow.example" in lookup.waiting)
    await resolver.close()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert lookup.closed


@pytest.mark.parametrize(
    ("code", "kind"),
    [(aiodns.error.ARES_ENOTFOUND, NameNotFound), (aiodns.error.ARES_ENODATA, NameNotFound),
     (aiodns.error.ARES_ETIMEOUT, LookupTimeout), (aiodns.error.ARES_ESERVFAIL, ResolveError),
     (aiodns.error.ARES_ECONNREFUSED, ResolveError)],
)
def test_c_ares_errors_map_to_what_the_cache_keeps_or_not(code: int, kind: type[OSError]) -> None:
    error = _lookup_error("x.example", aiodns.error.DNSError(code, "message"))
    assert type(error) is kind and str(error) == error.strerror and "x.example" in str(error)


def test_dns_settings_come_from_the_environment_and_a_bad_one_is_named() -> None:
    env = {"DISPATCHER_DNS_TIMEOUT": "2.5", "DISPATCHER_DNS_MAX_LOOKUPS": "8"}
    policy = Settings.from_env(env).dns_policy()
    assert (policy.timeout, policy.max_lookups) == (2.5, 8)
    assert Settings().dns_policy() == DnsPolicy(timeout=5.0, max_lookups=64)
    with pytest.raises(SettingsError, match="DISPATCHER_DNS_MAX_LOOKUPS"):
        Settings.from_env({"DISPATCHER_DNS_MAX_LOOKUPS": "0"}).dns_policy()
