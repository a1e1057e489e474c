"""SSRF enforcement: every variant is refused at registration or blocked at delivery.

The real delivery transport runs against loopback only: an allowed receiver on
127.0.0.1:P, and canaries on 127.0.0.2:P, [::1]:P and 127.0.0.1:Q that count
every connection they get. Names go through an injected resolver that answers
from a table, never from DNS; names mapped to non-loopback addresses are only
resolved, never dialled.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from dispatcher.domain.addresses import AllowList, TargetPolicy
from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.records import check_url
from dispatcher.target_guard import TargetGuard
from dispatcher.transport import AiohttpTransport, DeliveryError
from tests.harness import Api, Receiver


class TableResolver(AbstractResolver):
    """Answers names from a table; a list of answer sets is served in turn (DNS rebinding)."""

    def __init__(self, table: dict[str, list[list[str]]]) -> None:
        self.table = table
        self.lookups: dict[str, int] = {}

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_UNSPEC) -> list[ResolveResult]:
        name = host.lower().rstrip(".")
        if name not in self.table:
            raise OSError(socket.EAI_NONAME, f"{name} is not in the test table")
        n = self.lookups.get(name, 0)
        self.lookups[name] = n + 1
        answers = self.table[name][min(n, len(self.table[name]) - 1)]
        return [_answer(name, address, port) for address in answers]

    async def close(self) -> None:
        pass


def _answer(name: str, address: str, port: int) -> ResolveResult:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    return {"hostname": name, "host": address, "port": port, "family": family, "proto": 0, "flags": 0}


@dataclass
class Canary:
    """A listener that must never be reached; it answers 200 so a breach would look like success."""

    host: str
    port: int = 0
    connections: int = 0
    server: asyncio.Server | None = field(default=None, repr=False)

    async def start(self) -> Canary:
        self.server = await asyncio.start_server(self._on_connect, self.host, self.port)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


@dataclass
class Rig:
    port: int  # the allowed receiver's port; canaries on 127.0.0.2 and ::1 share it
    other: int  # a canary on 127.0.0.1 at a port the allow list does not name
    guard: TargetGuard
    transport: AiohttpTransport
    resolver: TableResolver
    canaries: list[Canary]
    hits: list[str]

    def url(self, template: str) -> str:
        return template.format(P=self.port, Q=self.other)

    async def register(self, url: str) -> None:
        """What the API does with a receiver URL before storing it."""
        check_url(url, "url", require_https=False)
        await self.guard.check_url(url)

    def canary_connections(self) -> int:
        return sum(c.connections for c in self.canaries)


async def _allowed_receiver(hits: list[str]) -> tuple[web.AppRunner, int]:
    async def handle(request: web.Request) -> web.StreamResponse:
        hits.append(request.path_qs)
        to = request.query.get("to")
        if to:
            return web.Response(status=int(request.query.get("status", "302")), headers={"Location": to})
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    for _ in range(20):  # find a port free on 127.0.0.1, 127.0.0.2 and ::1 alike
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        if _free_on(port, "127.0.0.2") and _free_on(port, "::1"):
            return runner, port
        await site.stop()
    raise RuntimeError("no port free on all loopback addresses")


def _free_on(port: int, host: str) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


RESOLVES = {
    "allowed.test": [["127.0.0.1"]],
    "localhost": [["127.0.0.1", "::1"]],
    "canary.test": [["127.0.0.2"]],
    "v6.test": [["::1"]],
    "mixed.test": [["127.0.0.2", "::1"]],
    "mapped.test": [["::ffff:127.0.0.2"]],
    "part-bad.test": [["127.0.0.2", "127.0.0.1"]],
    "rebind.test": [["127.0.0.1"], ["127.0.0.2"]],
    "rebind6.test": [["127.0.0.1"], ["::1"]],
    "rebind-late.test": [["127.0.0.1"], ["127.0.0.1"], ["127.0.0.2"]],
    # Never dialled by this module: only resolved and refused.
    "metadata.test": [["169.254.169.254"]],
    "private.test": [["10.0.0.1", "192.168.1.10"]],
    "cgnat.test": [["100.64.0.1"]],
    "nat64.test": [["64:ff9b::a9fe:a9fe"]],
    "teredo.test": [["2001::1"]],
    "sixtofour.test": [["2002:7f00:1::1"]],
    "ula.test": [["fd00::1"]],
    "multicast.test": [["224.0.0.1"]],
}


@pytest.fixture(scope="module")
async def rig() -> AsyncIterator[Rig]:
    hits: list[str] = []
    runner, port = await _allowed_receiver(hits)
    canaries = [
        await Canary("127.0.0.2", port).start(),
        await Canary("::1", port).start(),
        await Canary("127.0.0.1").start(),
    ]
    resolver = TableResolver(RESOLVES)
    guard = TargetGuard(TargetPolicy(AllowList.parse(f"127.0.0.1:{port}")), resolver)
    transport = AiohttpTransport(guard, timeout=5, connect_timeout=2, response_cap=4096, limit=10)
    yield Rig(port, canaries[2].port, guard, transport, resolver, canaries, hits)
    await transport.close()
    for canary in canaries:
        await canary.stop()
    await runner.cleanup()


REFUSED_AT_REGISTRATION = [
    "http://127.0.0.2:{P}/",
    "http://[::1]:{P}/",
    "http://[0:0:0:0:0:0:0:1]:{P}/",
    "http://[0000::0001]:{P}/",
    "http://[::ffff:127.0.0.2]:{P}/",
    "http://[::ffff:7f00:2]:{P}/",
    "http://[::127.0.0.2]:{P}/",
    "http://[fe80::1%25lo]:{P}/",
    "https://[::1]:{P}/",
    "http://2130706434:{P}/",
    "http://0x7f000002:{P}/",
    "http://0x7f.0.0.2:{P}/",
    "http://0177.0.0.2:{P}/",
    "http://0177.0.0.02:{P}/",
    "http://127.2:{P}/",
    "http://127.0.2:{P}/",
    "http://\uff11\uff12\uff17\uff0e\uff10\uff0e\uff10\uff0e\uff12:{P}/",  # full-width
    "http://127\u30020\u30020\u30022:{P}/",  # ideographic full stops
    "http://127.0.0.2.:{P}/",
    "http://%31%32%37.0.0.2:{P}/",
    "http://0.0.0.0:{Q}/",
    "http://0:{Q}/",
    "http://[::]:{Q}/",
    "http://127.0.0.1:{Q}/",  # allowed address, port not allowed
    "http://localhost:{Q}/",
    "http://canary.test:{P}/",
    "http://CANARY.test.:{P}/",
    "http://v6.test:{P}/",
    "http://mixed.test:{P}/",
    "http://mapped.test:{P}/",
    "http://metadata.test/latest/meta-data/",
    "http://private.test/",
    "http://cgnat.test/",
    "http://nat64.test/",
    "http://teredo.test/",
    "http://sixtofour.test/",
    "http://ula.test/",
    "http://multicast.test/",
    "http://169.254.169.254/latest/meta-data/",
    "http://user:pw@127.0.0.1:{P}/",
    "http://127.0.0.1:{P}@127.0.0.2:{P}/",
    "http://127.0.0.2:{P}\\@127.0.0.1:{P}/",
    "http://127.0.0.2:{P}#@127.0.0.1:{P}/",
    "ftp://127.0.0.1:{P}/",
    "file:///etc/passwd",
    "gopher://127.0.0.2:{P}/_",
]


@pytest.mark.parametrize("template", REFUSED_AT_REGISTRATION)
async def test_refused_at_registration(rig: Rig, template: str) -> None:
    with pytest.raises(InvalidInput) as info:
        await rig.register(rig.url(template))
    assert info.value.field == "url"
    assert rig.canary_connections() == 0


# Stored before the policy tightened, or written by hand: the connector still refuses.
BLOCKED_AT_CONNECT = [
    "http://127.0.0.2:{P}/",
    "http://[::1]:{P}/",
    "http://[::ffff:127.0.0.2]:{P}/",
    "http://0.0.0.0:{Q}/",
    "http://127.0.0.1:{Q}/",
    "http://2130706434:{P}/",
    "http://0x7f.0.0.2:{P}/",
    "http://canary.test:{P}/",
    "http://mixed.test:{P}/",
    "http://mapped.test:{P}/",
    "http://localhost:{Q}/",
]


@pytest.mark.parametrize("template", BLOCKED_AT_CONNECT)
async def test_blocked_at_delivery_even_if_stored(rig: Rig, template: str) -> None:
    with pytest.raises(DeliveryError):
        await rig.transport.post(rig.url(template), {}, b"{}")
    assert rig.canary_connections() == 0


@pytest.mark.parametrize("name", ["rebind.test", "rebind6.test"])
async def test_rebinding_name_passes_registration_then_is_blocked(rig: Rig, name: str) -> None:
    url = rig.url(f"http://{name}:{{P}}/")
    await rig.register(url)  # first answer: the allowed receiver
    with pytest.raises(DeliveryError, match="blocked"):
        await rig.transport.post(url, {}, b"{}")
    assert rig.resolver.lookups[name] == 2
    assert rig.canary_connections() == 0


async def test_rebinding_after_successful_deliveries_is_blocked_on_a_new_connection(rig: Rig) -> None:
    url = rig.url("http://rebind-late.test:{P}/late")
    await rig.register(url)
    before = len(rig.hits)
    assert (await rig.transport.post(url, {}, b"{}")).status == 200
    fresh = AiohttpTransport(rig.guard, timeout=5, connect_timeout=2, response_cap=4096, limit=1)
    try:
        with pytest.raises(DeliveryError, match="blocked"):
            await fresh.post(url, {}, b"{}")  # a new pool resolves again, and the name has rebound
    finally:
        await fresh.close()
    assert len(rig.hits) == before + 1
    assert rig.canary_connections() == 0


@pytest.mark.parametrize(
    ("to", "status"),
    [
        ("http://127.0.0.2:{P}/", 302),
        ("http://[::1]:{P}/", 307),
        ("http://canary.test:{P}/", 308),
        ("http://169.254.169.254/latest/meta-data/", 301),
        ("http://127.0.0.1:{Q}/", 303),
    ],
)
async def test_redirects_to_internal_addresses_are_not_followed(rig: Rig, to: str, status: int) -> None:
    url = rig.url("http://127.0.0.1:{P}/hook") + f"?status={status}&to={rig.url(to)}"
    await rig.register(url)
    response = await rig.transport.post(url, {}, b"{}")
    assert response.status == status
    assert response.headers["location"] == rig.url(to)
    assert rig.canary_connections() == 0


@pytest.mark.parametrize("template", ["http://127.0.0.1:{P}/ok", "http://allowed.test:{P}/ok",
                                      "http://part-bad.test:{P}/ok"])
async def test_allowed_targets_are_delivered(rig: Rig, template: str) -> None:
    """The control group: the guard lets the allowed receiver through, by address or by name."""
    url = rig.url(template)
    await rig.register(url)
    before = len(rig.hits)
    assert (await rig.transport.post(url, {}, b"{}")).status == 200
    assert len(rig.hits) == before + 1
    assert rig.canary_connections() == 0


async def test_worker_api_refuses_internal_targets_naming_the_url(api: Api, receiver: Receiver) -> None:
    for url in ["http://127.0.0.2:9/", "http://[::1]:9/", "http://2130706433/", "http://169.254.169.254/"]:
        status, body = await api.call("POST", "/v1/receivers", {"url": url})
        assert status == 422, (url, body)
        assert body["error"]["field"] == "url"
    await api.create_receiver(receiver.url("ok"))
