"""The benchmarks run end to end at tiny sizes, so they cannot rot. Figures are not checked."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from bench import dead_letter_expiry, engine, http_clients, isolation, suite


async def test_isolation_bench_runs_and_saves_its_figures(tmp_path: Path) -> None:
    policy = asyncio.get_event_loop_policy()
    result = await asyncio.to_thread(isolation.main, ["--quick", "--out", str(tmp_path)])
    # The bench's uvloop policy is put back: later tests' subprocesses (Playwright's) need asyncio's.
    assert asyncio.get_event_loop_policy() is policy
    [saved] = tmp_path.glob("isolation-*.json")
    assert orjson.loads(saved.read_bytes())["fast_alone"]["n"] == result["fast_alone"]["n"] > 0
    assert result["fast_with_bad"]["n"] > 0 and result["bad_receivers"] == 2


async def test_dead_letter_expiry_bench_expires_the_whole_backlog(tmp_path: Path) -> None:
    result = await asyncio.to_thread(dead_letter_expiry.main, ["--quick", "--out", str(tmp_path)])
    [saved] = tmp_path.glob("dead_letter_expiry-*.json")
    assert orjson.loads(saved.read_bytes())["expired"] == result["expired"] == 100
    assert result["healthy_alone"]["n"] > 0 and result["healthy_during_expiry"]["n"] > 0
    assert result["dead_lettered"] == 150  # 50 refused at once, 100 expired


async def test_the_suite_runs_every_scenario_and_loses_nothing(tmp_path: Path) -> None:
    result = await asyncio.to_thread(suite.main, ["--quick", "--out", str(tmp_path)])
    [saved] = tmp_path.glob("suite-*.json")
    assert orjson.loads(saved.read_bytes())["drain"]["per_s"] == result["drain"]["per_s"]
    assert set(suite.SCENARIOS) <= set(result)
    drain = result["drain"]
    assert (drain["lost"], drain["out_of_order"]) == (0, 0)
    assert drain["runs"][0]["delivered"] == drain["messages"]
    # Read from the broker's changelog offsets: each delivery wrote at least its message's backlog
    # entry and its attempt (two keys no later write replaces); the registration's writes, made
    # before the drain, are not counted.
    assert 2 <= drain["runs"][0]["changelog_records_per_delivery"] < 20
    floor = result["floor"]  # the same records POSTed by a bare consumer: each once, in order
    assert (floor["lost"], floor["out_of_order"], floor["runs"][0]["delivered"]) == (0, 0, floor["messages"])
    assert drain["cpu_above_floor_s_per_1000"] == round(
        drain["cpu_s_per_1000"]["median"] - floor["cpu_s_per_1000"]["median"], 3)
    assert result["latency"]["delivered"] == result["latency"]["sent"]
    events = result["events"]
    assert events["accepted"] == events["events"] and events["delivered"] == events["copies"] > 0
    assert result["memory"]["backlog"]["taken_in"]
    # Recovery reports what it saw within its bound (the first delivery after kill -9 has been
    # seen to take from 13 s to over 60 s; see the issue): here only that both variants ran.
    assert {"dynamic", "static"} <= set(result["recovery"])
    assert all(result["recovery"][kind]["all_partitions_recovered_after_kill_s"] > 0
               for kind in ("dynamic", "static"))


async def test_two_workers_drain_the_backlog_together(tmp_path: Path) -> None:
    result = await asyncio.to_thread(suite.main, ["--quick", "--only", "drain", "--workers", "2",
                                                  "--out", str(tmp_path)])
    drain = result["drain"]
    assert drain["workers"] == 2
    assert (drain["lost"], drain["out_of_order"]) == (0, 0)
    assert drain["runs"][0]["delivered"] == drain["messages"]


async def test_the_http_client_bench_posts_through_each_client(tmp_path: Path) -> None:
    result = await asyncio.to_thread(http_clients.main, ["--quick", "--out", str(tmp_path)])
    [saved] = tmp_path.glob("http-clients-*.json")
    assert orjson.loads(saved.read_bytes())["median"] == result["median"]
    assert set(result["median"]) == set(http_clients.CLIENTS)  # every POST answered 200, or it raised
    assert all(m["per_s"] > 0 and m["cpu_s_per_1000"] > 0 for m in result["median"].values())


async def test_the_engine_bench_delivers_every_message_in_order(tmp_path: Path) -> None:
    result = await asyncio.to_thread(engine.main, ["--quick", "--out", str(tmp_path)])
    [saved] = tmp_path.glob("engine-*.json")
    assert orjson.loads(saved.read_bytes())["median"] == result["median"]
    [one] = result["rounds"]
    assert one["messages"] == result["receivers"] * result["per_receiver"] > 0
    assert (one["delivered"], one["out_of_order"]) == (one["messages"], 0)
    # every message is stored (its 1 KiB payload at least once) with its dedup entry and a state
    assert one["table_puts"] >= 3 and one["table_bytes"] > 1024
