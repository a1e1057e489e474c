"""The issue 28 benches run end to end at tiny sizes. Figures are not checked.

The suite's scenarios of bench/perf2.py (HTTPS with a test CA, 100 origins, one
and two workers, a restart under a paced stream, a scale-down from two workers
to one without and with standby copies) each deliver every message once and in
order; bench/group_timings.py times each consumer-group case.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from bench import group_timings, idle_polls, perf2, suite


async def test_tls_hosts_workers_restart_and_handover_scenarios_lose_nothing(tmp_path: Path) -> None:
    result = await asyncio.to_thread(
        suite.main, ["--quick", "--only", ",".join(perf2.SCENARIOS), "--out", str(tmp_path)])
    assert set(perf2.SCENARIOS) <= set(result)
    for name in ("tls", "hosts"):
        drain = result[name]["drain"]
        assert (drain["lost"], drain["out_of_order"]) == (0, 0)
        assert drain["runs"][0]["delivered"] == drain["messages"]
        assert result[name]["ceiling"]["per_s"]["median"] > 0
        assert result[name]["latency"]["delivered"] == result[name]["latency"]["sent"]
    assert result["hosts"]["origins"] >= 100
    workers = result["workers"]
    for key in ("one", "two"):
        assert (workers[key]["lost"], workers[key]["out_of_order"]) == (0, 0)
        assert workers[key]["runs"][0]["delivered"] == workers[key]["messages"]
    assert workers["two"]["runs"][0]["workers"] == 2
    for kind in ("dynamic", "static"):
        restart = result["restart"][kind]
        assert (restart["lost"], restart["out_of_order"]) == (0, 0)
        [run] = restart["runs"]
        assert run["delivered"] == run["sent"] > 0 and run["stop_to_next_delivery_s"] is not None
    for standby in (0, 1):
        handover = result["handover"][f"standby_{standby}"]
        assert (handover["lost"], handover["out_of_order"]) == (0, 0)
        [run] = handover["runs"]
        assert run["standby_replicas"] == standby and run["partitions_moved"]
        assert run["delivered"] == run["history"] + run["sent"] and run["sent"] > 0
        assert run["stop_to_every_moved_partition_s"] is not None, "the survivor took every partition over"


async def test_the_group_timings_bench_times_every_case(tmp_path: Path) -> None:
    result = await asyncio.to_thread(group_timings.main, ["--quick", "--out", str(tmp_path)])
    [saved] = tmp_path.glob("group-timings-*.json")
    [found] = orjson.loads(saved.read_bytes())["seconds_to_assignment"].values()
    assert found == next(iter(result["seconds_to_assignment"].values()))
    assert set(found) == {"new_group", "after_a_stop_without_leave", "after_a_leave", "static_first",
                          "static_again"}
    assert all(seconds > 0 for seconds in found.values())


async def test_the_idle_bench_measures_the_broker_and_both_workers() -> None:
    result = await idle_polls.measure(settle=1.0, seconds=1.0, receivers=20)
    assert set(result["cores"]) == {"broker", "worker_1", "worker_2"}
    assert all(cores >= 0 for cores in result["cores"].values())
    assert result["cores"]["broker"] > 0, "two workers' polls keep the broker busy"
