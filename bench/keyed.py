"""Drain rate of a key-ordered receiver next to an unordered one and a strict one.

One loopback receiver in this process answers every request 200 after a
fixed service time (10 ms), taking any number at once. Each setup drains
`messages` buffered while it was paused, with a fixed window of 16:

- `none`: unordered, 16 out at once;
- `key, 100 keys`: messages spread over 100 ordering keys (round robin);
- `key, 8 keys`: fewer keys than the window, so at most 8 go at once;
- `key, 1 key`: every message under one key, as ordered as strict;
- `strict`: one at a time (for scale).

Figures: deliveries a second up to 90 % delivered, and each as a share of
`none`; the most requests the receiver had open at once; and, checked on the
way, that no message went before an earlier one of its key was answered.
Printed, never asserted; the JSON goes to bench/results/.

    python -m bench.keyed            # 3,000 messages per setup (strict: 600), 3 repeats (about 3 minutes)
    python -m bench.keyed --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from dispatcher.broker import EmbeddedBroker, free_port
from tests.harness import Api, WorkerProcess, new_app_id

from .runs import RESULTS, run_on, save, worker_loop
from .suite import progress

SERVICE_S = 0.01
WINDOW = 16
FULL = {"messages": 3000, "strict_messages": 600, "repeats": 3}
QUICK = {"messages": 120, "strict_messages": 40, "repeats": 1}
SETUPS: dict[str, tuple[dict[str, Any], int]] = {  # name -> (receiver options, keys; 0 = none)
    "none": ({"ordering": "none", "concurrency": "fixed", "max_in_flight": WINDOW}, 0),
    "key, 100 keys": ({"ordering": "key", "concurrency": "fixed", "max_in_flight": WINDOW}, 100),
    "key, 8 keys": ({"ordering": "key", "concurrency": "fixed", "max_in_flight": WINDOW}, 8),
    "key, 1 key": ({"ordering": "key", "concurrency": "fixed", "max_in_flight": WINDOW}, 1),
    "strict": ({"ordering": "strict"}, 0),
}


class TimedReceiver:
    """Answers 200 after SERVICE_S; counts open requests and per-key order violations."""

    def __init__(self) -> None:
        self.delivered: dict[str, float] = {}  # webhook-id -> when first answered
        self.open = 0
        self.most_open = 0
        self.outstanding: dict[str, set[int]] = {}  # key -> seqs arrived and not yet answered
        self.violations = 0
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def handle(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        seq = int(request.headers.get("webhook-sequence", "0"))
        key = body.get("data", {}).get("k") if seq else None  # a ping (probe) has no seq
        if key is not None:
            out = self.outstanding.setdefault(key, set())
            self.violations += any(s < seq for s in out)
            out.add(seq)
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            await asyncio.sleep(SERVICE_S)
        finally:
            self.open -= 1
        if key is not None:
            self.outstanding[key].discard(seq)
        self.delivered.setdefault(request.headers.get("webhook-id", ""), time.monotonic())
        return web.Response(status=200)

    async def start(self) -> TimedReceiver:
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


async def drain(api: Api, setup: str, messages: int) -> dict[str, Any]:
    """One receiver of `setup` draining `messages` buffered while paused."""
    options, keys = SETUPS[setup]
    receiver = await TimedReceiver().start()
    try:
        rid = (await api.create_receiver(f"http://127.0.0.1:{receiver.port}/k", **options))["id"]
        assert (await api.call("POST", f"/v1/receivers/{rid}/pause"))[0] == 200
        for start in range(0, messages, 1000):
            batch = []
            for n in range(start, min(messages, start + 1000)):
                payload: dict[str, Any] = {"n": n}
                message = {"receiver_id": rid, "event_type": "bench.keyed", "payload": payload}
                if keys:
                    payload["k"] = message["ordering_key"] = f"key-{n % keys}"
                batch.append(message)
            await api.send_batch(batch)
        await api.eventually_state(rid, lambda s: s["backlog"] == messages, 120, "the backlog stored")
        began = time.monotonic()
        assert (await api.call("POST", f"/v1/receivers/{rid}/resume"))[0] == 200
        await api.eventually_state(rid, lambda s: s["delivered"] >= messages, 600, "every message delivered")
        times = sorted(receiver.delivered.values())
        ninety = max(1, int(messages * 0.9))
        rate = ninety / (times[ninety - 1] - began) if len(times) >= ninety else 0.0
        return {"setup": setup, "messages": messages, "delivered": len(times),
                "per_s_to_90pc": round(rate, 1), "most_open": receiver.most_open,
                "key_order_violations": receiver.violations}
    finally:
        await receiver.stop()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = dict(QUICK if args.quick else FULL)
    tmp = Path(tempfile.mkdtemp(prefix="bench-keyed-"))
    broker = EmbeddedBroker(free_port())
    broker.start(str(tmp / "broker.log"))
    worker = WorkerProcess(broker.url, new_app_id(), tmp / "data", tmp / "worker.log", {
        "DISPATCHER_ALLOW_TARGETS": "127.0.0.1/32", "DISPATCHER_LOG_LEVEL": "warning",
    }).start()
    runs: list[dict[str, Any]] = []
    try:
        await worker.wait_ready()
        api = Api(worker.url)
        try:
            for repeat in range(sizes["repeats"]):
                for setup in SETUPS:
                    count = sizes["strict_messages"] if setup == "strict" else sizes["messages"]
                    figures = await drain(api, setup, count)
                    figures["repeat"] = repeat
                    runs.append(figures)
                    progress(f"{setup:14} {figures['per_s_to_90pc']:8.1f}/s  open at most "
                             f"{figures['most_open']:3}  key order violations "
                             f"{figures['key_order_violations']}")
        finally:
            await api.close()
    finally:
        worker.stop()
        broker.stop()
    return {"at": time.time(), "sizes": sizes, "service_s": SERVICE_S, "window": WINDOW, "runs": runs,
            "summary": summarise(runs)}


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per setup: the median rate, and its share of the unordered receiver's."""
    base = statistics.median(r["per_s_to_90pc"] for r in runs if r["setup"] == "none")
    out = []
    for setup in SETUPS:
        mine = [r for r in runs if r["setup"] == setup]
        rate = statistics.median(r["per_s_to_90pc"] for r in mine)
        out.append({"setup": setup, "per_s": rate, "share_of_none": round(rate / base, 3) if base else None,
                    "most_open": max(r["most_open"] for r in mine),
                    "key_order_violations": sum(r["key_order_violations"] for r in mine)})
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    result = run_on(worker_loop(), run(args))
    for row in result["summary"]:
        print(f"{row['setup']:14} {row['per_s']:8.1f}/s  share of none {row['share_of_none']}  "
              f"open at most {row['most_open']}  key order violations {row['key_order_violations']}")
    print(f"saved {save(result, args.out, 'keyed')}")
    return result


if __name__ == "__main__":
    main()
