"""Property tests: a transform never raises but its own error, and stays within its bounds.

Arbitrary payloads go through useful and hostile templates; arbitrary
templates, built from json-e's operators, builtins and expressions over the
message, go through arbitrary payloads; arbitrary path suffixes go through
the URL join. Whatever comes in, the answer is a result within bounds or a
TransformError (InvalidInput at create), and the work budget is never
overrun.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.jsone_bounded import MAX_VALUE, Budget
from dispatcher.domain.transform import (
    MAX_BODY_BYTES,
    TransformError,
    apply,
    check_path,
    check_transform,
    join_url,
    message_context,
    receiver_context,
)
from tests.unit.test_transform import HOSTILE

EXAMPLES = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

SCALARS = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False,
                                                                                    allow_infinity=False)
JSON = st.recursive(
    SCALARS | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=6), inner, max_size=6),
    max_leaves=40,
)
USEFUL: list[dict[str, Any]] = [
    {"body": {"text": "${event_type}: ${payload}"}},
    {"body": {"$eval": "payload"}, "headers": {"x-type": "${event_type}"}},
    {"body": {"$map": {"$eval": "payload"}, "each(x)": {"v": {"$eval": "x"}}}},
    {"body": {"$json": {"$eval": "payload"}}, "path": "/t/${typeof(payload)}"},
    {"$if": "typeof(payload) == 'object' && 'skip' in payload", "then": {"cancel": True},
     "else": {"body": {"$mergeDeep": [{"$eval": "payload"}, {"$eval": "payload"}]}}},
    {"body": {"$reduce": {"$eval": "payload"}, "initial": "", "each(a, x)": "${a}${x}"}},
    {"body": {"$flattenDeep": [{"$eval": "payload"}, [{"$eval": "payload"}]]}},
    {"body": {"$sort": {"$eval": "payload"}}},
    {"path": "${payload}"},
    {"headers": {"x-v": "${payload}"}},
]
TEMPLATES = st.sampled_from(USEFUL + [{"body": t} for t in HOSTILE.values()])


def context(payload: Any, event_type: str = "a.b") -> dict[str, Any]:
    entry = {"id": "m1", "seq": 1, "type": event_type, "data": payload, "headers": {"x-region": "eu"}}
    return message_context(entry, receiver_context("r1", None, ()), "T", "2024-01-01T00:00:00.000Z")


def within_bounds(template: dict[str, Any], payload: Any) -> None:
    """`apply` gives a result within bounds or a TransformError; the budget is never overrun."""
    budget = Budget()
    try:
        result = apply(template, context(payload), budget)
    except TransformError as exc:
        assert exc.field.startswith("transform")
    else:
        assert result.body is None or len(result.body) <= MAX_BODY_BYTES
        if result.path:
            assert urlsplit(join_url("https://h.example/in", result.path)).netloc == "h.example"
    assert budget.steps >= -1
    assert budget.built >= -MAX_VALUE


@EXAMPLES
@given(template=TEMPLATES, payload=JSON)
def test_any_payload_through_any_known_template(template: dict[str, Any], payload: Any) -> None:
    within_bounds(template, payload)


# Arbitrary templates: json-e's operators and expressions, nested, over the message.
EXPRESSIONS = st.sampled_from([
    "payload", "payload.a", "payload[0]", "payload[1:]", "event_type", "headers['x-region']",
    "len(payload)", "range(0, 50)", "range(0, 100000)", "x", "a", "a + a", "a * a", "x ** x", "[a, a]",
    "{k: a, j: a}", "join([a, a], a)", "str(x)", "split(event_type, '.')", "typeof(payload)",
    "payload + payload", "sqrt(x)", "x / 0", "uppercase(a)", "fromNow(a)", "number(a)", "defined('a')",
    "payload in payload", "min(1, x)", "(1 + 2", "9 ** 9 ** 9",
])
STRINGS = EXPRESSIONS.map(lambda e: "${" + e + "}") | st.text(max_size=8) | EXPRESSIONS.map(
    lambda e: "<${" + e + "}${" + e + "}>"
)


def operators(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        EXPRESSIONS.map(lambda e: {"$eval": e}),
        st.tuples(EXPRESSIONS, inner, inner).map(lambda t: {"$if": t[0], "then": t[1], "else": t[2]}),
        st.tuples(inner, inner).map(lambda t: {"$map": t[0], "each(x)": t[1]}),
        st.tuples(inner, inner, inner).map(lambda t: {"$reduce": t[0], "initial": t[1], "each(a, x)": t[2]}),
        st.tuples(inner, inner).map(lambda t: {"$let": {"a": t[0], "x": t[0]}, "in": t[1]}),
        inner.map(lambda t: {"$json": t}),
        inner.map(lambda t: {"$flatten": t}),
        inner.map(lambda t: {"$flattenDeep": t}),
        st.lists(inner, max_size=3).map(lambda t: {"$merge": t}),
        st.lists(inner, max_size=3).map(lambda t: {"$mergeDeep": t}),
        inner.map(lambda t: {"$sort": t}),
        inner.map(lambda t: {"$reverse": t}),
        st.tuples(inner, EXPRESSIONS).map(lambda t: {"$find": t[0], "each(x)": t[1]}),
        st.tuples(EXPRESSIONS, inner).map(lambda t: {"$match": {t[0]: t[1]}}),
        st.tuples(EXPRESSIONS, inner).map(lambda t: {"$switch": {t[0]: t[1], "$default": 1}}),
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(["a", "b", "${event_type}"]), inner, max_size=3),
    )


ANY_TEMPLATE = st.recursive(SCALARS | STRINGS, operators, max_leaves=12)
RESULTS = st.fixed_dictionaries(
    {}, optional={"body": ANY_TEMPLATE, "headers": st.dictionaries(st.sampled_from(["x-a", "Host"]), STRINGS),
                  "path": STRINGS, "cancel": st.booleans() | STRINGS}
) | ANY_TEMPLATE


@EXAMPLES
@given(template=RESULTS, payload=JSON)
def test_any_template_on_any_payload_stays_within_bounds(template: Any, payload: Any) -> None:
    try:
        checked = check_transform(template)
    except InvalidInput as exc:
        assert exc.field.startswith("transform")
        checked = template if isinstance(template, dict) else None
    if checked is not None:
        within_bounds(checked, payload)


@EXAMPLES
@given(suffix=st.text(max_size=40) | st.lists(st.sampled_from(["/", ".", "..", "%2e", ":", "@", "?", "a",
                                                                "//", "\\", "#", "%2f", "h.example"]),
                                              max_size=8).map("".join))
def test_no_path_suffix_changes_the_host(suffix: str) -> None:
    for url in ("https://h.example/in", "http://127.0.0.1:8080", "https://[::1]:9/x?k=1"):
        try:
            joined = join_url(url, check_path(suffix))
        except TransformError as exc:
            assert exc.field == "transform.path"
            continue
        before, after = urlsplit(url), urlsplit(joined)
        assert (after.scheme, after.netloc, after.fragment) == (before.scheme, before.netloc, "")
        assert after.path.startswith(before.path.rstrip("/"))


@settings(max_examples=50, deadline=None)
@given(payload=JSON)
def test_an_untransformed_field_of_the_result_is_json(payload: Any) -> None:
    result = apply({"body": {"$eval": "payload"}}, context(payload))
    assert result.body is not None and orjson.loads(result.body) == orjson.loads(orjson.dumps(payload))
