"""`python -m bench.filters`: content-filter cost at fan-out to N subscribers (default 10,000).

Every subscriber of one event type gets a filter of the kind named by the
case; one event is matched with `SubscriptionIndex.match` (the fan-out
agent's call), and the figure is the median time per event over `--runs`
runs, and that divided by N (the cost per subscriber). Cases:

- none: no subscriber has a filter (the index's match alone, the baseline);
- eq: `{"payload.currency": "EUR"}`;
- range: `{"payload": {"amount": {"$gte": 10, "$lt": 1000}}}`;
- regex: `{"payload": {"customer.email": {"$regex": "@example\\.(com|org)$"}}}`;
- mixed: `$or` of an `$in` on a header-less path and an array path, with `$not`;
- distinct: `eq`, but every subscriber's filter differs (no shared compilation).

Also printed: compiling one filter, and the index's `put` of N filtered
subscribers. Figures go to docs/benchmarks.md, never into this file.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from dispatcher.domain.filters import compile_filter, document
from dispatcher.domain.subscriptions import SubscriptionIndex

PAYLOAD = {
    "amount": 250, "currency": "EUR", "customer": {"id": "cus_42", "email": "ann@example.com"},
    "items": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}], "tags": ["new", "vip"],
}
FILTERS: dict[str, Callable[[int], dict[str, Any] | None]] = {
    "none": lambda i: None,
    "eq": lambda i: {"payload.currency": "EUR"},
    "range": lambda i: {"payload": {"amount": {"$gte": 10, "$lt": 1000}}},
    "regex": lambda i: {"payload": {"customer.email": {"$regex": "@example\\.(com|org)$"}}},
    "mixed": lambda i: {"$or": [{"payload.customer.id": {"$in": ["cus_1", "cus_2", "cus_42"]}},
                                {"payload.items.sku": "C-9"}],
                        "$not": {"payload.tags": "blocked"}},
    "distinct": lambda i: {"payload.customer.id": f"cus_{i}"},
}
CASES = tuple(FILTERS)


def build(case: str, subscribers: int) -> SubscriptionIndex:
    index = SubscriptionIndex()
    make = FILTERS[case]
    for i in range(subscribers):
        index.put(f"rcv_{i:06d}", ["order.paid"], None, make(i))
    return index


def per_event(index: SubscriptionIndex, runs: int) -> tuple[float, int]:
    """Median seconds of one fan-out match (with the document made per event, as fan-out does)."""
    times, matched = [], 0
    for _ in range(runs):
        start = time.perf_counter()
        doc = document("order.paid", PAYLOAD, None)
        matched = len(index.match("order.paid", None, doc))
        times.append(time.perf_counter() - start)
    return statistics.median(times), matched


def compile_cost(number: int) -> float:
    spec = FILTERS["mixed"](0)
    start = time.perf_counter()
    for _ in range(number):
        compile_filter(spec)
    return (time.perf_counter() - start) / number


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(prog="python -m bench.filters", description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args(argv)
    n = args.subscribers
    results: dict[str, dict[str, float]] = {}
    print(f"fan-out of one event to {n} subscribers, median of {args.runs} runs")
    print(f"{'case':<10} {'ms/event':>10} {'us/subscriber':>14} {'matched':>8} {'put all (ms)':>13}")
    for case in CASES:
        start = time.perf_counter()
        index = build(case, n)
        put_ms = (time.perf_counter() - start) * 1000
        seconds, matched = per_event(index, args.runs)
        results[case] = {"ms_per_event": seconds * 1000, "us_per_subscriber": seconds * 1e6 / n,
                         "matched": matched, "put_ms": put_ms}
        print(f"{case:<10} {seconds * 1000:>10.2f} {seconds * 1e6 / n:>14.3f} {matched:>8} {put_ms:>13.1f}")
    results["compile"] = {"us": compile_cost(max(1, min(2000, n))) * 1e6}
    print(f"compiling the 'mixed' filter once: {results['compile']['us']:.1f} us")
    return results


if __name__ == "__main__":
    main()
