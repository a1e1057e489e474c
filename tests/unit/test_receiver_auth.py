"""Receiver auth: `auth` bodies (mTLS, OAuth2), what the API shows of them, tokens and their cache."""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime
import os
import ssl
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import orjson
import pytest
import trustme
from cryptography.hazmat.primitives import serialization

from dispatcher.cli_api import add_api_commands
from dispatcher.cli_commands import UsageError, receiver_fields
from dispatcher.client_tls import ClientContexts
from dispatcher.domain.actor import Policy
from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.oauth2_tokens import (
    DEFAULT_LIFETIME,
    MAX_LIFETIME,
    MIN_LIFETIME,
    TokenError,
    parse_token_response,
    token_request,
    token_times,
)
from dispatcher.domain.receiver_auth import MtlsAuth, OAuth2Auth, ServerTls, auth_view, parse_auth
from dispatcher.domain.receiver_spec import parse_receiver_spec, patched_body, public_view, secret_view
from dispatcher.domain.records import ReceiverConfig
from dispatcher.domain.signing import generate
from dispatcher.receiver_auth import AuthedRequests, TokenSource
from dispatcher.transport import DeliveryError, Response
from tests.ui.test_templates import COMMON, pages
from web.ui import environment

NOW = time.time()
CA = trustme.CA()
LEAF = CA.issue_cert("client.example", common_name="client.example")
CERT = LEAF.cert_chain_pems[0].bytes().decode()
KEY = LEAF.private_key_pem.bytes().decode()
OTHER_KEY = CA.issue_cert("other.example").private_key_pem.bytes().decode()
EXPIRED = CA.issue_cert(
    "old.example", not_before=datetime.datetime(2020, 1, 1), not_after=datetime.datetime(2021, 1, 1))
SECRET = "s3cr3t-client-secret"
ENCRYPTED_KEY = serialization.load_pem_private_key(KEY.encode(), None).private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
    serialization.BestAvailableEncryption(b"passphrase")).decode()
OAUTH = {"type": "oauth2", "token_url": "https://auth.example/token", "client_id": "dispatcher",
         "client_secret": SECRET}


def mtls(**fields: Any) -> dict[str, Any]:
    return {"type": "mtls", "certificate": CERT, "private_key": KEY, **fields}


def error_field(value: object, current: Any = None, https: bool = True) -> str:
    with pytest.raises(InvalidInput) as caught:
        parse_auth(value, current, NOW, https)
    assert KEY not in caught.value.message and SECRET not in caught.value.message
    return caught.value.field


