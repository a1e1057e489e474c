"""Custom request headers: validated at the API so nothing bad reaches aiohttp."""

from __future__ import annotations

import re

from .errors import InvalidInput

# RFC 9110 token characters for header names.
_TOKEN_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,256}")
_RESERVED = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "proxy-authorization",
        "proxy-connection",
        "authorization",
        "cookie",
        "expect",
        "accept-encoding",
        "content-encoding",
        "via",
        "x-real-ip",
        "b3",
    }
)
# Ours (webhook-*), and proxy or tracing headers a receiver could mistake for infrastructure's.
_RESERVED_PREFIXES = (
    "webhook-", "x-forwarded-", "forwarded", "traceparent", "tracestate", "x-b3-", "x-amzn-trace-id",
    "x-cloud-trace-context", "uber-trace-id", "x-envoy-",
)
MAX_HEADERS = 32
MAX_VALUE_LEN = 4096


def check_headers(value: object, field: str) -> dict[str, str]:
    """Validate a `{name: value}` object of custom headers; names are kept as given."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInput(field, "must be an object of header names to string values")
    if len(value) > MAX_HEADERS:
        raise InvalidInput(field, f"at most {MAX_HEADERS} headers")
    seen: set[str] = set()
    for name, val in value.items():
        _check_one(name, val, f"{field}.{name}")
        if name.lower() in seen:
            raise InvalidInput(f"{field}.{name}", "header given twice (names are case-insensitive)")
        seen.add(name.lower())
    return dict(value)


def _check_one(name: object, val: object, field: str) -> None:
    if not isinstance(name, str) or not _TOKEN_RE.fullmatch(name):
        raise InvalidInput(field, "header name must be an HTTP token")
    lower = name.lower()
    if lower == "authorization":
        raise InvalidInput(field, "set the receiver's `authorization` field instead of a header")
    if lower in _RESERVED or lower.startswith(_RESERVED_PREFIXES):
        raise InvalidInput(field, f"header '{name}' is reserved and cannot be set")
    check_header_value(val, field)


def check_header_value(val: object, field: str) -> str:
    """Printable ASCII, spaces and tabs only: no CR, LF, NUL or other control character."""
    if not isinstance(val, str):
        raise InvalidInput(field, "header value must be a string")
    if len(val) > MAX_VALUE_LEN:
        raise InvalidInput(field, f"header value longer than {MAX_VALUE_LEN} characters")
    if any(ch in val for ch in "\r\n\0"):
        raise InvalidInput(field, "header value must not contain CR, LF or NUL")
    if not all(" " <= ch <= "~" or ch == "\t" for ch in val):
        raise InvalidInput(field, "header value must be printable ASCII")
    return val
