"""`webhook-delivery-control`: a receiver steers its own delivery from any answer, a 2xx included.

    webhook-delivery-control: pause=30, max-in-flight=4, rate=10
    webhook-delivery-control: disable

- `pause=N`: send nothing for N seconds (at most `max_pause`; 0 lifts a pause).
- `max-in-flight=N`: at most N messages out at once, up to the receiver's
  `max_in_flight` (0 lifts the cap). It stays until the receiver says otherwise.
- `rate=R`: at most R messages a second, never above the receiver's own
  `rate_limit` (0 lifts it). It stays until the receiver says otherwise.
- `disable`: disable the receiver, as `POST .../disable` does; an operator
  enables it again.

Names are case-insensitive and the last of a name wins; unknown names and
bad values are skipped, and said so in the attempt log next to what was
applied. A receiver whose `delivery_control` is `ignore` is not steered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .delivery_options import IGNORE, MAX_RATE, MIN_RATE, DeliveryOptions

HEADER = "webhook-delivery-control"
MAX_DIRECTIVES = 8
_DECIMAL = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,6})?")


@dataclass(slots=True, frozen=True)
class Asked:
    """What the receiver asked for through the header and still holds."""

    pause_until: float = 0.0
    max_in_flight: int = 0  # 0: no cap asked
    rate: float = 0.0  # messages a second; 0: none asked
    at: float = 0.0  # when it last used the header
    said: str = ""  # what was applied then (as in the attempt log)

    def view(self, now: float) -> dict[str, Any]:
        return {
            "paused_until": self.pause_until if self.pause_until > now else None,
            "max_in_flight": self.max_in_flight or None,
            "rate": self.rate or None,
            "last_at": self.at or None,
            "last": self.said or None,
        }


@dataclass(slots=True, frozen=True)
class Heeded:
    asked: Asked
    disable: bool = False
    note: str = ""  # for the attempt log: what was applied, clamped or skipped


def heed(asked: Asked, value: str | None, options: DeliveryOptions, now: float, max_pause: float) -> Heeded:
    """Apply one answer's header (None: the answer had none) to what the receiver asked so far."""
    if value is None or not value.strip():
        return Heeded(asked)
    if options.delivery_control == IGNORE:
        return Heeded(asked, note=f"{HEADER} ignored (delivery_control: ignore)")
    notes: list[str] = []
    directives = _directives(value, notes)
    pause_until, cap, rate = asked.pause_until, asked.max_in_flight, asked.rate
    if "pause" in directives:
        seconds = _number(directives["pause"], "pause", notes)
        if seconds is not None:
            wait = min(seconds, max_pause)
            pause_until = now + wait if wait else 0.0
            if not wait:
                notes.append("pause lifted")
            elif wait < seconds:
                notes.append(f"pause {wait:g}s (asked {seconds:g}, at most {max_pause:g})")
            else:
                notes.append(f"pause {wait:g}s")
    if "max-in-flight" in directives:
        cap = _cap(directives["max-in-flight"], options.max_in_flight, cap, notes)
    if "rate" in directives:
        rate = _rate(directives["rate"], options.rate_limit, rate, notes)
    disable = "disable" in directives
    if disable:
        notes.append("disable")
    said = "; ".join(notes)
    return Heeded(Asked(pause_until, cap, rate, now, said), disable, f"{HEADER}: {said}")


def _directives(value: str, notes: list[str]) -> dict[str, str]:
    """name -> value ("" for none), known names only; the rest noted as skipped."""
    found: dict[str, str] = {}
    parts = [p.strip() for p in value.split(",") if p.strip()]
    if len(parts) > MAX_DIRECTIVES:
        notes.append(f"only the first {MAX_DIRECTIVES} directives read")
    for part in parts[:MAX_DIRECTIVES]:
        name, _, arg = part.partition("=")
        name = name.strip().lower()
        if name not in ("pause", "max-in-flight", "rate", "disable"):
            notes.append(f"unknown directive {name[:40]!r} skipped")
        elif (name == "disable") == bool(arg.strip()):
            notes.append(f"{name}: {'takes no value' if name == 'disable' else 'needs a value'}, skipped")
        else:
            found[name] = arg.strip()
    return found


def _number(text: str, name: str, notes: list[str]) -> float | None:
    """A plain decimal of 0 or more (no sign, exponent, inf or nan), else None and a note."""
    if not _DECIMAL.fullmatch(text):
        notes.append(f"{name}: {text[:40]!r} is not a number of 0 or more, skipped")
        return None
    return float(text)


def _cap(text: str, ceiling: int, current: int, notes: list[str]) -> int:
    asked = _number(text, "max-in-flight", notes)
    if asked is None:
        return current
    if asked != int(asked):
        notes.append(f"max-in-flight: {text[:40]!r} is not a whole number, skipped")
        return current
    if not asked:
        notes.append("max-in-flight cap lifted")
        return 0
    cap = min(int(asked), ceiling)
    clamped = f" (asked {int(asked)}, ceiling {ceiling})" if cap < asked else ""
    notes.append(f"max-in-flight {cap}{clamped}")
    return cap


def _rate(text: str, ceiling: float, current: float, notes: list[str]) -> float:
    asked = _number(text, "rate", notes)
    if asked is None:
        return current
    if not asked:
        notes.append("rate cap lifted")
        return 0.0
    top = ceiling or MAX_RATE
    rate = min(max(asked, MIN_RATE), top)
    why = f" (asked {asked:g}, {'rate_limit' if ceiling else 'at most'} {top:g})" if rate < asked else ""
    why = why or (f" (asked {asked:g}, at least {MIN_RATE:g})" if rate > asked else "")
    notes.append(f"rate {rate:g}/s{why}")
    return rate


def effective_rate(configured: float, asked: float) -> float:
    """The rate that paces the receiver: the lower of its own and what it asked (0: no limit)."""
    if configured and asked:
        return min(configured, asked)
    return configured or asked
