"""The range of every numeric setting, checked when the worker reads its environment.

A value out of range would not fail at start: a tick of 0 raised in the timer wheel once a receiver
first needed a timer, a fetch wait of 0 polled without a pause, a breaker window over 64 made a
receiver's state unsavable, a response cap of gigabytes would be held per request. So each one is
refused up front, naming the variable and the range. The receiver-level bounds of the same knobs (a
receiver's `retry`, `backlog_max`, `batch_max_bytes`) are the worker's bounds too, so a default is
never something a receiver could not be given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .domain.delivery_options import (
    MAX_BACKLOG,
    MAX_BACKLOG_BYTES,
    MAX_BATCH,
    MAX_BATCH_BYTES,
    MIN_BACKLOG_BYTES,
)
from .domain.receiver_spec import MAX_GRACE
from .domain.retry import DAY

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class Bound:
    low: float
    high: float
    low_excluded: bool = False  # a duration that must be more than 0

    def admits(self, value: float) -> bool:
        if not math.isfinite(value) or value > self.high:
            return False
        return value > self.low if self.low_excluded else value >= self.low

    def describe(self) -> str:
        low = f"more than {number(self.low)}" if self.low_excluded else f"at least {number(self.low)}"
        return f"must be {low} and at most {number(self.high)}"


def number(value: float) -> str:
    """A bound or value as an operator would type it: 16777216, 0.001, nan."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def at_least(low: float, high: float) -> Bound:
    return Bound(low, high)


def above(low: float, high: float) -> Bound:
    return Bound(low, high, low_excluded=True)


BOUNDS: dict[str, Bound] = {
    "web_port": at_least(1, 65535),
    "partitions": at_least(1, 10_000),
    "topic_replication": at_least(1, 32_767),
    "topic_min_insync_replicas": at_least(0, 32_767),
    "metrics_top_receivers": at_least(0, 10_000),
    # delivery
    "timeout": above(0, HOUR),
    "connect_timeout": above(0, HOUR),
    # Each POST in flight may hold this much; 4,096 in flight at 16 MiB is 64 GiB already.
    "response_cap": at_least(0, 16 * MIB),
    "dns_timeout": above(0, 600),
    "dns_max_lookups": at_least(1, 4096),
    # receivers
    "secret_grace": at_least(0, MAX_GRACE),
    "ui_session_ttl": at_least(60, 30 * DAY),
    # isolation
    "max_in_flight": at_least(0, 1 << 20),
    "host_limit": at_least(1, 1 << 20),
    "slow_lane_in_flight": at_least(1, 1 << 20),
    "tenant_share": above(0, 1),
    "slow_lane_rate": above(0, 1e6),
    "slow_after_ms": at_least(0, HOUR * 1000),
    # The answers kept are saved with the receiver's state on every change.
    "slow_window": at_least(1, 100),
    "slow_min_samples": at_least(1, 100),
    "slow_timeouts": at_least(1, 10_000),
    "parole_after": at_least(1, 10_000),
    "backlog_max": at_least(1, MAX_BACKLOG),
    "backlog_max_bytes": at_least(MIN_BACKLOG_BYTES, MAX_BACKLOG_BYTES),
    "batch_max_bytes": at_least(1, MAX_BATCH_BYTES),
    # retries, as a receiver's `retry` object allows them (0 attempts: from the schedule)
    "retry_base": at_least(0.001, DAY),
    "retry_cap": at_least(0.001, 30 * DAY),
    "max_attempts": at_least(0, 10_000),
    "max_age": at_least(1, 90 * DAY),
    # breaker and offline receivers
    "breaker_failures": at_least(1, 10_000),
    # The window is a bit mask saved as a 64-bit integer (breaker.py).
    "breaker_window": at_least(1, 64),
    "breaker_ratio": above(0, 1),
    "probe_base": above(0, DAY),
    "probe_cap": above(0, 30 * DAY),
    "disable_after": above(0, 365 * DAY),
    "max_asked_pause": at_least(0, 30 * DAY),
    "attempt_log": at_least(0, 10_000),
    "dead_letters_keep": at_least(0, 10_000_000),
    # The timer wheel refuses a tick of 0, but only once a receiver first needs a timer.
    "timer_resolution": at_least(0.001, 10),
    # intake
    "max_payload": at_least(1, 64 * MIB),
    "max_batch": at_least(1, MAX_BATCH),
    "max_request_body": at_least(1, GIB),
    "max_record_bytes": at_least(64 * KIB, GIB),
    # A record read again after a crash (from the last commit on, however late) is known by its id
    # only while the id is remembered: an hour at least, so a restart after a short outage does.
    "dedup_window": at_least(HOUR, 365 * DAY),
    "retain_seconds": at_least(0, 365 * DAY),
    # the consumer group, the changelog and the event loop
    "session_timeout": above(0, 1800),  # Kafka's group.max.session.timeout.ms, 30 min by default
    "heartbeat_interval": above(0, 600),
    "commit_interval": above(0, HOUR),
    "producer_linger": at_least(0, 60),
    "changelog_linger_ms": at_least(0, 60_000),
    "heap_trim_interval": at_least(0, DAY),
    # 0 would poll without a pause, and the idle back-off doubles from it (fetch_wait.py).
    "fetch_max_wait_ms": at_least(1, 60_000),
    "fetch_idle_wait_ms": at_least(0, 60_000),
    "feed_idle_wait_ms": at_least(0, 60_000),
    "producer_max_batch_bytes": at_least(1, GIB),
    "standby_replicas": at_least(0, 16),
    "table_write_buffer": at_least(64 * KIB, 4 * GIB),
    "table_block_cache": at_least(0, 1 << 40),
}


def out_of_bounds(values: dict[str, float]) -> list[str]:
    """One line per value outside its bound, naming the variable: empty when all are in range."""
    problems = []
    for name, value in values.items():
        bound = BOUNDS[name]
        if not bound.admits(value):
            problems.append(f"DISPATCHER_{name.upper()}={number(value)}: {bound.describe()}")
    return problems
