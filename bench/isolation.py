"""Isolation benchmark: fast receivers' latency with and without bad receivers in the same run.

One embedded broker, one worker, `--fast` receivers on 127.0.0.1 answering at
once, and (second phase) `--bad` slow receivers (answer after `--slow-s`) and
`--bad` silent ones (never answer) on 127.0.0.2. Each phase sends `--rate`
messages a second for `--seconds` to the fast receivers and prints p50/p95/p99/max
of (receiver arrival - API call start). Figures are printed, never asserted;
the JSON is saved under bench/results/.

    python -m bench.isolation            # the full run (about a minute)
    python -m bench.isolation --quick    # a smoke run of a few seconds
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from dispatcher.broker import EmbeddedBroker, free_port
from tests.harness import Api, Delivery, Receiver, WorkerProcess, new_app_id, wait_until

from .runs import RESULTS, save


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))]

    return {
        "n": len(ordered),
        "p50_ms": round(statistics.median(ordered) * 1000, 2),
        "p95_ms": round(pct(0.95) * 1000, 2),
        "p99_ms": round(pct(0.99) * 1000, 2),
        "max_ms": round(ordered[-1] * 1000, 2),
    }


def print_latencies(title: str, rows: list[tuple[str, dict[str, Any]]]) -> None:
    """A table of `percentiles` results, one row per phase."""
    print(f"\n{title:<28}{'n':>7}{'p50 ms':>10}{'p95 ms':>10}{'p99 ms':>10}{'max ms':>10}")
    for label, f in rows:
        print(f"{label:<28}{f['n']:>7}{f.get('p50_ms', '-'):>10}{f.get('p95_ms', '-'):>10}"
              f"{f.get('p99_ms', '-'):>10}{f.get('max_ms', '-'):>10}")


async def paced_phase(api: Api, fast: list[str], server: Receiver, rate: int, seconds: float) -> list[float]:
    """Send `rate` messages/s round-robin to `fast`; return each message's latency."""
    sent: dict[str, float] = {}
    tick = 0.05
    per_tick = max(1, round(rate * tick))
    first = len(server.completed)
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        batch = [
            {"receiver_id": fast[(n + i) % len(fast)], "event_type": "bench.iso", "payload": {"n": n + i}}
            for i in range(per_tick)
        ]
        n += per_tick
        started = time.time()
        for msg_id in await api.send_batch(batch):
            sent[msg_id] = started
        await asyncio.sleep(max(0.0, tick - (time.time() - started)))
    with contextlib.suppress(AssertionError):  # report what arrived within the limit
        await wait_until(
            lambda: sum(d.msg_id in sent for d in server.completed[first:]) >= len(sent), 60, "deliveries"
        )
    seen: dict[str, Delivery] = {}
    for d in server.completed[first:]:
        seen.setdefault(d.msg_id, d)
    return [d.at - sent[m] for m, d in seen.items() if m in sent]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-iso-"))
    broker = EmbeddedBroker(free_port()).start(str(tmp / "broker.log"))
    release = asyncio.Event()

    async def bad(path: str, delivery: Delivery) -> int:
        if path.startswith("slow"):
            await asyncio.sleep(args.slow_s)
        else:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(release.wait(), 600)
        return 200

    fast_server = await Receiver().start()
    bad_server = await Receiver(bad, host="127.0.0.2", cancel_on_disconnect=True).start()
    worker = WorkerProcess(
        broker.url, new_app_id(), tmp / "data", tmp / "worker.log",
        {"DISPATCHER_ALLOW_TARGETS": "127.0.0.0/8", "DISPATCHER_LOG_LEVEL": "warning",
         "DISPATCHER_TIMEOUT": str(args.timeout)},
    ).start()
    api = Api(worker.url)
    try:
        await worker.wait_ready()
        fast = [(await api.create_receiver(fast_server.url(f"f{i}")))["id"] for i in range(args.fast)]
        print(f"{args.fast} fast receivers; phase 1: {args.rate}/s for {args.seconds}s, alone", flush=True)
        alone = await paced_phase(api, fast, fast_server, args.rate, args.seconds)
        bad_ids = [(await api.create_receiver(bad_server.url(f"slow{i}")))["id"] for i in range(args.bad)]
        bad_ids += [(await api.create_receiver(bad_server.url(f"hang{i}")))["id"] for i in range(args.bad)]
        await api.send_batch(
            [{"receiver_id": r, "event_type": "bench.bad", "payload": {}} for r in bad_ids for _ in range(20)]
        )
        print(f"phase 2: the same, with {args.bad} receivers answering after {args.slow_s}s and "
              f"{args.bad} that never answer", flush=True)
        await asyncio.sleep(args.settle)
        crowded = await paced_phase(api, fast, fast_server, args.rate, args.seconds)
        lanes = [(await api.state(r))["lane"]["lane"] for r in bad_ids]
        result = {
            "scenario": "isolation",
            "at": time.time(),
            "params": vars(args),
            "fast_alone": percentiles(alone),
            "fast_with_bad": percentiles(crowded),
            "bad_in_slow_lane": lanes.count("slow"),
            "bad_receivers": len(bad_ids),
        }
    finally:
        release.set()
        await api.close()
        worker.stop()
        await fast_server.stop()
        await bad_server.stop()
        broker.stop()
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fast", type=int, default=100)
    parser.add_argument("--bad", type=int, default=5)
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--slow-s", type=float, default=5.0)
    parser.add_argument("--timeout", type=float, default=8.0)
    parser.add_argument("--settle", type=float, default=20.0, help="seconds for bad receivers to be judged")
    parser.add_argument("--quick", action="store_true", help="tiny figures, for the smoke test")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        quick = {"fast": 5, "bad": 1, "rate": 40, "seconds": 1.0, "slow_s": 1.5, "timeout": 2, "settle": 1}
        vars(args).update(quick)
    result = asyncio.run(run(args))
    path = save(result, args.out, "isolation", default=str)
    print_latencies("fast receivers", [("alone", result["fast_alone"]),
                                       ("with bad receivers", result["fast_with_bad"])])
    print(f"bad receivers in the slow lane: {result['bad_in_slow_lane']} of {result['bad_receivers']}")
    print(f"saved {path}")
    return result


if __name__ == "__main__":
    main()
