"""Partition timers, settings and the pure-domain import boundary."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from dispatcher.settings import Settings, SettingsError
from dispatcher.timers import PartitionTimers


async def _never(rid: str, partition: int) -> None:
    raise AssertionError("not fired in this test")


def test_partition_timers_hold_one_timer_per_receiver() -> None:
    timers = PartitionTimers(_never, clock=lambda: 0.0)
    timers.set("a", 0, 5.0)
    timers.set("b", 1, 3.0)
    timers.set("a", 0, 9.0)  # moves a's timer
    timers.set("c", 2, 4.0)
    timers.set("c", 2, None)  # cancels
    assert len(timers) == 2
    assert timers.pop_due(5.0) == [("b", 1)]
    assert timers.pop_due(10.0) == [("a", 0)]
    assert len(timers) == 0


def test_partition_timers_drop_revoked_partitions() -> None:
    timers = PartitionTimers(_never, clock=lambda: 0.0)
    for i in range(6):
        timers.set(f"r{i}", i % 3, float(i))
    timers.drop_partitions({1})
    assert sorted(rid for rid, _ in timers.pop_due(100.0)) == ["r0", "r2", "r3", "r5"]


async def test_a_failing_wake_up_does_not_stop_the_others() -> None:
    fired: list[str] = []
    good_fired = asyncio.Event()

    async def fire(rid: str, partition: int) -> None:
        fired.append(rid)
        if rid == "bad":
            raise RuntimeError("corrupt state")
        good_fired.set()

    clock = [0.0]
    timers = PartitionTimers(fire, clock=lambda: clock[0])
    timers.set("bad", 0, 1.0)
    timers.set("good", 0, 2.0)
    clock[0] = 1e9  # everything is due at once
    task = asyncio.create_task(timers.run(max_sleep=0.01))
    try:
        await asyncio.wait_for(good_fired.wait(), timeout=5)
        assert not task.done(), "the loop ended"
    finally:
        task.cancel()
    assert fired == ["bad", "good"]


async def test_the_timer_loop_is_woken_only_by_a_timer_due_before_it_wakes_anyway() -> None:
    timers = PartitionTimers(_never, clock=lambda: 0.0)
    sleeps = []
    sleep_for = timers._sleep_for
    timers._sleep_for = lambda max_sleep: sleeps.append(max_sleep) or sleep_for(max_sleep)  # type: ignore[method-assign]

    async def loop_turns(turns: int) -> None:
        for _ in range(turns):
            await asyncio.sleep(0)

    task = asyncio.create_task(timers.run(max_sleep=60.0))  # asleep until t=60: no timers yet
    try:
        await loop_turns(20)
        assert len(sleeps) == 1
        timers.set("late", 0, 100.0)  # every command sets its receiver's timer, mostly far ahead
        await loop_turns(20)
        assert len(sleeps) == 1, "a timer due after the loop wakes anyway woke it"
        timers.set("soon", 0, 0.5)
        await loop_turns(20)
        assert len(sleeps) == 2, "a timer due before the loop wakes must wake it to sleep less"
    finally:
        task.cancel()


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
    with pytest.raises(SettingsError, match="DISPATCHER_RETRY_SCHEDULE"):
        Settings.from_env({"DISPATCHER_RETRY_SCHEDULE": "5s,often"}).policy()


def test_event_loop_setting_picks_the_loop() -> None:
    import uvloop

    from dispatcher.event_loop import new_event_loop

    policy = asyncio.get_event_loop_policy()
    try:
        before: asyncio.AbstractEventLoop | None = policy.get_event_loop()
    except RuntimeError:  # an earlier asyncio.run() (the CLI's, run in-process) left none set
        before = None
    try:
        for name, kind in (("uvloop", uvloop.Loop), ("asyncio", asyncio.BaseEventLoop)):
            loop = new_event_loop(name)
            try:
                assert isinstance(loop, kind)
                assert (name == "uvloop") == isinstance(loop, uvloop.Loop)
                assert asyncio.get_event_loop_policy().get_event_loop() is loop
                assert loop.run_until_complete(asyncio.sleep(0, result=name)) == name
                # The loop Faust's consumer thread makes for itself is of the same kind.
                other = asyncio.new_event_loop()
                assert (name == "uvloop") == isinstance(other, uvloop.Loop)
                other.close()
            finally:
                loop.close()
        with pytest.raises(SettingsError, match="DISPATCHER_EVENT_LOOP='trio'"):
            new_event_loop("trio")
    finally:
        asyncio.set_event_loop_policy(policy)
        asyncio.set_event_loop(before)


def test_http_client_setting_names_the_transport() -> None:
    from dispatcher.http1 import Http1Transport
    from dispatcher.transport import AiohttpTransport
    from dispatcher.worker import http_client

    assert http_client(Settings().http_client) is Http1Transport
    fallback = Settings.from_env({"DISPATCHER_HTTP_CLIENT": "aiohttp"}).http_client
    assert http_client(fallback) is AiohttpTransport
    with pytest.raises(SettingsError, match="DISPATCHER_HTTP_CLIENT='curl'"):
        http_client("curl")


def test_policy_from_settings() -> None:
    env = {"DISPATCHER_RETRY_SCHEDULE": "1s,2s", "DISPATCHER_PROBE_BASE": "0.5"}
    policy = Settings.from_env(env).policy()
    assert policy.retry.schedule == (1.0, 2.0) and policy.retry.max_attempts == 3
    assert policy.breaker.probe_base == 0.5
    assert Settings().policy().retry.max_attempts == 11


DOMAIN = Path(__file__).parents[2] / "dispatcher" / "domain"
FORBIDDEN = {"faust", "aiohttp", "rocksdict", "mode", "aiokafka", "time", "random", "asyncio"}


def test_domain_imports_no_io() -> None:
    """domain/ stays pure: no Faust, HTTP, RocksDB, clock or randomness."""
    paths = sorted(DOMAIN.rglob("*.py"))
    assert DOMAIN / "actor" / "decide.py" in paths  # subpackages are scanned too
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{path.relative_to(DOMAIN)} imports {name}"


MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 40


def test_domain_modules_and_functions_stay_small() -> None:
    """Every module of domain/ (subpackages too) has at most 400 lines, every function or method 40."""
    too_long = []
    for path in sorted(DOMAIN.rglob("*.py")):
        text = path.read_text()
        name = path.relative_to(DOMAIN)
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            too_long.append(f"{name}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    assert not too_long, f"over the limits: {too_long}"
