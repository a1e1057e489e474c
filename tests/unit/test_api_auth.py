"""The bearer check shared by /v1 and /readyz, /readyz's two faces, and error bodies that say nothing
of the worker's insides."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from typing import Any, cast

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict

from dispatcher.domain.errors import InvalidInput
from dispatcher.settings import Settings
from web.app import web_middlewares
from web.engine import ENGINE
from web.health import readyz
from web.middleware import auth_middleware, bearer_authorized, errors_middleware, header_bytes

TOKEN = "s3cret"


@dataclass
class Request:
    """What the checks read of a request. aiohttp's mocked request encodes its headers as plain
    UTF-8 and so cannot carry what a real one can: surrogates from bytes that were not UTF-8."""

    headers: CIMultiDict[str]
    app: Any = None
    method: str = "GET"
    path: str = "/v1/receivers"


def request(path: str = "/v1/receivers", authorization: str | None = None, app: Any = None) -> web.Request:
    headers: CIMultiDict[str] = CIMultiDict()
    if authorization is not None:
        headers["Authorization"] = authorization
    return cast(web.Request, Request(headers, app, path=path))


def surrogates(raw: bytes) -> str:
    """A header value as aiohttp hands it over: bytes decoded as UTF-8 with surrogateescape."""
    return raw.decode("utf-8", "surrogateescape")


# the check ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [b"Bearer \xff\xfe", b"Bearer s3cret\xc3", b"Bearer s\xe9cret", b"\xed\xa0\x80", b"Bearer s3cret\x80"],
)
def test_a_non_utf8_authorization_is_wrong_not_an_error(raw: bytes) -> None:
    value = surrogates(raw)
    with pytest.raises(UnicodeEncodeError):
        value.encode()  # what the old check did: a 500
    assert header_bytes(value) == raw
    assert not bearer_authorized(request(authorization=value), TOKEN)


def test_only_the_exact_bearer_token_passes() -> None:
    assert bearer_authorized(request(authorization="Bearer s3cret"), TOKEN)
    for given in (None, "", "Bearer", "Bearer ", "bearer s3cret", "Bearer s3cret ", "Bearer s3cre", "s3cret"):
        assert not bearer_authorized(request(authorization=given), TOKEN), given


def test_no_token_configured_lets_nobody_in() -> None:
    assert not bearer_authorized(request(authorization="Bearer "), "")
    assert not bearer_authorized(request(), "")


def test_a_token_read_from_a_non_utf8_environment_still_matches_its_own_bytes() -> None:
    token = surrogates(b"t\xe9k")  # os.environ decodes with surrogateescape too
    assert bearer_authorized(request(authorization=surrogates(b"Bearer t\xe9k")), token)
    assert not bearer_authorized(request(authorization="Bearer t\u00e9k"), token), "UTF-8 é is other bytes"


def test_unencodable_text_on_both_sides_never_matches() -> None:
    lone = "\ud800"  # no byte sequence decodes to this: it cannot have come off the wire
    assert header_bytes(lone) is None
    assert not bearer_authorized(request(authorization="Bearer " + lone), lone)


async def _ok(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


@pytest.mark.parametrize("raw", [b"Bearer \xff\xfe", b"\xed\xa0\x80"])
async def test_the_middleware_answers_a_non_utf8_header_with_a_401_naming_it(raw: bytes) -> None:
    check = auth_middleware(TOKEN)
    resp = await errors_middleware(request(authorization=surrogates(raw)), lambda r: check(r, _ok))
    body = orjson.loads(resp.body)  # type: ignore[attr-defined]
    assert resp.status == 401
    assert body["error"] == {
        "code": "unauthorized", "field": "Authorization", "message": "missing or wrong bearer token"
    }


# error bodies -------------------------------------------------------------------------------------


async def _raises(exc: BaseException) -> web.StreamResponse:
    async def handler(request: web.Request) -> web.StreamResponse:
        raise exc

    return await errors_middleware(request(), handler)


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("password=hunter2 at /srv/dispatcher/worker.py line 3"),
        UnicodeEncodeError("utf-8", "\udcff", 0, 1, "surrogates not allowed"),
        KeyError("rocksdb://secret-path"),
    ],
)
async def test_an_unhandled_error_says_nothing_of_it(exc: Exception) -> None:
    resp = await _raises(exc)
    assert resp.status == 500
    assert orjson.loads(resp.body)["error"] == {  # type: ignore[attr-defined]
        "code": "internal_error", "field": "", "message": "internal error; see the worker log"
    }


@pytest.mark.parametrize(
    ("exc", "status", "code"),
    [
        (web.HTTPBadRequest(text="Traceback (most recent call last):", reason="y.py"), 400, "bad_request"),
        (web.HTTPNotFound(), 404, "not_found"),
        (web.HTTPMethodNotAllowed("PUT", ["GET"]), 405, "method_not_allowed"),
        (web.HTTPInternalServerError(text="db at 10.0.0.5 refused"), 500, "internal_server_error"),
        (web.HTTPUnsupportedMediaType(text="detail"), 415, "unsupported_media_type"),
    ],
)
async def test_http_errors_carry_their_status_phrase_only(
    exc: web.HTTPException, status: int, code: str
) -> None:
    resp = await _raises(exc)
    error = orjson.loads(resp.body)["error"]  # type: ignore[attr-defined]
    assert (resp.status, error["code"], error["field"]) == (status, code, "")
    assert not any(leak in error["message"] for leak in ("Traceback", ".py", "10.0", "detail"))


async def test_invalid_input_keeps_its_field_and_message() -> None:
    resp = await _raises(InvalidInput("messages[3].payload", "too big", "too_large", 413))
    assert (resp.status, orjson.loads(resp.body)["error"]) == (  # type: ignore[attr-defined]
        413, {"code": "too_large", "field": "messages[3].payload", "message": "too big"}
    )


# /readyz ----------------------------------------------------------------------------------------


@dataclass
class FakeEngine:
    is_ready: bool = True
    settings: Any = None
    figures: dict[str, Any] = field(default_factory=lambda: {"partitions": [0, 1], "in_flight": 3})

    def __post_init__(self) -> None:
        self.settings = type("S", (), {"api_token": TOKEN})()

    def ready(self) -> bool:
        return self.is_ready

    def stats(self) -> dict[str, Any]:
        return self.figures


async def _readyz(authorization: str | None, ready: bool = True) -> tuple[int, dict[str, Any]]:
    app = web.Application()
    app[ENGINE] = FakeEngine(ready)  # type: ignore[assignment]
    resp = await readyz(request("/readyz", authorization, app))
    return resp.status, orjson.loads(resp.body)  # type: ignore[arg-type]


@pytest.mark.parametrize("authorization", [None, "", "Bearer wrong", surrogates(b"Bearer \xff")])
async def test_readyz_without_the_token_shows_the_status_only(authorization: str | None) -> None:
    assert await _readyz(authorization) == (200, {"status": "ready"})
    assert await _readyz(authorization, ready=False) == (503, {"status": "starting"})


async def test_readyz_with_the_token_shows_the_figures() -> None:
    figures = {"status": "ready", "partitions": [0, 1], "in_flight": 3, "pid": os.getpid()}
    assert await _readyz("Bearer s3cret") == (200, figures)
    status, body = await _readyz("Bearer s3cret", ready=False)
    assert (status, body["status"], body["in_flight"]) == (503, "starting", 3)


# the whole stack, as bytes off a socket -------------------------------------------------------------


async def test_a_non_utf8_header_through_the_real_server_is_a_401() -> None:
    """aiohttp's parser, the middlewares in their order, and the answer as bytes."""
    app = web.Application(middlewares=web_middlewares(Settings(api_token=TOKEN)))
    app.router.add_get("/v1/receivers", _ok)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"GET /v1/receivers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe\r\n"
                     b"Accept: text/html\r\nConnection: close\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
    finally:
        await server.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 401"), answer
    assert orjson.loads(body)["error"]["field"] == "Authorization"
