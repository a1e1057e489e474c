"""The seal that lets a worker trust the worker-only fields of a requests-topic record.

Producers and workers write the same requests topic. A fan-out copy (`from_event`, `time_note`) and
a replay or resend (`replay_of`) pass the receiver's content filter without being matched again, and
`replay_of` speaks for the dispatcher (the `webhook-replay-of` header). A producer's record that
claimed them would walk past the filter a receiver set. So a worker seals each record it writes
there: a keyed BLAKE2b MAC of the receiver id and the value, under a key drawn from the API token
every worker of the group is given (BLAKE2b: under half of HMAC-SHA256's CPU, on each fan-out copy;
README, "Producing straight to Kafka"). A record whose seal is missing or wrong has those fields
dropped and is taken as the producer's plain message it is; one that takes an id of the dispatcher's
own forms goes by the id of its own position instead.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

SEAL_HEADER = "webhook-dispatcher-seal"
WORKER_ONLY_FIELDS = ("replay_of", "from_event", "time_note")
_KEY_LABEL = b"webhook-dispatcher requests-record seal v1"


def seal_key(api_token: str) -> bytes:
    """The group's sealing key (once, at start); the token itself never keys anything another party sees."""
    return hmac.new(api_token.encode(), _KEY_LABEL, hashlib.sha256).digest()


def seal(key: bytes, receiver_id: str, value: bytes) -> bytes:
    """The seal of one record: its key (the receiver id, length-prefixed) and value, so it fits no
    other record."""
    rid = receiver_id.encode()
    mac = hashlib.blake2b(len(rid).to_bytes(4, "big"), key=key, digest_size=16)
    mac.update(rid)
    mac.update(value)
    return mac.hexdigest().encode()


def is_sealed(key: bytes, receiver_id: str, value: bytes,
              headers: Mapping[str, bytes] | Iterable[tuple[str, bytes]] | None) -> bool:
    """Whether the record carries this group's seal (the first seal header counts)."""
    if not headers:
        return False
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    given = next((v for k, v in pairs if k == SEAL_HEADER), None)
    return isinstance(given, bytes) and hmac.compare_digest(given, seal(key, receiver_id, value))


def claims_worker_fields(data: Mapping[str, object]) -> bool:
    """Whether a record's value sets a field, or takes an id, only a worker's record may."""
    return (data.get("replay_of") is not None or data.get("from_event") is True or "time_note" in data
            or is_reserved_id(data.get("id")))


def is_reserved_id(value: object) -> bool:
    """An id of the forms the dispatcher gives: an event's copy (`copy_id`) and an id-less record
    (`kafka_<partition>_<offset>`). A producer's record that took one first would make the real one
    a duplicate, dropped, with the producer's payload delivered under its id."""
    return isinstance(value, str) and _RESERVED_ID.fullmatch(value) is not None


_RESERVED_ID = re.compile(r"evt_[0-9a-f]{24}|kafka_[0-9]+_[0-9]+")
RESERVED_CLAIMS = (*WORKER_ONLY_FIELDS, "an evt_ or kafka_ id")


def without_unvouched_claims(data: dict[str, Any], vouched: Callable[[], bool]) -> dict[str, Any]:
    """A record's fields as a producer's record may set them, unless `vouched()` (asked only of a
    record that claims more) says a worker wrote it: worker-only fields dropped, and a reserved id
    too, so the record goes by its own position's id (`kafka_<partition>_<offset>`, which no other
    record has). Not refused: a worker's record sealed under another token, or written before
    seals, is still delivered."""
    if not claims_worker_fields(data) or vouched():
        return data
    reserved = is_reserved_id(data.get("id"))
    return {k: v for k, v in data.items() if k not in WORKER_ONLY_FIELDS and not (reserved and k == "id")}
