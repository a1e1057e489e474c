"""How often a log line about something outsiders can repeat at will may be written."""

from __future__ import annotations


class Throttle:
    """At most one log line per `interval` seconds for a kind of event outsiders can repeat at will;
    `admit` answers how many were held back since the last line (None: hold this one back too)."""

    def __init__(self, interval: float = 10.0) -> None:
        self.interval = interval
        self._next_at = float("-inf")
        self._held = 0

    def admit(self, now: float) -> int | None:
        if now < self._next_at:
            self._held += 1
            return None
        held, self._held, self._next_at = self._held, 0, now + self.interval
        return held
