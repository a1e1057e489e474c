from __future__ import annotations

import base64

import pytest
from standardwebhooks import Webhook

from dispatcher.domain.signing import SecretError, decode_secret, generate_secret, sign, verify
from dispatcher.domain.webhook import build_body, build_headers

SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SPEC_TS = 1614265330
SPEC_BODY = b'{"test": 2432232314}'
SPEC_SIG = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_standard_webhooks_test_vector() -> None:
    assert sign(decode_secret(SPEC_SECRET), SPEC_ID, SPEC_TS, SPEC_BODY) == SPEC_SIG


def test_verify_accepts_any_of_several_signatures_and_rejects_tampering() -> None:
    key = decode_secret(SPEC_SECRET)
    assert verify(key, SPEC_ID, SPEC_TS, SPEC_BODY, f"v1,bm9wZQ== {SPEC_SIG}")
    assert not verify(key, SPEC_ID, SPEC_TS, SPEC_BODY + b" ", SPEC_SIG)
    assert not verify(key, SPEC_ID, SPEC_TS + 1, SPEC_BODY, SPEC_SIG)


def test_generated_secret_round_trips() -> None:
    secret = generate_secret(bytes(range(24)))
    assert secret == "whsec_" + base64.b64encode(bytes(range(24))).decode()
    assert decode_secret(secret) == bytes(range(24))


SHORT = "whsec_" + base64.b64encode(b"short").decode()


@pytest.mark.parametrize("bad", ["abc", "whsec_", "whsec_!!!!", SHORT])
def test_bad_secrets_are_refused(bad: str) -> None:
    with pytest.raises(SecretError):
        decode_secret(bad)


def test_official_library_verifies_our_request(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = {"id": "msg_1", "seq": 7, "type": "a.b", "data": {"x": [1, "ü"]}, "accepted_at": 1700000000.5}
    body = build_body(entry)
    import time

    now = int(time.time())
    headers = build_headers(SPEC_SECRET, entry, body, now, {"X-Tenant": "t1"})
    assert Webhook(SPEC_SECRET).verify(body, headers) == {
        "type": "a.b", "timestamp": "2023-11-14T22:13:20.500Z", "data": {"x": [1, "ü"]}
    }
    assert headers["webhook-sequence"] == "7" and headers["X-Tenant"] == "t1"
