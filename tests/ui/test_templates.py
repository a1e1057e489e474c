"""Every console page rendered from fixtures: hostile text from receivers and producers comes out as
text, and nothing a page shows is a secret."""

from __future__ import annotations

from typing import Any

import pytest
from jinja2 import Environment

from web.ui import environment
from web.ui.charts import activity_bars, sparkline
from web.ui.filters import when, window_reason

HOSTILE = '<script>window.pwned=1</script><img src=x onerror="window.pwned=1">'
NOW = 1_790_000_000.0
COMMON = {"csrf": "csrf-token", "own_url": "http://127.0.0.1:8080", "path": "/ui/", "tenant": ""}


def attempt(n: int, ok: bool) -> dict[str, Any]:
    return {"number": n, "kind": "message", "seq": n, "last": 0, "attempt": 1, "msg_id": f"msg_{n}",
            "ok": ok, "status": 200 if ok else 500, "error": None if ok else HOSTILE, "latency_ms": 12.5 * n,
            "at": NOW - 60 + n, "headers": {"x-evil": HOSTILE}, "body_prefix": HOSTILE}


def receiver_view() -> dict[str, Any]:
    return {
        "id": "rcv_1", "url": f"http://127.0.0.1:9/hook?{HOSTILE}", "event_types": ["invoice.*"],
        "tenant": HOSTILE, "signing": "hmac-sha256", "verified": True, "verify": False, "partition": 3,
        "headers": {"x-custom": HOSTILE}, "previous_secrets_valid_until": [NOW + 86400],
        "state": {
            "status": "retrying", "paused": False, "disabled": False, "disabled_reason": None,
            "circuit": "open", "consecutive_failures": 3, "failure_ratio": 0.5, "next_seq": 8,
            "delivered_seq": 4, "head_seq": 5, "head_attempts": 2, "next_attempt_at": NOW + 5,
            "backlog": 3, "oldest_undelivered_age": 42.0, "failing_since": NOW - 30, "delivered": 4,
            "failed_attempts": 3, "dead_lettered": 1, "lane": {"lane": "fast"},
            "concurrency": {"mode": "adaptive", "window": 3, "ceiling": 8, "changed_at": NOW - 10,
                            "reason": "429", "plateau": 6, "baseline_ms": 4.5, "cuts": 2},
            "delivery_control": {"mode": "obey", "paused_until": NOW + 90, "max_in_flight": 3, "rate": 2.5,
                                 "last_at": NOW - 10, "last": f"unknown directive {HOSTILE!r} skipped"},
            "heartbeat": {"interval": 30.0, "sent": 7, "last_at": NOW - 40, "next_at": NOW + 20},
            "last_response": {**attempt(3, False), "control": f"webhook-delivery-control: {HOSTILE}"},
        },
    }


def heartbeat_attempt(n: int) -> dict[str, Any]:
    return {**attempt(n, True), "kind": "heartbeat", "seq": 0, "msg_id": f"heartbeat_{n}",
            "control": f"webhook-delivery-control: pause 5s; unknown directive {HOSTILE!r} skipped"}


