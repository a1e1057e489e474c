"""Tenant tokens, pure: the format, the stored hash, refusals, the book's merge, and what a tenant token
may do (each a table); then the /v1 route table against the router and the middleware's answers."""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass, replace
from typing import Any, cast

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request

from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.subscriptions import SubscriptionIndex
from dispatcher.domain.tokens import (
    ADMIN,
    PREFIX,
    Principal,
    TokenBook,
    TokenRecord,
    decode_record,
    encode_record,
    hash_secret,
    may_see,
    mint,
    parse_mint,
    parse_token,
    refusal,
    scoped_event_body,
    scoped_receiver_body,
    scoped_tenant,
    status,
)
from web.app import setup_web, web_middlewares
from web.engine import ENGINE
from web.scopes import ADMIN_ONLY, PRINCIPAL, ROUTE_ACCESS, TENANT, principal_of
from web.ui.session import SessionKeys

TOKEN_ID = "01JD3Q7ZK8W4G2M5N6P7R8S9TV"
SECRET = bytes(range(32))
NOW = 1_800_000_000.0
ACME = Principal("acme", TOKEN_ID)


def minted(**changes: Any) -> tuple[str, TokenRecord]:
    plaintext, record = mint(TOKEN_ID, SECRET, "acme", "ci", NOW)
    return plaintext, replace(record, **changes)


# the format and the hash ---------------------------------------------------------------------------


def test_a_minted_token_is_its_id_and_secret_and_only_the_secret_s_hash_is_kept() -> None:
    plaintext, record = minted()
    token_id, secret = plaintext.removeprefix(PREFIX).split("_", 1)
    assert (token_id, len(secret)) == (TOKEN_ID, 43)
    assert parse_token(plaintext) == (TOKEN_ID, secret)
    assert record.secret_hash == hashlib.sha256(secret.encode()).hexdigest() == hash_secret(secret)
    assert record.last4 == secret[-4:] and secret not in encode_record(record).decode()
    assert decode_record(encode_record(record)) == record


def test_secrets_with_underscores_still_split_at_the_first_one() -> None:
    plaintext, _ = mint(TOKEN_ID, b"\xff" * 32, "acme", "", NOW)  # base64url of 0xff..: "____..."
    assert parse_token(plaintext) == (TOKEN_ID, plaintext.split("_", 2)[2])


_, SECRET_TEXT = cast(tuple[str, str], parse_token(mint(TOKEN_ID, SECRET, "acme", "", NOW)[0]))


@pytest.mark.parametrize(
    "presented",
    [
        "", "wdt_", "wdt__", f"wdt_{TOKEN_ID}", f"wdt_{TOKEN_ID}_", f"wdt_{TOKEN_ID}_{SECRET_TEXT}x",
        f"wdt_{TOKEN_ID}_{SECRET_TEXT[:-1]}", f"WDT_{TOKEN_ID}_{SECRET_TEXT}",
        f"wdt_{TOKEN_ID.lower()}_{SECRET_TEXT}",
        f"wdt_{TOKEN_ID[:-1]}I_{SECRET_TEXT}",  # I is not Crockford base32
        f"wdt_{TOKEN_ID}_{SECRET_TEXT[:-1]}=", f"wdt_{TOKEN_ID}_{SECRET_TEXT[:-1]}\u00e9",
        f" wdt_{TOKEN_ID}_{SECRET_TEXT}", "s3cret-admin-token", "Bearer wdt_x_y",
    ],
)
def test_anything_but_the_exact_format_is_not_a_tenant_token(presented: str) -> None:
    assert parse_token(presented) is None


@pytest.mark.parametrize("bad", [("0" * 25, SECRET), (TOKEN_ID + "_", SECRET), (TOKEN_ID, SECRET[:31])])
def test_mint_takes_only_a_ulid_and_32_random_bytes(bad: tuple[str, bytes]) -> None:
    with pytest.raises(ValueError):
        mint(bad[0], bad[1], "acme", "", NOW)


@pytest.mark.parametrize(
    ("changes", "secret", "now", "why"),
    [
        ({}, SECRET_TEXT, NOW, ""),
        ({}, SECRET_TEXT[:-1] + ("A" if SECRET_TEXT[-1] != "A" else "B"), NOW, "wrong secret"),
        ({"revoked_at": NOW + 1}, SECRET_TEXT, NOW + 2, "revoked"),
        ({"expires_at": NOW + 10}, SECRET_TEXT, NOW + 9.9, ""),
        ({"expires_at": NOW + 10}, SECRET_TEXT, NOW + 10, "expired"),
        ({"expires_at": NOW + 10, "revoked_at": NOW + 1}, SECRET_TEXT, NOW + 20, "revoked"),
        # a caller without the secret learns nothing about the token's state
        ({"revoked_at": NOW + 1}, "x" * 43, NOW + 2, "wrong secret"),
    ],
)
def test_refusals(changes: dict[str, Any], secret: str, now: float, why: str) -> None:
    _, record = minted(**changes)
    assert refusal(record, secret, now) == why


