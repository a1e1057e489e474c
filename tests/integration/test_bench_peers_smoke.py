"""The peers bench (bench/peers.py) runs end to end at tiny sizes. Figures are not checked.

arq and dramatiq each deliver every message of the backlog exactly once as nginx saw it (order is
theirs: not checked), and the paced run; their worker processes are gone afterwards. The bench
extra (`pip install -e '.[bench]'`) is part of the dev one.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from bench import peers, suite


async def test_arq_and_dramatiq_deliver_every_message_once(tmp_path: Path) -> None:
    result = await asyncio.to_thread(suite.main, ["--quick", "--only", "peers", "--out", str(tmp_path)])
    out = result["peers"]
    assert out["ceiling"]["per_s"]["median"] > 0
    for peer in peers.PEERS:
        drain = out[peer.name]
        [run] = drain["runs"]
        assert (drain["lost"], drain["duplicates"]) == (0, 0)
        assert run["delivered"] == drain["messages"] == suite.QUICK["messages"]
        assert run["per_s"] > 0 and run["cpu_s_per_1000"] > 0
        assert drain["latency"]["delivered"] == drain["latency"]["sent"] > 0
    assert out["worker_pids"]
    assert not [pid for pid in out["worker_pids"] if peers.alive(pid)]
    assert not peers.alive(out["redis_pid"])
