"""How the dispatcher proves itself to a receiver: a TLS client certificate, or an OAuth2 token.

A receiver's `auth` is one of
    {"type": "mtls", "certificate": PEM, "private_key": PEM}
    {"type": "oauth2", "token_url", "client_id", "client_secret", "scope"?, "audience"?,
     "client_auth"?: "basic" | "body"}
The private key and the client secret are write-only: they are stored and used, never shown
(`auth_view` names the certificate by subject, fingerprint and expiry, the secret as "set").
A body that leaves one out keeps the current one, so a renewed certificate over the same key,
or a new scope, needs no secret again.

The OAuth2 token exchange itself (the request's form, the server's answer, refresh times) is
`oauth2_tokens.py`. Pure code: no sockets, no clock.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.hashes import SHA256

from .errors import InvalidInput
from .field_checks import check_url, reject_unknown

AUTH_TYPES = ("mtls", "oauth2")
CLIENT_AUTH_METHODS = ("basic", "body")
MAX_PEM = 64 * 1024  # a certificate chain and a key fit many times over
MAX_CLIENT_ID = 256
MAX_CLIENT_SECRET = 1024
MAX_SCOPE = 1024  # scope and audience alike
MAX_REASON = 200
_PRINTABLE = re.compile(r"[\x20-\x7e]*")  # a header value or a form field, whole


@dataclass(slots=True, frozen=True)
class MtlsAuth:
    """A client certificate (its chain, leaf first) and its private key, both PEM."""

    certificate: str
    private_key: str = field(repr=False)
    _identity: bytes = field(default=b"", init=False, repr=False, compare=False)  # made once, on first use

    @property
    def identity(self) -> bytes:
        """Tells this (certificate, key) from any other: the key of its TLS context and connections."""
        if not self._identity:
            digest = hashlib.sha256(self.certificate.encode() + b"\0" + self.private_key.encode()).digest()
            object.__setattr__(self, "_identity", digest)
        return self._identity

    def as_dict(self) -> dict[str, Any]:
        return {"type": "mtls", "certificate": self.certificate, "private_key": self.private_key}


@dataclass(slots=True, frozen=True)
class OAuth2Auth:
    """OAuth2 client credentials: what a token request needs."""

    token_url: str
    client_id: str
    client_secret: str = field(repr=False)
    scope: str = ""
    audience: str = ""
    client_auth: str = "basic"  # client_secret_basic (RFC 6749 2.3.1), or "body": client_secret_post
    _identity: bytes = field(default=b"", init=False, repr=False, compare=False)  # made once, on first use

    @property
    def identity(self) -> bytes:
        """Tells these credentials from any other: a token cached for one set is never used for another."""
        if not self._identity:
            parts = (self.token_url, self.client_id, self.client_secret, self.scope, self.audience,
                     self.client_auth)
            object.__setattr__(self, "_identity", hashlib.sha256("\0".join(parts).encode()).digest())
        return self._identity

    def as_dict(self) -> dict[str, Any]:
        return {"type": "oauth2", "token_url": self.token_url, "client_id": self.client_id,
                "client_secret": self.client_secret, "scope": self.scope, "audience": self.audience,
                "client_auth": self.client_auth}


ReceiverAuth = MtlsAuth | OAuth2Auth


@dataclass(slots=True, frozen=True)
class ServerTls:
    """`tls.ca`: the only CA certificates (PEM) the receiver's server certificate may chain to.

    Set, it replaces the system's CAs and DISPATCHER_CA_FILE for this receiver alone: a partner's
    private CA is trusted for its receiver, and for no other. Not secret.
    """

    ca: str
    _identity: bytes = field(default=b"", init=False, repr=False, compare=False)

    @property
    def identity(self) -> bytes:
        if not self._identity:
            object.__setattr__(self, "_identity", hashlib.sha256(self.ca.encode()).digest())
        return self._identity

    def as_dict(self) -> dict[str, Any]:
        return {"ca": self.ca}


def parse_tls(value: object, field_name: str = "tls") -> ServerTls | None:
    """A body's `tls` (null: none): `{"ca": PEM}`, one or more CA certificates."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidInput(field_name, 'must be an object {"ca": PEM} or null')
    reject_unknown(value, {"ca"}, f"{field_name}.")
    _certificates(value.get("ca"), f"{field_name}.ca")
    return ServerTls(value["ca"])


