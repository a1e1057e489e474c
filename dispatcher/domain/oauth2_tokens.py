"""The OAuth2 client-credentials exchange (RFC 6749 4.4) of a receiver's `auth`: the form a token
request sends, the reading of a token server's answer (any answer: the server is as untrusted as
a receiver), and when a cached token is due for a refresh. Pure code: no sockets, no clock.
"""

from __future__ import annotations

import base64
import math
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

import orjson

from .receiver_auth import MAX_REASON, OAuth2Auth
from .untrusted import clean_text

MAX_ACCESS_TOKEN = 8192  # it becomes a header value, and response headers are capped at 8,190 bytes
# A token's lifetime as used: a server's `expires_in` outside these bounds is clamped, so neither a
# second-long token (a fetch per delivery) nor a ten-year one (never refreshed) is taken at its word.
MIN_LIFETIME = 5.0
MAX_LIFETIME = 86400.0
DEFAULT_LIFETIME = 300.0  # no `expires_in` (RFC 6749 5.1 makes it optional): refresh every 5 minutes
REFRESH_MARGIN = 30.0  # refresh this long before expiry, or at 90% of a shorter lifetime
_TOKEN_CHARS = re.compile(r"[\x21-\x7e]+")  # RFC 6750's b64token and then some; never a space or CR/LF


# the token request ------------------------------------------------------------------------------


def token_request(auth: OAuth2Auth) -> tuple[dict[str, str], bytes]:
    """The headers and form body of a client-credentials token request (RFC 6749 4.4.2)."""
    form = {"grant_type": "client_credentials"}
    headers = {"content-type": "application/x-www-form-urlencoded"}  # the transports send accept: */*
    if auth.client_auth == "basic":
        # RFC 6749 2.3.1: each part form-encoded before the Basic encoding
        pair = f"{quote(auth.client_id, safe='')}:{quote(auth.client_secret, safe='')}"
        headers["authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
    else:
        form["client_id"] = auth.client_id
        form["client_secret"] = auth.client_secret
    if auth.scope:
        form["scope"] = auth.scope
    if auth.audience:
        form["audience"] = auth.audience
    return headers, urlencode(form).encode()


@dataclass(slots=True, frozen=True)
class Token:
    """An access token as used: its header value, and when it is due for a refresh."""

    value: str = field(repr=False)
    fetched_at: float
    expires_at: float
    refresh_at: float

    def fresh(self, now: float) -> bool:
        """Still good to send: not yet at its refresh time."""
        return now < self.refresh_at


class TokenError(Exception):
    """The token server gave no usable token; the message says why (no secret in it)."""


def token_times(fetched_at: float, expires_in: float | None) -> tuple[float, float]:
    """(expires_at, refresh_at) of a token fetched at `fetched_at` with the server's `expires_in`."""
    lifetime = DEFAULT_LIFETIME if expires_in is None else min(max(expires_in, MIN_LIFETIME), MAX_LIFETIME)
    margin = min(REFRESH_MARGIN, lifetime * 0.1)
    return fetched_at + lifetime, fetched_at + lifetime - margin


def parse_token_response(status: int, body: bytes, now: float, capped: bool, secret: str = "") -> Token:
    """A token server's answer as a Token, or TokenError saying what is wrong with it.

    `capped`: the body reached the transport's read cap (a token answer is small). `secret` is
    kept out of the reason, should the server echo it.
    """
    if capped:
        raise TokenError(f"token server answered HTTP {status} with a body over the size cap")
    data = _json_object(body)
    if not 200 <= status < 300:
        raise TokenError(_redacted(f"token server answered HTTP {status}{_oauth_error(data)}", secret))
    if data is None:
        raise TokenError("token server answer is not a JSON object")
    access = data.get("access_token")
    if not isinstance(access, str) or not access:
        raise TokenError("token server answer has no access_token")
    if len(access) > MAX_ACCESS_TOKEN or not _TOKEN_CHARS.fullmatch(access):
        raise TokenError(f"access_token is not a header-safe string of at most {MAX_ACCESS_TOKEN} characters")
    kind = data.get("token_type", "bearer")
    if not isinstance(kind, str) or kind.lower() != "bearer":
        raise TokenError(_redacted(f"token_type {clean_text(kind, 40)!r} is not bearer", secret))
    expires_at, refresh_at = token_times(now, _expires_in(data.get("expires_in")))
    return Token(f"Bearer {access}", now, expires_at, refresh_at)


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def _expires_in(value: object) -> float | None:
    """A number of seconds (some servers send it as a string); a negative one is no answer."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise TokenError("expires_in is not a number") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TokenError("expires_in is not a number")
    if value < 0:
        raise TokenError("expires_in is negative")
    return float(value)


def _oauth_error(data: dict[str, Any] | None) -> str:
    """RFC 6749 5.2's `error` and `error_description`, cleaned and short, if the answer has them."""
    if data is None or not isinstance(data.get("error"), str):
        return ""
    text = clean_text(data["error"], 60)
    description = data.get("error_description")
    if isinstance(description, str) and description:
        text += f" ({clean_text(description, MAX_REASON)})"
    return f": {text}"


def _redacted(reason: str, secret: str) -> str:
    return reason.replace(secret, "[secret]") if secret else reason
