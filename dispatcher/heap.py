"""Giving the heap that bursts leave behind back to the OS.

glibc keeps what Python and RocksDB free inside its heap, and a burst (a
registration of 100,000 receivers, a recovery, a drained backlog) leaves tens
of MB there that an idle worker never touches again (docs/benchmarks.md,
"Figures behind the code"). The worker calls it every `DISPATCHER_HEAP_TRIM_INTERVAL` seconds, in a
thread (it walks the free lists; ctypes lets go of the GIL, so the event loop
goes on). Where the C library has no `malloc_trim` (musl, macOS) nothing
happens.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
from collections.abc import Awaitable, Callable

from mode import Service

log = logging.getLogger(__name__)


def _find_malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own C library
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


_MALLOC_TRIM = _find_malloc_trim()


def can_trim() -> bool:
    return _MALLOC_TRIM is not None


def trim_heap() -> bool:
    """Return the heap's free pages to the OS; True if any were."""
    return _MALLOC_TRIM is not None and _MALLOC_TRIM(0) == 1


class HeapTrimmer(Service):
    """Trims the heap every `interval` seconds while started (0: never)."""

    def __init__(self, interval: float, sleep: Callable[[float], Awaitable[None]] | None = None) -> None:
        super().__init__()
        self.interval = interval
        self.trims = 0
        self._sleep = sleep or self.sleep  # the service's own sleep ends early at stop

    async def on_start(self) -> None:
        if self.interval <= 0 or not can_trim():
            log.info("heap trimming off (interval %s s, malloc_trim %s)", self.interval, can_trim())
            return
        self.add_future(self._trimming())

    async def _trimming(self) -> None:
        while not self.should_stop:
            await self._sleep(self.interval)
            if not self.should_stop:
                await asyncio.to_thread(trim_heap)
                self.trims += 1