def tls_from_dict(data: dict[str, Any] | None) -> ServerTls | None:
    return ServerTls(data["ca"]) if data else None


def tls_view(tls: ServerTls | None) -> dict[str, Any] | None:
    """`tls` as shown: the PEM (not secret) and what each CA certificate is."""
    if tls is None:
        return None
    return {"ca": tls.ca, "ca_certificates": ca_views(tls.ca)}


def ca_views(pem: str) -> list[dict[str, Any]]:
    return [dict(view) for view in _ca_views(pem)]


@lru_cache(maxsize=256)
def _ca_views(pem: str) -> tuple[dict[str, Any], ...]:
    try:
        chain = x509.load_pem_x509_certificates(pem.encode())
    except ValueError:
        return ({"error": "the stored certificates do not parse"},)
    return tuple({"subject": c.subject.rfc4514_string(), "not_after": _iso(c.not_valid_after_utc.timestamp()),
                  "fingerprint_sha256": c.fingerprint(_SHA256).hex(":")} for c in chain)


# configuration ---------------------------------------------------------------------------------


def parse_auth(
    value: object, current: ReceiverAuth | None, now: float, require_https: bool, field_name: str = "auth"
) -> ReceiverAuth | None:
    """A body's `auth` (null: none), checked; the private key or client secret it leaves out is
    `current`'s (same type). Errors name the field (`auth.private_key`) and never quote a secret."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidInput(field_name, 'must be an object with "type": "mtls" or "oauth2", or null')
    kind = value.get("type")
    if kind == "mtls":
        reject_unknown(value, {"type", "certificate", "private_key"}, f"{field_name}.")
        return _parse_mtls(value, current if isinstance(current, MtlsAuth) else None, now, field_name)
    if kind == "oauth2":
        allowed = {"type", "token_url", "client_id", "client_secret", "scope", "audience", "client_auth"}
        reject_unknown(value, allowed, f"{field_name}.")
        return _parse_oauth2(value, current if isinstance(current, OAuth2Auth) else None, require_https,
                             field_name)
    raise InvalidInput(f"{field_name}.type", f"must be one of {', '.join(AUTH_TYPES)}")


def _parse_mtls(value: dict[str, Any], current: MtlsAuth | None, now: float, prefix: str) -> MtlsAuth:
    chain = _certificates(value.get("certificate"), f"{prefix}.certificate")
    leaf = chain[0]
    not_after = leaf.not_valid_after_utc.timestamp()
    if not_after <= now:
        raise InvalidInput(f"{prefix}.certificate", f"expired on {_iso(not_after)}")
    if "private_key" in value:
        key_pem = _pem_text(value["private_key"], f"{prefix}.private_key", "PRIVATE KEY")
    elif current is not None:
        key_pem = current.private_key
    else:
        raise InvalidInput(f"{prefix}.private_key", "is required with a certificate (PEM)")
    _check_key_matches(key_pem, leaf, f"{prefix}.private_key")
    return MtlsAuth(value["certificate"], key_pem)


def _certificates(value: object, field_name: str) -> list[x509.Certificate]:
    text = _pem_text(value, field_name, "CERTIFICATE")
    if "PRIVATE KEY" in text:  # a pasted bundle: the key would sit in a field that is not secret
        raise InvalidInput(field_name, "holds a private key: give certificates only (a client key goes in "
                           "auth.private_key, which is never shown)")
    try:
        chain = x509.load_pem_x509_certificates(text.encode())
    except ValueError:
        raise InvalidInput(field_name, "is not a PEM certificate (-----BEGIN CERTIFICATE-----)") from None
    return chain


def _pem_text(value: object, field_name: str, label: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(field_name, f"must be a PEM string (-----BEGIN {label}-----)")
    if len(value) > MAX_PEM:
        raise InvalidInput(field_name, f"must be at most {MAX_PEM} characters")
    if not value.isascii():
        raise InvalidInput(field_name, "must be PEM text (ASCII)")
    return value


def _check_key_matches(key_pem: str, leaf: x509.Certificate, field_name: str) -> None:
    """The key loads (unencrypted) and is the certificate's; the message never quotes the key."""
    try:
        key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    except TypeError:
        raise InvalidInput(field_name, "is encrypted; give the key without a passphrase") from None
    except (ValueError, UnsupportedAlgorithm):
        raise InvalidInput(field_name, "is not a PEM private key (-----BEGIN PRIVATE KEY-----)") from None
    if not isinstance(key, _SIGNING_KEYS):
        raise InvalidInput(field_name, "must be an RSA, EC, Ed25519 or Ed448 key")
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*spki) != leaf.public_key().public_bytes(*spki):
        raise InvalidInput(field_name, "does not match the certificate (the first in the chain)")


