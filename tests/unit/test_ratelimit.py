"""The token bucket behind per-receiver rate limits and the slow lane's pace."""

from __future__ import annotations

from dispatcher.domain.ratelimit import Bucket, burst_of


def test_a_new_bucket_is_full_then_refills_at_the_rate() -> None:
    rate, burst = 2.0, burst_of(2.0)
    bucket = Bucket()
    assert bucket.level(rate, burst, 100.0) == 2.0
    bucket = bucket.take(2, rate, burst, 100.0)
    assert bucket.level(rate, burst, 100.0) == 0.0
    assert bucket.wait(1, rate, burst, 100.0) == 0.5
    assert bucket.level(rate, burst, 100.25) == 0.5
    assert bucket.level(rate, burst, 200.0) == 2.0, "never more than the burst"


def test_slow_rates_still_allow_one() -> None:
    assert burst_of(0.1) == 1.0
    bucket = Bucket().take(1, 0.1, 1.0, 0.0)
    assert bucket.wait(1, 0.1, 1.0, 0.0) == 10.0
