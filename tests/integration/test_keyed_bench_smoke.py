"""bench.keyed runs end to end at tiny sizes, so it cannot rot. Figures are not checked, counts are."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench import keyed


async def test_keyed_bench_runs_every_setup_in_order_and_delivers_everything(tmp_path: Path) -> None:
    result = await asyncio.to_thread(keyed.main, ["--quick", "--out", str(tmp_path)])
    assert [p.name.startswith("keyed-") for p in tmp_path.iterdir()] == [True]
    runs = result["runs"]
    assert [r["setup"] for r in runs] == list(keyed.SETUPS)
    assert all(r["delivered"] == r["messages"] and r["key_order_violations"] == 0 for r in runs)
    most_open = {r["setup"]: r["most_open"] for r in runs}
    assert most_open["key, 1 key"] == most_open["strict"] == 1
    assert most_open["key, 8 keys"] <= 8
