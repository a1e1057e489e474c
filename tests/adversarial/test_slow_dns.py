"""A receiver whose DNS never answers, or rebinds to cloud metadata, against both HTTP clients.

A fake DNS server on 127.0.0.1 answers A records for some names at once, never
answers others, and says NXDOMAIN to the rest; the c-ares resolver is pointed
at it alone (its resolv.conf names only loopback too), so nothing here asks a
real DNS server. Names that resolve to non-loopback addresses are only
resolved and refused, never dialled: the guard records every address it is
asked to make a socket for (and c-ares is told not to sort answers, which it
does by connecting a UDP socket to each).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import struct
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from dispatcher.dns_resolver import AresLookup, CachingResolver, LookupTimeout
from dispatcher.domain.addresses import AllowList, TargetPolicy
from dispatcher.domain.dns_cache import DnsPolicy
from dispatcher.http1 import Http1Transport
from dispatcher.target_guard import BlockedTarget, TargetGuard
from dispatcher.transport import AiohttpTransport, DeliveryError, Transport
from tests.harness import ScriptedReceiver, answering, wait_until

pytestmark = pytest.mark.adversarial

OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
TRANSPORTS = {"aiohttp": AiohttpTransport, "http1": Http1Transport}
QTYPE_A = 1
SLOW = [f"slow-{i}.test" for i in range(4)]


class FakeDns(asyncio.DatagramProtocol):
    """A DNS server: A records from `zone`, silence for `silent`, NODATA for other types, NXDOMAIN else."""

    def __init__(self) -> None:
        self.zone: dict[str, tuple[str, int]] = {}  # name -> (IPv4 address, TTL)
        self.silent: set[str] = set()
        self.queries: list[tuple[str, int]] = []
        self.transport: asyncio.DatagramTransport | None = None
        self.port = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.port = transport.get_extra_info("sockname")[1]

    def asked(self, name: str, qtype: int = QTYPE_A) -> int:
        return self.queries.count((name, qtype))

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        name, qtype, question = _question(data)
        self.queries.append((name, qtype))
        if name in self.silent or self.transport is None:
            return
        self.transport.sendto(self._answer(data[:2], name, qtype, question), addr)

    def _answer(self, query_id: bytes, name: str, qtype: int, question: bytes) -> bytes:
        records = b""
        if name in self.zone and qtype == QTYPE_A:
            address, ttl = self.zone[name]
            records = b"\xc0\x0c" + struct.pack(">HHIH", QTYPE_A, 1, ttl, 4) + socket.inet_aton(address)
        rcode = 0 if name in self.zone else 3
        header = query_id + struct.pack(">HHHHH", 0x8180 | rcode, 1, 1 if records else 0, 0, 0)
        return header + question + records


def _question(data: bytes) -> tuple[str, int, bytes]:
    """The queried name (lower case), its type, and the question section's bytes to echo."""
    labels, i = [], 12
    while data[i]:
        labels.append(data[i + 1:i + 1 + data[i]].decode("ascii"))
        i += 1 + data[i]
    (qtype,) = struct.unpack(">H", data[i + 1:i + 3])
    return ".".join(labels).lower(), qtype, data[12:i + 5]


