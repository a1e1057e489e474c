"""Checks of single values from outside (API bodies, producers' records).

Each raises InvalidInput naming the field at fault. A value that passes is
one the engine can store, encode and dial as it is: JSON nested no deeper
than its copies can be encoded, event types of a fixed alphabet, a receiver
URL that every URL parser reads alike, no field the body may not have.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from .addresses import ip_literal, normalise_host, parse_target
from .errors import InvalidInput
from .untrusted import clean_text

_EVENT_TYPE_RE = re.compile(r"[A-Za-z0-9_.:*-]{1,256}")
MAX_URL_LEN = 2048
MAX_PAYLOAD_DEPTH = 64  # orjson writes at most 254 levels; a stored or dead-lettered copy adds a few


def check_depth(value: object, field_name: str, limit: int = MAX_PAYLOAD_DEPTH) -> None:
    """Refuse JSON nested deeper than `limit`: deeper still, the copies we make could not be encoded."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            raise InvalidInput(field_name, f"is nested deeper than {limit} levels")
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def check_event_type(value: object, field_name: str) -> str:
    if not isinstance(value, str) or not _EVENT_TYPE_RE.fullmatch(value):
        raise InvalidInput(field_name, "must be 1..256 characters of [A-Za-z0-9_.:-]")
    return value


def check_url(value: object, field_name: str, require_https: bool) -> str:
    """A receiver URL: absolute http(s) with a host, no credentials, no fragment."""
    if not isinstance(value, str) or not value or len(value) > MAX_URL_LEN:
        raise InvalidInput(field_name, f"must be a URL of at most {MAX_URL_LEN} characters")
    if any(ch.isspace() or ord(ch) < 32 for ch in value):
        raise InvalidInput(field_name, "must not contain whitespace or control characters")
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise InvalidInput(field_name, f"is not a valid URL: {exc}") from exc
    if parts.scheme not in ("http", "https"):
        raise InvalidInput(field_name, "scheme must be http or https")
    if require_https and parts.scheme != "https":
        raise InvalidInput(field_name, "must use https (DISPATCHER_REQUIRE_HTTPS is on)")
    if not parts.hostname:
        raise InvalidInput(field_name, "must include a host")
    if parts.username or parts.password:
        raise InvalidInput(field_name, "must not contain credentials")
    if parts.fragment:
        raise InvalidInput(field_name, "must not contain a fragment")
    if port == 0:
        raise InvalidInput(field_name, "port must be 1..65535")
    # The host must be the one aiohttp (yarl) will dial: a URL two parsers read
    # differently is how SSRF filters get bypassed.
    target = parse_target(value, field_name)
    seen = normalise_host(parts.hostname).replace("%25", "%")
    same_address = target.address is not None and ip_literal(seen) == target.address
    if not same_address and seen not in (target.host.replace("%25", "%"), target.display_host):
        raise InvalidInput(field_name, "is ambiguous: its host reads differently to different URL parsers")
    return value


def reject_unknown(body: dict[str, Any], allowed: set[str], prefix: str) -> None:
    """Refuse the first field of `body` not in `allowed` (`prefix` qualifies its name)."""
    for key in body:
        if key not in allowed:
            name = clean_text(key, 64) or '""'  # a field name is the caller's text: bounded, never empty
            raise InvalidInput(prefix + name, "is not a known field")
