"""Every numeric setting has a range; a value outside it stops the worker naming the variable."""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from dispatcher.domain.actor.state import ReceiverState
from dispatcher.domain.breaker import Breaker
from dispatcher.domain.records import ReceiverConfig
from dispatcher.settings import Settings, SettingsError
from dispatcher.settings_bounds import BOUNDS, Bound


def _numeric_fields() -> set[str]:
    values = {f.name: getattr(Settings(), f.name) for f in fields(Settings)}
    return {name for name, value in values.items()
            if isinstance(value, int | float) and not isinstance(value, bool)}


def test_every_numeric_setting_has_a_range_and_its_default_is_in_it() -> None:
    assert set(BOUNDS) == _numeric_fields()
    Settings().check_ranges()
    Settings.from_env({})


def _variable(name: str) -> str:
    return "DISPATCHER_" + name.upper()


def _text(name: str, value: float) -> str:
    return str(int(value)) if isinstance(getattr(Settings(), name), int) else repr(float(value))


def _outside(name: str, bound: Bound) -> list[float]:
    whole = isinstance(getattr(Settings(), name), int)
    step = 1 if whole else bound.high * 1e-6
    below = [bound.low] if bound.low_excluded else [bound.low - (1 if whole else max(bound.low * 0.5, 1e-9))]
    return [*below, bound.high + step]


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_each_end_of_a_range_is_taken_and_a_step_past_it_is_refused(name: str) -> None:
    bound = BOUNDS[name]
    ends = [bound.high] if bound.low_excluded else [bound.low, bound.high]
    # The other settings stay valid around an end (heartbeat below session, samples within the window).
    context = {"DISPATCHER_SESSION_TIMEOUT": "1800", "DISPATCHER_HEARTBEAT_INTERVAL": "1",
               "DISPATCHER_SLOW_WINDOW": "100", "DISPATCHER_SLOW_MIN_SAMPLES": "1",
               "DISPATCHER_TOPIC_REPLICATION": "32767"}
    if name == "session_timeout":
        context["DISPATCHER_HEARTBEAT_INTERVAL"] = "0.0001"
    if name == "topic_replication":
        context["DISPATCHER_TOPIC_MIN_INSYNC_REPLICAS"] = "1"
    for value in ends:
        env = {**context, _variable(name): _text(name, value)}
        assert getattr(Settings.from_env(env), name) == pytest.approx(value)
    for value in _outside(name, bound):
        with pytest.raises(SettingsError, match=f"^{_variable(name)}=.*must be") as raised:
            Settings.from_env({**context, _variable(name): _text(name, value)})
        assert len(str(raised.value).splitlines()) == 1


@pytest.mark.parametrize("name", sorted(n for n in BOUNDS if isinstance(getattr(Settings(), n), float)))
@pytest.mark.parametrize("text", ["nan", "inf", "-inf"])
def test_a_float_setting_must_be_a_finite_number(name: str, text: str) -> None:
    with pytest.raises(SettingsError, match=f"{_variable(name)}={text.lstrip('-').replace('inf', '-?inf')}"):
        Settings.from_env({_variable(name): text})
    assert not BOUNDS[name].admits(math.nan)


def test_settings_that_depend_on_each_other_are_checked_together() -> None:
    with pytest.raises(SettingsError, match="DISPATCHER_HEARTBEAT_INTERVAL=10: must be less than "
                                            r"DISPATCHER_SESSION_TIMEOUT \(10\)"):
        Settings.from_env({"DISPATCHER_HEARTBEAT_INTERVAL": "10"})
    samples = r"DISPATCHER_SLOW_MIN_SAMPLES=11: must be at most DISPATCHER_SLOW_WINDOW \(10\)"
    with pytest.raises(SettingsError, match=samples):
        Settings.from_env({"DISPATCHER_SLOW_MIN_SAMPLES": "11"})
    with pytest.raises(SettingsError, match=r"DISPATCHER_TOPIC_MIN_INSYNC_REPLICAS=2: must be at most "
                                            r"DISPATCHER_TOPIC_REPLICATION \(1\)"):
        Settings.from_env({"DISPATCHER_TOPIC_MIN_INSYNC_REPLICAS": "2"})
    Settings.from_env({"DISPATCHER_TOPIC_MIN_INSYNC_REPLICAS": "2", "DISPATCHER_TOPIC_REPLICATION": "3"})


def test_every_value_out_of_range_is_named_at_once() -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({"DISPATCHER_TIMER_RESOLUTION": "0", "DISPATCHER_RESPONSE_CAP": "-1"})
    assert "DISPATCHER_TIMER_RESOLUTION=0: must be at least 0.001 and at most 10" in str(raised.value)
    assert "DISPATCHER_RESPONSE_CAP=-1: must be at least 0 and at most 16777216" in str(raised.value)


def test_a_worker_with_a_setting_out_of_range_stops_with_one_line_and_exit_2(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "DISPATCHER_API_TOKEN": "t" * 32, "DISPATCHER_TIMER_RESOLUTION": "0",
           "DISPATCHER_DATA_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "dispatcher", "worker"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2, done
    assert done.stderr == ("configuration error: DISPATCHER_TIMER_RESOLUTION=0: "
                           "must be at least 0.001 and at most 10\n")


def test_the_widest_breaker_window_still_saves_with_the_receivers_state() -> None:
    widest = int(BOUNDS["breaker_window"].high)
    env = {"DISPATCHER_BREAKER_WINDOW": str(widest), "DISPATCHER_BREAKER_FAILURES": "10000",
           "DISPATCHER_BREAKER_RATIO": "1"}
    policy = Settings.from_env(env).policy()
    breaker = Breaker()
    for n in range(3 * widest):  # every bit of the window set: the widest mask the state holds
        breaker = breaker.record(n == 0, 0.0, policy.breaker)
    assert breaker.recent == (1 << widest) - 1
    state = ReceiverState("r1", ReceiverConfig("r1", "https://example.com/x", "whsec_" + "A" * 32),
                          breaker=breaker)
    assert ReceiverState.from_bytes(state.to_bytes()).breaker == breaker
