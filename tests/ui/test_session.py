"""The console's session cookie, CSRF token, login throttle and activity figures, on fake clocks."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson
import pytest

from dispatcher.activity import Activity
from web.ui.guard import safe_next
from web.ui.session import LoginThrottle, SessionKeys


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_cookie_is_good_on_any_worker_with_the_same_token_until_it_expires() -> None:
    clock = Clock()
    issuer, other = SessionKeys("tok", 60, clock), SessionKeys("tok", 60, clock)
    cookie = issuer.issue()
    session = other.check(cookie)
    assert session is not None and other.csrf_ok(session, issuer.csrf(session))
    clock.now += 61
    assert other.check(cookie) is None


def _flip_last(cookie: str) -> str:
    return cookie[:-1] + ("B" if cookie.endswith("A") else "A")


@pytest.mark.parametrize("tamper", [
    _flip_last, lambda c: "9" + c, lambda c: c.replace(".", "", 1), lambda c: "", lambda c: "a.b.c",
])
def test_a_forged_or_altered_cookie_is_refused(tamper: Callable[[str], str]) -> None:
    keys = SessionKeys("tok", 60, Clock())
    assert keys.check(tamper(keys.issue())) is None


def test_a_new_token_ends_every_session_and_no_token_logs_nobody_in() -> None:
    cookie = SessionKeys("tok", 60, Clock()).issue()
    assert SessionKeys("other", 60, Clock()).check(cookie) is None
    assert SessionKeys("", 60, Clock()).check(cookie) is None
    assert not SessionKeys("", 60).token_ok("", "")


def test_the_csrf_token_belongs_to_its_session() -> None:
    keys = SessionKeys("tok", 60, Clock())
    one, two = keys.check(keys.issue()), keys.check(keys.issue())
    assert one is not None and two is not None
    assert not keys.csrf_ok(two, keys.csrf(one))
    assert not keys.csrf_ok(one, "")


def test_bad_logins_wait_longer_each_time_and_a_good_one_clears() -> None:
    clock = Clock()
    throttle = LoginThrottle(cap=60, clock=clock)
    waits = []
    for _ in range(9):
        throttle.failed("1.2.3.4")
        waits.append(throttle.wait_for("1.2.3.4"))
    assert waits[:2] == [0, 0] and waits[2:] == [1, 2, 4, 8, 16, 32, 60]
    assert throttle.wait_for("5.6.7.8") == 0
    clock.now += 60
    assert throttle.wait_for("1.2.3.4") == 0
    throttle.succeeded("1.2.3.4")
    throttle.failed("1.2.3.4")
    assert throttle.wait_for("1.2.3.4") == 0


def test_the_throttle_forgets_the_oldest_addresses_past_its_size() -> None:
    throttle = LoginThrottle(size=2, clock=Clock())
    for address in ("a", "b", "c"):
        for _ in range(5):
            throttle.failed(address)
    assert throttle.wait_for("a") == 0 and throttle.wait_for("c") > 0


@pytest.mark.parametrize(("target", "expected"), [
    ("/ui/receivers?q=x", "/ui/receivers?q=x"), ("//evil.example/ui/", "/ui/"), ("https://evil/", "/ui/"),
    ("/ui/\\evil", "/ui/"), ("/v1/receivers", "/ui/"),
])
def test_login_goes_on_to_console_paths_only(target: str, expected: str) -> None:
    assert safe_next(target) == expected


def record(ok: bool) -> bytes:
    return orjson.dumps({"number": 1, "ok": ok, "status": 200 if ok else 500, "body_prefix": '"ok":true'})


async def test_activity_counts_per_minute_and_wakes_the_tail() -> None:
    clock = Clock(600.0)
    activity = Activity(clock)
    activity.attempt("r1", record(True))
    activity.attempt("r1", record(False))
    activity.dead_letter("r1", b"{}")
    clock.now += 60
    activity.attempt("r2", record(True))
    figures = activity.figures(minutes=3)
    assert [(m["ok"], m["failed"]) for m in figures["minutes"]] == [(0, 0), (1, 1), (1, 0)]
    assert figures["dead_letters_last_hour"] == 1
    newest, found = activity.since(1)
    assert newest == 3 and [a["receiver_id"] for a in found] == ["r1", "r2"]
    waiting = asyncio.ensure_future(activity.wait_since(3, 5))
    await asyncio.sleep(0)
    activity.attempt("r3", record(True))
    assert (await waiting)[1][0]["receiver_id"] == "r3"
    clock.now += 3600
    assert activity.figures()["dead_letters_last_hour"] == 0
