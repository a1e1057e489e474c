"""Inline SVG charts as plain numbers for the templates to draw (no script, no library)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

WIDTH, HEIGHT = 300, 48


@dataclass(slots=True, frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    ok: bool
    label: str  # the bar's tooltip: outcome and latency


def sparkline(attempts: list[dict[str, Any]]) -> list[Bar]:
    """One bar per attempt, oldest left: height by latency (square root, so one slow answer does not
    flatten the rest), green for a 2xx, red otherwise."""
    if not attempts:
        return []
    top = max(a.get("latency_ms") or 0.0 for a in attempts) ** 0.5 or 1.0
    step = WIDTH / len(attempts)
    bars = []
    for i, attempt in enumerate(attempts):
        latency = attempt.get("latency_ms") or 0.0
        height = max(2.0, HEIGHT * (latency**0.5) / top)
        answer = attempt.get("status") or attempt.get("error") or "no answer"
        label = f"#{attempt.get('number', '?')} {answer} in {latency:.0f} ms"
        bars.append(Bar(round(i * step, 2), round(HEIGHT - height, 2), round(max(step - 1, 1), 2),
                        round(height, 2), bool(attempt.get("ok")), label))
    return bars


def activity_bars(minutes: list[dict[str, Any]]) -> list[dict[str, float | str]]:
    """Per minute, a stacked bar of attempts: ok (bottom) and failed (top)."""
    top = max((m["ok"] + m["failed"] for m in minutes), default=0) or 1
    step = WIDTH / max(len(minutes), 1)
    bars: list[dict[str, float | str]] = []
    for i, minute in enumerate(minutes):
        ok_h = HEIGHT * minute["ok"] / top
        failed_h = HEIGHT * minute["failed"] / top
        bars.append({"x": round(i * step, 2), "width": round(max(step - 2, 1), 2),
                     "ok_y": round(HEIGHT - ok_h, 2), "ok_h": round(ok_h, 2),
                     "failed_y": round(HEIGHT - ok_h - failed_h, 2), "failed_h": round(failed_h, 2),
                     "label": f"{minute['ok']} ok, {minute['failed']} failed"})
    return bars