def pages() -> dict[str, dict[str, Any]]:
    view = receiver_view()
    attempts = [heartbeat_attempt(4), attempt(3, False), attempt(2, True), attempt(1, True)]
    minutes = [{"minute": 60 * i, "ok": i, "failed": i % 2, "dead_letters": 0} for i in range(15)]
    letter = {"seq": 2, "msg_id": "msg_2", "reason": "permanent_status", "detail": HOSTILE, "at": NOW}
    summary = {"id": "rcv_1", "url": view["url"], "tenant": HOSTILE, "status": "failing", "circuit": "open",
               "lane": "slow", "backlog": 7, "oldest_undelivered_age": 90.0,
               "last_answer": {"ok": False, "status": None, "error": HOSTILE, "at": NOW}}
    return {
        "login.html": {"error": "That is not the API token.", "next": "/ui/", "csrf": ""},
        "error.html": {"error": type("E", (), {"status": 404, "code": "not_found", "field": "receiver_id",
                                               "message": HOSTILE})()},
        "overview.html": {
            "workers": [{"url": "http://127.0.0.1:8080", "ready": True, "self": True, "partitions": [0, 1]},
                        {"url": "http://127.0.0.1:8081", "error": "ClientConnectorError"}],
            "minutes": minutes, "bars": activity_bars(minutes), "ok": 105, "failed": 7, "rate": 0.9375,
            "by_status": {"active": 3, "failing": 1}, "statuses": ("active", "failing", "paused"),
            "oldest": [{"receiver_id": "rcv_1", "age": 90.0}], "dead_last_hour": 2, "unreachable": ["http://127.0.0.1:8081"],
        },
        "receivers.html": {"page": {"receivers": [summary], "next_cursor": "rcv_1"},
                           "form": {"search": HOSTILE, "tenant": "", "event_type": "", "status": ""},
                           "statuses": ("active", "failing"), "cursor": "rcv_0", "query": {"search": HOSTILE},
                           "now": NOW},
        "receiver.html": {"r": view, "s": view["state"], "attempts": attempts,
                          "bars": sparkline(attempts[::-1]), "letters": [letter], "notice": "Paused.",
                          "now": NOW,
                          "ping": {"ok": False, "status": 418, "error": None, "latency_ms": 3.2,
                                   "headers": {"x-evil": HOSTILE}, "body_prefix": HOSTILE},
                          "sent": {"id": "msg_9"}, "replayed": {"replayed": 1, "skipped": 1}},
        "secret.html": {"r": view, "secret": "whsec_shown_once"},
        "deleted.html": {"answer": {"id": "rcv_1", "deleted": True, "dead_lettered": 3}},
        "message.html": {"m": {"id": "msg_1", "receiver_id": "rcv_1", "seq": 1, "status": "dead_lettered",
                               "reason": "max_attempts", "detail": HOSTILE, "at": NOW},
                         "payload": HOSTILE, "entry": {"type": HOSTILE, "accepted_at": NOW},
                         "timeline": [attempt(1, False), {**attempt(2, True), "control": HOSTILE}]},
        "events.html": {"rid": "rcv_1", "after": 0, "q": HOSTILE, "stopped": 0, "found": {
            "events": [{"seq": 1, "id": "msg_1", "type": HOSTILE, "timestamp": "2026-01-01T00:00:00Z",
                        "status": "delivered", "data_json": HOSTILE}],
            "next_after_seq": 1, "retained_seconds": 86400}},
        "lookup.html": {"form": {"receiver_id": HOSTILE, "message_id": ""}},
        "publish.html": {"form": {"event_type": HOSTILE, "tenant": "", "payload": HOSTILE},
                         "result": {"id": "evt_1", "event_type": HOSTILE, "receivers": 4}},
        "tail.html": {"receiver_id": HOSTILE},
    }


@pytest.fixture(scope="module")
def env() -> Environment:
    return environment()


def test_every_template_has_a_fixture(env: Environment) -> None:
    names = {n for n in env.list_templates() if n != "base.html"}
    assert names == set(pages())


@pytest.mark.parametrize("name", sorted(pages()))
def test_page_renders_hostile_text_as_text(env: Environment, name: str) -> None:
    html = env.get_template(name).render({**COMMON, **pages()[name]})
    assert "<script>window" not in html and "<img src=x" not in html
    assert "onerror=\"window" not in html
    if "pwned" in html:  # shown, escaped
        assert "&lt;script&gt;" in html or "&lt;img" in html
    assert "<script" not in html.replace('<script src="/ui/static/tail.js"></script>', "")


def test_no_template_marks_anything_safe() -> None:
    from web.ui import WEB

    for path in (WEB / "templates").glob("*.html"):
        text = path.read_text()
        assert "|safe" not in text.replace(" ", "") and "autoescape false" not in text, path.name


def test_forms_that_change_something_carry_the_csrf_token(env: Environment) -> None:
    for name, context in pages().items():
        if name == "login.html":
            continue
        html = env.get_template(name).render({**COMMON, **context})
        for form in html.split("<form")[1:]:
            if 'method="post"' in form.split(">", 1)[0]:
                assert 'name="csrf" value="csrf-token"' in form, name


def test_the_receiver_page_shows_no_secret(env: Environment) -> None:
    view = receiver_view()
    html = env.get_template("receiver.html").render({**COMMON, **pages()["receiver.html"], "r": view})
    assert "whsec_" not in html and "secret\"" not in html.lower()


