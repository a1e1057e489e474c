"""Typed access to the actor table (state, backlog and dedup entries).

Writes must run inside the stream iteration of the receiver's partition (Faust
sends the changelog record to the partition of the current event). Reads work
anywhere on the owning worker.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson

from .domain import keys
from .domain.actor import ReceiverState
from .domain.records import Message, encode_backlog_entry


class ActorStore:
    def __init__(self, table: Any) -> None:
        self._table = table

    def load(self, receiver_id: str) -> ReceiverState | None:
        raw = self._table.data.get(keys.state_key(receiver_id))
        return None if raw is None else ReceiverState.from_bytes(raw)

    def save(self, state: ReceiverState) -> None:
        self._table[keys.state_key(state.receiver_id)] = state.to_bytes()

    def put_backlog(self, receiver_id: str, seq: int, message: Message) -> None:
        self._table[keys.backlog_key(receiver_id, seq)] = encode_backlog_entry(message, seq)

    def get_backlog(self, receiver_id: str, seq: int) -> dict[str, Any] | None:
        raw = self._table.data.get(keys.backlog_key(receiver_id, seq))
        return None if raw is None else orjson.loads(raw)

    def delete_backlog(self, receiver_id: str, seq: int) -> None:
        del self._table[keys.backlog_key(receiver_id, seq)]

    def seen_seq(self, receiver_id: str, msg_id: str, now: float) -> int | None:
        """The seq a message id got within the dedup window, if any."""
        raw = self._table.data.get(keys.dedup_key(receiver_id, msg_id))
        if raw is None:
            return None
        entry = orjson.loads(raw)
        return entry["seq"] if entry["exp"] > now else None

    def remember_id(self, receiver_id: str, msg_id: str, seq: int, expires_at: float) -> None:
        value = orjson.dumps({"seq": seq, "exp": expires_at})
        self._table[keys.dedup_key(receiver_id, msg_id)] = value

    def states_in_partition(self, partition: int) -> Iterator[ReceiverState]:
        """Every receiver state stored in one local partition (for rebuilding timers)."""
        db = self._table.data._db_for_partition(partition)  # Faust has no public per-partition scan
        for key, value in db.items(from_key=keys.STATE):
            if not key.startswith(keys.STATE):
                break
            yield ReceiverState.from_bytes(value)
