"""Standard Webhooks signing: sans-I/O, computes bytes only.

Two kinds of signing secret: a shared `whsec_` HMAC key (`v1` signatures), or
an ed25519 `whsk_` private key (`v1a` signatures) whose `whpk_` public key is
all a receiver needs, so a leak on their side lets nobody forge our requests.
"""

from __future__ import annotations

import base64
import functools
import hmac
import secrets

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

SECRET_PREFIX = "whsec_"
SIGNING_KEY_PREFIX = "whsk_"
PUBLIC_KEY_PREFIX = "whpk_"


class SecretError(ValueError):
    """A webhook secret that cannot be decoded."""


def generate_secret(random_bytes: bytes | None = None) -> str:
    """Return a new `whsec_` secret (24 random bytes, as Standard Webhooks suggests)."""
    raw = random_bytes if random_bytes is not None else secrets.token_bytes(24)
    return SECRET_PREFIX + base64.b64encode(raw).decode()


def _decode_prefixed(value: str, prefix: str, what: str) -> bytes:
    """The bytes of `<prefix><base64>`; errors name `what` (secret, signing key)."""
    if not value.startswith(prefix):
        raise SecretError(f"{what} must start with '{prefix}'")
    try:
        return base64.b64decode(value[len(prefix) :], validate=True)
    except ValueError as exc:
        raise SecretError(f"{what} is not valid base64 after '{prefix}'") from exc


def decode_secret(secret: str) -> bytes:
    """Return the HMAC key bytes of a `whsec_<base64>` secret."""
    key = _decode_prefixed(secret, SECRET_PREFIX, "secret")
    if not 24 <= len(key) <= 64:
        raise SecretError("secret must decode to 24..64 bytes")
    return key


def generate(kind: str) -> str:
    """A new secret of `kind`: "ed25519" (a `whsk_` key) or "hmac-sha256" (a `whsec_` secret)."""
    return generate_signing_key() if kind == "ed25519" else generate_secret()


def generate_signing_key(seed: bytes | None = None) -> str:
    """Return a new `whsk_` ed25519 private key: base64 of seed + public key (libsodium's layout)."""
    key = Ed25519PrivateKey.from_private_bytes(seed if seed is not None else secrets.token_bytes(32))
    return SIGNING_KEY_PREFIX + base64.b64encode(_seed(key) + _public(key)).decode()


def decode_signing_key(secret: str) -> Ed25519PrivateKey:
    """The private key of a `whsk_` secret: 32 bytes of seed, or 64 of seed + public key."""
    raw = _decode_prefixed(secret, SIGNING_KEY_PREFIX, "signing key")
    if len(raw) not in (32, 64):
        raise SecretError("signing key must decode to 32 or 64 bytes")
    key = Ed25519PrivateKey.from_private_bytes(raw[:32])
    if len(raw) == 64 and raw[32:] != _public(key):
        raise SecretError("signing key's public half does not match its seed")
    return key


def public_key_of(secret: str) -> str:
    """The `whpk_` public key receivers verify `v1a` signatures with."""
    return PUBLIC_KEY_PREFIX + base64.b64encode(_public(decode_signing_key(secret))).decode()


def check_secret(secret: str) -> None:
    """Raise SecretError unless `secret` is a usable `whsec_` or `whsk_` secret."""
    if secret.startswith(SIGNING_KEY_PREFIX):
        decode_signing_key(secret)
    else:
        decode_secret(secret)


def is_asymmetric(secret: str) -> bool:
    return secret.startswith(SIGNING_KEY_PREFIX)


def _seed(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())


def _public(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def _signed_content(msg_id: str, timestamp: int, body: bytes) -> bytes:
    return b"%s.%d.%s" % (msg_id.encode(), timestamp, body)


def sign(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """Return the `v1,<base64>` HMAC-SHA256 signature of one request."""
    digest = hmac.digest(key, _signed_content(msg_id, timestamp, body), "sha256")
    return "v1," + base64.b64encode(digest).decode()


def sign_with(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """`v1,...` for a `whsec_` secret, `v1a,...` (ed25519) for a `whsk_` key."""
    if is_asymmetric(secret):
        signature = decode_signing_key(secret).sign(_signed_content(msg_id, timestamp, body))
        return "v1a," + base64.b64encode(signature).decode()
    return sign(_hmac_key(secret), msg_id, timestamp, body)


@functools.lru_cache(maxsize=8192)
def _hmac_key(secret: str) -> bytes:
    """decode_secret, remembered: every delivery signs with its receiver's secret again."""
    return decode_secret(secret)


def signature_header(secrets_: list[str], msg_id: str, timestamp: int, body: bytes) -> str:
    """Space-separated signatures, one per active secret (several while a secret rotates)."""
    return " ".join(sign_with(secret, msg_id, timestamp, body) for secret in secrets_)


def verify(key: bytes, msg_id: str, timestamp: int, body: bytes, header: str) -> bool:
    """True when any `v1` signature in `header` matches."""
    expected = sign(key, msg_id, timestamp, body).encode()
    return any(
        hmac.compare_digest(expected, candidate.encode())
        for candidate in header.split()
        if candidate.startswith("v1,")
    )


def check_verify_key(key: str) -> None:
    """Raise SecretError unless `key` is what a receiver verifies with: `whsec_` or a `whpk_` key."""
    if key.startswith(PUBLIC_KEY_PREFIX):
        _public_key(key)
    elif key.startswith(SECRET_PREFIX):
        decode_secret(key)
    else:
        raise SecretError(f"must start with '{SECRET_PREFIX}' (HMAC) or '{PUBLIC_KEY_PREFIX}' (ed25519)")


def _public_key(key: str) -> Ed25519PublicKey:
    raw = _decode_prefixed(key, PUBLIC_KEY_PREFIX, "public key")
    if len(raw) != 32:
        raise SecretError("public key must decode to 32 bytes")
    return Ed25519PublicKey.from_public_bytes(raw)


def verify_with(key: str, msg_id: str, timestamp: int, body: bytes, header: str) -> bool:
    """What a receiver checks: any `v1` signature under a `whsec_` secret, or `v1a` under a `whpk_` key.

    The id and header come from outside: anything not ASCII simply does not match.
    """
    if not (msg_id.isascii() and header.isascii()):
        return False
    if not key.startswith(PUBLIC_KEY_PREFIX):
        return verify(decode_secret(key), msg_id, timestamp, body, header)
    public = _public_key(key)
    content = _signed_content(msg_id, timestamp, body)
    for candidate in header.split():
        if not candidate.startswith("v1a,"):
            continue
        try:
            public.verify(base64.b64decode(candidate[4:], validate=True), content)
            return True
        except (InvalidSignature, ValueError):
            continue
    return False