def test_the_receiver_page_says_custom_header_values_are_shown(env: Environment) -> None:
    html = env.get_template("receiver.html").render({**COMMON, **pages()["receiver.html"]})
    assert "(no secrets)" not in html and "custom header values are shown as configured" in html


def receiver_page(env: Environment, **state: Any) -> str:
    """The receiver page of the fixture with these parts of its state replaced."""
    context = pages()["receiver.html"]
    view = receiver_view()
    view["state"].update(state)
    return env.get_template("receiver.html").render({**COMMON, **context, "r": view, "s": view["state"]})


def test_the_receiver_page_shows_the_window_what_the_receiver_asked_and_heartbeats(env: Environment) -> None:
    html = receiver_page(env)
    assert '<dd id="window">3 of 8 (adaptive)</dd>' in html
    assert f'<dd id="window-change">{when(NOW - 10)}: halved on a 429 answer</dd>' in html
    assert '<dd id="window-cuts">2 (the last from 6)</dd>' in html
    assert f'<dd id="asked-pause">{when(NOW + 90)} (in 2 min)</dd>' in html
    assert '<dd id="asked-cap">3</dd>' in html and '<dd id="asked-rate">2.5/s</dd>' in html
    assert '<dd id="heartbeats-sent">7</dd>' in html
    assert f'<dd id="heartbeat-next">{when(NOW + 20)}</dd>' in html


def test_control_notes_are_shown_as_text(env: Environment) -> None:
    """The notes quote what the receiver's header said: escaped where they are shown."""
    html = receiver_page(env)
    escaped = "&lt;script&gt;window.pwned=1&lt;/script&gt;"
    asked = html.split('<dd id="asked-last">', 1)[1].split("</dd>", 1)[0]
    assert asked.startswith("unknown directive ") and escaped in asked
    assert escaped in html.split('<p id="last-control">', 1)[1].split("</p>", 1)[0]
    heartbeat_row = html.split('<tr class="kind-heartbeat">', 1)[1].split("</tr>", 1)[0]
    control = heartbeat_row.split('<td class="control">', 1)[1]
    assert control.startswith("webhook-delivery-control: pause 5s; unknown directive") and escaped in control
    assert "<td>heartbeat</td>" in heartbeat_row
    assert "/messages/heartbeat_4" not in html, "a heartbeat is no message: its id is not a link"
    assert html.count('<td class="control"></td>') == 3, "attempts without a note: an empty cell"


def test_an_ordered_receiver_without_heartbeats_that_ignores_the_header(env: Environment) -> None:
    quiet = {"mode": "ignore", "paused_until": None, "max_in_flight": None, "rate": None, "last_at": None,
             "last": None}
    html = receiver_page(env, concurrency=None, heartbeat=None, delivery_control=quiet)
    assert "Ordered: one message at a time." in html and 'id="window"' not in html
    assert "Off: no <code>heartbeat_interval</code>." in html and 'id="heartbeats-sent"' not in html
    assert "which this receiver's settings ignore" in html
    for part in ('<dd id="asked-pause">not paused</dd>', '<dd id="asked-cap">—</dd>',
                 '<dd id="asked-rate">—</dd>', '<dd id="asked-last">—</dd>'):
        assert part in html, part


def test_a_fixed_window_and_a_heartbeat_not_due(env: Environment) -> None:
    fixed = {"mode": "fixed", "window": 6, "ceiling": 6, "changed_at": None, "reason": None, "plateau": None,
             "baseline_ms": None, "cuts": 0}
    html = receiver_page(env, concurrency=fixed,
                         heartbeat={"interval": 3600.0, "sent": 0, "last_at": None, "next_at": None})
    assert '<dd id="window">6 of 6 (fixed)</dd>' in html and 'id="window-change"' not in html
    assert '<dd id="heartbeats-sent">0</dd>' in html and "after 1 h idle" in html
    assert '<dd id="heartbeat-next">none while' in html


@pytest.mark.parametrize(("reason", "words"), [
    ("start", "started at 1"), ("grew", "grew after a run of fast answers"),
    ("ceiling", "lowered to max_in_flight"), ("timeout", "halved on a timeout"),
    ("latency", "halved on an answer slower than the baseline"), ("503", "halved on a 503 answer"),
    (None, "—"), ("something new", "something new"),
])
def test_window_reasons_in_words(reason: str | None, words: str) -> None:
    assert window_reason(reason) == words
