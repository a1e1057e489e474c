"""`python -m bench.transforms`: a receiver's transform, cost per delivery.

Each case builds one delivery's request (URL, body, signed headers) from a
backlog entry, as the deliverer does before its POST: `none` without a
transform (the baseline: envelope and headers), the others with the template
named, run through the bounded json-e evaluator. The figure is the median
time per delivery over `--runs` runs of `--number` deliveries, the extra
over `none`, and for comparison json-e's own `render` of the same template
(unbounded, expressions parsed at every call). The hostile cases show what the work budget lets a
pathological template cost before it fails (the message is then
dead-lettered as `transform_error`). Figures go to docs/benchmarks.md, never
into this file.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import jsone

from dispatcher.domain.records import ReceiverConfig
from dispatcher.domain.transform import TransformError
from dispatcher.domain.webhook import build_body, build_headers, build_transformed, transform_entry

PAYLOAD = {
    "id": 42, "amount": 250, "currency": "EUR", "customer": {"id": "cus_42", "email": "ann@example.com"},
    "items": [{"sku": f"A-{i}", "qty": i % 3 + 1, "price": 10 + i} for i in range(10)],
}
ENTRY = {"id": "msg_1", "seq": 7, "type": "order.paid", "data": PAYLOAD, "headers": {"x-region": "eu"},
         "accepted_at": 1_700_000_000.0}
BIG_ENTRY = {**ENTRY, "data": {**PAYLOAD, "items": [{"sku": f"A-{i}", "qty": 1} for i in range(1000)]}}
TEMPLATES: dict[str, dict[str, Any] | None] = {
    "none": None,
    "headers": {"headers": {"x-event": "${event_type}", "x-customer": "${payload.customer.id}"}},
    "chat": {"body": {"text": "Order ${payload.id} paid: ${payload.amount} ${payload.currency}"}},
    "path": {"path": "/orders/${payload.id}?currency=${payload.currency}"},
    "reshape": {"body": {
        "order": {"$eval": "payload.id"}, "total": {"$eval": "payload.amount / 100"},
        "lines": {"$map": {"$eval": "payload.items"},
                  "each(x)": {"sku": "${x.sku}", "n": {"$eval": "x.qty"}}},
    }},
    "cancel": {"$if": "payload.amount > 100", "then": {"cancel": True}, "else": {}},
    "map 1000": {"body": {"$map": {"$eval": "payload.items"}, "each(x)": {"$eval": "x.sku"}}},
}
HOSTILE: dict[str, dict[str, Any]] = {
    "steps: nested maps": {"body": {"$map": {"$eval": "range(0, 1000)"}, "each(x)": {
        "$map": {"$eval": "range(0, 1000)"}, "each(y)": {"$eval": "x + y"}}}},
    "size: doubling string": {"body": {"$reduce": {"$eval": "range(0, 40)"}, "initial": "ab",
                                       "each(a, x)": {"$eval": "a + a"}}},
    "size: shared tree": {"body": {"$json": {"$reduce": {"$eval": "range(0, 200)"}, "initial": [1],
                                             "each(a, x)": {"$eval": "[a, a]"}}}},
    "membership n^2": {"body": {"$let": {"big": {"$eval": "range(0, 10000)"}}, "in": {
        "$map": {"$eval": "big"}, "each(x)": {"$eval": "x in big"}}}},
    "sort 10k x many": {"body": {"$map": {"$eval": "range(0, 10000)"},
                                 "each(x)": {"$sort": {"$eval": "range(0, 10000)"}}}},
}


def config(template: dict[str, Any] | None) -> ReceiverConfig:
    return ReceiverConfig("rcv_bench", "https://receiver.example/hooks", "whsec_" + "A" * 32,
                          headers={"x-team": "payments"}, transform=template)


def one(cfg: ReceiverConfig, entry: dict[str, Any], now: float) -> None:
    """One delivery's request, as the deliverer builds it."""
    if cfg.transform is None:
        body = build_body(entry)
        build_headers(cfg, entry, body, now)
        return
    shaped = transform_entry(cfg, entry, now)
    if not shaped.cancel:
        build_transformed(cfg, entry, shaped, now)


def per_delivery(cfg: ReceiverConfig, entry: dict[str, Any], runs: int, number: int) -> float:
    """Median seconds of one delivery's request build."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(number):
            one(cfg, entry, 1_700_000_001.0)
        times.append((time.perf_counter() - start) / number)
    return statistics.median(times)


def plain_json_e(template: dict[str, Any] | None, entry: dict[str, Any], runs: int, number: int) -> float:
    """Median seconds of json-e's own render of the template over the same message (0: no template)."""
    if template is None:
        return 0.0
    context = {"payload": entry["data"], "event_type": entry["type"], "headers": entry["headers"]}
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(number):
            jsone.render(template, context)
        times.append((time.perf_counter() - start) / number)
    return statistics.median(times)


def until_refused(template: dict[str, Any], runs: int) -> tuple[float, str]:
    """Median seconds until the budget refuses a hostile template, and why."""
    times, why = [], ""
    for _ in range(runs):
        start = time.perf_counter()
        try:
            transform_entry(config(template), ENTRY, 1_700_000_001.0)
            why = "not refused"
        except TransformError as exc:
            why = exc.message
        times.append(time.perf_counter() - start)
    return statistics.median(times), why


def main(argv: list[str] | None = None) -> dict[str, dict[str, Any]]:
    parser = argparse.ArgumentParser(prog="python -m bench.transforms", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--number", type=int, default=2000, help="deliveries per run")
    args = parser.parse_args(argv)
    results: dict[str, dict[str, Any]] = {}
    print(f"one delivery's request, median of {args.runs} runs of {args.number}")
    print(f"{'case':<12} {'us/delivery':>12} {'extra us':>10} {'json-e alone us':>16}")
    base = 0.0
    for case, template in TEMPLATES.items():
        entry = BIG_ENTRY if case == "map 1000" else ENTRY
        number = max(1, args.number // 50) if case == "map 1000" else args.number
        seconds = per_delivery(config(template), entry, args.runs, number)
        base = seconds if case == "none" else base
        alone = plain_json_e(template, entry, args.runs, number)
        results[case] = {"us_per_delivery": seconds * 1e6, "extra_us": (seconds - base) * 1e6,
                         "json_e_alone_us": alone * 1e6}
        print(f"{case:<12} {seconds * 1e6:>12.1f} {(seconds - base) * 1e6:>10.1f} {alone * 1e6:>16.1f}")
    print("hostile templates: time until the budget refuses them (median)")
    for case, template in HOSTILE.items():
        seconds, why = until_refused(template, max(3, args.runs // 2))
        results[case] = {"ms_until_refused": seconds * 1000, "why": why}
        print(f"{case:<24} {seconds * 1000:>8.1f} ms  {why[:90]}")
    return results


if __name__ == "__main__":
    main()
