"""Key layout of the actor table.

State, backlog and dedup entries of one receiver share one table so that all of
a receiver's writes go, in order, to one changelog partition.
"""

from __future__ import annotations

STATE = b"s:"
BACKLOG = b"b:"
DEDUP = b"d:"


def state_key(receiver_id: str) -> bytes:
    return STATE + receiver_id.encode()


def backlog_key(receiver_id: str, seq: int) -> bytes:
    # Fixed-width hex keeps one receiver's backlog sorted by seq in RocksDB.
    return b"%s%s:%016x" % (BACKLOG, receiver_id.encode(), seq)


def dedup_key(receiver_id: str, msg_id: str) -> bytes:
    return b"%s%s:%s" % (DEDUP, receiver_id.encode(), msg_id.encode())
