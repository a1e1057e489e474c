"""What one attempt's outcome means for its message: the ladder the ordered head and the window share.

A 2xx settles the message. 410 Gone disables the receiver (the message
stays, counted as tried). A permanent status dead-letters it, and so does a
failure that uses up `max_attempts`. Any other failure retries it after the
backoff, which a Retry-After on a 429 or 503 may stretch. Each path acts on
the ruling in its own place: the head's attempts live in the state, a window
message's in its slot. Age is not judged here: an expired message is
dead-lettered when it is next due, whatever its last answer was.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..records import Outcome
from ..retry import RetryPolicy, Verdict, parse_retry_after
from .effects import MAX_ATTEMPTS, PERMANENT_STATUS


class Next(enum.Enum):
    SETTLE = "settle"
    DISABLE = "disable"
    DEAD_LETTER = "dead_letter"
    RETRY = "retry"


@dataclass(slots=True, frozen=True)
class Ruling:
    """What happens to the message next, with what that needs."""

    next: Next
    attempt: int  # which attempt of the message this was; when it failed, its failed attempts so far
    reason: str = ""  # DEAD_LETTER: the dead letter's reason; DISABLE: why the receiver is disabled
    detail: str = ""  # DEAD_LETTER: what the dead letter says about it
    retry_at: float = 0.0  # RETRY: when the next attempt is due


def rule(outcome: Outcome, failed: int, retry: RetryPolicy, now: float, rand: float) -> Ruling:
    """The ruling on `outcome`, an attempt of a message that had failed `failed` times before it."""
    attempt = failed + 1
    verdict = retry.classify(outcome.status)
    if verdict is Verdict.SUCCESS:
        return Ruling(Next.SETTLE, attempt)
    if verdict is Verdict.GONE:
        return Ruling(Next.DISABLE, attempt, f"receiver answered 410 Gone (seq {outcome.seq})")
    if verdict is Verdict.PERMANENT:
        return Ruling(Next.DEAD_LETTER, attempt, PERMANENT_STATUS, f"{describe(outcome)}, not retryable")
    if attempt >= retry.max_attempts:
        return Ruling(Next.DEAD_LETTER, attempt, MAX_ATTEMPTS, f"{describe(outcome)}, {attempt} attempts")
    retry_after = None
    if outcome.status in (429, 503):
        retry_after = parse_retry_after(outcome.headers.get("retry-after"), now)
    return Ruling(Next.RETRY, attempt, retry_at=now + retry.next_delay(attempt, rand, retry_after))


def describe(outcome: Outcome) -> str:
    """The answer in a few words: its status, else the error (a timeout, a refused connection)."""
    if outcome.status is not None:
        return f"HTTP {outcome.status}"
    return outcome.error or "no response"