def _parse_oauth2(
    value: dict[str, Any], current: OAuth2Auth | None, require_https: bool, prefix: str
) -> OAuth2Auth:
    token_url = check_url(value.get("token_url"), f"{prefix}.token_url", require_https)
    client_id = _text(value.get("client_id"), f"{prefix}.client_id", MAX_CLIENT_ID, required=True)
    if "client_secret" in value:
        secret = _text(value["client_secret"], f"{prefix}.client_secret", MAX_CLIENT_SECRET, required=True)
    elif current is not None and _origin(current.token_url) == _origin(token_url):
        secret = current.client_secret
    elif current is not None:  # a kept secret must not follow the token URL to another server
        raise InvalidInput(f"{prefix}.client_secret", "is required again when token_url moves to another "
                           "host")
    else:
        raise InvalidInput(f"{prefix}.client_secret", "is required")
    scope = _text(value.get("scope", ""), f"{prefix}.scope", MAX_SCOPE)
    audience = _text(value.get("audience", ""), f"{prefix}.audience", MAX_SCOPE)
    client_auth = value.get("client_auth", "basic")
    if client_auth not in CLIENT_AUTH_METHODS:
        raise InvalidInput(f"{prefix}.client_auth", f"must be one of {', '.join(CLIENT_AUTH_METHODS)}")
    return OAuth2Auth(token_url, client_id, secret, scope, audience, client_auth)


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


def _text(value: object, field_name: str, limit: int, required: bool = False) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise InvalidInput(field_name, f"must be a string of 1..{limit} characters")
    if len(value) > limit:
        raise InvalidInput(field_name, f"must be at most {limit} characters")
    if not _PRINTABLE.fullmatch(value):
        raise InvalidInput(field_name, "must be printable ASCII (no control characters)")
    return value


def auth_from_dict(data: dict[str, Any] | None) -> ReceiverAuth | None:
    """A stored `auth` (as_dict's form, checked when it was accepted) back as a record."""
    if not data:
        return None
    if data.get("type") == "mtls":
        return MtlsAuth(data["certificate"], data["private_key"])
    return OAuth2Auth(data["token_url"], data["client_id"], data["client_secret"], data.get("scope", ""),
                      data.get("audience", ""), data.get("client_auth", "basic"))


def auth_view(auth: ReceiverAuth | None) -> dict[str, Any] | None:
    """What the API and the UI show of `auth`: nothing secret."""
    if auth is None:
        return None
    if isinstance(auth, OAuth2Auth):
        return {"type": "oauth2", "token_url": auth.token_url, "client_id": auth.client_id,
                "client_secret": "set", "scope": auth.scope, "audience": auth.audience,
                "client_auth": auth.client_auth}
    return {"type": "mtls", "private_key": "set", "certificate": certificate_view(auth.certificate)}


def certificate_view(pem: str) -> dict[str, Any]:
    """The leaf certificate's subject, issuer, SHA-256 fingerprint and validity."""
    return dict(_certificate_view(pem))  # a copy: the cached one is shared


@lru_cache(maxsize=1024)  # a page of receivers shows many; a parse costs tens of microseconds
def _certificate_view(pem: str) -> dict[str, Any]:
    try:
        leaf = x509.load_pem_x509_certificates(pem.encode())[0]
    except ValueError:  # checked when stored; a view must never fail on it
        return {"error": "the stored certificate does not parse"}
    return {
        "subject": leaf.subject.rfc4514_string(),
        "issuer": leaf.issuer.rfc4514_string(),
        "fingerprint_sha256": leaf.fingerprint(_SHA256).hex(":"),
        "serial_number": format(leaf.serial_number, "x"),
        "not_before": _iso(leaf.not_valid_before_utc.timestamp()),
        "not_after": _iso(leaf.not_valid_after_utc.timestamp()),
    }


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_SHA256 = SHA256()
_SIGNING_KEYS = (
    rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey, ed25519.Ed25519PrivateKey, ed448.Ed448PrivateKey,
)
