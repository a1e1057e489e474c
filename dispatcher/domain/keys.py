"""Key layout of the actor table.

Everything about one receiver shares one table so that all of a receiver's
writes go, in order, to one changelog partition. Fixed-width hex numbers keep
each receiver's entries sorted in RocksDB.
"""

from __future__ import annotations

STATE = b"s:"
BACKLOG = b"b:"  # b:<rid>:<seq>        a message: buffered, or settled and kept (an r: mark)
DEDUP = b"d:"  # d:<rid>:<msg id>      the seq a message id got, and when that expires
DEDUP_ORDER = b"i:"  # i:<rid>:<seq>    the msg id of that seq's dedup entry (expiry order)
FILTERED_ORDER = b"f:"  # f:<rid>:<expiry ms>  ids of filtered messages (seq 0 in d:) expiring then
DEAD = b"x:"  # x:<rid>:<seq>          a dead letter, with its message, for listing and replay
ATTEMPT = b"a:"  # a:<rid>:<number>    one entry of the attempt log
RETAINED = b"r:"  # r:<rid>:<seq>      settle time of a message kept in b: a while for catch-up reads
LATEST = b"k:"  # k:<rid>:<key hash>    coalescing: [the newest seq of an ordering key, the key]


def state_key(receiver_id: str) -> bytes:
    return STATE + receiver_id.encode()


def prefix(kind: bytes, receiver_id: str) -> bytes:
    return b"%s%s:" % (kind, receiver_id.encode())


def numbered_key(kind: bytes, receiver_id: str, number: int) -> bytes:
    return b"%s%016x" % (prefix(kind, receiver_id), number)


def number_of(key: bytes) -> int:
    return int(key[-16:], 16)


def backlog_key(receiver_id: str, seq: int) -> bytes:
    return numbered_key(BACKLOG, receiver_id, seq)


def dedup_key(receiver_id: str, msg_id: str) -> bytes:
    return prefix(DEDUP, receiver_id) + msg_id.encode()


def latest_key(receiver_id: str, key_hash: int) -> bytes:
    return numbered_key(LATEST, receiver_id, key_hash)
