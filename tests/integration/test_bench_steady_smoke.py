"""The steady-traffic bench runs end to end at tiny sizes. Figures are not checked.

Through the API and straight to Kafka, every message of each run arrives once
and in order, and each run reports the worker's CPU and its latencies.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench import steady, suite


async def test_the_steady_scenario_delivers_every_message_of_each_run(tmp_path: Path) -> None:
    result = await asyncio.to_thread(suite.main, ["--quick", "--only", "steady", "--out", str(tmp_path)])
    run = result["steady"]
    assert (run["lost"], run["out_of_order"], run["duplicates"]) == (0, 0, 0)
    assert [(r["path"], r["rate"]) for r in run["runs"]] == [
        (path, rate) for rate in steady.QUICK_RATES for path in steady.PATHS]
    for r in run["runs"]:
        assert r["delivered"] == r["accepted"] == r["sent"] > 0 and r["send_errors"] == 0, r
        assert r["cpu_ms_per_message"] > 0 and r["send_to_receiver"]["n"] == r["sent"]
    assert steady.table_rows(result)[0][0] == "steady: idle worker"

