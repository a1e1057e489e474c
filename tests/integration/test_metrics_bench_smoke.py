"""bench.metrics_scrape runs end to end at tiny sizes, so it cannot rot. Figures are not checked."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench import metrics_scrape


async def test_metrics_scrape_bench_runs_and_sees_every_failing_receiver(tmp_path: Path) -> None:
    result = await asyncio.to_thread(metrics_scrape.main, ["--quick", "--out", str(tmp_path)])
    assert [p.name.startswith("metrics_scrape-") for p in tmp_path.iterdir()] == [True]
    assert result["exposition"]["by_status"]["retrying"] >= 200
    assert result["exposition"]["receivers_with_series"] == 20  # the top N, whatever the fleet
    assert [run["scraping"] for run in result["paced"]] == [False, True]
    assert all(run["delivered"] == run["accepted"] > 0 for run in result["paced"])
