"""Freed heap goes back to the OS (glibc's malloc_trim), measured on this process's own RSS."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from dispatcher.heap import can_trim, trim_heap

pytestmark = pytest.mark.skipif(not can_trim(), reason="the C library has no malloc_trim")


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_trim_hands_the_free_middle_of_the_heap_back() -> None:
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
    # 64 MiB in 1 KiB blocks (below the mmap threshold: inside the heap), all touched.
    blocks = [libc.malloc(1024) for _ in range(64 * 1024)]
    for block in blocks:
        libc.memset(block, 1, 1024)
    keep = libc.malloc(1024)  # the heap's top stays in use: free() alone cannot shrink it
    for block in blocks:
        libc.free(block)
    before = rss_mb()
    trimmed = trim_heap()
    after = rss_mb()
    libc.free(keep)
    print(f"\nRSS {before:.1f} MB with 64 MiB freed, {after:.1f} MB after malloc_trim")
    assert trimmed
    assert before - after > 32, "most of the freed 64 MiB should have gone back"