@pytest.mark.parametrize(
    ("changes", "now", "state"),
    [({}, NOW, "active"), ({"expires_at": NOW + 1}, NOW, "active"), ({"expires_at": NOW}, NOW, "expired"),
     ({"revoked_at": NOW}, NOW, "revoked"), ({"revoked_at": NOW, "expires_at": NOW - 1}, NOW, "revoked")],
)
def test_status(changes: dict[str, Any], now: float, state: str) -> None:
    record = minted(**changes)[1]
    assert status(record, now) == state == record.view(now)["status"]


def test_an_unknown_id_is_refused() -> None:
    assert refusal(None, SECRET_TEXT, NOW) == "unknown token id"


@pytest.mark.parametrize(
    "raw",
    [b"{}", b"[]", b"not json", b'{"id": "x", "tenant": "a", "secret_hash": "00", "created_at": 1}',
     orjson.dumps({**orjson.loads(encode_record(minted()[1])), "secret_hash": "ab"}),
     orjson.dumps({**orjson.loads(encode_record(minted()[1])), "created_at": "soon"}),
     # a tenant no mint would give: it would reach log lines and scope checks as it is
     orjson.dumps({**orjson.loads(encode_record(minted()[1])), "tenant": "acme\n[2026-11-29] FORGED"})],
)
def test_a_record_that_is_not_one_is_refused(raw: bytes) -> None:
    with pytest.raises((ValueError, TypeError, KeyError)):
        decode_record(raw)


# the book -----------------------------------------------------------------------------------------

_, ACTIVE = minted()
REVOKED = replace(ACTIVE, revoked_at=NOW + 5)


@pytest.mark.parametrize(
    ("puts", "kept"),
    [
        ([ACTIVE], ACTIVE),
        ([ACTIVE, REVOKED], REVOKED),
        # the revoking worker's feed reads the older record after the revocation: still revoked
        ([REVOKED, ACTIVE], REVOKED),
        ([REVOKED, replace(REVOKED, revoked_at=NOW + 9)], replace(REVOKED, revoked_at=NOW + 9)),
    ],
)
def test_a_revocation_is_never_undone_by_an_older_record(puts: list[TokenRecord], kept: TokenRecord) -> None:
    book = TokenBook()
    for record in puts:
        book.put(record)
    assert book.get(TOKEN_ID) == kept and len(book) == 1


def test_the_book_lists_in_id_order_and_forgets_a_tombstone() -> None:
    book = TokenBook()
    later = replace(ACTIVE, id="01JD3Q7ZK8W4G2M5N6P7R8S9TW")
    book.put(later)
    book.put(ACTIVE)
    assert [r.id for r in book.listed()] == [ACTIVE.id, later.id]
    book.remove(later.id)
    assert book.listed() == [ACTIVE]


# the mint request ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "body"), ({}, "tenant"), ({"tenant": None}, "tenant"), ({"tenant": ""}, "tenant"),
        ({"tenant": "a b"}, "tenant"), ({"tenant": "x" * 129}, "tenant"), ({"tenant": 5}, "tenant"),
        ({"tenant": "acme", "name": "x" * 101}, "name"), ({"tenant": "acme", "name": "a\nb"}, "name"),
        ({"tenant": "acme", "name": 3}, "name"), ({"tenant": "acme", "expires_at": NOW}, "expires_at"),
        ({"tenant": "acme", "expires_at": "yesterday"}, "expires_at"),
        ({"tenant": "acme", "expires_at": True}, "expires_at"), ({"tenant": "acme", "scope": "all"}, "scope"),
    ],
)
def test_a_bad_mint_names_its_field(body: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        parse_mint(body, NOW)
    assert raised.value.field == field


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"tenant": "acme"}, ("acme", "", None)),
        ({"tenant": "acme", "name": "CI deploys", "expires_at": NOW + 60}, ("acme", "CI deploys", NOW + 60)),
        ({"tenant": "acme", "expires_at": "2027-01-15T08:00:00Z"}, ("acme", "", NOW)),
        ({"tenant": "acme", "expires_at": "2027-01-15T09:00:00+01:00"}, ("acme", "", NOW)),
    ],
)
def test_a_good_mint(body: dict[str, Any], expected: tuple[str, str, float | None]) -> None:
    ask = parse_mint(body, NOW - 86_400 * 30)
    assert (ask.tenant, ask.name, ask.expires_at) == expected


