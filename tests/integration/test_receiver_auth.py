"""Receiver auth through real servers on 127.0.0.1: mutual TLS and OAuth2 client credentials.

The mTLS receiver is an aiohttp HTTPS server that requires a client certificate signed by its
own trustme CA; the OAuth2 receiver checks bearer tokens a loopback token server issued.
Both delivery transports are checked directly too (a connection that presented one
receiver's certificate never carries another's request).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gzip
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote_plus

import aiohttp
import orjson
import pytest
import trustme
from aiohttp import web

from dispatcher.domain.addresses import AllowList, TargetPolicy
from dispatcher.domain.receiver_auth import MtlsAuth, OAuth2Auth, ServerTls
from dispatcher.domain.records import ReceiverConfig
from dispatcher.http1 import Http1Transport
from dispatcher.receiver_auth import AuthedRequests
from dispatcher.target_guard import TargetGuard
from dispatcher.transport import AiohttpTransport, DeliveryError
from tests.harness import Api, Delivery, Receiver, WorkerProcess, tls_receiver, wait_until

pytestmark = pytest.mark.integration

SEEN_SECRETS: list[str] = []  # client secrets and private keys this module sent; none may come back


@dataclass
class Pki:
    server_ca: trustme.CA  # signs the receiver's server certificate; the worker trusts it
    client_ca: trustme.CA  # signs client certificates; the receiver trusts it
    ca_file: Path

    def client(self, name: str) -> dict[str, str]:
        leaf = self.client_ca.issue_cert(f"{name}.clients.example", common_name=name)
        key = leaf.private_key_pem.bytes().decode()
        SEEN_SECRETS.append(key)
        return {"type": "mtls", "certificate": leaf.cert_chain_pems[0].bytes().decode(), "private_key": key}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    pki = Pki(trustme.CA(), trustme.CA(), tmp_path_factory.mktemp("auth-tls") / "ca.pem")
    pki.server_ca.cert_pem.write_to_path(str(pki.ca_file))
    return pki


@pytest.fixture(scope="module")
async def worker(make_module_worker: Callable[..., WorkerProcess], pki: Pki) -> AsyncIterator[WorkerProcess]:
    proc = make_module_worker(DISPATCHER_CA_FILE=str(pki.ca_file), DISPATCHER_CONNECT_TIMEOUT="2")
    await proc.wait_ready()
    yield proc


class MtlsReceiver:
    """HTTPS on 127.0.0.1 that completes a handshake only with a client certificate of `client_ca`."""

    def __init__(self, pki: Pki) -> None:
        self.pki = pki
        self.deliveries: list[tuple[str, str, bytes]] = []  # (path, client common name, body)
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def start(self) -> MtlsReceiver:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.pki.server_ca.issue_cert("127.0.0.1").configure_cert(context)
        self.pki.client_ca.configure_trust(context)
        context.verify_mode = ssl.CERT_REQUIRED
        app = web.Application()
        app.router.add_post("/{path:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=context)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}/{path}"

    async def _handle(self, request: web.Request) -> web.Response:
        assert request.transport is not None
        peer = request.transport.get_extra_info("peercert") or {}
        names = [value for rdn in peer.get("subject", ()) for key, value in rdn if key == "commonName"]
        self.deliveries.append((request.match_info["path"], names[0] if names else "", await request.read()))
        return web.Response(text="ok")

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def mtls_receiver(pki: Pki) -> AsyncIterator[MtlsReceiver]:
    receiver = await MtlsReceiver(pki).start()
    yield receiver
    await receiver.stop()


@dataclass
class TokenServer:
    """A client-credentials token endpoint on 127.0.0.1 that also tells the receiver which tokens hold."""

    client_id: str = "dispatcher"
    client_secret: str = "cs-" + base64.b32encode(b"token-server-secret").decode()
    expires_in: float = 3600
    status: int = 200  # what the endpoint answers (500: down)
    requests: list[dict[str, list[str]]] = field(default_factory=list)
    valid: set[str] = field(default_factory=set)
    issued: list[str] = field(default_factory=list)
    port: int = 0
    runner: web.AppRunner | None = None

    async def start(self) -> TokenServer:
        app = web.Application()
        app.router.add_post("/token", self._token)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        SEEN_SECRETS.append(self.client_secret)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    def auth(self, **extra: Any) -> dict[str, Any]:
        return {"type": "oauth2", "token_url": self.url, "client_id": self.client_id,
                "client_secret": self.client_secret, **extra}

    async def _token(self, request: web.Request) -> web.Response:
        form = parse_qs((await request.read()).decode())
        self.requests.append(form)
        # RFC 6749 2.3.1: id and secret are form-encoded inside Basic (this secret has "=" in it)
        basic = request.headers.get("authorization", "").removeprefix("Basic ")
        given = [unquote_plus(part) for part in base64.b64decode(basic).decode().split(":")]
        if given != [self.client_id, self.client_secret]:
            return web.json_response({"error": "invalid_client"}, status=401)
        if self.status != 200 or form.get("grant_type") != ["client_credentials"]:
            return web.json_response({"error": "temporarily_unavailable"}, status=self.status)
        token = f"tok-{len(self.issued) + 1}"
        self.issued.append(token)
        self.valid.add(token)
        answer = {"access_token": token, "token_type": "Bearer", "expires_in": self.expires_in}
        return web.json_response(answer)

    async def receiver_check(self, path: str, delivery: Delivery) -> int:
        """The receiver's behaviour: 200 for a valid bearer token, else 401."""
        given = delivery.headers.get("authorization", "").removeprefix("Bearer ")
        return 200 if given in self.valid else 401

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.fixture
async def tokens() -> AsyncIterator[TokenServer]:
    server = await TokenServer().start()
    yield server
    await server.stop()


