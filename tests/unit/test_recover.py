"""Recover's pure parts (times as unix seconds or RFC 3339, the request body, paging) and which
messages resend takes."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.recover import RecoverRequest, parse_instant, parse_recover, recover_page
from web.resend_ops import delivered_entry

NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, 0.0),
        (1_700_000_000, 1_700_000_000.0),
        (1_700_000_000.5, 1_700_000_000.5),
        ("1700000000", 1_700_000_000.0),
        ("1700000000.25", 1_700_000_000.25),
        ("2023-11-14T22:13:20Z", 1_700_000_000.0),
        ("2023-11-14T22:13:20.5+00:00", 1_700_000_000.5),
        ("2023-11-15T00:13:20+02:00", 1_700_000_000.0),
    ],
)
def test_instants_parse(value: Any, expected: float) -> None:
    assert parse_instant(value, "since") == expected


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (True, "unix seconds or an RFC 3339"),
        (None, "unix seconds or an RFC 3339"),
        ([1], "unix seconds or an RFC 3339"),
        (-1, "1970"),
        ("-5", "1970"),
        ("nan", "1970"),
        ("inf", "1970"),
        ("yesterday", "neither unix seconds"),
        ("2023-11-14T22:13:20", "offset"),
    ],
)
def test_bad_instants_name_the_field(value: Any, fragment: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_instant(value, "until")
    assert caught.value.field == "until" and fragment in caught.value.message


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"since": 10}, RecoverRequest(10.0, NOW, 0, 1000)),
        ({"since": 10, "until": None}, RecoverRequest(10.0, NOW, 0, 1000)),
        ({"since": 10, "until": 20, "after_seq": 7, "limit": 3}, RecoverRequest(10.0, 20.0, 7, 3)),
        ({"since": "2023-11-14T22:13:20Z", "until": NOW}, RecoverRequest(NOW, NOW, 0, 1000)),
    ],
)
def test_recover_bodies_parse(body: dict[str, Any], expected: RecoverRequest) -> None:
    assert parse_recover(body, NOW, 10_000) == expected


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "body"),
        ({}, "since"),
        ({"since": 1, "from_seq": 2}, "from_seq"),
        ({"since": 20, "until": 10}, "until"),
        ({"since": NOW + 1}, "until"),  # until defaults to now
        ({"since": 1, "after_seq": -1}, "after_seq"),
        ({"since": 1, "after_seq": 1.5}, "after_seq"),
        ({"since": 1, "limit": 0}, "limit"),
        ({"since": 1, "limit": 10_001}, "limit"),
        ({"since": 1, "limit": True}, "limit"),
    ],
)
def test_bad_recover_bodies_name_the_field(body: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_recover(body, NOW, 10_000)
    assert caught.value.field == field


def letters(*times: float) -> list[dict[str, Any]]:
    return [{"seq": seq, "at": at} for seq, at in enumerate(times, start=1)]


@pytest.mark.parametrize(
    ("times", "since", "until", "limit", "more", "seqs", "cursor"),
    [
        ((), 0, 10, 5, False, [], None),
        ((1, 2, 3), 0, 10, 5, False, [1, 2, 3], None),
        ((1, 5, 9), 2, 8, 5, False, [2], None),  # outside the window: left
        ((1, 5, 9), 1, 9, 5, False, [1, 2, 3], None),  # both ends included
        ((1, 2, 3, 4), 0, 10, 2, False, [1, 2], 2),  # the page is full: go on after it
        ((1, 2), 0, 10, 2, False, [1, 2], None),  # full and the last one read: done
        ((1, 2), 0, 10, 2, True, [1, 2], 2),  # full, more unread
        ((1, 20, 30), 0, 10, 5, True, [1], 3),  # more unread: go on after the last read
        ((20, 30), 0, 10, 5, True, [], 2),  # nothing matched yet, more unread
    ],
)
def test_recover_pages(
    times: tuple[float, ...], since: float, until: float, limit: int, more: bool, seqs: list[int],
    cursor: int | None,
) -> None:
    chosen, next_after = recover_page(letters(*times), RecoverRequest(since, until, 0, limit), more)
    assert [letter["seq"] for letter in chosen] == seqs and next_after == cursor


# resend: which messages can be sent again -----------------------------------------------


class Kept:
    """The parts of the engine `delivered_entry` reads: one receiver's messages by seq."""

    def __init__(
        self, pending: set[int], dead: set[int], kept: set[int], superseded: frozenset[int] = frozenset()
    ) -> None:
        self.pending, self.dead, self.kept, self.superseded = pending, dead, kept, superseded
        self.settings = SimpleNamespace(policy=SimpleNamespace(retain=3600.0))

    def is_pending(self, rid: str, seq: int) -> bool:
        return seq in self.pending

    def dead_letter(self, rid: str, seq: int) -> dict[str, Any] | None:
        return {"seq": seq} if seq in self.dead else None

    def superseded_by(self, rid: str, seq: int) -> int:
        return seq + 1 if seq in self.superseded else 0

    def messages_after(self, rid: str, after: int, limit: int) -> list[tuple[dict[str, Any], float | None]]:
        later = sorted(s for s in self.kept | self.pending if s > after)[:limit]
        return [({"seq": s, "type": "t.x", "data": {}}, None if s in self.pending else 1.0) for s in later]


@pytest.mark.parametrize(
    ("seq", "status", "code", "fragment"),
    [
        (0, 409, "not_delivered", "filter"),
        (2, 409, "not_delivered", "pending"),
        (3, 409, "not_delivered", "dead-lettered"),
        (7, 409, "not_delivered", "superseded by seq 8"),
        (4, 410, "expired", "DISPATCHER_RETAIN_SECONDS=3600"),  # swept: the next kept one is 5
        (6, 410, "expired", "no longer kept"),  # nothing kept above it
    ],
)
def test_only_a_delivered_kept_message_is_resent(seq: int, status: int, code: str, fragment: str) -> None:
    engine = Kept(pending={2}, dead={3}, kept={1, 5}, superseded={7})
    with pytest.raises(InvalidInput) as caught:
        delivered_entry(engine, "r", seq)  # type: ignore[arg-type]
    error = caught.value
    assert (error.status, error.code, error.field) == (status, code, "message_id")
    assert fragment in error.message


def test_a_delivered_kept_message_is_resent() -> None:
    engine = Kept(pending={2}, dead={3}, kept={1, 5})
    assert delivered_entry(engine, "r", 5)["seq"] == 5  # type: ignore[arg-type]
