"""Standard Webhooks signing: sans-I/O, computes bytes only."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

SECRET_PREFIX = "whsec_"


class SecretError(ValueError):
    """A webhook secret that cannot be decoded."""


def generate_secret(random_bytes: bytes | None = None) -> str:
    """Return a new `whsec_` secret (24 random bytes, as Standard Webhooks suggests)."""
    raw = random_bytes if random_bytes is not None else secrets.token_bytes(24)
    return SECRET_PREFIX + base64.b64encode(raw).decode()


def decode_secret(secret: str) -> bytes:
    """Return the HMAC key bytes of a `whsec_<base64>` secret."""
    if not secret.startswith(SECRET_PREFIX):
        raise SecretError("secret must start with 'whsec_'")
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except ValueError as exc:
        raise SecretError("secret is not valid base64 after 'whsec_'") from exc
    if not 24 <= len(key) <= 64:
        raise SecretError("secret must decode to 24..64 bytes")
    return key


def sign(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """Return the `v1,<base64>` signature of one request."""
    signed = b"%s.%d.%s" % (msg_id.encode(), timestamp, body)
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signature_header(keys: list[bytes], msg_id: str, timestamp: int, body: bytes) -> str:
    """Space-separated signatures, one per active key (several while a secret rotates)."""
    return " ".join(sign(key, msg_id, timestamp, body) for key in keys)


def verify(key: bytes, msg_id: str, timestamp: int, body: bytes, header: str) -> bool:
    """True when any `v1` signature in `header` matches."""
    expected = sign(key, msg_id, timestamp, body).encode()
    return any(
        hmac.compare_digest(expected, candidate.encode())
        for candidate in header.split()
        if candidate.startswith("v1,")
    )
