"""Backoff, wake timers, settings and the pure-domain import boundary."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from dispatcher.domain.backoff import Backoff
from dispatcher.settings import Settings, SettingsError
from dispatcher.timers import WakeTimers


@pytest.mark.parametrize(
    ("attempts", "rand", "expected"),
    [(1, 0.5, 1.0), (2, 0.5, 2.0), (4, 0.5, 8.0), (10, 0.5, 30.0), (1, 0.0, 0.8), (1, 0.999999, 1.2)],
)
def test_backoff(attempts: int, rand: float, expected: float) -> None:
    assert Backoff(base=1.0, cap=30.0, jitter=0.2).delay(attempts, rand) == pytest.approx(expected, abs=1e-5)


async def _never(rid: str, partition: int) -> None:
    raise AssertionError("not fired in this test")


def test_wake_timers_fire_in_due_order_and_earliest_wins() -> None:
    timers = WakeTimers(_never, clock=lambda: 0.0)
    timers.schedule("a", 0, 5.0)
    timers.schedule("b", 1, 3.0)
    timers.schedule("a", 0, 9.0)  # later than pending: ignored
    timers.schedule("c", 2, 4.0)
    timers.schedule("c", 2, 1.0)  # earlier: replaces
    assert timers.pop_due(2.0) == [("c", 2)]
    assert timers.pop_due(10.0) == [("b", 1), ("a", 0)]
    assert len(timers) == 0


def test_wake_timers_drop_revoked_partitions() -> None:
    timers = WakeTimers(_never, clock=lambda: 0.0)
    for i in range(6):
        timers.schedule(f"r{i}", i % 3, float(i))
    timers.drop_partitions({1})
    assert [rid for rid, _ in timers.pop_due(100.0)] == ["r0", "r2", "r3", "r5"]


async def test_a_failing_wake_up_does_not_stop_the_others() -> None:
    fired: list[str] = []
    good_fired = asyncio.Event()

    async def fire(rid: str, partition: int) -> None:
        fired.append(rid)
        if rid == "bad":
            raise RuntimeError("corrupt state")
        good_fired.set()

    timers = WakeTimers(fire, clock=lambda: 1e9)  # everything is due at once
    timers.schedule("bad", 0, 1.0)
    timers.schedule("good", 0, 2.0)
    task = asyncio.create_task(timers.run(max_sleep=0.01))
    try:
        await asyncio.wait_for(good_fired.wait(), timeout=5)
        assert not task.done(), "the loop ended"
    finally:
        task.cancel()
    assert fired == ["bad", "good"]


def test_settings_from_env() -> None:
    s = Settings.from_env(
        {"DISPATCHER_WEB_PORT": "9000", "DISPATCHER_REQUIRE_HTTPS": "no", "DISPATCHER_TIMEOUT": "2.5"},
        require_https=True,
    )
    assert (s.web_port, s.require_https, s.timeout) == (9000, False, 2.5)
    with pytest.raises(SettingsError, match="DISPATCHER_PARTITIONS"):
        Settings.from_env({"DISPATCHER_PARTITIONS": "many"})
    with pytest.raises(SettingsError, match="DISPATCHER_REQUIRE_HTTPS"):
        Settings.from_env({"DISPATCHER_REQUIRE_HTTPS": "maybe"})


FORBIDDEN = {"faust", "aiohttp", "rocksdict", "mode", "aiokafka", "time", "random", "asyncio"}


def test_domain_imports_no_io() -> None:
    """domain/ stays pure: no Faust, HTTP, RocksDB, clock or randomness."""
    domain = Path(__file__).parents[2] / "dispatcher" / "domain"
    for path in domain.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"
