"""A hierarchical timing wheel: O(1) schedule and cancel, advance(now) → due keys.

Time is cut into ticks of `resolution` seconds. Level L has 256 slots of
256**L ticks each; a timer sits in the lowest level whose revolution reaches
its tick, and moves down one level when its slot's turn comes (cascade). A
timer fires on the first advance whose tick is at or after its due time, never
before: due times round *up* to a tick.

One key has at most one timer; scheduling a key again moves it. The clock is
whatever the caller passes to `advance`, so tests run without sleeping.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

BITS = 8
SLOTS = 1 << BITS
MASK = SLOTS - 1
LEVELS = 5  # 2**40 ticks: centuries at any sensible resolution


class TimingWheel(Generic[K]):
    def __init__(self, now: float, resolution: float = 0.01) -> None:
        if resolution <= 0:
            raise ValueError("resolution must be positive")
        self.resolution = resolution
        self._tick = self._floor(now)  # the last tick processed
        self._levels: list[list[dict[K, tuple[int, float]]]] = [
            [{} for _ in range(SLOTS)] for _ in range(LEVELS)
        ]
        self._counts = [0] * LEVELS
        self._where: dict[K, tuple[int, int]] = {}  # key -> (level, slot); level -1 = ready
        self._ready: dict[K, tuple[int, float]] = {}  # due at or before the current tick

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, key: object) -> bool:
        return key in self._where

    def due_at(self, key: K) -> float | None:
        where = self._where.get(key)
        if where is None:
            return None
        level, slot = where
        bucket = self._ready if level < 0 else self._levels[level][slot]
        return bucket[key][1]

    def schedule(self, key: K, at: float) -> None:
        """Fire `key` at `at` (seconds, same clock as advance); replaces its earlier timer."""
        self.cancel(key)
        self._place(key, self._ceil(at), at)

    def cancel(self, key: K) -> bool:
        where = self._where.pop(key, None)
        if where is None:
            return False
        level, slot = where
        if level < 0:
            del self._ready[key]
        else:
            del self._levels[level][slot][key]
            self._counts[level] -= 1
        return True

    def next_due(self) -> float | None:
        """A lower bound of the next firing time (exact for level 0), for sleeping."""
        if self._ready:
            return self._tick * self.resolution
        for level in range(LEVELS):
            if not self._counts[level]:
                continue
            shift = BITS * level
            base = self._tick >> shift
            for step in range(1, SLOTS + 1):
                if self._levels[level][(base + step) & MASK]:
                    return ((base + step) << shift) * self.resolution
        return None

    def advance(self, now: float) -> list[K]:
        """Process every tick up to `now`; return the keys due, earliest first."""
        target = self._floor(now)
        fired: list[tuple[float, K]] = [(at, key) for key, (_, at) in self._ready.items()]
        for key in self._ready:
            del self._where[key]
        self._ready.clear()
        while self._tick < target:
            empty = 0  # levels 0..empty-1 hold nothing: skip to the next boundary above them
            while empty < LEVELS and not self._counts[empty]:
                empty += 1
            if empty == LEVELS:
                self._tick = target
                break
            shift = BITS * max(empty, 1)
            end = min(target, ((self._tick >> shift) + 1) << shift)
            if not empty:  # walk level 0 slot by slot up to the next cascade point
                level0 = self._levels[0]
                for tick in range(self._tick + 1, end):
                    if level0[tick & MASK]:
                        self._collect(tick & MASK, fired)
            self._tick = end
            if end & MASK == 0:
                self._cascade(end, fired)
            if self._levels[0][end & MASK]:
                self._collect(end & MASK, fired)
        fired.sort(key=lambda pair: pair[0])
        return [key for _, key in fired]

    def _cascade(self, tick: int, fired: list[tuple[float, K]]) -> None:
        """Move the timers whose higher-level slot starts at `tick` down a level."""
        for level in range(LEVELS - 1, 0, -1):
            shift = BITS * level
            if tick & ((1 << shift) - 1):
                continue
            slot = (tick >> shift) & MASK
            bucket = self._levels[level][slot]
            if not bucket:
                continue
            self._levels[level][slot] = {}
            self._counts[level] -= len(bucket)
            for key, (t, at) in bucket.items():
                del self._where[key]
                if t <= tick:
                    fired.append((at, key))
                else:
                    self._place(key, t, at)

    def _collect(self, slot: int, fired: list[tuple[float, K]]) -> None:
        bucket = self._levels[0][slot]
        self._levels[0][slot] = {}
        self._counts[0] -= len(bucket)
        for key, (_, at) in bucket.items():
            del self._where[key]
            fired.append((at, key))

    def _place(self, key: K, t: int, at: float) -> None:
        if t <= self._tick:
            self._ready[key] = (t, at)
            self._where[key] = (-1, 0)
            return
        level = 0
        while level < LEVELS - 1 and (t >> (BITS * level)) - (self._tick >> (BITS * level)) >= SLOTS:
            level += 1
        shift = BITS * level
        # Beyond the top level's reach: park in its last slot and re-place on cascade.
        block = min(t >> shift, (self._tick >> shift) + SLOTS - 1)
        slot = block & MASK
        self._levels[level][slot][key] = (t, at)
        self._counts[level] += 1
        self._where[key] = (level, slot)

    def _floor(self, seconds: float) -> int:
        return math.floor(seconds / self.resolution)

    def _ceil(self, seconds: float) -> int:
        return math.ceil(seconds / self.resolution)
