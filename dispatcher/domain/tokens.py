"""Tenant API tokens: their format, their stored record, and what a tenant token may do.

A tenant token reads `wdt_<id>_<secret>`: the id is a ULID (no `_` in it), the
secret 32 random bytes in unpadded base64url. The id finds the record; only the
SHA-256 of the secret is stored, and a presented secret is checked by comparing
hashes in constant time.

Why SHA-256 and not a slow KDF (bcrypt, scrypt, argon2): a KDF's slowness is
there to make guessing a low-entropy secret (a password) from a leaked hash
costly. A 256-bit random secret cannot be guessed from its hash however fast
the hash is, and a deliberately slow hash on every API call would hand any
caller who can reach the port a way to burn the worker's CPU.

Records are kept for ever (revoked ones too, for the listing): a revocation is
final, so a record that says revoked wins over one that does not, whatever
order they are read in (`TokenBook.put`).

Pure: times and random bytes are passed in.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import orjson

from .errors import InvalidInput
from .field_checks import reject_unknown
from .recover import parse_instant
from .subscriptions import check_tenant

PREFIX = "wdt_"
SECRET_BYTES = 32
_ID_RE = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")  # a ULID in Crockford base32, as python-ulid writes it
_SECRET_RE = re.compile(r"[A-Za-z0-9_-]{43}")  # 32 bytes, base64url without padding
MAX_NAME = 100
MINT_FIELDS = {"tenant", "name", "expires_at"}


@dataclass(slots=True, frozen=True)
class TokenRecord:
    """One tenant token as stored (keyed by `id`): never its secret, only the secret's hash."""

    id: str
    tenant: str
    secret_hash: str  # hex SHA-256 of the secret part
    created_at: float
    last4: str  # the secret's last four characters, so a holder can tell which token is which
    name: str = ""
    expires_at: float | None = None
    revoked_at: float | None = None

    def view(self, now: float) -> dict[str, Any]:
        """The record as the API lists it: everything but the hash."""
        return {
            "id": self.id, "tenant": self.tenant, "name": self.name, "created_at": self.created_at,
            "expires_at": self.expires_at, "revoked_at": self.revoked_at, "last4": self.last4,
            "prefix": f"{PREFIX}{self.id}_", "status": status(self, now),
        }


@dataclass(slots=True, frozen=True)
class Principal:
    """Who calls: the admin token (`tenant` None) or a tenant token (its id and tenant)."""

    tenant: str | None = None
    token_id: str | None = None

    @property
    def admin(self) -> bool:
        return self.tenant is None

    def describe(self) -> str:
        """For logs: the token's id and tenant, never its secret."""
        return "admin token" if self.admin else f"token_id={self.token_id} tenant={self.tenant}"


ADMIN = Principal()


# the token itself ---------------------------------------------------------------------------------


def mint(token_id: str, secret: bytes, tenant: str, name: str, now: float,
         expires_at: float | None = None) -> tuple[str, TokenRecord]:
    """The plaintext token (shown once) and the record to store."""
    if not _ID_RE.fullmatch(token_id) or len(secret) != SECRET_BYTES:
        raise ValueError("a token id is a ULID and its secret 32 bytes")
    text = base64.urlsafe_b64encode(secret).rstrip(b"=").decode()
    record = TokenRecord(token_id, tenant, hash_secret(text), now, text[-4:], name, expires_at)
    return f"{PREFIX}{token_id}_{text}", record


def parse_token(presented: str) -> tuple[str, str] | None:
    """(id, secret) of a string in the tenant-token format; None for anything else."""
    if not presented.startswith(PREFIX):
        return None
    token_id, _, secret = presented[len(PREFIX):].partition("_")
    if not (_ID_RE.fullmatch(token_id) and _SECRET_RE.fullmatch(secret)):
        return None
    return token_id, secret


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def status(record: TokenRecord, now: float) -> str:
    """`active`, `revoked` or `expired` (a revocation is told first: it was someone's decision)."""
    if record.revoked_at is not None:
        return "revoked"
    if record.expires_at is not None and now >= record.expires_at:
        return "expired"
    return "active"


def refusal(record: TokenRecord | None, secret: str, now: float) -> str:
    """Why a presented token is refused ("" if it is not): unknown, wrong secret, revoked, expired."""
    if record is None:
        return "unknown token id"
    if not hmac.compare_digest(hash_secret(secret).encode(), record.secret_hash.encode()):
        return "wrong secret"
    state = status(record, now)
    return "" if state == "active" else state


# the records on the tokens topic -----------------------------------------------------------------


def encode_record(record: TokenRecord) -> bytes:
    return orjson.dumps({
        "id": record.id, "tenant": record.tenant, "secret_hash": record.secret_hash,
        "created_at": record.created_at, "last4": record.last4, "name": record.name,
        "expires_at": record.expires_at, "revoked_at": record.revoked_at,
    })


