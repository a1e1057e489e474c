"""Adaptive concurrency against receivers that take K requests at once, next to a fixed window of K.

Two model receivers on loopback, in this process, each able to take K = 4
requests at once with a 20 ms service time:

- `refusing`: answers 429 at once to a request beyond its K open ones;
- `queueing`: takes every request and serves K at a time, so its answer time
  grows with the load (a thread pool of K behind a queue).

For each, one unordered receiver with a fixed window of K (`concurrency:
fixed`, `max_in_flight: 4`), one with the adaptive window and a ceiling of 32,
and, for scale, one with a fixed window of 32. Each drains `messages` buffered
while it was paused. Figures: deliveries a second up to 90 % delivered (so a
last retry does not stand in for the rate), as a share of the fixed window of
K; 429 answers; the window the receiver's state showed, sampled every 100 ms
(p10/p50/p90, max); and the answers it took to reach K. Printed, never
asserted; the JSON goes to bench/results/.

    python -m bench.adaptive            # 3,000 messages per receiver, 3 repeats (about 3 minutes)
    python -m bench.adaptive --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from aiohttp import web

from dispatcher.broker import EmbeddedBroker, free_port
from tests.harness import Api, WorkerProcess, new_app_id

from .runs import RESULTS, run_on, save, worker_loop
from .suite import progress

K = 4
SERVICE_S = 0.02
CEILING = 32
FULL = {"messages": 3000, "repeats": 3}
QUICK = {"messages": 200, "repeats": 1}
SETUPS = {  # name -> receiver options
    "fixed K": {"concurrency": "fixed", "max_in_flight": K},
    "adaptive, ceiling 32": {"concurrency": "adaptive", "max_in_flight": CEILING},
    "fixed 32": {"concurrency": "fixed", "max_in_flight": CEILING},
}


class ModelReceiver:
    """A loopback receiver of capacity K: refusing (429 past K) or queueing (K served at a time)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.open = 0
        self.slots = asyncio.Semaphore(K)
        self.delivered: dict[str, float] = {}  # webhook-id -> when first answered 2xx
        self.refused = 0
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        msg_id = request.headers.get("webhook-id", "")
        if self.kind == "refusing":
            self.open += 1
            try:
                if self.open > K:
                    self.refused += 1
                    return web.Response(status=429)
                await asyncio.sleep(SERVICE_S)
            finally:
                self.open -= 1
        else:
            async with self.slots:
                await asyncio.sleep(SERVICE_S)
        self.delivered.setdefault(msg_id, time.monotonic())
        return web.Response(status=200)

    async def start(self) -> ModelReceiver:
        app = web.Application()
        app.router.add_post("/{path:.*}", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self.port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


async def drain(api: Api, kind: str, setup: str, messages: int) -> dict[str, Any]:
    """One receiver of `setup` draining `messages` buffered while paused, against a fresh model receiver."""
    receiver = await ModelReceiver(kind).start()
    try:
        made = await api.create_receiver(f"http://127.0.0.1:{receiver.port}/{kind}", ordering="none",
                                         **SETUPS[setup])
        rid = made["id"]
        assert (await api.call("POST", f"/v1/receivers/{rid}/pause"))[0] == 200
        for start in range(0, messages, 1000):
            await api.send_batch([{"receiver_id": rid, "event_type": "bench.adaptive", "payload": {"n": n}}
                                  for n in range(start, min(messages, start + 1000))])
        await api.eventually_state(rid, lambda s: s["backlog"] == messages, 120, "the backlog stored")
        windows: list[int] = []
        began = time.monotonic()
        assert (await api.call("POST", f"/v1/receivers/{rid}/resume"))[0] == 200
        deadline = began + 300
        state: dict[str, Any] = {}
        while time.monotonic() < deadline:
            state = await api.state(rid)
            windows.append(state["concurrency"]["window"])
            if state["delivered"] >= messages:
                break
            await asyncio.sleep(0.1)
        return _figures(receiver, messages, began, windows, state, kind, setup)
    finally:
        await receiver.stop()


def _figures(receiver: ModelReceiver, messages: int, began: float, windows: list[int], state: dict[str, Any],
             kind: str, setup: str) -> dict[str, Any]:
    times = sorted(receiver.delivered.values())
    ninety = max(1, int(messages * 0.9))
    rate = ninety / (times[ninety - 1] - began) if len(times) >= ninety else 0.0
    steady = windows[len(windows) // 5:] or windows
    deciles = statistics.quantiles(steady, n=10) if len(steady) >= 2 else [float(steady[0])] * 9
    reached = next((i for i, w in enumerate(windows) if w >= K), None)
    return {
        "receiver": kind, "setup": setup, "delivered": len(times), "per_s_to_90pc": round(rate, 1),
        "refused_429": receiver.refused, "dead_lettered": state.get("dead_lettered"),
        "window": {"p10": deciles[0], "p50": statistics.median(steady), "p90": deciles[-1],
                   "max": max(windows)},
        "samples_to_reach_k": reached, "cuts": state.get("concurrency", {}).get("cuts"),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = dict(QUICK if args.quick else FULL)
    tmp = Path(tempfile.mkdtemp(prefix="bench-adaptive-"))
    broker = EmbeddedBroker(free_port())
    broker.start(str(tmp / "broker.log"))
    worker = WorkerProcess(broker.url, new_app_id(), tmp / "data", tmp / "worker.log", {
        "DISPATCHER_ALLOW_TARGETS": "127.0.0.1/32", "DISPATCHER_LOG_LEVEL": "warning",
        # a refused message comes back soon, as in the tests: the drain measures the window, not the backoff
        "DISPATCHER_RETRY_SCHEDULE": "exponential", "DISPATCHER_RETRY_BASE": "0.2",
        "DISPATCHER_RETRY_CAP": "1",
    }).start()
    runs: list[dict[str, Any]] = []
    try:
        await worker.wait_ready()
        api = Api(worker.url)
        try:
            for repeat in range(sizes["repeats"]):
                for kind in ("refusing", "queueing"):
                    for setup in SETUPS:
                        figures = await drain(api, kind, setup, sizes["messages"])
                        figures["repeat"] = repeat
                        runs.append(figures)
                        progress(f"{kind:9} {setup:21} {figures['per_s_to_90pc']:7.1f}/s  "
                                 f"429s {figures['refused_429']:5}  window {figures['window']}")
        finally:
            await api.close()
    finally:
        worker.stop()
        broker.stop()
    return {"at": time.time(), "sizes": sizes, "k": K, "service_s": SERVICE_S, "runs": runs,
            "summary": summarise(runs)}


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per receiver kind and setup: the median rate, and its share of the fixed window of K's."""
    out = []
    for kind in ("refusing", "queueing"):
        fixed_k = [r for r in runs if (r["receiver"], r["setup"]) == (kind, "fixed K")]
        base = statistics.median(r["per_s_to_90pc"] for r in fixed_k)
        for setup in SETUPS:
            mine = [r for r in runs if (r["receiver"], r["setup"]) == (kind, setup)]
            rate = statistics.median(r["per_s_to_90pc"] for r in mine)
            out.append({"receiver": kind, "setup": setup, "per_s": rate,
                        "share_of_fixed_k": round(rate / base, 3) if base else None,
                        "refused_429": statistics.median(r["refused_429"] for r in mine)})
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    result = run_on(worker_loop(), run(args))
    for row in result["summary"]:
        print(f"{row['receiver']:9} {row['setup']:21} {row['per_s']:7.1f}/s  share of fixed K "
              f"{row['share_of_fixed_k']}  429s {row['refused_429']}")
    print(f"saved {save(result, args.out, 'adaptive')}")
    return result


if __name__ == "__main__":
    main()
