"""bench.adaptive runs end to end at tiny sizes, so it cannot rot. Figures are not checked, counts are."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench import adaptive


async def test_adaptive_bench_runs_every_setup_and_delivers_everything(tmp_path: Path) -> None:
    result = await asyncio.to_thread(adaptive.main, ["--quick", "--out", str(tmp_path)])
    assert [p.name.startswith("adaptive-") for p in tmp_path.iterdir()] == [True]
    runs = result["runs"]
    assert {(r["receiver"], r["setup"]) for r in runs} == {
        (kind, setup) for kind in ("refusing", "queueing") for setup in adaptive.SETUPS
    }
    assert all(r["delivered"] == result["sizes"]["messages"] and r["dead_lettered"] == 0 for r in runs)
    fixed_k = [r for r in runs if r["setup"] == "fixed K"]
    assert all(r["refused_429"] == 0 and r["window"]["max"] == adaptive.K for r in fixed_k)
