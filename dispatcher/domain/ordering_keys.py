"""A message's ordering key: what a key-ordered receiver (`"ordering": "key"`) keeps in order.

Messages with the same key go in seq order; messages with different keys go
side by side. A key is the producer's text (an account id, an order id), so it
is checked like any value from outside; the actor keeps only its 63-bit hash
in the state (`Slot.key`): a state write carries a number, not up to 128
characters per message out. Two keys with one hash would only be kept in
order together, never sent out of order.
"""

from __future__ import annotations

from hashlib import blake2b

from .errors import InvalidInput

MAX_KEY_LEN = 128
NO_KEY = 0  # a message without a key is ordered with no other (as with ordering "none")


def check_ordering_key(value: object, field_name: str) -> str:
    """A key from outside: "" when absent (None or ""), else 1..128 printable characters."""
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_KEY_LEN:
        raise InvalidInput(field_name, f"must be a string of at most {MAX_KEY_LEN} characters")
    if not value.isprintable():
        raise InvalidInput(field_name, "must not contain control or other unprintable characters")
    return value


def key_hash(key: str | None) -> int:
    """The key's number in the state: a stable 63-bit hash (never 0), or NO_KEY for none.

    Stable across processes and versions (Python's own str hash is salted per
    process), since a state written by one worker is read by another.
    """
    if not key:
        return NO_KEY
    number = int.from_bytes(blake2b(key.encode(), digest_size=8).digest(), "big") >> 1
    return number or 1
