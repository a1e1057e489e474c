"""`python -m bench.decide_micro`: microseconds per `actor.decide` call, for three commands.

- intake: an `Intake` on an idle receiver (stored, remembered, posted at once);
- 2xx: the head's attempt answered 2xx (settled, the next head looked up);
- 503: the head's attempt answered 503 (breaker, lane, backoff).

Each figure is the median of `--runs` runs of `--number` calls. With
`--old FILE` (a copy of an earlier `dispatcher/domain/actor.py`, e.g. from
`git show <rev>:dispatcher/domain/actor.py`) the earlier module runs too,
interleaved run by run with the current one, so both see the same machine
noise. Figures go to docs/benchmarks.md, never into this file.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import fields
from types import ModuleType
from typing import Any

from dispatcher.domain import actor
from dispatcher.domain.records import Message, Outcome, ReceiverConfig

CASES = ("intake", "2xx", "503")
NOW = 1_000_000.0
CONFIG = ReceiverConfig("r1", "http://127.0.0.1:1/", "whsec_" + "A" * 32, created_at=NOW - 100)
MESSAGE = Message("m1", "r1", "order.created", {"id": 1, "total": 12.5}, accepted_at=NOW - 1)


class _Backlog:
    """Two stored messages, as the table would answer for them."""

    def accepted_at(self, seq: int) -> float | None:
        return NOW - 1 if seq <= 2 else None

    def size(self, seq: int) -> int:
        return 120 if seq <= 2 else 0


def _facts(module: ModuleType) -> Any:
    """The module's Facts, with the backlog as it takes it (a view, or the earlier callbacks)."""
    backlog = _Backlog()
    if "backlog" in {f.name for f in fields(module.Facts)}:
        return module.Facts(NOW, 0.5, False, backlog)
    return module.Facts(NOW, 0.5, False, backlog.accepted_at, backlog.size)


def _cases(module: ModuleType) -> dict[str, Callable[[], object]]:
    decide, policy, facts = module.decide, module.Policy(), _facts(module)
    idle = module.ReceiverState("r1", CONFIG, active_since=NOW - 100)
    busy = module.ReceiverState("r1", CONFIG, next_seq=3, head_accepted_at=NOW - 1, active_since=NOW - 100,
                                backlog_bytes=240)
    intake = module.Intake(MESSAGE)

    def answered(status: int) -> Any:
        return module.Result(Outcome(1, "m1", "t", status < 300, status, None, 12.0, NOW, attempt=1))

    ok, unavailable = answered(200), answered(503)
    return {
        "intake": lambda: decide(idle, intake, facts, policy),
        "2xx": lambda: decide(busy, ok, facts, policy),
        "503": lambda: decide(busy, unavailable, facts, policy),
    }


def _run(call: Callable[[], object], number: int) -> float:
    """Microseconds per call over `number` calls (the collector off, as timeit does)."""
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(number):
            call()
        return (time.perf_counter() - start) / number * 1e6
    finally:
        gc.enable()


def _load_old(path: str) -> ModuleType:
    """An earlier actor module, loaded beside the current one (its relative imports see the domain)."""
    spec = importlib.util.spec_from_file_location("dispatcher.domain._actor_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Print (and return, per module and case) the median µs per call."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--number", type=int, default=20_000)
    parser.add_argument("--old", help="an earlier actor module to run interleaved with this one")
    args = parser.parse_args(argv)
    modules = {"new": actor} if args.old is None else {"old": _load_old(args.old), "new": actor}
    cases = {name: _cases(module) for name, module in modules.items()}
    for which in cases.values():  # warm up: generated copiers, config JSON, specialised bytecode
        for call in which.values():
            _run(call, 1000)
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.runs):
        for case in CASES:
            for name, which in cases.items():
                times.setdefault((name, case), []).append(_run(which[case], args.number))
    medians = {name: {case: statistics.median(times[(name, case)]) for case in CASES} for name in modules}
    print(f"µs per decide call, median of {args.runs} runs of {args.number:,} (min-max)")
    for case in CASES:
        row = [f"{case:>7}"]
        for name in modules:
            runs = times[(name, case)]
            row.append(f"{name} {medians[name][case]:6.2f} ({min(runs):.2f}-{max(runs):.2f})")
        if len(modules) == 2:
            row.append(f"new/old {medians['new'][case] / medians['old'][case]:.3f}")
        print("  ".join(row))
    return medians


if __name__ == "__main__":
    main()