def message(rid: str, n: int) -> dict[str, Any]:
    return {"receiver_id": rid, "event_type": "t.x", "payload": {"n": n}}


def paths(receiver: MtlsReceiver) -> list[str]:
    return [path for path, _, _ in receiver.deliveries]


def bearer(delivery: Delivery) -> str:
    return delivery.headers.get("authorization", "").removeprefix("Bearer ")


# mutual TLS ----------------------------------------------------------------------------------------


async def test_a_receiver_with_the_right_certificate_gets_deliveries_and_one_without_retries(
    api: Api, pki: Pki, mtls_receiver: MtlsReceiver
) -> None:
    good = await api.create_receiver(mtls_receiver.url("good"), auth=pki.client("alpha"))
    assert good["auth"]["certificate"]["subject"].startswith("CN=alpha")
    plain = await api.create_receiver(mtls_receiver.url("plain"))
    await api.send_batch([message(good["id"], 1), message(plain["id"], 2)])
    await wait_until(lambda: paths(mtls_receiver) == ["good"], 20, "mTLS delivery")
    assert [(p, cn) for p, cn, _ in mtls_receiver.deliveries] == [("good", "alpha")]

    # Refused at the handshake: failed attempts, and the message waits (not lost) ...
    state = await api.eventually_state(plain["id"], lambda s: s["failed_attempts"] >= 2, 20, "failures")
    assert state["backlog"] == 1 and state["delivered"] == 0
    attempts = await api.attempts(plain["id"])
    assert attempts[0]["status"] is None and attempts[0]["error"], attempts[0]  # TLS 1.3: a hang-up
    # ... until the receiver gets a certificate: then it goes, once.
    status, patched = await api.call("PATCH", f"/v1/receivers/{plain['id']}", {"auth": pki.client("beta")})
    assert status == 200, patched
    await wait_until(lambda: "plain" in paths(mtls_receiver), 20, "delivery after the PATCH")
    assert [(p, cn) for p, cn, _ in mtls_receiver.deliveries if p == "plain"] == [("plain", "beta")]
    await api.eventually_state(plain["id"], lambda s: s["backlog"] == 0, 10, "backlog drained")


