"""The benchmarks run end to end at tiny sizes, so they cannot rot. Figures are not checked."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from bench import isolation


async def test_isolation_bench_runs_and_saves_its_figures(tmp_path: Path) -> None:
    result = await asyncio.to_thread(isolation.main, ["--quick", "--out", str(tmp_path)])
    [saved] = tmp_path.glob("isolation-*.json")
    assert orjson.loads(saved.read_bytes())["fast_alone"]["n"] == result["fast_alone"]["n"] > 0
    assert result["fast_with_bad"]["n"] > 0 and result["bad_receivers"] == 2
