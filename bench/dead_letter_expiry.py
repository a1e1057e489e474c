"""Healthy receivers' latency while a receiver with 10,000 dead letters expires a large backlog.

One embedded broker, one worker, `--fast` receivers on 127.0.0.1 answering at
once. Phase 1 sends `--rate` messages a second to them alone. Then a receiver
whose URL answers 404 is given `--dead` messages (each dead-lettered at once,
so it keeps the most dead letters a receiver may), is paused, and buffers
`--backlog` more; once they are past its `max_age` it is resumed, and phase 2
sends the same paced traffic while the worker dead-letters that backlog (each
past the kept 10,000, so each trims the oldest). Prints p50/p95/p99/max of
(receiver arrival - API call start) for both phases; figures are printed,
never asserted; the JSON is saved under bench/results/.

    python -m bench.dead_letter_expiry            # the full run (a few minutes)
    python -m bench.dead_letter_expiry --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from dispatcher.broker import EmbeddedBroker, free_port
from tests.harness import Api, Delivery, Receiver, WorkerProcess, new_app_id, wait_until_read

from .isolation import paced_phase, percentiles, print_latencies
from .runs import RESULTS, save

MAX_AGE = 2.0


async def _answer(path: str, delivery: Delivery) -> int:
    return 404 if path.startswith("gone") else 200


async def _send_many(api: Api, rid: str, count: int, label: str) -> None:
    for start in range(0, count, 1000):
        batch = [{"receiver_id": rid, "event_type": "bench.dead", "payload": {"n": n}}
                 for n in range(start, min(count, start + 1000))]
        await api.send_batch(batch)
    print(f"  {count:,} {label} sent", flush=True)


async def _prepare_doomed(api: Api, server: Receiver, args: argparse.Namespace) -> str:
    """A receiver holding the most dead letters it may keep, and a paused backlog past its max_age."""
    rid = (await api.create_receiver(server.url("gone"), retry={"max_age": MAX_AGE}))["id"]
    await _send_many(api, rid, args.dead, "messages to a receiver answering 404")
    await wait_until_read(lambda: api.state(rid), lambda s: s["dead_lettered"] >= args.dead,
                          600, f"{args.dead:,} dead letters")
    assert (await api.call("POST", f"/v1/receivers/{rid}/pause"))[0] == 200
    await _send_many(api, rid, args.backlog, "messages buffered while paused")
    await wait_until_read(lambda: api.state(rid), lambda s: s["backlog"] >= args.backlog,
                          600, f"{args.backlog:,} buffered")
    await asyncio.sleep(MAX_AGE + 1)  # the whole backlog is past its max_age (counted from resume)
    return rid


async def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-dead-"))
    broker = EmbeddedBroker(free_port()).start(str(tmp / "broker.log"))
    server = await Receiver(_answer).start()
    worker = WorkerProcess(
        broker.url, new_app_id(), tmp / "data", tmp / "worker.log",
        {"DISPATCHER_ALLOW_TARGETS": "127.0.0.0/8", "DISPATCHER_LOG_LEVEL": "error"},
    ).start()
    api = Api(worker.url)
    try:
        await worker.wait_ready()
        fast = [(await api.create_receiver(server.url(f"f{i}")))["id"] for i in range(args.fast)]
        print(f"{args.fast} healthy receivers; phase 1: {args.rate}/s for {args.seconds}s, alone", flush=True)
        alone = await paced_phase(api, fast, server, args.rate, args.seconds)
        doomed = await _prepare_doomed(api, server, args)
        print(f"phase 2: the same while {args.backlog:,} messages expire past {args.dead:,} dead letters",
              flush=True)
        expiry_started = time.monotonic()
        assert (await api.call("POST", f"/v1/receivers/{doomed}/resume"))[0] == 200
        during = await paced_phase(api, fast, server, args.rate, args.seconds)
        state = await wait_until_read(lambda: api.state(doomed), lambda s: s["backlog"] == 0,
                                      600, "the backlog expired")
        expiry_s = time.monotonic() - expiry_started
        result = {
            "scenario": "dead_letter_expiry",
            "at": time.time(),
            "params": vars(args),
            "healthy_alone": percentiles(alone),
            "healthy_during_expiry": percentiles(during),
            "expired": args.backlog,
            "expiry_s": round(expiry_s, 2),
            "dead_lettered": state["dead_lettered"],
        }
    finally:
        await api.close()
        worker.stop()
        await server.stop()
        broker.stop()
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--fast", type=int, default=100)
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--dead", type=int, default=10_000)
    parser.add_argument("--backlog", type=int, default=20_000)
    parser.add_argument("--quick", action="store_true", help="tiny figures, for the smoke test")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        vars(args).update({"fast": 5, "rate": 40, "seconds": 1.0, "dead": 50, "backlog": 100})
    result = asyncio.run(run(args))
    path = save(result, args.out, "dead_letter_expiry", default=str)
    print_latencies("healthy receivers", [("alone", result["healthy_alone"]),
                                          ("during the expiry", result["healthy_during_expiry"])])
    print(f"{result['expired']:,} messages expired in {result['expiry_s']} s")
    print(f"saved {path}")
    return result


if __name__ == "__main__":
    main()
