"""Retry policy tables: classification, schedules and jitter, Retry-After, overrides."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.retry import (
    STANDARD_SCHEDULE,
    RetryPolicy,
    Verdict,
    parse_retry_after,
    parse_schedule,
)

NOW = datetime(2026, 11, 21, 12, 0, 0, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        (200, Verdict.SUCCESS), (201, Verdict.SUCCESS), (204, Verdict.SUCCESS), (299, Verdict.SUCCESS),
        (None, Verdict.RETRY),  # connect error, timeout, reset
        (301, Verdict.RETRY), (302, Verdict.RETRY), (308, Verdict.RETRY),  # a failure, never followed
        (408, Verdict.RETRY), (425, Verdict.RETRY), (429, Verdict.RETRY),
        (500, Verdict.RETRY), (502, Verdict.RETRY), (503, Verdict.RETRY), (504, Verdict.RETRY),
        (599, Verdict.RETRY),
        (501, Verdict.PERMANENT), (400, Verdict.PERMANENT), (401, Verdict.PERMANENT),
        (403, Verdict.PERMANENT), (404, Verdict.PERMANENT), (413, Verdict.PERMANENT),
        (422, Verdict.PERMANENT),
        (410, Verdict.GONE),
        (101, Verdict.RETRY), (103, Verdict.RETRY),  # no final answer: as http1.py treats it
    ],
)
def test_classification(status: int | None, verdict: Verdict) -> None:
    assert RetryPolicy().classify(status) is verdict


def test_receiver_overrides_move_codes() -> None:
    policy = RetryPolicy().with_overrides({"retryable_statuses": [404, 410], "permanent_statuses": [503]})
    assert policy.classify(404) is Verdict.RETRY
    assert policy.classify(410) is Verdict.RETRY
    assert policy.classify(503) is Verdict.PERMANENT
    assert policy.classify(500) is Verdict.RETRY


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"schedule": []}, "retry.schedule"),
        ({"schedule": [1, "soon"]}, "retry.schedule[1]"),
        ({"schedule": [-1]}, "retry.schedule[0]"),
        ({"max_attempts": 0}, "retry.max_attempts"),
        ({"max_age": "3d"}, "retry.max_age"),
        ({"retryable_statuses": [200]}, "retry.retryable_statuses[0]"),
        ({"retryable_statuses": [404], "permanent_statuses": [404]}, "retry.permanent_statuses"),
        ({"speed": 1}, "retry.speed"),
        ("fast", "retry"),
    ],
)
def test_bad_overrides_name_the_field(spec: object, field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        RetryPolicy().with_overrides(spec)
    assert err.value.field == field


def test_standard_schedule_with_twenty_percent_jitter() -> None:
    policy = RetryPolicy()
    for n, base in enumerate(STANDARD_SCHEDULE, start=1):
        low, mid, high = (policy.delay(n, r) for r in (0.0, 0.5, 0.999999))
        assert low == pytest.approx(base * 0.8)
        assert mid == pytest.approx(base)
        assert high == pytest.approx(base * 1.2, rel=1e-5)
    assert policy.delay(50, 0.5) == STANDARD_SCHEDULE[-1]
    assert policy.max_attempts == len(STANDARD_SCHEDULE) + 1


def test_exponential_with_full_jitter_is_capped() -> None:
    policy = RetryPolicy(schedule=(), base=2.0, cap=60.0)
    for n in range(1, 40):
        bound = min(60.0, 2.0 * 2 ** (n - 1))
        assert policy.delay(n, 0.0) == 0.0
        assert policy.delay(n, 0.999999) == pytest.approx(bound, rel=1e-5)
        assert 0.0 <= policy.delay(n, 0.37) <= bound


def test_schedule_setting_parses_durations() -> None:
    assert parse_schedule("5s,5m,30m,2h,5h,10h,10h,14h,20h,24h", "S") == STANDARD_SCHEDULE
    assert parse_schedule("250ms, 1.5s, 2", "S") == (0.25, 1.5, 2.0)
    assert parse_schedule("exponential", "S") == ()
    with pytest.raises(InvalidInput, match="duration"):
        parse_schedule("5 minutes", "S")


def http_date(offset: float) -> str:
    return format_datetime(datetime.fromtimestamp(NOW + offset, UTC), usegmt=True)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("120", 120.0),
        (" 7 ", 7.0),
        ("0", 0.0),
        (http_date(90), 90.0),
        (http_date(-90), None),  # past
        ("-5", None),  # negative
        ("1.5", None),  # not delta-seconds
        ("soon", None),
        ("", None),
        (None, None),
        ("Wed, 99 Foo 2026 25:00:00 GMT", None),
        ("99999999999999999999", 86400.0),  # huge: clamped by the caller to 24 h anyway
    ],
)
def test_retry_after_parsing(value: str | None, expected: float | None) -> None:
    got = parse_retry_after(value, NOW)
    assert got == (pytest.approx(expected) if expected is not None else None)


@pytest.mark.parametrize(
    ("retry_after", "expected"),
    [(None, 5.0), (2.0, 5.0), (60.0, 60.0), (10 * 86400.0, 86400.0)],
)
def test_retry_after_is_clamped_between_schedule_and_a_day(
    retry_after: float | None, expected: float
) -> None:
    assert RetryPolicy(jitter=0.0).next_delay(1, 0.5, retry_after) == expected


@pytest.mark.parametrize("retry_after", [None, 1.0, 86400.0, 10 * 86400.0])
def test_a_retry_after_never_shortens_a_schedule_longer_than_its_cap(retry_after: float | None) -> None:
    """The 24 h cap bounds what a receiver asks for; a receiver's own 10-day step stays 10 days."""
    policy = RetryPolicy(schedule=(10 * 86400.0,), jitter=0.0)
    assert policy.next_delay(1, 0.5, retry_after) == 10 * 86400.0


@pytest.mark.parametrize("failures", [1_024, 1_025, 10_000, 10**9])
def test_an_exponential_delay_after_very_many_failures_is_the_cap(failures: int) -> None:
    """2**1024 does not fit a float: the delay must not raise once max_attempts allows that many."""
    policy = RetryPolicy(schedule=(), base=0.05, cap=30.0)
    assert policy.delay(failures, 0.5) == 15.0