async def test_a_renewed_certificate_keeps_its_key_and_a_bad_one_is_refused_naming_the_field(
    api: Api, pki: Pki, mtls_receiver: MtlsReceiver
) -> None:
    first = pki.client("gamma")
    created = await api.create_receiver(mtls_receiver.url("renew"), auth=first)
    rid = created["id"]
    other = pki.client("delta")
    cases = [
        ({"type": "mtls", "certificate": other["certificate"]}, "auth.private_key"),  # not gamma's key
        ({"type": "mtls", "certificate": "-----BEGIN CERTIFICATE-----\nxx\n-----END CERTIFICATE-----"},
         "auth.certificate"),
        ({**first, "private_key": other["private_key"]}, "auth.private_key"),
        ({"type": "kerberos"}, "auth.type"),
    ]
    for auth, field_name in cases:
        status, body = await api.call("PATCH", f"/v1/receivers/{rid}", {"auth": auth})
        assert (status, body["error"]["field"]) == (422, field_name), body
        assert "PRIVATE KEY" not in orjson.dumps(body).decode()
    renewed = {"type": "mtls", "certificate": first["certificate"]}
    status, body = await api.call("PATCH", f"/v1/receivers/{rid}", {"auth": renewed})
    assert status == 200 and body["auth"]["private_key"] == "set", body


@pytest.mark.parametrize("kind", [Http1Transport, AiohttpTransport])
async def test_connections_are_never_shared_between_client_certificates(
    kind: type[Http1Transport] | type[AiohttpTransport], pki: Pki, mtls_receiver: MtlsReceiver
) -> None:
    guard = TargetGuard(TargetPolicy(AllowList.parse("127.0.0.0/8")))
    transport = kind(guard, 5.0, 2.0, 4096, 16, pki.ca_file)
    try:
        certs = {name: MtlsAuth(c["certificate"], c["private_key"])
                 for name, c in (("one", pki.client("one")), ("two", pki.client("two")))}
        for n in range(3):
            for name, cert in certs.items():
                resp = await transport.post(mtls_receiver.url(f"{name}-{n}"), {}, b"{}", client_cert=cert)
                assert resp.status == 200
        with pytest.raises(DeliveryError):  # no certificate: refused, on a connection of its own
            await transport.post(mtls_receiver.url("none"), {}, b"{}")
    finally:
        await transport.close()
    assert [(path.split("-")[0], cn) for path, cn, _ in mtls_receiver.deliveries] == [
        (name, name) for _ in range(3) for name in ("one", "two")]


# OAuth2 client credentials ---------------------------------------------------------------------------


async def test_a_token_is_fetched_once_reused_and_fetched_again_after_a_401(
    api: Api, receiver: Receiver, tokens: TokenServer
) -> None:
    receiver.behaviour = tokens.receiver_check
    created = await api.create_receiver(receiver.url("oauth"), auth=tokens.auth(scope="webhooks:send",
                                                                                 audience="https://rcv"))
    rid = created["id"]
    assert created["auth"]["client_secret"] == "set"
    await api.send_batch([message(rid, n) for n in range(5)])
    await api.eventually_state(rid, lambda s: s["delivered"] == 5, 20, "five deliveries")
    assert {bearer(d) for d in receiver.by_path("oauth")} == {"tok-1"}
    assert len(tokens.requests) == 1
    assert tokens.requests[0]["scope"] == ["webhooks:send"] and tokens.requests[0]["audience"] == ["https://rcv"]

    tokens.valid.clear()  # the token is revoked before its time: one 401, one new token, delivered
    await api.send_batch([message(rid, 5)])
    await api.eventually_state(rid, lambda s: s["delivered"] == 6, 20, "delivery after the 401")
    assert [bearer(d) for d in receiver.by_path("oauth")][-2:] == ["tok-1", "tok-2"]
    assert len(tokens.requests) == 2
    state = await api.state(rid)
    assert state["failed_attempts"] == 0  # the 401 and its retry are one attempt