def decode_record(raw: bytes) -> TokenRecord:
    """A tokens-topic record; ValueError (or TypeError, KeyError) for one that is not."""
    data = orjson.loads(raw)
    record = TokenRecord(
        str(data["id"]), str(data["tenant"]), str(data["secret_hash"]), float(data["created_at"]),
        str(data.get("last4", "")), str(data.get("name", "")), _time_or_none(data.get("expires_at")),
        _time_or_none(data.get("revoked_at")),
    )
    if not _ID_RE.fullmatch(record.id) or len(record.secret_hash) != 64:
        raise ValueError("not a token record")
    check_tenant(record.tenant, "tenant")  # it goes to log lines and into every scope check
    return record


def _time_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


class TokenBook:
    """Every token record by id, as read from the tokens topic (and written by this worker)."""

    def __init__(self) -> None:
        self._records: dict[str, TokenRecord] = {}

    def __len__(self) -> int:
        return len(self._records)

    def get(self, token_id: str) -> TokenRecord | None:
        return self._records.get(token_id)

    def put(self, record: TokenRecord) -> TokenRecord:
        """Keep `record`, except that a revocation already known stays: a worker that revoked a token
        and then reads the token's older record (its feed behind) must still refuse it."""
        known = self._records.get(record.id)
        if known is not None and known.revoked_at is not None and record.revoked_at is None:
            record = replace(record, revoked_at=known.revoked_at)
        self._records[record.id] = record
        return record

    def remove(self, token_id: str) -> None:
        self._records.pop(token_id, None)

    def listed(self) -> list[TokenRecord]:
        """Every record in id order, that is in the order they were minted (ULIDs sort by time)."""
        return [self._records[k] for k in sorted(self._records)]


# the API's requests about tokens -----------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class MintRequest:
    tenant: str
    name: str = ""
    expires_at: float | None = None


def parse_mint(body: object, now: float) -> MintRequest:
    """`POST /v1/tokens`: `{"tenant", "name"?, "expires_at"?}`; errors name the field."""
    if not isinstance(body, dict):
        raise InvalidInput("body", "must be a JSON object")
    reject_unknown(body, MINT_FIELDS, "")
    if body.get("tenant") is None:
        raise InvalidInput("tenant", "is required: a token acts for one tenant")
    tenant = check_tenant(body["tenant"], "tenant")
    assert tenant is not None
    name = body.get("name") or ""
    if not isinstance(name, str) or len(name) > MAX_NAME or not name.isprintable():
        raise InvalidInput("name", f"must be at most {MAX_NAME} printable characters")
    expires_at = body.get("expires_at")
    if expires_at is not None:
        expires_at = parse_instant(expires_at, "expires_at")
        if expires_at <= now:
            raise InvalidInput("expires_at", "must be in the future")
    return MintRequest(tenant, name, expires_at)


# what a tenant token may do ---------------------------------------------------------------------


def may_see(principal: Principal, receiver_tenant: str | None) -> bool:
    """The admin sees every receiver; a tenant token only those of its tenant (not untenanted ones)."""
    return principal.admin or receiver_tenant == principal.tenant


def forbidden(field: str, message: str) -> InvalidInput:
    return InvalidInput(field, message, "forbidden", 403)


T = TypeVar("T")


def scoped_tenant(principal: Principal, asked: T, what: str) -> T | str:
    """The `tenant` a body or query may have under `principal`: a tenant token's own (also when none
    was given); another, or none (null) where one was asked for explicitly, is refused."""
    if principal.admin:
        return asked
    if asked is not None and asked != principal.tenant:
        raise forbidden("tenant", f"a token of tenant {principal.tenant!r} {what} of that tenant only")
    assert principal.tenant is not None
    return principal.tenant


def scoped_receiver_body(principal: Principal, body: object, create: bool) -> object:
    """A receiver's create (or PATCH) body under `principal`: a tenant token's receivers are its tenant's.

    A create gets the token's tenant when it names none; a PATCH may leave `tenant` out, or name the
    token's own, but never clear or change it.
    """
    if principal.admin or not isinstance(body, dict):
        return body
    if "tenant" in body and body["tenant"] != principal.tenant:
        raise forbidden("tenant", f"a token of tenant {principal.tenant!r} manages receivers of that "
                        "tenant only: it cannot set another tenant or none")
    return {**body, "tenant": principal.tenant} if create else body


def scoped_event_body(principal: Principal, body: object) -> object:
    """An event under `principal`: a tenant token publishes its own tenant's events only."""
    if principal.admin or not isinstance(body, dict):
        return body
    return {**body, "tenant": scoped_tenant(principal, body.get("tenant"), "publishes events")}
