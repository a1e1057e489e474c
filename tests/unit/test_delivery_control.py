"""webhook-delivery-control: what each header value asks, as applied and clamped, by table."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.domain.delivery_control import Asked, effective_rate, heed
from dispatcher.domain.delivery_options import DeliveryOptions

NOW = 1000.0
MAX_PAUSE = 3600.0
UNORDERED = DeliveryOptions(ordering="none", max_in_flight=16)


@pytest.mark.parametrize(
    ("value", "options", "pause_until", "cap", "rate", "disable", "note"),
    [
        ("pause=30", UNORDERED, NOW + 30, 0, 0.0, False, "pause 30s"),
        ("PAUSE=1.5", UNORDERED, NOW + 1.5, 0, 0.0, False, "pause 1.5s"),
        ("pause=99999", UNORDERED, NOW + MAX_PAUSE, 0, 0.0, False, "pause 3600s (asked 99999, at most 3600)"),
        ("pause=0", UNORDERED, 0.0, 0, 0.0, False, "pause lifted"),
        ("max-in-flight=4", UNORDERED, 0.0, 4, 0.0, False, "max-in-flight 4"),
        ("max-in-flight=100", UNORDERED, 0.0, 16, 0.0, False, "max-in-flight 16 (asked 100, ceiling 16)"),
        ("max-in-flight=0", UNORDERED, 0.0, 0, 0.0, False, "max-in-flight cap lifted"),
        ("max-in-flight=2.5", UNORDERED, 0.0, 0, 0.0, False, "is not a whole number, skipped"),
        ("rate=10", UNORDERED, 0.0, 0, 10.0, False, "rate 10/s"),
        ("rate=0.001", UNORDERED, 0.0, 0, 0.01, False, "rate 0.01/s (asked 0.001, at least 0.01)"),
        ("rate=500", DeliveryOptions(rate_limit=50), 0.0, 0, 50.0, False,
         "rate 50/s (asked 500, rate_limit 50)"),
        ("rate=0", UNORDERED, 0.0, 0, 0.0, False, "rate cap lifted"),
        ("disable", UNORDERED, 0.0, 0, 0.0, True, "disable"),
        ("disable=1", UNORDERED, 0.0, 0, 0.0, False, "disable: takes no value, skipped"),
        ("pause", UNORDERED, 0.0, 0, 0.0, False, "pause: needs a value, skipped"),
        ("pause=-1", UNORDERED, 0.0, 0, 0.0, False, "pause: '-1' is not a number of 0 or more, skipped"),
        ("pause=inf, rate=nan", UNORDERED, 0.0, 0, 0.0, False, "rate: 'nan' is not a number"),
        ("pause=1e9", UNORDERED, 0.0, 0, 0.0, False, "pause: '1e9' is not a number"),
        ("sleep=5", UNORDERED, 0.0, 0, 0.0, False, "unknown directive 'sleep' skipped"),
        ("pause=5, pause=7", UNORDERED, NOW + 7, 0, 0.0, False, "pause 7s"),
        (" pause = 5 ,, rate = 2 ", UNORDERED, NOW + 5, 0, 2.0, False, "pause 5s; rate 2/s"),
        ("pause=5, disable", DeliveryOptions(delivery_control="ignore"), 0.0, 0, 0.0, False,
         "webhook-delivery-control ignored (delivery_control: ignore)"),
    ],
)
def test_what_a_header_value_does(
    value: str, options: DeliveryOptions, pause_until: float, cap: int, rate: float, disable: bool, note: str
) -> None:
    heeded = heed(Asked(), value, options, NOW, MAX_PAUSE)
    asked = heeded.asked
    assert (asked.pause_until, asked.max_in_flight, asked.rate) == (pause_until, cap, rate)
    assert heeded.disable is disable
    assert note in heeded.note


def test_what_was_asked_stays_until_the_receiver_says_otherwise() -> None:
    first = heed(Asked(), "max-in-flight=3, rate=5", UNORDERED, NOW, MAX_PAUSE).asked
    second = heed(first, "pause=2", UNORDERED, NOW + 1, MAX_PAUSE).asked
    assert (second.max_in_flight, second.rate, second.pause_until) == (3, 5.0, NOW + 3)
    assert heed(second, None, UNORDERED, NOW + 2, MAX_PAUSE).asked is second, "no header: nothing changes"
    assert heed(second, "  ", UNORDERED, NOW + 2, MAX_PAUSE).asked is second


def test_only_the_first_directives_are_read() -> None:
    heeded = heed(Asked(), ",".join(["sleep=1"] * 20 + ["pause=9"]), UNORDERED, NOW, MAX_PAUSE)
    assert heeded.asked.pause_until == 0.0 and "only the first 8 directives read" in heeded.note


@pytest.mark.parametrize(
    ("configured", "asked", "rate"), [(0, 0, 0), (10, 0, 10), (0, 5, 5), (10, 5, 5), (5, 10, 5)]
)
def test_the_lower_rate_paces(configured: float, asked: float, rate: float) -> None:
    assert effective_rate(configured, asked) == rate


@given(st.text(max_size=300), st.integers(1, 64), st.sampled_from([0.0, 0.5, 20.0]))
def test_any_header_stays_within_the_receivers_bounds(value: str, ceiling: int, rate_limit: float) -> None:
    options = DeliveryOptions(ordering="none", max_in_flight=ceiling, rate_limit=rate_limit)
    heeded = heed(Asked(), value, options, NOW, MAX_PAUSE)
    asked = heeded.asked
    assert 0 <= asked.pause_until <= NOW + MAX_PAUSE
    assert 0 <= asked.max_in_flight <= ceiling
    assert asked.rate == 0 or 0.01 <= asked.rate <= (rate_limit or 100_000)
    assert len(heeded.note) <= 2000
