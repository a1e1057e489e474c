"""Receivers' transforms: template checks, evaluation, results, URL joining and the work budget, as tables."""

from __future__ import annotations

import importlib.metadata
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jsone
import orjson
import pytest

from dispatcher.domain import jsone_bounded
from dispatcher.domain.actor import TRANSFORM_ERROR, DeadLetterHead, DeleteBacklog, MarkCancelled, Result
from dispatcher.domain.breaker import Circuit
from dispatcher.domain.delivery_options import DeliveryOptions
from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.jsone_bounded import Budget
from dispatcher.domain.receiver_spec import parse_receiver_spec, patched_body
from dispatcher.domain.records import Outcome, ReceiverConfig
from dispatcher.domain.signing import signature_header
from dispatcher.domain.transform import (
    MAX_BODY_BYTES,
    Transformed,
    TransformError,
    apply,
    check_path,
    check_transform,
    join_url,
    message_context,
    receiver_context,
)
from dispatcher.domain.transform_preview import preview
from dispatcher.domain.webhook import build_transformed, transform_entry
from tests.unit.test_actor import CONFIG, io, step, with_backlog
from tests.unit.test_actor_window import Window

ROOT = Path(__file__).parents[2]
SECRET = "whsec_" + "A" * 32
NOW = 1_700_000_000.0


def context(payload: Any = None, **extra: Any) -> dict[str, Any]:
    entry = {"id": "m1", "seq": 7, "type": "order.created", "data": payload, "headers": {"x-region": "eu"}}
    return {**message_context(entry, receiver_context("r1", "acme", ("order.*",)), "T", "NOW"), **extra}


def nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return value


NESTED_40 = nested(40)


# template checks at create ------------------------------------------------------------------------

@pytest.mark.parametrize(("template", "field", "says"), [
    ([1], "transform", "must be a json-e template object"),
    ("${payload}", "transform", "must be a json-e template object"),
    ({"body": {"text": "${payload."}}, "transform.body.text", "SyntaxError"),
    ({"body": {"$eval": "1 +"}}, "transform.body.$eval", "SyntaxError"),
    ({"$if": "event_type ==", "then": {}}, "transform.$if", "SyntaxError"),
    ({"b": {"$sort": [], "by(x)": "x +"}}, "transform.b.by(x)", "SyntaxError"),
    ({"b": {"$match": {"x >": 1}}}, "transform.b.$match", "SyntaxError"),
    ({"b": {"$eval": "!" * 80 + "true"}}, "transform.b.$eval", "nests deeper"),
    ({"b": {"$eval": "1" + "+1" * 600}}, "transform.b.$eval", "longer than 1024"),
    ({"b": "${" + "1+" * 600 + "1}"}, "transform.b", "longer than 1024"),
    ({"b": "x" * (17 * 1024)}, "transform", "at most 16384 bytes"),
    (NESTED_40, "transform", "deeper than 32"),
])
def test_a_bad_template_is_refused_naming_the_path(template: Any, field: str, says: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_transform(template)
    assert caught.value.field.startswith(field) and says in caught.value.message


@pytest.mark.parametrize("template", [
    None,
    {},
    {"body": {"text": "${payload.name} ($${literal})"}},
    {"$if": "event_type == 'ping'", "then": {"cancel": True}, "else": {"body": {"$eval": "payload"}}},
    {"body": {"$map": {"$eval": "payload.items"}, "each(x)": {"$eval": "x.id"}}},
    {"path": "/orders/${payload.id}", "headers": {"x-kind": "${event_type}"}},
])
def test_a_good_template_is_kept_as_given(template: Any) -> None:
    assert check_transform(template) == template


# evaluation ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("template", "payload", "expected"), [
    ({}, {"a": 1}, Transformed()),
    ({"body": {"text": "new ${event_type} for ${receiver.tenant}"}}, {},
     Transformed(body=b'{"text":"new order.created for acme"}')),
    ({"body": {"$eval": "payload.items[1:]"}}, {"items": [1, 2, 3]}, Transformed(body=b"[2,3]")),
    ({"body": {"$map": {"$eval": "payload.items"}, "each(x)": {"id": "${x}"}}}, {"items": [1, 2]},
     Transformed(body=b'[{"id":"1"},{"id":"2"}]')),
    ({"body": {"$eval": "headers['x-region'] + '/' + message.id + '/' + str(message.seq)"}}, {},
     Transformed(body=b'"eu/m1/7"')),
    ({"body": None}, {}, Transformed(body=b"null")),
    ({"$if": "payload.skip", "then": {"cancel": True}, "else": {}}, {"skip": True}, Transformed(cancel=True)),
    ({"$if": "payload.skip", "then": {"cancel": True}, "else": {}}, {"skip": False}, Transformed()),
    ({"cancel": True, "body": "ignored", "path": "//ignored"}, {}, Transformed(cancel=True)),
    ({"cancel": False, "headers": {"X-Id": "${payload.id}"}}, {"id": 5}, Transformed(headers={"X-Id": "5"})),
    ({"path": "/orders/${payload.id}?v=2"}, {"id": 5}, Transformed(path="/orders/5?v=2")),
    ({"path": ""}, {}, Transformed()),
    ({"body": {"$eval": "2 ** 10"}}, {}, Transformed(body=b"1024")),
    ({"body": {"$eval": "fromNow('1 day', '2024-01-01T00:00:00.000Z')"}}, {},
     Transformed(body=b'"2024-01-02T00:00:00.000Z"')),
])
def test_a_template_shapes_the_message(template: dict[str, Any], payload: Any, expected: Transformed) -> None:
    assert apply(template, context(payload)) == expected