@pytest.mark.parametrize(("value", "field"), [
    ("mtls", "auth"),
    ({"type": "basic"}, "auth.type"),
    ({}, "auth.type"),
    (mtls(extra=1), "auth.extra"),
    (mtls(certificate="nope"), "auth.certificate"),
    (mtls(certificate=""), "auth.certificate"),
    (mtls(certificate=5), "auth.certificate"),
    (mtls(certificate="x" * 70_000), "auth.certificate"),
    (mtls(certificate="-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), "auth.certificate"),
    (mtls(certificate=EXPIRED.cert_chain_pems[0].bytes().decode(),
          private_key=EXPIRED.private_key_pem.bytes().decode()), "auth.certificate"),
    (mtls(private_key="not a key"), "auth.private_key"),
    (mtls(private_key=OTHER_KEY), "auth.private_key"),
    (mtls(private_key=CERT), "auth.private_key"),
    (mtls(private_key=LEAF.private_key_pem.bytes().decode().replace("PRIVATE KEY", "ENCRYPTED PRIVATE KEY")),
     "auth.private_key"),
    (mtls(private_key=ENCRYPTED_KEY), "auth.private_key"),
    (mtls(certificate=CERT + KEY), "auth.certificate"),  # a bundle: the key must not sit there
    ({"type": "mtls", "certificate": CERT}, "auth.private_key"),  # no key, and none to keep
    ({**OAUTH, "token_url": "ftp://auth.example/t"}, "auth.token_url"),
    ({**OAUTH, "token_url": "http://auth.example/t"}, "auth.token_url"),  # https required
    ({**OAUTH, "token_url": "https://u:p@auth.example/t"}, "auth.token_url"),
    ({**OAUTH, "client_id": ""}, "auth.client_id"),
    ({**OAUTH, "client_id": "a\r\nb"}, "auth.client_id"),
    ({**OAUTH, "client_id": "x" * 257}, "auth.client_id"),
    ({**OAUTH, "client_secret": ""}, "auth.client_secret"),
    ({**OAUTH, "client_secret": 12}, "auth.client_secret"),
    ({k: v for k, v in OAUTH.items() if k != "client_secret"}, "auth.client_secret"),
    ({**OAUTH, "scope": "a\nb"}, "auth.scope"),
    ({**OAUTH, "audience": ["x"]}, "auth.audience"),
    ({**OAUTH, "client_auth": "jwt"}, "auth.client_auth"),
    ({**OAUTH, "grant_type": "password"}, "auth.grant_type"),
])
def test_a_bad_auth_is_refused_naming_its_field_and_quoting_no_secret(value: object, field: str) -> None:
    assert error_field(value) == field


@pytest.mark.parametrize(("value", "https", "expected"), [
    (None, True, None),
    (mtls(), True, MtlsAuth(CERT, KEY)),
    (mtls(certificate=CERT + LEAF.cert_chain_pems[0].bytes().decode()), True, None),  # a chain: leaf first
    (OAUTH, True, OAuth2Auth("https://auth.example/token", "dispatcher", SECRET)),
    ({**OAUTH, "token_url": "http://127.0.0.1:9/t"}, False,
     OAuth2Auth("http://127.0.0.1:9/t", "dispatcher", SECRET)),
    ({**OAUTH, "scope": "send:webhooks", "audience": "https://api.example", "client_auth": "body"}, True,
     OAuth2Auth("https://auth.example/token", "dispatcher", SECRET, "send:webhooks", "https://api.example",
                "body")),
])
def test_a_good_auth_is_taken(value: object, https: bool, expected: Any) -> None:
    parsed = parse_auth(value, None, NOW, https)
    if expected is not None or value is None:
        assert parsed == expected
    else:
        assert isinstance(parsed, MtlsAuth)


@pytest.mark.parametrize(("current", "body", "kept"), [
    (OAuth2Auth("https://auth.example/token", "id", SECRET),
     {k: v for k, v in OAUTH.items() if k != "client_secret"}, SECRET),
    (MtlsAuth(CERT, KEY), {"type": "oauth2", "token_url": "https://a.example/t", "client_id": "i"}, None),
    (MtlsAuth(CERT, KEY), {"type": "mtls", "certificate": CERT}, KEY),
    (OAuth2Auth("https://a.example/t", "id", SECRET), {"type": "mtls", "certificate": CERT}, None),
    # the secret is kept on the same server only: it must not follow the URL to another host
    (OAuth2Auth("https://auth.example/old", "id", SECRET),
     {k: v for k, v in OAUTH.items() if k != "client_secret"}, SECRET),
    (OAuth2Auth("https://auth.example:8443/token", "id", SECRET),
     {k: v for k, v in OAUTH.items() if k != "client_secret"}, None),
    (OAuth2Auth("https://evil.example/token", "id", SECRET),
     {k: v for k, v in OAUTH.items() if k != "client_secret"}, None),
])
def test_a_write_only_field_left_out_is_kept_from_the_same_type_only(
    current: Any, body: dict[str, Any], kept: str | None
) -> None:
    if kept is None:
        assert error_field(body, current) in ("auth.client_secret", "auth.private_key")
        return
    parsed = parse_auth(body, current, NOW, True)
    assert (parsed.client_secret if isinstance(parsed, OAuth2Auth) else parsed.private_key) == kept  # type: ignore[union-attr]


def spec(body: dict[str, Any], current: ReceiverConfig | None = None) -> ReceiverConfig:
    return parse_receiver_spec(body, "r1", NOW, True, generate, current)


@pytest.mark.parametrize(("body", "field"), [
    ({"url": "http://h.example/x", "auth": mtls()}, "url"),  # https required anyway
    ({"url": "https://h.example/x", "auth": OAUTH, "authorization": "Bearer static"}, "authorization"),
])
def test_receiver_level_conflicts_are_refused(body: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        spec(body)
    assert caught.value.field == field


def test_an_authorization_value_is_refused_on_an_oauth2_receiver_until_auth_goes() -> None:
    created = spec({"url": "https://h.example/x", "auth": OAUTH})
    with pytest.raises(InvalidInput) as caught:
        spec(patched_body(created, {"authorization": "Bearer static"}), created)
    assert caught.value.field == "authorization"
    changed = spec(patched_body(created, {"authorization": "Bearer static", "auth": None}), created)
    assert changed.auth is None and changed.authorization == "Bearer static"


def test_mtls_needs_an_https_url() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_receiver_spec({"url": "http://127.0.0.1:9/x", "auth": mtls()}, "r1", NOW, False, generate)
    assert caught.value.field == "auth"


def test_a_patch_keeps_auth_unless_it_names_it_and_null_removes_it() -> None:
    created = spec({"url": "https://h.example/x", "auth": OAUTH})
    kept = spec(patched_body(created, {"url": "https://h.example/y"}), created)
    assert kept.auth == created.auth
    rescoped = spec(patched_body(created, {"auth": {**OAUTH, "scope": "a b"}}), created)
    assert isinstance(rescoped.auth, OAuth2Auth) and rescoped.auth.scope == "a b"
    assert spec(patched_body(created, {"auth": None}), created).auth is None


def test_the_stored_form_round_trips_and_an_unauthenticated_receiver_stores_no_auth_key() -> None:
    for auth in (OAUTH, mtls()):
        config = spec({"url": "https://h.example/x", "auth": auth})
        assert ReceiverConfig.from_dict(orjson.loads(orjson.dumps(config.as_dict()))) == config
    assert "auth" not in spec({"url": "https://h.example/x"}).as_dict()


@pytest.mark.parametrize("auth", [OAUTH, mtls()])
def test_no_answer_and_no_repr_shows_the_key_or_the_secret(auth: dict[str, Any]) -> None:
    config = spec({"url": "https://h.example/x", "auth": auth})
    for shown in (public_view(config, NOW, Policy()), secret_view(config, NOW, Policy())):
        text = orjson.dumps(shown).decode()
        assert SECRET not in text and "PRIVATE KEY" not in text
        assert shown["auth"]["type"] == auth["type"]
    assert SECRET not in repr(config) and "PRIVATE KEY" not in repr(config)
    assert SECRET not in repr(config.auth) and "PRIVATE KEY" not in repr(config.auth)


def test_the_view_names_the_certificate_and_says_the_secrets_are_set() -> None:
    view = auth_view(MtlsAuth(CERT, KEY))
    assert view is not None and view["private_key"] == "set"
    certificate = view["certificate"]
    assert certificate["subject"].startswith("CN=client.example,")
    assert len(certificate["fingerprint_sha256"].split(":")) == 32
    assert certificate["not_after"].endswith("Z")
    oauth = auth_view(OAuth2Auth("https://a.example/t", "id", SECRET, "s"))
    assert oauth == {"type": "oauth2", "token_url": "https://a.example/t", "client_id": "id",
                     "client_secret": "set", "scope": "s", "audience": "", "client_auth": "basic"}


# token requests and answers ----------------------------------------------------------------------


@pytest.mark.parametrize(("auth", "basic", "form"), [
    (OAuth2Auth("https://a/t", "id", "pw"), ("id", "pw"), {"grant_type": ["client_credentials"]}),
    (OAuth2Auth("https://a/t", "i:d", "p&w", "a b", "aud"), ("i%3Ad", "p%26w"),
     {"grant_type": ["client_credentials"], "scope": ["a b"], "audience": ["aud"]}),
    (OAuth2Auth("https://a/t", "id", "pw", client_auth="body"), None,
     {"grant_type": ["client_credentials"], "client_id": ["id"], "client_secret": ["pw"]}),
])
def test_the_token_request_is_a_client_credentials_form(
    auth: OAuth2Auth, basic: tuple[str, str] | None, form: dict[str, list[str]]
) -> None:
    headers, body = token_request(auth)
    assert headers["content-type"] == "application/x-www-form-urlencoded"
    assert parse_qs(body.decode()) == form
    if basic is None:
        assert "authorization" not in headers
    else:
        assert base64.b64decode(headers["authorization"].removeprefix("Basic ")).decode() == ":".join(basic)


@pytest.mark.parametrize(("expires_in", "lifetime", "margin"), [
    (None, DEFAULT_LIFETIME, 30.0),
    (3600, 3600.0, 30.0),
    (100, 100.0, 10.0),  # 10% of a short lifetime
    (0, MIN_LIFETIME, MIN_LIFETIME * 0.1),
    (10**12, MAX_LIFETIME, 30.0),
])
def test_a_token_is_refreshed_shortly_before_it_expires(
    expires_in: float | None, lifetime: float, margin: float
) -> None:
    expires_at, refresh_at = token_times(1000.0, expires_in)
    assert expires_at == pytest.approx(1000.0 + lifetime)
    assert refresh_at == pytest.approx(1000.0 + lifetime - margin)


def answer(**fields: Any) -> bytes:
    return orjson.dumps({"access_token": "tok-1", "token_type": "Bearer", "expires_in": 60, **fields})


@pytest.mark.parametrize(("status", "body", "capped", "value", "refresh_in"), [
    (200, answer(), False, "Bearer tok-1", 54.0),
    (200, answer(token_type="bearer", expires_in="120"), False, "Bearer tok-1", 108.0),
    (200, orjson.dumps({"access_token": "t"}), False, "Bearer t", DEFAULT_LIFETIME - 30),
    (200, answer(expires_in=1e300), False, "Bearer tok-1", MAX_LIFETIME - 30),
    (201, answer(), False, "Bearer tok-1", 54.0),
])
def test_a_usable_token_answer(status: int, body: bytes, capped: bool, value: str, refresh_in: float) -> None:
    token = parse_token_response(status, body, 1000.0, capped)
    assert token.value == value and token.refresh_at == pytest.approx(1000.0 + refresh_in)
    assert "tok" not in repr(token) or "Bearer" not in repr(token)


@pytest.mark.parametrize(("status", "body", "capped", "reason"), [
    (500, b"oops", False, "HTTP 500"),
    (401, orjson.dumps({"error": "invalid_client", "error_description": f"bad {SECRET}"}), False,
     "HTTP 401: invalid_client (bad [secret])"),
    (302, b"", False, "HTTP 302"),  # redirects are never followed
    (200, b"x" * 100, True, "size cap"),
    (200, b"<html>", False, "not a JSON object"),
    (200, b"[1]", False, "not a JSON object"),
    (200, orjson.dumps({"token_type": "Bearer"}), False, "no access_token"),
    (200, answer(access_token=""), False, "no access_token"),
    (200, answer(access_token=7), False, "no access_token"),
    (200, answer(access_token="a b"), False, "header-safe"),
    (200, answer(access_token="a\r\nx-evil: 1"), False, "header-safe"),
    (200, answer(access_token="x" * 9000), False, "header-safe"),
    (200, answer(token_type="mac"), False, "not bearer"),
    (200, answer(expires_in=-5), False, "negative"),
    (200, answer(expires_in="soon"), False, "not a number"),
    (200, answer(expires_in=True), False, "not a number"),
    (200, b'{"access_token": "t", "expires_in": NaN}', False, "not a JSON object"),
])
def test_an_unusable_token_answer_says_why(status: int, body: bytes, capped: bool, reason: str) -> None:
    with pytest.raises(TokenError) as caught:
        parse_token_response(status, body, 1000.0, capped, SECRET)
    assert reason in str(caught.value) and SECRET not in str(caught.value)


# the token cache (a scripted token server: the clock is the test's) --------------------------------


class Scripted:
    """A transport answering token requests from a script, and the receiver with 200 or 401."""

    def __init__(self, answers: list[Callable[[], Response]]) -> None:
        self.answers = answers
        self.token_calls = 0
        self.sent: list[str] = []  # authorization headers the receiver got
        self.refuse: set[str] = set()  # tokens the receiver answers 401
        self.gate: asyncio.Event | None = None

    async def post(self, url: str, headers: dict[str, str], body: bytes, client_cert: Any = None,
                   gate: Any = None) -> Response:
        return await self.request("POST", url, headers, body, client_cert)

    async def request(self, method: str, url: str, headers: dict[str, str], body: bytes = b"",
                      client_cert: Any = None, server_ca: Any = None, gate: Any = None) -> Response:
        if url.endswith("/token"):
            self.token_calls += 1
            if self.gate is not None:
                await self.gate.wait()
            return self.answers[min(self.token_calls, len(self.answers)) - 1]()
        self.sent.append(headers.get("authorization", ""))
        return Response(401 if headers.get("authorization") in self.refuse else 200)

    async def close(self) -> None:
        pass


def token(name: str, expires_in: float = 60) -> Callable[[], Response]:
    return lambda: Response(200, {}, answer(access_token=name, expires_in=expires_in))


def failure(status: int = 503) -> Callable[[], Response]:
    return lambda: Response(status, {}, b"down")


def unreachable() -> Response:
    raise DeliveryError("connect timeout (auth.example:443)")


AUTH = OAuth2Auth("https://auth.example/token", "id", SECRET)
RECEIVER = ReceiverConfig("r1", "https://h.example/hook", "whsec_x", auth=AUTH)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("script", "steps", "fetches", "tokens"), [
    # (clock advance before each request, ...): a token is reused until its refresh time (54 s)
    ([token("a"), token("b")], [0, 10, 43], 1, ["a", "a", "a"]),
    ([token("a"), token("b")], [0, 54], 2, ["a", "b"]),
    # a refresh that fails while the old token has not expired: the old one still goes
    ([token("a"), failure(), token("c")], [0, 55, 1], 3, ["a", "a", "c"]),
    # a different lifetime: refresh at 90%
    ([token("a", 100), token("b", 100)], [0, 89, 1], 2, ["a", "a", "b"]),
])
async def test_tokens_are_cached_until_shortly_before_expiry(
    script: list[Callable[[], Response]], steps: list[float], fetches: int, tokens: list[str]
) -> None:
    transport, clock = Scripted(script), Clock()
    requests = AuthedRequests(transport, clock)
    for step in steps:
        clock.now += step
        assert (await requests.send("POST", RECEIVER, {}, b"{}")).status == 200
    assert transport.token_calls == fetches
    assert transport.sent == [f"Bearer {t}" for t in tokens]


@pytest.mark.parametrize(("script", "reason"), [
    ([failure(503)], "auth_error: token server answered HTTP 503"),
    ([unreachable], "auth_error: token request failed: connect timeout"),
    ([lambda: Response(200, {}, b"x" * 20_000)],
     "auth_error: token server answered HTTP 200 with a body over"),
])
async def test_no_token_is_a_failed_attempt_with_an_auth_error(
    script: list[Callable[[], Response]], reason: str
) -> None:
    requests = AuthedRequests(Scripted(script), Clock())
    with pytest.raises(DeliveryError) as caught:
        await requests.send("POST", RECEIVER, {}, b"{}")
    assert str(caught.value).startswith(reason)


async def test_a_401_gets_one_new_token_and_one_more_try() -> None:
    transport = Scripted([token("a"), token("b"), token("c")])
    transport.refuse = {"Bearer a"}
    requests = AuthedRequests(transport, Clock())
    assert (await requests.send("POST", RECEIVER, {}, b"{}")).status == 200
    assert transport.sent == ["Bearer a", "Bearer b"] and transport.token_calls == 2
    transport.refuse = {"Bearer b", "Bearer c"}  # refused again after the new token: answered as is
    assert (await requests.send("POST", RECEIVER, {}, b"{}")).status == 401
    assert transport.sent[2:] == ["Bearer b", "Bearer c"] and transport.token_calls == 3


async def test_concurrent_requests_share_one_token_fetch() -> None:
    transport = Scripted([token("a")])
    transport.gate = asyncio.Event()
    requests = AuthedRequests(transport, Clock())
    sends = [asyncio.create_task(requests.send("POST", RECEIVER, {}, b"{}")) for _ in range(20)]
    await asyncio.sleep(0)
    transport.gate.set()
    assert [r.status for r in await asyncio.gather(*sends)] == [200] * 20
    assert transport.token_calls == 1


async def test_the_cache_is_bounded_and_keyed_by_the_credentials() -> None:
    transport = Scripted([token("a")])
    source = TokenSource(transport, Clock(), size=3)
    for n in range(5):
        await source.get(OAuth2Auth("https://auth.example/token", f"id{n}", SECRET))
    assert transport.token_calls == 5 and len(source._tokens) == 3
    await source.get(OAuth2Auth("https://auth.example/token", "id4", SECRET))  # still cached
    await source.get(OAuth2Auth("https://auth.example/token", "id4", "rotated"))  # new secret: new token
    assert transport.token_calls == 6


# client certificates ----------------------------------------------------------------------------------


@pytest.mark.parametrize("memfd", [True, False], ids=["memfd", "temp-file"])
def test_client_contexts_load_from_memory_are_shared_per_pair_and_bounded(
    memfd: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[ssl.SSLContext] = []
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where a key file would go: this test's own
    if not memfd:  # a system without memfd_create: the key goes through a 0600 file, then is removed
        monkeypatch.delattr(os, "memfd_create")

    def base() -> ssl.SSLContext:
        made.append(ssl.create_default_context())
        return made[-1]

    contexts = ClientContexts(base, size=2)
    first = contexts.get(MtlsAuth(CERT, KEY))
    assert contexts.get(MtlsAuth(CERT, KEY)) is first and len(made) == 1
    for _ in range(2):
        leaf = CA.issue_cert("x.example")
        pem = leaf.cert_chain_pems[0].bytes().decode()
        contexts.get(MtlsAuth(pem, leaf.private_key_pem.bytes().decode()))
    assert len(contexts) == 2 and contexts.get(MtlsAuth(CERT, KEY)) is not first  # evicted, made again
    assert list(tmp_path.iterdir()) == []  # no key file left behind


# the CLI's auth options --------------------------------------------------------------------------------


def cli_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="webhook-dispatcher", exit_on_error=False)
    add_api_commands(parser.add_subparsers(dest="command", required=True))
    return parser


@pytest.mark.parametrize(("options", "auth"), [
    ([], "unset"),
    (["--no-auth"], None),
    (["--client-cert", "{cert}", "--client-key", "{key}"], {"type": "mtls", "certificate": CERT,
                                                            "private_key": KEY}),
    (["--client-cert", "@{cert}"], {"type": "mtls", "certificate": CERT}),
    (["--oauth2-token-url", "https://a/t", "--oauth2-client-id", "i", "--oauth2-client-secret", "@{secret}",
      "--oauth2-scope", "s", "--oauth2-client-auth", "body"],
     {"type": "oauth2", "token_url": "https://a/t", "client_id": "i", "client_secret": SECRET, "scope": "s",
      "client_auth": "body"}),
])
def test_cli_auth_options_make_the_auth_field(
    tmp_path: Path, options: list[str], auth: Any
) -> None:
    files = {"cert": tmp_path / "c.pem", "key": tmp_path / "k.pem", "secret": tmp_path / "secret"}
    files["cert"].write_text(CERT)
    files["key"].write_text(KEY)
    files["secret"].write_text(SECRET + "\n")
    argv = [o.format(**{k: str(v) for k, v in files.items()}) for o in options]
    fields = receiver_fields(cli_parser().parse_args(["receivers", "update", "r1", *argv]))
    assert fields.get("auth", "unset") == auth


@pytest.mark.parametrize(("options", "tls"), [
    (["--server-ca", "{cert}"], {"ca": CERT}),
    (["--no-server-ca"], None),
])
def test_cli_server_ca_options_make_the_tls_field(tmp_path: Path, options: list[str], tls: Any) -> None:
    pem = tmp_path / "ca.pem"
    pem.write_text(CERT)
    argv = [o.format(cert=pem) for o in options]
    assert receiver_fields(cli_parser().parse_args(["receivers", "update", "r1", *argv]))["tls"] == tls


def test_cli_auth_options_of_both_kinds_are_refused() -> None:
    args = cli_parser().parse_args(["receivers", "update", "r1", "--no-auth", "--oauth2-client-id", "i"])
    with pytest.raises(UsageError):
        receiver_fields(args)


# the console ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("auth", "shown"), [
    (OAUTH, "OAuth2: dispatcher at https://auth.example/token"),
    (mtls(), "mutual TLS: CN=client.example"),
    (None, "<dd id=\"auth\">none</dd>"),
])
def test_the_receiver_page_names_the_auth_and_shows_no_key_or_secret(auth: Any, shown: str) -> None:
    config = spec({"url": "https://h.example/x", "auth": auth})
    context = pages()["receiver.html"]
    view = {**context["r"], **public_view(config, NOW, Policy())}
    html = environment().get_template("receiver.html").render({**COMMON, **context, "r": view})
    assert shown in html
    assert SECRET not in html and "PRIVATE KEY" not in html