class RecordingGuard(TargetGuard):
    """The real guard, noting every address a socket is made for (a dial) before it decides."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dialled: list[str] = []

    def socket_factory(self, addr_info: tuple[Any, ...]) -> socket.socket:
        self.dialled.append(addr_info[4][0])
        return super().socket_factory(addr_info)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def dns() -> AsyncIterator[FakeDns]:
    loop = asyncio.get_running_loop()
    transport, server = await loop.create_datagram_endpoint(FakeDns, local_addr=("127.0.0.1", 0))
    yield server
    transport.close()


@pytest.fixture
async def receiver() -> AsyncIterator[ScriptedReceiver]:
    server = await ScriptedReceiver(answering(OK)).start()
    yield server
    await server.stop()


@pytest.fixture
async def resolvers(dns: FakeDns, tmp_path: Path) -> AsyncIterator[Callable[..., CachingResolver]]:
    """Resolvers that ask only the fake server; the resolv.conf c-ares may re-read names only loopback."""
    conf = tmp_path / "resolv.conf"
    conf.write_text("nameserver 127.0.0.1\n")
    made: list[CachingResolver] = []

    def make(clock: Callable[[], float] | None = None, **policy: float) -> CachingResolver:
        dns_policy = DnsPolicy(**policy)  # type: ignore[arg-type]
        # sort=False: c-ares would connect() a UDP socket to each answer to order them (no packet
        # leaves), and these answers include 169.254.169.254.
        lookup = AresLookup(dns_policy.timeout, [f"127.0.0.1:{dns.port}"], str(conf), sort=False)
        made.append(CachingResolver(lookup, dns_policy, *([clock] if clock else [])))
        return made[-1]

    yield make
    for resolver in made:
        await resolver.close()


@pytest.fixture(params=sorted(TRANSPORTS))
async def transports(request: pytest.FixtureRequest) -> AsyncIterator[Callable[..., Transport]]:
    made: list[Transport] = []

    def make(guard: TargetGuard, connect_timeout: float = 30.0) -> Transport:
        made.append(TRANSPORTS[request.param](guard, 30.0, connect_timeout, 4096, 64))
        return made[-1]

    yield make
    for transport in made:
        await transport.close()


def only(receiver: ScriptedReceiver) -> TargetPolicy:
    return TargetPolicy(AllowList.parse(f"127.0.0.1:{receiver.port}"))


async def test_names_that_never_answer_hold_up_neither_other_names_nor_addresses(
    dns: FakeDns, receiver: ScriptedReceiver, resolvers: Callable[..., CachingResolver],
    transports: Callable[..., Transport],
) -> None:
    dns.zone["fast.test"] = ("127.0.0.1", 60)
    dns.silent.update(SLOW)
    guard = RecordingGuard(only(receiver), resolvers(timeout=60.0, max_lookups=8))
    transport = transports(guard)
    # Two deliveries per silent name: more lookups than a small thread pool has threads.
    stalled = [asyncio.create_task(transport.post(f"http://{name}:{receiver.port}/", {}, b"{}"))
               for name in SLOW * 2]
    try:
        await wait_until(lambda: all(dns.asked(name) for name in SLOW), 10, "the silent names asked")
        by_name = await transport.post(f"http://fast.test:{receiver.port}/hook", {}, b"{}")
        by_address = await transport.post(receiver.url(), {}, b"{}")
        assert (by_name.status, by_address.status) == (200, 200)
        assert not any(task.done() for task in stalled)  # still waiting on the DNS all along
        assert all(dns.asked(name) == 1 for name in SLOW)  # each silent name asked once, for both waiters
        assert receiver.connections >= 1 and set(guard.dialled) == {"127.0.0.1"}
    finally:
        for task in stalled:
            task.cancel()
        await asyncio.gather(*stalled, return_exceptions=True)


async def test_a_lookup_past_its_timeout_is_a_failed_delivery_and_is_asked_again_next_time(
    dns: FakeDns, receiver: ScriptedReceiver, resolvers: Callable[..., CachingResolver],
    transports: Callable[..., Transport],
) -> None:
    dns.silent.add("slow-0.test")
    dns.zone["fast.test"] = ("127.0.0.1", 60)
    guard = RecordingGuard(only(receiver), resolvers(timeout=0.5))
    transport = transports(guard, connect_timeout=20.0)  # the DNS timeout, not the connect one, ends it
    url = f"http://slow-0.test:{receiver.port}/"
    with pytest.raises(DeliveryError, match=r"slow-0\.test timed out"):  # what the deliverer records
        await transport.post(url, {}, b"{}")
    asked = dns.asked("slow-0.test")
    with pytest.raises(DeliveryError, match="timed out"):
        await transport.post(url, {}, b"{}")
    assert dns.asked("slow-0.test") > asked  # a timeout is not cached as an answer
    assert (await transport.post(f"http://fast.test:{receiver.port}/", {}, b"{}")).status == 200
    with pytest.raises(LookupTimeout):
        await guard.resolve_allowed("slow-0.test", receiver.port)
    assert guard.dialled == ["127.0.0.1"]


async def test_a_cached_metadata_answer_is_refused_on_every_resolve_never_dialled(
    dns: FakeDns, resolvers: Callable[..., CachingResolver], transports: Callable[..., Transport],
) -> None:
    dns.zone["meta.test"] = ("169.254.169.254", 300)
    resolver = resolvers(clock=Clock())
    strict = RecordingGuard(TargetPolicy(), resolver)
    # A guard whose policy allows the address shares the cache: it may resolve it, never dial it here.
    lenient = TargetGuard(TargetPolicy(AllowList.parse("169.254.169.254/32")), resolver)
    for _ in range(2):
        with pytest.raises(BlockedTarget, match=r"169\.254\.169\.254 is a link-local"):
            await strict.resolve_allowed("meta.test", 80)
    assert [a["host"] for a in await lenient.resolve_allowed("meta.test", 80)] == ["169.254.169.254"]
    with pytest.raises(DeliveryError, match="blocked"):
        await transports(strict).post("http://meta.test/latest/meta-data/", {}, b"{}")
    assert dns.asked("meta.test") == 1  # every answer after the first came from the cache
    assert strict.dialled == []


async def test_a_name_rebinding_to_metadata_after_its_ttl_is_refused_before_any_connect(
    dns: FakeDns, receiver: ScriptedReceiver, resolvers: Callable[..., CachingResolver],
    transports: Callable[..., Transport],
) -> None:
    clock = Clock()
    # TTL 0: c-ares keeps nothing itself, and ours keeps the answer for its floor of 1 s.
    dns.zone["rebind.test"] = ("127.0.0.1", 0)
    guard = RecordingGuard(only(receiver), resolvers(clock=clock, min_ttl=1.0))
    url = f"http://rebind.test:{receiver.port}/"
    assert (await transports(guard).post(url, {}, b"{}")).status == 200
    dns.zone["rebind.test"] = ("169.254.169.254", 0)
    assert (await guard.resolve_allowed("rebind.test", receiver.port))[0]["host"] == "127.0.0.1"  # cached
    clock.now += 1.0
    with pytest.raises(DeliveryError, match=r"blocked: rebind\.test resolves only to refused addresses"):
        await transports(guard).post(url, {}, b"{}")  # a new pool: a new connection, a new resolve
    assert dns.asked("rebind.test") == 2
    assert guard.dialled == ["127.0.0.1"] and receiver.connections == 1


def _hosts_file_loopback_names() -> dict[str, str]:
    """Names /etc/hosts maps to an IPv4 loopback address (c-ares must read them, not ask the DNS)."""
    names: dict[str, str] = {}
    for line in Path("/etc/hosts").read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2 and fields[0].startswith("127."):
            for name in fields[1:]:
                names.setdefault(name.lower(), fields[0])
    names.pop("localhost", None)
    return names


async def test_localhost_and_hosts_file_names_resolve_as_before(
    dns: FakeDns, receiver: ScriptedReceiver, resolvers: Callable[..., CachingResolver],
    transports: Callable[..., Transport],
) -> None:
    guard = RecordingGuard(only(receiver), resolvers())  # the fake DNS says NXDOMAIN to all of these
    answers = await guard.resolve_allowed("localhost", receiver.port)
    assert [a["host"] for a in answers] == ["127.0.0.1"]  # ::1, if given, is refused by the allow list
    assert (await transports(guard).post(f"http://localhost:{receiver.port}/", {}, b"{}")).status == 200
    for name, address in list(_hosts_file_loopback_names().items())[:3]:
        allowed = TargetGuard(TargetPolicy(AllowList.parse("127.0.0.0/8")), resolvers())
        found = [a["host"] for a in await allowed.resolve_allowed(name, 80)]
        assert ipaddress.ip_address(address) in map(ipaddress.ip_address, found), name
    assert set(guard.dialled) <= {"127.0.0.1", "::1"}