async def test_a_token_is_refreshed_before_it_expires(
    api: Api, receiver: Receiver, tokens: TokenServer
) -> None:
    receiver.behaviour = tokens.receiver_check
    tokens.expires_in = 5  # the shortest lifetime used: refreshed after 4.5 s
    rid = (await api.create_receiver(receiver.url("refresh"), auth=tokens.auth()))["id"]
    sent = 0

    async def send_one() -> None:
        nonlocal sent
        sent += 1
        await api.send_batch([message(rid, sent)])
        await api.eventually_state(rid, lambda s: s["delivered"] == sent, 20, f"delivery {sent}")

    await send_one()
    deadline = time.monotonic() + 30  # the refresh is due 4.5 s after the first fetch
    while len(tokens.issued) < 2 and time.monotonic() < deadline:
        await send_one()
    assert len(tokens.issued) == 2, "a new token after the first one's refresh time"
    assert {bearer(d) for d in receiver.by_path("refresh")} == {"tok-1", "tok-2"}
    assert (await api.state(rid))["failed_attempts"] == 0  # refreshed ahead: no 401 on the way


async def test_a_failing_token_server_fails_attempts_with_auth_error_and_nothing_is_lost(
    api: Api, receiver: Receiver, tokens: TokenServer, worker: WorkerProcess
) -> None:
    receiver.behaviour = tokens.receiver_check
    tokens.status = 500
    rid = (await api.create_receiver(receiver.url("down"), auth=tokens.auth()))["id"]
    await api.send_batch([message(rid, 1)])
    await api.eventually_state(rid, lambda s: s["failed_attempts"] >= 2, 20, "failed attempts")
    attempts = await api.attempts(rid)
    assert attempts[0]["error"].startswith("auth_error: token server answered HTTP 500"), attempts[0]
    assert receiver.by_path("down") == []  # no request without a token
    async with aiohttp.ClientSession() as session, session.get(f"{worker.url}/metrics") as resp:
        exposition = await resp.text()
    counted = [float(line.rsplit(" ", 1)[1]) for line in exposition.splitlines()
               if line.startswith("webhook_dispatcher_delivery_attempts_total{")
               and 'outcome="auth_error"' in line and 'kind="message"' in line]
    assert counted and counted[0] >= 2, "the failures are counted as auth_error"
    tokens.status = 200
    await api.eventually_state(rid, lambda s: s["delivered"] == 1 and s["backlog"] == 0, 20, "recovered")
    assert [bearer(d) for d in receiver.by_path("down")] == ["tok-1"]


async def test_the_verification_handshake_and_a_ping_carry_the_token(
    api: Api, receiver: Receiver, tokens: TokenServer
) -> None:
    receiver.behaviour = tokens.receiver_check
    receiver.echo_challenge = True
    created = await api.create_receiver(receiver.url("verified"), auth=tokens.auth(), verify=True)
    assert created["verified"], created
    assert [bearer(d) for d in receiver.challenges] == ["tok-1"]
    status, pinged = await api.call("POST", f"/v1/receivers/{created['id']}/ping")
    assert status == 200 and pinged["status"] == 200, pinged
    assert bearer(receiver.by_path("verified")[-1]) == "tok-1" and len(tokens.requests) == 1


async def test_a_token_url_is_checked_like_a_receiver_url(api: Api, tokens: TokenServer) -> None:
    for url, code in (("http://127.0.0.2:9/token", "forbidden_target"), ("ftp://127.0.0.1/t", "invalid")):
        status, body = await api.call("POST", "/v1/receivers", {"url": "http://127.0.0.1:9/x",
                                                                 "auth": tokens.auth(token_url=url)})
        assert (status, body["error"]["field"], body["error"]["code"]) == (422, "auth.token_url", code), body


# a hostile token server, through the real transports ----------------------------------------------


