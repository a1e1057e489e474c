"""What two idle workers and the embedded broker spend on nothing: CPU cores over a quiet spell.

The embedded broker answers a fetch only when its wait runs out, at about the
same cost for each partition the fetch names, so idle polls are the whole of an
idle deployment's CPU and go on through a drain once its source is read
(docs/architecture.md, "Broker notes"). Two workers share 1,000 receivers;
after a settling pause, the broker's and each worker's CPU over `--seconds` is
printed in cores. The environment reaches the workers, so an interleaved A/B
is two runs with, say, `DISPATCHER_FETCH_IDLE_WAIT_MS` set differently.

    python -m bench.idle_polls                # 15 s to settle, 10 s measured
    python -m bench.idle_polls --settle 2 --seconds 2   # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from bench.suite import FULL, RESULTS, Bench, cpu_seconds, new_app_id, progress


async def measure(settle: float, seconds: float, receivers: int) -> dict[str, Any]:
    bench = Bench(argparse.Namespace(workers=2, quick=False, only="", repeats=1, out=None), dict(FULL))
    bench.start()
    try:
        app_id = new_app_id()
        first = bench.worker(app_id, "idle0")
        await first.wait_ready()
        await bench.register(app_id, first, receivers, path="idle_")
        second = bench.worker(app_id, "idle1")
        await second.wait_ready()
        progress(f"two workers hold {receivers:,} receivers; settling {settle:.0f} s")
        await asyncio.sleep(settle)
        assert bench.broker.process is not None and first.process is not None and second.process is not None
        pids = {"broker": bench.broker.process.pid, "worker_1": first.process.pid,
                "worker_2": second.process.pid}
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        await asyncio.sleep(seconds)
        cores = {name: round((cpu_seconds(pid) - before[name]) / seconds, 3) for name, pid in pids.items()}
        return {"receivers": receivers, "seconds": seconds, "cores": cores,
                "total_cores": round(sum(cores.values()), 3)}
    finally:
        bench.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settle", type=float, default=15.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--receivers", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    result = asyncio.run(measure(args.settle, args.seconds, args.receivers))
    print(f"idle: broker {result['cores']['broker']} cores, workers {result['cores']['worker_1']} and "
          f"{result['cores']['worker_2']}; {result['total_cores']} in all")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"idle-polls-{int(time.time())}.json"
    path.write_text(json.dumps(result, indent=1))
    print(f"saved {path}")


if __name__ == "__main__":
    main()
