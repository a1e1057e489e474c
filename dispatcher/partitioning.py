"""Which partition a receiver lives in: Kafka's default partitioner on its id, as producers key it."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from aiokafka.partitioner import murmur2

RECENT = 4096  # receivers whose partition is remembered (murmur2 is pure Python)


def partitioner(partitions: int) -> Callable[[str], int]:
    @lru_cache(maxsize=RECENT)
    def partition_of(receiver_id: str) -> int:
        return (murmur2(receiver_id.encode()) & 0x7FFFFFFF) % partitions

    return partition_of