@pytest.mark.parametrize(("template", "field", "says"), [
    ({"$eval": "payload.s"}, "transform", "must evaluate to an object"),
    ({"$eval": "payload"}, "transform.s", "is not one of body, headers, path, cancel"),
    ({"$if": "false", "then": {}}, "transform", "must evaluate to an object"),
    ({"bodyy": 1}, "transform.bodyy", "is not one of body, headers, path, cancel"),
    ({"cancel": "yes"}, "transform.cancel", "must be true or false"),
    ({"headers": {"webhook-signature": "v1,x"}}, "transform.headers.webhook-signature", "reserved"),
    ({"headers": {"Host": "evil.example"}}, "transform.headers.Host", "reserved"),
    ({"headers": {"Content-Length": "1"}}, "transform.headers.Content-Length", "reserved"),
    ({"headers": {"Authorization": "Bearer x"}}, "transform.headers.Authorization", "authorization"),
    ({"headers": {"x-a": "a\r\nx-b: b"}}, "transform.headers.x-a", "CR, LF"),
    ({"headers": {"bad name": "v"}}, "transform.headers.bad name", "HTTP token"),
    ({"headers": {"x-n": {"$eval": "1"}}}, "transform.headers.x-n", "must be a string"),
    ({"headers": "x"}, "transform.headers", "must be an object"),
    ({"body": {"$eval": "payload.missing.deeper"}}, "transform", "InterpreterError"),
    ({"body": {"$eval": "sqrt(-1)"}}, "transform", "math domain error"),
    ({"body": {"$eval": "payload.s"}, "path": 5}, "transform.path", "must be a string"),
    ({"path": "https://evil.example/x"}, "transform.path", "scheme"),
    ({"body": {"$eval": "range(0, 5)"}, "other": 1}, "transform.other", "is not one of"),
])
def test_a_failing_template_or_result_names_the_part(template: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(TransformError) as caught:
        apply(template, context({"s": "x"}))
    assert caught.value.field == field and says in caught.value.message
    assert caught.value.code == TRANSFORM_ERROR


def test_a_body_over_the_limit_is_refused() -> None:
    # Within the budget's bound in characters; over the body's in bytes, each one escaped in six.
    with pytest.raises(TransformError) as caught:
        apply({"body": {"$eval": "payload"}}, context("\x01" * (MAX_BODY_BYTES // 5)))
    assert caught.value.field == "transform.body" and "at most" in caught.value.message


# paths: never another host ---------------------------------------------------------------------------

@pytest.mark.parametrize(("url", "suffix", "expected"), [
    ("https://h.example/hooks", "/orders/5", "https://h.example/hooks/orders/5"),
    ("https://h.example/hooks/", "orders/5", "https://h.example/hooks/orders/5"),
    ("https://h.example", "/a", "https://h.example/a"),
    ("https://h.example:8443/x?k=1", "/y?v=2", "https://h.example:8443/x/y?k=1&v=2"),
    ("https://h.example/x?k=1", "?v=2", "https://h.example/x?k=1&v=2"),
    ("https://h.example/x", "", "https://h.example/x"),
    ("http://127.0.0.1:9/x", "/@evil.example", "http://127.0.0.1:9/x/@evil.example"),
    ("https://h.example/x", "/a:b", "https://h.example/x/a:b"),
    ("https://h.example/x", "/%41%42", "https://h.example/x/%41%42"),
])
def test_a_path_suffix_joins_the_receivers_url(url: str, suffix: str, expected: str) -> None:
    joined = join_url(url, check_path(suffix))
    assert joined == expected
    assert urlsplit(joined).netloc == urlsplit(url).netloc


@pytest.mark.parametrize(("suffix", "says"), [
    ("//evil.example/x", "empty segment"),
    ("/a//b", "empty segment"),
    ("/../admin", "`..` segment"),
    ("/a/./b", "`.` or `..` segment"),
    ("/%2e%2e/admin", "`..` segment"),
    ("/a%2Fb", "encoded slash"),
    ("/a%5cb", "backslash"),
    ("/a\\b", "only URL path and query characters"),
    ("/a b", "only URL path and query characters"),
    ("/a\r\nHost: x", "only URL path and query characters"),
    ("/a#frag", "only URL path and query characters"),
    ("/ü", "only URL path and query characters"),
    ("javascript:alert(1)", "scheme"),
    ("evil.example:80/x", "scheme"),
    ("/" + "a" * 1100, "at most 1024"),
    (["/a"], "must be a string"),
])
def test_a_path_that_could_leave_the_host_is_refused(suffix: Any, says: str) -> None:
    with pytest.raises(TransformError) as caught:
        check_path(suffix)
    assert caught.value.field == "transform.path" and says in caught.value.message


# the work budget: hostile templates end, fast, with the module's own error ---------------------------

HOSTILE: dict[str, Any] = {
    "range": {"$eval": "range(0, 1000000000)"},
    "huge range": {"$eval": "range(0, 100000000000000000000000000)"},
    "power tower": {"$eval": "9 ** (9 ** 9)"},
    "squaring": {"$reduce": {"$eval": "range(0, 100)"}, "initial": 3, "each(a, x)": {"$eval": "a * a"}},
    "shared array doubling": {"$json": {"$reduce": {"$eval": "range(0, 200)"}, "initial": [1],
                                        "each(a, x)": {"$eval": "[a, a]"}}},
    "shared object doubling": {"$reduce": {"$eval": "range(0, 200)"}, "initial": [1],
                               "each(a, x)": {"x": {"$eval": "a"}, "y": {"$eval": "a"}}},
    "flatten a shared tree": {"$flattenDeep": {"$reduce": {"$eval": "range(0, 200)"}, "initial": [1],
                                               "each(a, x)": {"$eval": "[a, a]"}}},
    "interpolation doubling": {"$reduce": {"$eval": "range(0, 200)"}, "initial": "ab",
                               "each(a, x)": "${a}${a}"},
    "concatenation doubling": {"$reduce": {"$eval": "range(0, 200)"}, "initial": "ab",
                               "each(a, x)": {"$eval": "a + a"}},
    "merge doubling": {"$reduce": {"$eval": "range(0, 200)"}, "initial": {"k": [1]},
                       "each(a, x)": {"$mergeDeep": [{"$eval": "a"}, {"$eval": "a"}]}},
    "nested maps": {"$map": {"$eval": "range(0, 1000)"}, "each(x)": {
        "$map": {"$eval": "range(0, 1000)"}, "each(y)": {"$map": {"$eval": "range(0, 1000)"}, "each(z)": 1}}},
    "join doubling": {"$reduce": {"$eval": "range(0, 200)"}, "initial": "ab",
                      "each(a, x)": {"$eval": "join([a, a], a)"}},
    "nesting by reduce": {"$reduce": {"$eval": "range(0, 5000)"}, "initial": [],
                          "each(a, x)": {"$eval": "[a]"}},
    "deep expression": {"$eval": "(" * 400 + "1" + ")" * 400},
    "long addition": {"$eval": "+".join(["1"] * 3000)},
    "sorting big lists": {"$map": {"$eval": "range(0, 10000)"},
                          "each(x)": {"$sort": {"$eval": "range(0, 10000)"}}},
    "overflow": {"$eval": "fromNow('99999999999 years')"},
    "membership n^2": {"$let": {"big": {"$eval": "range(0, 10000)"}}, "in": {
        "$map": {"$eval": "big"}, "each(x)": {"$eval": "x in big"}}},
    "equality n^2": {"$let": {"big": {"$eval": "range(0, 10000)"}}, "in": {
        "$map": {"$eval": "big"}, "each(x)": {"$eval": "big == big"}}},
    "slices n^2": {"$let": {"s": {"$eval": "join(range(0, 5000), ',')"}}, "in": {
        "$map": {"$eval": "range(0, 5000)"}, "each(x)": {"$eval": "len(s[1:])"}}},
    "long interpolation": "${" + "1+" * 1000 + "1}",
    "numbers of a long string": {"$let": {"s": {"$eval": "join(range(0, 20000), '')"}}, "in": {
        "$map": {"$eval": "range(0, 5000)"}, "each(x)": {"$eval": "number(s)"}}},
    "string order n^2": {"$let": {"s": {"$eval": "join(range(0, 20000), '')"}}, "in": {
        "$map": {"$eval": "range(0, 5000)"}, "each(x)": {"$eval": "s < s + 'x'"}}},
}


@pytest.mark.parametrize("template", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_template_fails_within_its_budget(template: Any) -> None:
    budget = Budget()
    with pytest.raises(TransformError):
        apply({"body": template}, context({"items": list(range(100))}), budget)
    assert budget.steps >= -1, "no step past the budget's end"
    assert budget.built >= -jsone_bounded.MAX_VALUE, "no value built past the budget's end"


def test_a_budget_bounds_a_useful_template_too() -> None:
    template = {"body": {"$map": {"$eval": "payload"}, "each(x)": {"id": "${x}", "n": {"$eval": "x + 1"}}}}
    assert apply(template, context(list(range(100)))).body is not None
    with pytest.raises(TransformError, match="steps"):
        apply(template, context(list(range(100))), Budget(steps=50))


def test_the_hooks_leave_the_process_jsone_alone() -> None:
    module = importlib.import_module("jsone.render")
    assert module.renderValue is not jsone_bounded._render.renderValue
    assert jsone.render({"a": {"$eval": "range(0, 20000)"}}, {})["a"][-1] == 19999


def test_json_e_is_the_pinned_version_and_the_hooked_names_hold() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert "json-e==" + importlib.metadata.version("json-e") in declared
    render = jsone_bounded._render
    for name in ("renderValue", "interpolate", "parse", "Interpreter", "operators", "containsFunctions",
                 "tokenizer", "SyntaxError", "TemplateError"):
        assert hasattr(render, name), name
    assert {"$eval", "$map", "$reduce", "$json", "$mergeDeep", "$flattenDeep"} <= set(render.operators)
    assert hasattr(jsone_bounded._Interpreter, "visit_BinOp")


# requests: signed over the body sent ---------------------------------------------------------------

def test_a_transformed_request_is_signed_over_its_own_body_and_keeps_our_headers() -> None:
    config = ReceiverConfig("r1", "https://h.example/in", SECRET, headers={"X-Team": "a"},
                            transform={"body": {"t": "${payload.n}"}, "path": "/x",
                                       "headers": {"x-team": "b", "X-Extra": "1"}})
    entry = {"id": "m1", "seq": 3, "type": "a.b", "data": {"n": 1}, "headers": {}, "accepted_at": NOW}
    url, body, headers = build_transformed(config, entry, transform_entry(config, entry, NOW), NOW)
    assert (url, body) == ("https://h.example/in/x", b'{"t":"1"}')
    assert headers["webhook-signature"] == signature_header([SECRET], "m1", int(NOW), body)
    ours = (headers["webhook-id"], headers["webhook-sequence"], headers["webhook-event-type"])
    assert ours == ("m1", "3", "a.b")
    assert headers["x-team"] == "b" and headers["X-Extra"] == "1" and "X-Team" not in headers


def test_without_a_body_the_envelope_goes() -> None:
    config = ReceiverConfig("r1", "https://h.example/in", SECRET, transform={"headers": {"x-a": "1"}})
    entry = {"id": "m1", "seq": 1, "type": "a.b", "data": [1], "headers": {}, "accepted_at": NOW}
    _, body, _ = build_transformed(config, entry, transform_entry(config, entry, NOW), NOW)
    assert orjson.loads(body)["data"] == [1] and orjson.loads(body)["type"] == "a.b"


def test_the_context_holds_no_secret() -> None:
    config = ReceiverConfig("r1", "https://h.example/in?token=t0ken", SECRET, headers={"X-Key": "k3y"},
                            authorization="Bearer s3cret", transform={"body": {"$eval": "receiver"}})
    entry = {"id": "m1", "seq": 1, "type": "a.b", "data": None, "headers": {}, "accepted_at": NOW}
    body = transform_entry(config, entry, NOW).body
    assert body is not None
    for secret in (SECRET, "t0ken", "k3y", "s3cret"):
        assert secret.encode() not in body


# the receiver spec -----------------------------------------------------------------------------------

def spec(body: dict[str, Any], current: ReceiverConfig | None = None) -> ReceiverConfig:
    return parse_receiver_spec(body, "r1", NOW, False, lambda kind: SECRET, current)


@pytest.mark.parametrize(("body", "field", "says"), [
    ({"url": "https://h.example", "transform": {"body": {"$eval": "payload +"}}}, "transform.body.$eval",
     "SyntaxError"),
    ({"url": "https://h.example", "transform": {"body": 1}, "batch_max": 10}, "transform",
     "batching"),
    ({"url": "https://h.example", "transform": "x"}, "transform", "json-e template object"),
])
def test_the_receiver_spec_refuses_a_bad_transform(body: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        spec(body)
    assert caught.value.field == field and says in caught.value.message


def test_a_patch_keeps_the_transform_unless_it_names_it() -> None:
    template = {"body": {"$eval": "payload"}}
    current = spec({"url": "https://h.example", "transform": template})
    assert current.transform == template
    assert spec(patched_body(current, {"url": "https://h2.example"}), current).transform == template
    assert spec(patched_body(current, {"transform": None}), current).transform is None
    assert ReceiverConfig.from_dict(orjson.loads(orjson.dumps(current.as_dict()))).transform == template


# the preview -----------------------------------------------------------------------------------------

PREVIEWED = ReceiverConfig("r1", "https://h.example/in", SECRET, transform={"body": {"n": "${payload.n}"}})


@pytest.mark.parametrize(("body", "expected"), [
    ({"payload": {"n": 1}}, {"cancel": False, "body": {"n": "1"}, "headers": {}, "path": "",
                             "url": "https://h.example/in"}),
    ({"payload": {}, "transform": {"cancel": True}},
     {"cancel": True, "body": None, "headers": {}, "path": "", "url": None}),
    ({"payload": {"n": 2}, "event_type": "x.y", "headers": {"x-a": "b"},
      "transform": {"body": "${event_type}/${headers['x-a']}", "path": "/p/${payload.n}"}},
     {"cancel": False, "body": "x.y/b", "headers": {}, "path": "/p/2", "url": "https://h.example/in/p/2"}),
])
def test_a_preview_answers_what_delivery_would_do(body: dict[str, Any], expected: dict[str, Any]) -> None:
    assert preview(PREVIEWED, body, NOW) == expected


@pytest.mark.parametrize(("config", "body", "field"), [
    (PREVIEWED, {}, "payload"),
    (PREVIEWED, {"payload": 1, "extra": 1}, "extra"),
    (PREVIEWED, {"payload": 1, "event_type": "bad type"}, "event_type"),
    (PREVIEWED, {"payload": 1, "transform": {"path": "//x"}}, "transform.path"),
    (PREVIEWED, {"payload": 1, "transform": {"body": {"$eval": "1 +"}}}, "transform.body.$eval"),
    (replace(PREVIEWED, transform=None), {"payload": 1}, "transform"),
    (PREVIEWED, [1], "body"),
])
def test_a_preview_refuses_naming_the_field(config: ReceiverConfig, body: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        preview(config, body, NOW)
    assert caught.value.field == field


# the actor: a cancel settles, a failure dead-letters at once, the breaker learns nothing --------------

def unposted(seq: int, attempt: int, transform: str) -> Outcome:
    return Outcome(seq, f"m{seq}", "t", False, None, "transform: no", 0.0, 0.0, attempt=attempt,
                   transform=transform)


@pytest.mark.parametrize(("transform", "written"), [
    ("cancelled", MarkCancelled("m1", 1)),
    ("error", DeadLetterHead(1, TRANSFORM_ERROR, "transform: no", 1, None, "transform: no")),
])
def test_the_ordered_head_settles_on_a_transform_outcome(transform: str, written: Any) -> None:
    state = with_backlog(2)
    state, effects = step(state, Result(unposted(1, 1, transform)), 5.0)
    assert written in effects
    assert DeleteBacklog(1) in io(effects) and any(getattr(e, "seq", 0) == 2 for e in effects[-1:])
    assert (state.delivered_seq, state.attempts, state.failed_attempts, state.delivered) == (1, 0, 0, 0)
    assert state.breaker.circuit is Circuit.CLOSED and state.breaker.consecutive == 0
    assert state.dead_lettered == (1 if transform == "error" else 0)


@pytest.mark.parametrize("transform", ["cancelled", "error"])
def test_a_window_slot_settles_on_a_transform_outcome(transform: str) -> None:
    w = Window(DeliveryOptions(ordering="none", concurrency="fixed", max_in_flight=2))
    w.send(1, 2)
    w.sending.discard(1)
    _, effects = w.run(Result(unposted(1, 1, transform)))
    assert (MarkCancelled("m1", 1) in effects) == (transform == "cancelled")
    letters = [e for e in effects if isinstance(e, DeadLetterHead)]
    assert [(e.seq, e.reason) for e in letters] == ([(1, TRANSFORM_ERROR)] if transform == "error" else [])
    assert w.state is not None and [s.seq for s in w.state.window] == [2]
    assert w.state.breaker.consecutive == 0


def test_the_config_round_trips_the_transform() -> None:
    config = replace(CONFIG, transform={"body": 1})
    assert ReceiverConfig.from_dict(config.as_dict()) == config
