"""Identifiers: producer-given message ids, generated ids, receiver ids."""

from __future__ import annotations

import re

from ulid import ULID

from .errors import InvalidInput

_ID_RE = re.compile(r"[A-Za-z0-9_-]{1,128}")


def check_id(value: object, field: str) -> str:
    """Return `value` if it is a valid id (`[A-Za-z0-9_-]{1,128}`), else raise InvalidInput."""
    if not isinstance(value, str) or not _ID_RE.fullmatch(value):
        raise InvalidInput(field, "must match [A-Za-z0-9_-]{1,128}")
    return value


def new_id(prefix: str, ulid: ULID | None = None) -> str:
    """A fresh sortable id such as `msg_01J...` or `rcv_01J...`."""
    return f"{prefix}_{ulid or ULID()}"
