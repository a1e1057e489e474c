"""`webhook-dispatcher listen` checks a request as a careful receiver would."""

from __future__ import annotations

import asyncio
import io

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from dispatcher.domain.signing import (
    SecretError,
    check_verify_key,
    generate_secret,
    generate_signing_key,
    public_key_of,
    signature_header,
)
from dispatcher.listen import Listener

NOW = 1_800_000_000
BODY = b'{"type":"invoice.paid","data":{"amount":42}}'


def _headers(secrets: list[str], stamp: int = NOW, body: bytes = BODY) -> dict[str, str]:
    return {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(stamp),
        "webhook-signature": signature_header(secrets, "msg_1", stamp, body),
    }


def test_hmac_and_ed25519_signatures_pass_with_the_receivers_key() -> None:
    secret, signing_key = generate_secret(), generate_signing_key()
    assert Listener(secret, out=io.StringIO()).check(_headers([secret]), BODY, NOW) == "ok"
    public = public_key_of(signing_key)
    assert Listener(public, out=io.StringIO()).check(_headers([signing_key]), BODY, NOW) == "ok"
    # While a secret rotates the header carries two signatures; either key passes.
    both = _headers([generate_secret(), secret])
    assert Listener(secret, out=io.StringIO()).check(both, BODY, NOW) == "ok"


def test_a_wrong_key_a_changed_body_or_an_old_timestamp_fail() -> None:
    secret, signing_key = generate_secret(), generate_signing_key()
    listener = Listener(secret, out=io.StringIO())
    assert listener.check(_headers([generate_secret()]), BODY, NOW).startswith("BAD: no signature")
    assert listener.check(_headers([secret]), BODY + b" ", NOW).startswith("BAD: no signature")
    assert listener.check(_headers([secret], stamp=NOW - 301), BODY, NOW).startswith("BAD: timestamp")
    assert listener.check({"webhook-id": "msg_1"}, BODY, NOW).startswith("BAD: webhook-id")
    # An ed25519 key never accepts an HMAC signature, nor a signature made with another key.
    other = public_key_of(generate_signing_key())
    assert Listener(other, out=io.StringIO()).check(_headers([signing_key]), BODY, NOW) != "ok"
    assert Listener(public_key_of(signing_key), out=io.StringIO()).check(
        _headers([secret]), BODY, NOW) != "ok"
    broken = Listener("whpk_notbase64!", out=io.StringIO())
    assert broken.check(_headers([secret]), BODY, NOW).startswith("BAD")
    assert Listener(None, out=io.StringIO()).check(_headers([secret]), BODY, NOW) == "not checked"


def test_hostile_headers_are_bad_requests_never_an_error() -> None:
    secret = generate_secret()
    listener = Listener(secret, out=io.StringIO())
    good = _headers([secret])
    for name, value in (("webhook-signature", "v1,\udce9\udcff"), ("webhook-id", "\udcff\udcfe"),
                        ("webhook-timestamp", "²"), ("webhook-timestamp", "9" * 5000)):
        assert listener.check({**good, name: value}, BODY, NOW).startswith("BAD"), (name, value)
    public = public_key_of(generate_signing_key())
    hostile = {**good, "webhook-signature": "v1a,\udcff"}
    assert Listener(public, out=io.StringIO()).check(hostile, BODY, NOW) != "ok"


async def test_what_a_sender_wrote_never_reaches_the_terminal_raw() -> None:
    out = io.StringIO()
    listener = Listener(None, out=out)
    app = web.Application()
    app.router.add_route("*", "/{path:.*}", listener.handle)
    async with TestServer(app) as server:  # raw bytes: aiohttp's client refuses to send such headers
        # aiohttp's server refuses C0 controls in headers itself (400); a bidi override gets through.
        head = ("POST /hook HTTP/1.1\r\nhost: x\r\nwebhook-id: msg_\u202e1\r\n"
                "webhook-event-type: a\u202eb\r\ncontent-length: {}\r\nconnection: close\r\n\r\n")
        # JSON whose string holds a C1 control, and a body that is not JSON with a raw escape.
        for body in (b'{"x": "\\u009b[2J"}', b"not json \x1b[31m\x1b]0;owned\x07"):
            reader, writer = await asyncio.open_connection(server.host, server.port)
            writer.write(head.format(len(body)).encode("utf-8") + body)
            assert (await reader.readline()).startswith(b"HTTP/1.1 200")
            writer.close()
    printed = out.getvalue()
    for raw in ("\x1b", "\x07", "\u202e", "\x9b"):
        assert raw not in printed, printed
    assert "\\x1b" in printed and "\\u202e" in printed and "\\x9b" in printed  # shown as text


def test_a_key_that_cannot_verify_is_refused_at_start() -> None:
    for key in ("nonsense", "whpk_AAAA", "whsec_short", "whsk_" + "A" * 43 + "="):
        with pytest.raises(SecretError):
            check_verify_key(key)
    check_verify_key(generate_secret())
    check_verify_key(public_key_of(generate_signing_key()))