# what a tenant token may do -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("principal", "receiver_tenant", "seen"),
    [(ADMIN, None, True), (ADMIN, "globex", True), (ACME, "acme", True), (ACME, "globex", False),
     (ACME, None, False), (ACME, "ACME", False)],
)
def test_who_sees_a_receiver(principal: Principal, receiver_tenant: str | None, seen: bool) -> None:
    assert may_see(principal, receiver_tenant) is seen


@pytest.mark.parametrize(
    ("principal", "body", "create", "result"),
    [
        (ADMIN, {"url": "u"}, True, {"url": "u"}),
        (ADMIN, {"tenant": "globex"}, False, {"tenant": "globex"}),
        (ACME, {"url": "u"}, True, {"url": "u", "tenant": "acme"}),
        (ACME, {"url": "u", "tenant": "acme"}, True, {"url": "u", "tenant": "acme"}),
        (ACME, {"url": "u", "tenant": "globex"}, True, "tenant"),
        (ACME, {"url": "u", "tenant": None}, True, "tenant"),
        (ACME, {"url": "u"}, False, {"url": "u"}),  # a PATCH leaves the tenant as it is
        (ACME, {"tenant": "acme"}, False, {"tenant": "acme"}),
        (ACME, {"tenant": "globex"}, False, "tenant"),
        (ACME, {"tenant": None}, False, "tenant"),  # cannot clear it either
        (ACME, ["not", "an", "object"], True, ["not", "an", "object"]),  # left to the body's own checks
    ],
)
def test_receiver_bodies_under_a_token(principal: Principal, body: Any, create: bool, result: Any) -> None:
    if isinstance(result, str):
        with pytest.raises(InvalidInput) as raised:
            scoped_receiver_body(principal, body, create)
        assert (raised.value.field, raised.value.status, raised.value.code) == (result, 403, "forbidden")
    else:
        assert scoped_receiver_body(principal, body, create) == result


@pytest.mark.parametrize(
    ("principal", "body", "result"),
    [
        (ADMIN, {"event_type": "t"}, {"event_type": "t"}),
        (ADMIN, {"tenant": "globex"}, {"tenant": "globex"}),
        (ACME, {"event_type": "t"}, {"event_type": "t", "tenant": "acme"}),
        (ACME, {"tenant": None}, {"tenant": "acme"}),
        (ACME, {"tenant": "acme"}, {"tenant": "acme"}),
        (ACME, {"tenant": "globex"}, "tenant"),
        (ACME, {"tenant": 7}, "tenant"),
    ],
)
def test_event_bodies_under_a_token(principal: Principal, body: Any, result: Any) -> None:
    if isinstance(result, str):
        with pytest.raises(InvalidInput) as raised:
            scoped_event_body(principal, body)
        assert (raised.value.field, raised.value.status) == (result, 403)
    else:
        assert scoped_event_body(principal, body) == result


@pytest.mark.parametrize(
    ("principal", "asked", "result"),
    [(ADMIN, None, None), (ADMIN, "globex", "globex"), (ACME, None, "acme"), (ACME, "acme", "acme"),
     (ACME, "globex", 403)],
)
def test_the_list_filter_under_a_token(principal: Principal, asked: str | None, result: Any) -> None:
    if result == 403:
        with pytest.raises(InvalidInput):
            scoped_tenant(principal, asked, "lists receivers")
    else:
        assert scoped_tenant(principal, asked, "lists receivers") == result


@pytest.mark.parametrize(
    ("put", "tenant_of"),
    [
        ((["*"], None), (None,)),  # every type, untenanted: kept apart from the others
        (([], None), (None,)),
        ((["order.*"], None), (None,)),
        ((["order.*"], "acme"), ("acme",)),
        (([], "acme"), ("acme",)),
    ],
)
def test_the_subscription_index_tells_a_receiver_s_tenant(
    put: tuple[list[str], str | None], tenant_of: tuple[str | None]
) -> None:
    index = SubscriptionIndex()
    index.put("r1", *put)
    assert index.tenant_of("r1") == tenant_of and index.tenant_of("r2") is None
    index.remove("r1")
    assert index.tenant_of("r1") is None


# every route decided --------------------------------------------------------------------------------


def routes() -> set[tuple[str, str]]:
    app = web.Application()
    setup_web(app, object())  # type: ignore[arg-type] - routes only
    return {(re.sub(r"\{(\w+)(:[^}]*)?\}", r"{\1}", r.resource.canonical), r.method.lower())
            for r in app.router.routes() if r.resource is not None and r.resource.canonical.startswith("/v1")
            and r.method != "HEAD"}


