"""The issue 28 scenarios of the suite (bench/perf2.py) run end to end at tiny sizes. Figures are not checked.

HTTPS with a test CA, 100 origins, one and two workers, and a restart under a
paced stream: each delivers every message once and in order.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench import perf2, suite


async def test_tls_hosts_workers_and_restart_scenarios_lose_nothing(tmp_path: Path) -> None:
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
