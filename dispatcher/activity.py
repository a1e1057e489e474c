"""What this worker did lately, for the developer UI: its newest attempts (the live tail) and
per-minute counts of attempts and dead letters (the overview).

Memory is fixed: a ring of the newest attempts and one bucket per minute for an hour. Nothing
here is durable or shared between workers; the tables hold the history.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import orjson

RECENT = 500  # attempts kept for the live tail
MINUTES = 60  # per-minute buckets kept (the overview shows the last hour of dead letters)


class Activity:
    """The newest attempts, numbered from 1 in the order this worker logged them, and minute counts."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._recent: deque[tuple[int, str, bytes]] = deque(maxlen=RECENT)
        self._number = 0
        # minute (epoch // 60) -> [attempts ok, attempts failed, dead letters]
        self._minutes: dict[int, list[int]] = {}
        self._changed = asyncio.Event()

    def attempt(self, receiver_id: str, record: bytes) -> None:
        """An attempt the actor logged (its attempt-log record, kept as bytes until read)."""
        self._number += 1
        self._recent.append((self._number, receiver_id, record))
        ok = b'"ok":true' in record  # orjson's fixed spelling: no decode on the delivery path
        self._bucket()[0 if ok else 1] += 1
        self._changed.set()
        self._changed = asyncio.Event()

    def dead_letter(self, receiver_id: str, record: bytes) -> None:
        self._bucket()[2] += 1

    def _bucket(self) -> list[int]:
        minute = int(self._clock() // 60)
        bucket = self._minutes.get(minute)
        if bucket is None:
            bucket = self._minutes[minute] = [0, 0, 0]
            for old in [m for m in self._minutes if m <= minute - MINUTES]:
                del self._minutes[old]
        return bucket

    def since(self, after: int) -> tuple[int, list[dict[str, Any]]]:
        """Attempts numbered above `after` still kept, oldest first, and the newest number."""
        found = [{**orjson.loads(record), "receiver_id": rid, "tail_number": n}
                 for n, rid, record in self._recent if n > after]
        return self._number, found

    async def wait_since(self, after: int, wait: float) -> tuple[int, list[dict[str, Any]]]:
        """As `since`, waiting at most `wait` s for an attempt above `after` when there is none yet."""
        if self._number <= after:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), wait)
        return self.since(after)

    def figures(self, minutes: int = 15) -> dict[str, Any]:
        """Per minute for the last `minutes` (oldest first): attempts ok and failed, dead letters; and
        the dead letters of the last hour."""
        now = int(self._clock() // 60)
        rows = []
        for minute in range(now - minutes + 1, now + 1):
            ok, failed, dead = self._minutes.get(minute, (0, 0, 0))
            rows.append({"minute": minute * 60, "ok": ok, "failed": failed, "dead_letters": dead})
        hour = sum(b[2] for m, b in self._minutes.items() if m > now - MINUTES)
        return {"minutes": rows, "dead_letters_last_hour": hour}