def answer_text(text: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(text=text, content_type="application/json")

    return handler


class HostileTokenServer:
    """Token endpoints that answer badly: each path is one way."""

    def __init__(self) -> None:
        self.hold = asyncio.Event()  # the slow endpoint answers only once the test is done with it
        self.port = 0
        self.runner: web.AppRunner | None = None

    async def start(self) -> HostileTokenServer:
        app = web.Application()
        app.router.add_post("/redirect", self._redirect)
        app.router.add_post("/good", self._good)
        app.router.add_post("/huge", self._huge)
        app.router.add_post("/gzip-bomb", self._bomb)
        app.router.add_post("/html", answer_text("<html>hello</html>"))
        app.router.add_post("/slow", self._slow)
        app.router.add_post("/no-token", answer_text('{"token_type": "Bearer"}'))
        app.router.add_post("/negative", answer_text('{"access_token": "t", "expires_in": -1}'))
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    async def _redirect(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(self.url("good"))

    async def _good(self, request: web.Request) -> web.Response:
        return web.json_response({"access_token": "followed", "token_type": "Bearer"})

    async def _huge(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"content-type": "application/json"})
        await resp.prepare(request)
        with contextlib.suppress(ConnectionError):  # the client hangs up at its cap
            await resp.write(b'{"access_token": "' + b"x" * (4 << 20))
        return resp

    async def _bomb(self, request: web.Request) -> web.Response:
        body = gzip.compress(b'{"access_token": "' + b"x" * (8 << 20) + b'"}')
        headers = {"content-type": "application/json", "content-encoding": "gzip"}
        return web.Response(body=body, headers=headers)

    async def _slow(self, request: web.Request) -> web.Response:
        await self.hold.wait()
        return await self._good(request)

    async def stop(self) -> None:
        self.hold.set()
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.fixture
async def hostile_tokens() -> AsyncIterator[HostileTokenServer]:
    server = await HostileTokenServer().start()
    yield server
    await server.stop()


HOSTILE_ANSWERS = [
    ("redirect", "auth_error: token server answered HTTP 302"),  # never followed
    ("huge", "auth_error: token server answered HTTP 200 with a body over the size cap"),
    ("gzip-bomb", "auth_error: token server answered HTTP 200 with a body over the size cap"),
    ("html", "auth_error: token server answer is not a JSON object"),
    ("no-token", "auth_error: token server answer has no access_token"),
    ("negative", "auth_error: expires_in is negative"),
    ("slow", "auth_error: token request failed: timeout"),
]


@pytest.mark.parametrize("kind", [Http1Transport, AiohttpTransport])
async def test_a_hostile_token_server_fails_only_its_own_receivers_attempts(
    kind: type[Http1Transport] | type[AiohttpTransport], hostile_tokens: HostileTokenServer,
    receiver: Receiver,
) -> None:
    guard = TargetGuard(TargetPolicy(AllowList.parse("127.0.0.0/8")))
    transport = kind(guard, 1.0, 1.0, 64 * 1024, 16)
    requests = AuthedRequests(transport)
    plain = ReceiverConfig("plain", receiver.url("plain"), "whsec_x")
    try:
        for path, reason in HOSTILE_ANSWERS:
            config = ReceiverConfig(path, receiver.url(path), "whsec_x",
                                    auth=OAuth2Auth(hostile_tokens.url(path), "id", "secret"))
            attempt = asyncio.create_task(requests.send("POST", config, {}, b"{}"))
            # Meanwhile another receiver is served: nothing waits for the token server.
            assert (await requests.send("POST", plain, {}, b"{}")).status == 200
            with pytest.raises(DeliveryError) as caught:
                await attempt
            assert str(caught.value).startswith(reason), (path, str(caught.value))
    finally:
        await requests.close()
        await transport.close()
    assert {d.path for d in receiver.deliveries} == {"plain"}  # no request went out without a token


# a receiver's own CA (tls.ca) ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [Http1Transport, AiohttpTransport])
async def test_a_receivers_own_ca_is_the_only_one_its_certificate_may_chain_to(
    kind: type[Http1Transport] | type[AiohttpTransport], pki: Pki, mtls_receiver: MtlsReceiver
) -> None:
    private = trustme.CA()
    private_tls = ServerTls(private.cert_pem.bytes().decode())
    private_runner, private_port = await tls_receiver(private)  # a CA the worker does not trust
    public_runner, public_port = await tls_receiver(pki.server_ca)  # one it trusts (DISPATCHER_CA_FILE)
    guard = TargetGuard(TargetPolicy(AllowList.parse("127.0.0.0/8")))
    transport = kind(guard, 5.0, 2.0, 4096, 16, pki.ca_file)
    private_url, public_url = (f"https://127.0.0.1:{p}/hook" for p in (private_port, public_port))
    try:
        assert (await transport.request("POST", private_url, {}, b"{}", server_ca=private_tls)).status == 200
        with pytest.raises(DeliveryError, match="certificate"):  # the worker's CAs do not vouch for it
            await transport.post(private_url, {}, b"{}")
        with pytest.raises(DeliveryError, match="certificate"):  # its own CA replaces the worker's
            await transport.request("POST", public_url, {}, b"{}", server_ca=private_tls)
        assert (await transport.post(public_url, {}, b"{}")).status == 200
        client = pki.client("own-ca")
        both = await transport.request("POST", mtls_receiver.url("both"), {}, b"{}",
                                       client_cert=MtlsAuth(client["certificate"], client["private_key"]),
                                       server_ca=ServerTls(pki.server_ca.cert_pem.bytes().decode()))
        assert both.status == 200 and mtls_receiver.deliveries[-1][:2] == ("both", "own-ca")
    finally:
        await transport.close()
        await private_runner.cleanup()
        await public_runner.cleanup()


async def test_a_receiver_with_its_own_ca_gets_deliveries_through_the_worker(api: Api) -> None:
    private = trustme.CA()
    runner, port = await tls_receiver(private)
    try:
        ca = private.cert_pem.bytes().decode()
        created = await api.create_receiver(f"https://127.0.0.1:{port}/hook", tls={"ca": ca})
        assert created["tls"]["ca"] == ca and created["tls"]["ca_certificates"][0]["subject"]
        rid = created["id"]
        await api.send_batch([message(rid, 1)])
        await api.eventually_state(rid, lambda s: s["delivered"] == 1, 20, "delivery over the receiver's CA")
        status, body = await api.call("PATCH", f"/v1/receivers/{rid}", {"tls": {"ca": "not a pem"}})
        assert (status, body["error"]["field"]) == (422, "tls.ca"), body
        status, body = await api.call("PATCH", f"/v1/receivers/{rid}", {"tls": None})
        assert status == 200 and body["tls"] is None, body
        await api.send_batch([message(rid, 2)])  # the worker's CAs do not vouch for it: it waits
        state = await api.eventually_state(rid, lambda s: s["failed_attempts"] >= 1, 20, "a failed attempt")
        assert state["backlog"] == 1
    finally:
        await runner.cleanup()


async def test_no_answer_and_no_log_line_holds_a_key_or_a_client_secret(
    api: Api, worker: WorkerProcess
) -> None:
    assert SEEN_SECRETS, "the tests above record what they sent"
    status, listed = await api.call("GET", "/v1/receivers?limit=1000")
    assert status == 200
    shown = orjson.dumps(listed).decode()
    for receiver in listed["receivers"]:
        status, one = await api.call("GET", f"/v1/receivers/{receiver['id']}")
        shown += orjson.dumps(one).decode()
    log = worker.log_path.read_text(errors="replace")
    assert "auth_error" in log  # the failing token server's attempts were logged
    for secret in SEEN_SECRETS:
        assert secret not in shown and secret not in log
    assert "PRIVATE KEY" not in shown and "PRIVATE KEY" not in log
