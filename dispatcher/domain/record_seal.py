"""The seal that lets a worker trust the worker-only fields of a requests-topic record.

Producers and workers write the same requests topic. A fan-out copy (`from_event`, `time_note`) and
a replay or resend (`replay_of`) pass the receiver's content filter without being matched again, and
`replay_of` speaks for the dispatcher (the `webhook-replay-of` header). A producer's record that
claimed them would walk past the filter a receiver set. So a worker seals each record it writes
there: a keyed BLAKE2b MAC of the receiver id and the value, under a key drawn from the API token
every worker of the group is given (BLAKE2b: a fifth to a third of HMAC-SHA256's CPU here, on each
fan-out copy). A record whose seal is missing or wrong has those fields dropped and is taken as the
producer's plain message it is.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping

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
    """Whether a record's value sets any field only a worker may set."""
    return data.get("replay_of") is not None or data.get("from_event") is True or "time_note" in data