def test_every_v1_route_is_decided_for_tenant_tokens_and_no_decision_is_stale() -> None:
    assert set(ROUTE_ACCESS) == routes()
    assert set(ROUTE_ACCESS.values()) == {TENANT, ADMIN_ONLY}
    admin_only = {path for (path, _), access in ROUTE_ACCESS.items() if access == ADMIN_ONLY}
    assert admin_only == {"/v1/tokens", "/v1/tokens/{token_id}"}
    # every tenant route that names no receiver in its path scopes in its own way (web/scopes.py)
    assert {(p, m) for (p, m), a in ROUTE_ACCESS.items() if a == TENANT and "{receiver_id}" not in p} == {
        ("/v1/receivers", "get"), ("/v1/receivers", "post"), ("/v1/messages", "post"),
        ("/v1/messages/batch", "post"), ("/v1/events", "post"),
    }


# the middleware -------------------------------------------------------------------------------------


@dataclass
class Tokens:
    """The engine's token lookup: a book, and how often an unknown id was waited for."""

    book: TokenBook
    settings: Any = None
    waited: int = 0

    async def find_token(self, token_id: str, wait: float) -> TokenRecord | None:
        record = self.book.get(token_id)
        self.waited += record is None
        return record


async def _whoami(request: web.Request) -> web.Response:
    who = principal_of(request)
    return web.json_response({"tenant": who.tenant, "token_id": who.token_id})


@pytest.fixture
async def served() -> Any:
    book = TokenBook()
    app = web.Application(middlewares=web_middlewares(type("S", (), {"api_token": "admin-token"})()))
    app[ENGINE] = Tokens(book)  # type: ignore[assignment]
    app.router.add_get("/v1/receivers", _whoami)
    app.router.add_get("/v1/tokens", _whoami)
    client = TestClient(TestServer(app))
    await client.start_server()
    yield client, book
    await client.close()


@pytest.mark.parametrize(
    ("changes", "path", "status", "message"),
    [
        ({}, "/v1/receivers", 200, None),
        ({}, "/v1/tokens", 403, "a tenant token (tenant 'acme') cannot make this call: it needs the admin "
         "token"),
        ({"revoked_at": NOW}, "/v1/receivers", 401, "this token is revoked"),
        ({"expires_at": 1.0}, "/v1/receivers", 401, "this token is expired"),  # the middleware: real time
        ({"secret_hash": "0" * 64}, "/v1/receivers", 401, "missing or wrong bearer token"),
        ({"id": "01JD3Q7ZK8W4G2M5N6P7R8S9TW"}, "/v1/receivers", 401, "missing or wrong bearer token"),
    ],
)
async def test_the_middleware_on_a_tenant_token(
    served: Any, caplog: pytest.LogCaptureFixture, changes: dict[str, Any], path: str, status: int,
    message: str | None,
) -> None:
    client, book = served
    plaintext, record = minted(**changes)
    book.put(record)
    caplog.set_level(logging.INFO)
    resp = await client.get(path, headers={"Authorization": f"Bearer {plaintext}"})
    body = await resp.json()
    assert resp.status == status, body
    if message is None:
        assert body == {"tenant": "acme", "token_id": TOKEN_ID}
    else:
        assert body["error"]["message"] == message
        assert f"token_id={TOKEN_ID}" in caplog.text, "a refusal names the token"
    assert SECRET_TEXT not in caplog.text and record.secret_hash not in caplog.text


async def test_the_admin_token_is_the_admin_and_nothing_else_is_looked_up(served: Any) -> None:
    client, _ = served
    resp = await client.get("/v1/tokens", headers={"Authorization": "Bearer admin-token"})
    assert (resp.status, await resp.json()) == (200, {"tenant": None, "token_id": None})
    for given in ("Bearer nope", "Bearer wdt_x_y", "admin-token", ""):
        resp = await client.get("/v1/receivers", headers={"Authorization": given})
        assert resp.status == 401
    assert client.app[ENGINE].waited == 0, "no lookup for what is not a tenant token"


def test_principal_of_a_request_the_middleware_never_saw_is_an_error() -> None:
    request = make_mocked_request("GET", "/v1/receivers")
    with pytest.raises(RuntimeError):
        principal_of(request)
    request[PRINCIPAL] = ACME
    assert principal_of(request) is ACME


# the console's session --------------------------------------------------------------------------


@pytest.mark.parametrize("token_id", ["", TOKEN_ID])
def test_a_session_carries_the_tenant_token_s_id_signed(token_id: str) -> None:
    keys = SessionKeys("admin-token", 60, clock=lambda: NOW)
    cookie = keys.issue(token_id)
    session = keys.check(cookie)
    assert session is not None and session.token_id == token_id
    expires, nonce = cookie.split(".")[:2]
    for forged in (f"{expires}.{nonce}.{TOKEN_ID[:-1]}W.{cookie.rsplit('.', 1)[1]}",  # another token
                   f"{expires}.{nonce}..{cookie.rsplit('.', 1)[1]}",  # an empty token id
                   cookie.rsplit(".", 1)[0] + ".x.y"):
        assert keys.check(forged) is None
