from __future__ import annotations

import base64
import time

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from dispatcher.domain.records import ReceiverConfig
from dispatcher.domain.signing import (
    SecretError,
    decode_secret,
    decode_signing_key,
    generate_secret,
    generate_signing_key,
    public_key_of,
    sign,
    sign_with,
    verify,
)
from dispatcher.domain.webhook import build_body, build_headers, iso_timestamp

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


ENTRY = {"id": "msg_1", "seq": 7, "type": "a.b", "data": {"x": [1, "ü"]}, "accepted_at": 1700000000.5}


def test_official_library_verifies_our_request() -> None:
    body = build_body(ENTRY)
    now = int(time.time())  # the library checks the timestamp against its own clock
    config = ReceiverConfig("r", "https://x.test/", SPEC_SECRET, headers={"X-Tenant": "t1"})
    headers = build_headers(config, ENTRY, body, now)
    assert Webhook(SPEC_SECRET).verify(body, headers) == {
        "type": "a.b", "timestamp": "2023-11-14T22:13:20.500Z", "data": {"x": [1, "ü"]}
    }
    assert headers["webhook-sequence"] == "7" and headers["X-Tenant"] == "t1"


def test_rotated_secret_signs_until_its_grace_ends() -> None:
    old, new = generate_secret(), generate_secret()
    now = int(time.time())
    config = ReceiverConfig("r", "https://x.test/", new, previous_secrets=((old, now + 60),))
    body = build_body(ENTRY)
    during = build_headers(config, ENTRY, body, now)
    assert len(during["webhook-signature"].split()) == 2
    for secret in (old, new):
        Webhook(secret).verify(body, during)
    after = build_headers(config, ENTRY, body, now + 60)
    Webhook(new).verify(body, after)
    with pytest.raises(WebhookVerificationError):
        Webhook(old).verify(body, after)


def test_ed25519_signature_verifies_with_the_public_key_only() -> None:
    secret = generate_signing_key(bytes(range(32)))
    public = public_key_of(secret)
    assert public.startswith("whpk_") and secret.startswith("whsk_")
    raw_public = base64.b64decode(public.removeprefix("whpk_"))
    signature = sign_with(secret, SPEC_ID, SPEC_TS, SPEC_BODY)
    assert signature.startswith("v1a,")
    key = Ed25519PublicKey.from_public_bytes(raw_public)
    key.verify(base64.b64decode(signature[4:]), f"{SPEC_ID}.{SPEC_TS}.".encode() + SPEC_BODY)
    with pytest.raises(InvalidSignature):
        key.verify(base64.b64decode(signature[4:]), f"{SPEC_ID}.{SPEC_TS + 1}.".encode() + SPEC_BODY)


def test_signing_keys_load_as_seed_or_seed_and_public_key() -> None:
    full = generate_signing_key(bytes(32))
    seed_only = "whsk_" + base64.b64encode(bytes(32)).decode()
    assert public_key_of(full) == public_key_of(seed_only)
    mismatched = "whsk_" + base64.b64encode(bytes(32) + bytes(32)).decode()
    for bad in [mismatched, "whsk_", "whsk_!!", "whsk_" + base64.b64encode(bytes(31)).decode()]:
        with pytest.raises(SecretError):
            decode_signing_key(bad)


def test_iso_timestamps_read_as_datetime_writes_them() -> None:
    import random
    from datetime import UTC, datetime

    rng = random.Random(7)
    edges = [0.0, 1.0, 1.9995, 1.99949999, 1700000000.0005, 1700000000.9999996, 1700000000.123]
    epochs = edges + [rng.uniform(0, 4e9) for _ in range(20_000)] + [1.7e9 + i / 997 for i in range(5_000)]
    for epoch in epochs:
        expected = datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"
        assert iso_timestamp(epoch) == expected, epoch