# a receiver's own CA ------------------------------------------------------------------------------------

CA_PEM = CA.cert_pem.bytes().decode()


@pytest.mark.parametrize(("body", "field"), [
    ({"url": "https://h.example/x", "tls": "pem"}, "tls"),
    ({"url": "https://h.example/x", "tls": {}}, "tls.ca"),
    ({"url": "https://h.example/x", "tls": {"ca": "nope"}}, "tls.ca"),
    ({"url": "https://h.example/x", "tls": {"ca": CA_PEM + KEY}}, "tls.ca"),  # shown whole: no key there
    ({"url": "https://h.example/x", "tls": {"ca": CA_PEM, "verify": False}}, "tls.verify"),
    ({"url": "http://h.example/x", "tls": {"ca": CA_PEM}}, "tls"),
])
def test_a_bad_tls_is_refused_naming_its_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_receiver_spec(body, "r1", NOW, False, generate)
    assert caught.value.field == field


def test_tls_is_kept_unless_named_shown_whole_and_round_trips() -> None:
    created = spec({"url": "https://h.example/x", "tls": {"ca": CA_PEM + CA_PEM}})
    assert created.tls is not None and created.tls.ca == CA_PEM + CA_PEM
    assert spec(patched_body(created, {"url": "https://h.example/y"}), created).tls == created.tls
    assert spec(patched_body(created, {"tls": None}), created).tls is None
    view = public_view(created, NOW, Policy())["tls"]
    assert view["ca"] == CA_PEM + CA_PEM and len(view["ca_certificates"]) == 2
    assert ReceiverConfig.from_dict(orjson.loads(orjson.dumps(created.as_dict()))) == created
    assert public_view(spec({"url": "https://h.example/x"}), NOW, Policy())["tls"] is None


def test_contexts_are_kept_per_certificate_and_ca_together() -> None:
    contexts = ClientContexts(ssl.create_default_context)
    client, own = MtlsAuth(CERT, KEY), ServerTls(CA_PEM)
    made = {id(contexts.get(c, s)) for c, s in ((client, None), (None, own), (client, own))}
    assert len(made) == 3 and len(contexts) == 3
    assert contexts.get(client, own) is contexts.get(MtlsAuth(CERT, KEY), ServerTls(CA_PEM))


def test_the_receiver_page_names_its_own_ca() -> None:
    config = spec({"url": "https://h.example/x", "tls": {"ca": CA_PEM}})
    context = pages()["receiver.html"]
    view = {**context["r"], **public_view(config, NOW, Policy())}
    html = environment().get_template("receiver.html").render({**COMMON, **context, "r": view})
    assert 'id="server-ca">OU=Testing CA' in html
