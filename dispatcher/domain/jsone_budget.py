"""The work budget of one json-e evaluation (`jsone_bounded.py` says what costs what), and the errors
an evaluation ends with.
"""

from __future__ import annotations

from typing import Any

import jsone.shared

MAX_STEPS = 20_000
MAX_VALUE = 256 * 1024  # characters of JSON a value built along the way may have
MAX_BUILT = 200_000  # units of work besides steps (jsone_bounded.py): about as long as MAX_STEPS take
MAX_VALUE_DEPTH = 100
MAX_INT_BITS = 64  # JSON numbers as JavaScript and orjson see them; bigger is refused, not rounded


class TemplateFailed(Exception):
    """The template failed (json-e's error, a budget spent, or a value out of bounds); the text says why.

    `spent`: it ran out of steps or work units, so a larger budget might see it through.
    """

    def __init__(self, message: str, spent: bool = False) -> None:
        super().__init__(message)
        self.spent = spent


class LimitExceeded(jsone.shared.TemplateError):  # type: ignore[misc]
    """Raised inside json-e (its error type, so the template location gets added on the way out)."""


class BudgetSpent(LimitExceeded):
    """Out of steps or work units (as against a value out of bounds, which no budget would allow)."""


class Budget:
    """Steps and characters left for one evaluation, and the sizes of values seen so far."""

    __slots__ = ("built", "max_value", "seen", "steps")

    def __init__(self, steps: int = MAX_STEPS, built: int = MAX_BUILT, max_value: int = MAX_VALUE) -> None:
        self.steps = steps
        self.built = built
        self.max_value = max_value
        self.seen: dict[int, tuple[Any, int, int]] = {}  # id -> (value kept alive, size, depth)

    def step(self) -> None:
        self.steps -= 1
        if self.steps < 0:
            raise BudgetSpent("the template takes more than its budget of steps")

    def charge(self, chars: int) -> None:
        self.built -= chars
        if self.built < 0:
            raise BudgetSpent("the template does more work than its budget allows")

    def size(self, value: Any) -> int:
        return self._measure(value)[0]

    def check(self, value: Any) -> Any:
        """`value`, once it is within bounds (measured once per object)."""
        size, _ = self._measure(value)
        if size > self.max_value:
            raise LimitExceeded(f"a value would be larger than {self.max_value} characters of JSON")
        return value

    def _measure(self, value: Any) -> tuple[int, int]:
        """(JSON-ish size, depth); a new container's entries and a new long string are charged."""
        if isinstance(value, bool) or value is None:
            return 5, 0
        if isinstance(value, int):
            if value.bit_length() > MAX_INT_BITS:
                raise LimitExceeded(f"a number would be larger than {MAX_INT_BITS} bits")
            return 8, 0
        if isinstance(value, str) and len(value) < 64:
            return len(value) + 2, 0
        if not isinstance(value, (str, list, dict)):
            return 8, 0  # a float, a builtin function, json-e's delete marker
        known = self.seen.get(id(value))
        if known is not None:
            return known[1], known[2]
        size, depth = self._measure_new(value)
        self.seen[id(value)] = (value, size, depth)
        return size, depth

    def _measure_new(self, value: str | list[Any] | dict[str, Any]) -> tuple[int, int]:
        if isinstance(value, str):
            self.charge(len(value) // 16 + 1)
            return len(value) + 2, 0
        self.charge(len(value) + 1)
        size, depth = 2, 0
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            inner, inner_depth = self._measure(item)
            size += inner + (len(key) + 4 if isinstance(key, str) else 1)
            depth = max(depth, inner_depth)
            if size > self.max_value:
                raise LimitExceeded(f"a value would be larger than {self.max_value} characters of JSON")
        if depth + 1 > MAX_VALUE_DEPTH:
            raise LimitExceeded(f"a value would be nested deeper than {MAX_VALUE_DEPTH} levels")
        return size, depth + 1
