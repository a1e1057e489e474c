"""Content filters: the language in table form, its validation, its bounds, and where it is applied."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.domain.actor import (
    Configure,
    Facts,
    Ignored,
    Intake,
    Policy,
    PutBacklog,
    RememberFiltered,
    RememberId,
    decide,
)
from dispatcher.domain.breaker import BreakerPolicy
from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.filters import (
    MAX_CONDITIONS,
    MAX_FILTER_BYTES,
    MAX_FILTER_DEPTH,
    MAX_REACHED,
    check_filter,
    compile_filter,
    document,
)
from dispatcher.domain.receiver_spec import parse_receiver_spec, patched_body
from dispatcher.domain.records import Message, ReceiverConfig
from dispatcher.domain.retry import RetryPolicy
from dispatcher.domain.subscriptions import SubscriptionIndex, decode_subscription, encode_subscription

PAYLOAD = {
    "amount": 12.5,
    "currency": "EUR",
    "count": 3,
    "paid": True,
    "note": None,
    "customer": {"id": "cus_1", "tier": "gold", "address": {"country": "FR"}},
    "tags": ["new", "vip"],
    "items": [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}],
    "matrix": [[1, 2], [3, 4]],
}
HEADERS = {"X-Region": "eu-west", "X-Trace": "abc"}
DOC = document("order.paid", PAYLOAD, HEADERS)


@pytest.mark.parametrize(("spec", "expected"), [
    # plain values: equality, nested objects, dotted paths
    ({}, True),
    ({"payload": {"currency": "EUR"}}, True),
    ({"payload": {"currency": "USD"}}, False),
    ({"payload": {"customer": {"tier": "gold"}}}, True),
    ({"payload.customer.tier": "gold"}, True),
    ({"payload": {"customer.address.country": "FR"}}, True),
    ({"payload.customer.address.country": "DE"}, False),
    ({"payload": {"missing": "x"}}, False),
    ({"payload": {"note": None}}, True),
    ({"payload": {"paid": True}}, True),
    ({"payload": {"count": 3.0}}, True),  # 3 is 3.0
    ({"payload": {"paid": 1}}, False),  # true is not 1
    ({"payload": {"count": True}}, False),
    ({"payload": {"count": "3"}}, False),  # no string/number coercion
    ({"event_type": "order.paid"}, True),
    # arrays: contains, indexes, paths through elements, the whole array
    ({"payload": {"tags": "vip"}}, True),
    ({"payload": {"tags": "old"}}, False),
    ({"payload": {"tags": ["new", "vip"]}}, True),
    ({"payload": {"tags": ["vip", "new"]}}, False),
    ({"payload.tags.0": "new"}, True),
    ({"payload.tags.5": "new"}, False),
    ({"payload.items.sku": "B-7"}, True),
    ({"payload": {"items": {"sku": "A-1"}}}, True),
    ({"payload.items.1.qty": 1}, True),
    ({"payload.items.qty": {"$gte": 2}}, True),
    ({"payload.items.qty": {"$gt": 2}}, False),
    ({"payload.matrix": [3, 4]}, True),
    ({"payload": {"items": {"$eq": {"sku": "A-1", "qty": 2}}}}, True),
    ({"payload": {"items": {"$eq": {"sku": "A-1", "qty": True}}}}, False),
    # comparisons
    ({"payload": {"amount": {"$gte": 10}}}, True),
    ({"payload": {"amount": {"$gt": 12.5}}}, False),
    ({"payload": {"amount": {"$lte": 12.5}}}, True),
    ({"payload": {"amount": {"$lt": 12}}}, False),
    ({"payload": {"amount": {"$gte": 10, "$lt": 20}}}, True),
    ({"payload": {"currency": {"$gt": "AAA"}}}, True),  # strings compare with strings
    ({"payload": {"currency": {"$gt": 1}}}, False),  # ... and never with numbers
    ({"payload": {"paid": {"$gte": 0}}}, False),  # a boolean is not a number
    ({"payload": {"missing": {"$lt": 100}}}, False),
    # $eq $neq $in $nin
    ({"payload": {"currency": {"$eq": "EUR"}}}, True),
    ({"payload": {"currency": {"$neq": "EUR"}}}, False),
    ({"payload": {"currency": {"$neq": "USD"}}}, True),
    ({"payload": {"missing": {"$neq": "USD"}}}, True),
    ({"payload": {"tags": {"$neq": "vip"}}}, False),  # no element may equal
    ({"payload": {"currency": {"$in": ["USD", "EUR"]}}}, True),
    ({"payload": {"currency": {"$in": []}}}, False),
    ({"payload": {"tags": {"$in": ["vip", "x"]}}}, True),
    ({"payload": {"count": {"$in": [True, "3"]}}}, False),
    ({"payload": {"currency": {"$nin": ["USD", "GBP"]}}}, True),
    ({"payload": {"tags": {"$nin": ["vip"]}}}, False),
    # $exist
    ({"payload": {"note": {"$exist": True}}}, True),  # null is there
    ({"payload": {"missing": {"$exist": True}}}, False),
    ({"payload": {"missing": {"$exist": False}}}, True),
    ({"payload.items.sku": {"$exist": True}}, True),
    # $regex (RE2, searched)
    ({"payload": {"customer.id": {"$regex": "^cus_[0-9]+$"}}}, True),
    ({"payload": {"currency": {"$regex": "^E"}}}, True),
    ({"payload": {"currency": {"$regex": "^U"}}}, False),
    ({"payload": {"tags": {"$regex": "^v"}}}, True),
    ({"payload": {"amount": {"$regex": "12"}}}, False),  # a number is not a string
    # headers: case-insensitive names
    ({"headers": {"x-region": {"$regex": "^eu-"}}}, True),
    ({"headers": {"X-REGION": "eu-west"}}, True),
    ({"headers.X-Trace": "abc"}, True),
    ({"headers": {"x-missing": {"$exist": False}}}, True),
    # $and $or $not, at the top and inside a field (relative paths)
    ({"$or": [{"payload": {"currency": "USD"}}, {"payload": {"amount": {"$gt": 10}}}]}, True),
    ({"$or": [{"payload": {"currency": "USD"}}, {"payload": {"amount": {"$gt": 20}}}]}, False),
    ({"$and": [{"payload.currency": "EUR"}, {"headers.x-region": "eu-west"}]}, True),
    ({"$and": [{"payload.currency": "EUR"}, {"headers.x-region": "us"}]}, False),
    ({"$not": {"payload.currency": "EUR"}}, False),
    ({"$not": {"payload.currency": "USD"}}, True),
    ({"payload": {"$or": [{"currency": "USD"}, {"customer.tier": "gold"}]}}, True),
    ({"payload": {"customer": {"$not": {"tier": "gold"}}}}, False),
    ({"payload": {"amount": {"$gte": 10}}, "headers": {"x-region": "us"}}, False),  # every field holds
])
def test_filter_language(spec: dict[str, Any], expected: bool) -> None:
    assert compile_filter(spec).accepts(DOC) is expected


DEEP = {"payload": {"a": 1}}
for _ in range(MAX_FILTER_DEPTH):
    DEEP = {"$not": DEEP}


@pytest.mark.parametrize(("spec", "field", "words"), [
    ([], "filter", "JSON object"),
    ("payload.x", "filter", "JSON object"),
    ({"amount": 1}, "filter.amount", "top-level fields"),
    ({"payload": {"amount": {"$gte": True}}}, "filter.payload.amount.$gte", "number or a string"),
    ({"payload": {"amount": {"$gte": [1]}}}, "filter.payload.amount.$gte", "number or a string"),
    ({"data": {"amount": {"$gte": 10}}}, "filter.data", "payload, headers, event_type"),
    ({"payload": {"amount": {"$between": [1, 2]}}}, "filter.payload.amount.$between", "unknown operator"),
    ({"$gte": 3}, "filter.$gte", "needs a field"),
    ({"payload": {"tags": {"$in": "vip"}}}, "filter.payload.tags.$in", "list"),
    ({"payload": {"tags": {"$in": list(range(300))}}}, "filter.payload.tags.$in", "at most 256"),
    ({"payload": {"x": {"$exist": "yes"}}}, "filter.payload.x.$exist", "true or false"),
    ({"payload": {"x": {"$regex": "(a)\\1"}}}, "filter.payload.x.$regex", "RE2"),
    ({"payload": {"x": {"$regex": "(?=a)"}}}, "filter.payload.x.$regex", "RE2"),
    ({"payload": {"x": {"$regex": "a" * 600}}}, "filter.payload.x.$regex", "1..512"),
    ({"payload": {"x": {"$regex": ""}}}, "filter.payload.x.$regex", "1..512"),
    ({"$or": []}, "filter.$or", "non-empty list"),
    ({"$or": [{"payload.a": 1}, "b"]}, "filter.$or", "non-empty list"),
    ({"$or": [{"payload.a": 1}, {"payload": {"b": {"$lt": None}}}]}, "filter.$or[1].payload.b.$lt", "number"),
    ({"$not": [1]}, "filter.$not", "filter object"),
    ({"payload..a": 1}, "filter.payload..a", "empty segments"),
    ({"payload": {"x": {"$regex": "a", "y": {"$gt": {}}}}}, "filter.payload.x.y.$gt", "number"),
    ({"payload": {f"f{i}": i for i in range(MAX_CONDITIONS + 1)}}, "filter.payload.f255", "conditions"),
    ({"payload": {"x": "y" * MAX_FILTER_BYTES}}, "filter", "bytes"),
    (DEEP, "filter" + ".$not" * MAX_FILTER_DEPTH + ".payload", "deeper"),
])
def test_filter_errors_name_the_path(spec: Any, field: str, words: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        compile_filter(spec)
    assert caught.value.field == field
    assert words in caught.value.message


def test_an_empty_filter_is_no_filter() -> None:
    assert check_filter(None) is None and check_filter({}) is None
    assert check_filter({"payload.a": 1}) == {"payload.a": 1}


# bounds: arbitrary payloads never make evaluation raise ------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(st.text(max_size=4), children, max_size=5),
    max_leaves=40,
)
KEYS = st.sampled_from(["a", "b", "0", "1", "tags", "a.b", "b.0", "x"])
SCALARS = st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["a", "b", ""])
OPERATORS = st.one_of(
    st.builds(lambda op, v: {op: v}, st.sampled_from(["$eq", "$neq"]), JSON),
    st.builds(lambda op, v: {op: v}, st.sampled_from(["$gt", "$gte", "$lt", "$lte"]),
              st.integers(-3, 3) | st.sampled_from(["a", "b"])),
    st.builds(lambda op, v: {op: v}, st.sampled_from(["$in", "$nin"]), st.lists(JSON, max_size=4)),
    st.builds(lambda v: {"$exist": v}, st.booleans()),
    st.builds(lambda v: {"$regex": v}, st.sampled_from(["^a", "b$", "a|b", "[0-9]+", "(a*)*b"])),
)
CONDITIONS = st.recursive(
    SCALARS | OPERATORS,
    lambda inner: st.dictionaries(KEYS, inner, min_size=1, max_size=3)
    | st.builds(lambda op, items: {op: items}, st.sampled_from(["$and", "$or"]),
                st.lists(st.dictionaries(KEYS, inner, min_size=1, max_size=2), min_size=1, max_size=3))
    | st.builds(lambda f: {"$not": f}, st.dictionaries(KEYS, inner, min_size=1, max_size=2)),
    max_leaves=10,
)
FILTERS = st.dictionaries(st.sampled_from(["payload", "headers", "event_type"]), CONDITIONS, max_size=2)


@settings(max_examples=300, deadline=None)
@given(spec=FILTERS, payload=JSON, headers=st.dictionaries(st.text(max_size=4), st.text(max_size=4)))
def test_evaluation_never_raises(spec: dict[str, Any], payload: Any, headers: dict[str, str]) -> None:
    try:
        compiled = compile_filter(spec)
    except InvalidInput:
        return  # a generated filter past a bound is refused at creation, which is what bounds are for
    result = compiled.accepts(document("a.b", payload, headers))
    assert isinstance(result, bool)


@settings(max_examples=100, deadline=None)
@given(spec=FILTERS)
def test_a_valid_filter_stays_within_its_bounds(spec: dict[str, Any]) -> None:
    try:
        compile_filter(spec)
    except InvalidInput as exc:
        assert exc.field.startswith("filter")
        return
    assert len(orjson.dumps(spec)) <= MAX_FILTER_BYTES


WIDE = st.recursive(
    st.integers(0, 3) | st.sampled_from(["a", "b"]),
    lambda children: st.lists(children, min_size=0, max_size=40)
    | st.dictionaries(st.sampled_from(["a", "b", "0"]), children, max_size=3),
    max_leaves=3000,
)


@settings(max_examples=60, deadline=None)
@given(payload=WIDE, path=st.lists(st.sampled_from(["a", "b", "0"]), min_size=1, max_size=6))
def test_a_path_reaches_at_most_max_reached_values(payload: Any, path: list[str]) -> None:
    doc = document("t", payload, None)
    full = ("payload", *path)
    assert len(doc.reach((full, False))) <= MAX_REACHED
    assert len(doc.reach((full, True))) <= MAX_REACHED


def test_a_path_through_huge_arrays_looks_at_a_bounded_number_of_values() -> None:
    wide = {"rows": [{"cells": list(range(r * 100, r * 100 + 100))} for r in range(100)]}  # 0..9,999
    assert len(document("t", wide, None).reach((("payload", "rows", "cells"), True))) == MAX_REACHED
    compiled = compile_filter({"payload": {"rows.cells": 9999}})
    assert compiled.accepts(document("t", wide, None)) is False  # past MAX_REACHED: not looked at
    assert compile_filter({"payload": {"rows.cells": 5}}).accepts(document("t", wide, None)) is True
    assert MAX_REACHED < 10_000


def test_a_pathological_pattern_runs_in_linear_time() -> None:
    # (a*)*b against a long run of a's backtracks exponentially in `re`; RE2 answers at once
    compiled = compile_filter({"payload": {"s": {"$regex": "(a*)*b"}}})
    assert compiled.accepts(document("t", {"s": "a" * 50_000}, None)) is False


# where filters apply ----------------------------------------------------------------------------


def test_the_index_leaves_out_receivers_whose_filter_refuses() -> None:
    index = SubscriptionIndex()
    index.put("all", ["order.*"])
    index.put("big", ["order.*"], None, {"payload": {"amount": {"$gte": 100}}})
    index.put("eur", ["order.*"], None, {"payload.currency": "EUR"})
    index.put("eur2", ["order.*"], None, {"payload.currency": "EUR"})
    doc = document("order.paid", {"amount": 12, "currency": "EUR"}, None)
    assert index.match("order.paid", None, doc) == {"all", "eur", "eur2"}
    assert index.match("order.paid") == {"all", "big", "eur", "eur2"}, "no document: filters not run"
    assert index.filtered == 3 and len(index._compiled) == 2, "one compilation per distinct filter"
    index.put("big", ["order.*"])  # its filter removed
    assert index.match("order.paid", None, doc) == {"all", "big", "eur", "eur2"}
    index.remove("eur")
    assert index.filtered == 1


def test_a_subscription_record_carries_the_filter() -> None:
    raw = encode_subscription(["a.*"], "acme", {"payload.x": 1})
    assert decode_subscription(raw) == (("a.*",), "acme", {"payload.x": 1})
    assert b"filter" not in encode_subscription(["a.*"], None, None), "records without one stay as they were"
    assert decode_subscription(orjson.dumps({"event_types": ["a"], "tenant": None})) == (("a",), None, None)


def make_secret(kind: str) -> str:
    return "whsec_" + "A" * 32


def test_create_and_patch_validate_the_filter() -> None:
    body = {"url": "https://example.test/", "filter": {"payload": {"amount": {"$gte": 10}}}}
    config = parse_receiver_spec(body, "r1", 0.0, True, make_secret)
    assert config.filter == {"payload": {"amount": {"$gte": 10}}}
    assert ReceiverConfig.from_dict(config.as_dict()).filter == config.filter
    with pytest.raises(InvalidInput) as caught:
        parse_receiver_spec({**body, "filter": {"payload": {"amount": {"$gte": "x", "$in": 1}}}}, "r1", 0.0,
                            True, make_secret)
    assert caught.value.field == "filter.payload.amount.$in"
    kept = parse_receiver_spec(patched_body(config, {"url": "https://other.test/"}), "r1", 0.0, True,
                               make_secret, config)
    assert kept.filter == config.filter, "a PATCH without `filter` keeps it"
    unfiltered = patched_body(config, {"filter": None})
    dropped = parse_receiver_spec(unfiltered, "r1", 0.0, True, make_secret, config)
    assert dropped.filter is None


POLICY = Policy(RetryPolicy(), BreakerPolicy(), dedup_window=100.0)


class NoBacklog:
    def accepted_at(self, seq: int) -> float | None:
        return None

    def size(self, seq: int) -> int:
        return 0


def test_a_direct_message_the_filter_refuses_takes_no_seq() -> None:
    config = ReceiverConfig("r1", "http://127.0.0.1:1/", "whsec_" + "A" * 32, filter={"payload.keep": True})
    facts = Facts(5.0, 0.5, False, NoBacklog())
    state, _ = decide(None, Configure(config), facts, POLICY)
    refused = Message("m1", "r1", "a.b", {"keep": False})
    state, effects = decide(state, Intake(refused), facts, POLICY)
    assert RememberFiltered("m1", 105.0) in effects and state.next_seq == 1
    assert not [e for e in effects if isinstance(e, PutBacklog)]
    _, effects = decide(state, Intake(refused, seen_seq=0), facts, POLICY)
    assert effects == [Ignored("duplicate message id", "m1", 0)], "a filtered id is a duplicate after"
    kept = Message("m2", "r1", "a.b", {"keep": True})
    state, effects = decide(state, Intake(kept), facts, POLICY)
    assert RememberId("m2", 1, 105.0) in effects and state.next_seq == 2, "the next one takes seq 1"
    copy = Message("m3", "r1", "a.b", {"keep": False}, from_event=True)
    state, effects = decide(state, Intake(copy), facts, POLICY)
    assert state.next_seq == 3, "an event's copy was filtered at fan-out, not again"


def test_the_bench_runs_and_its_cases_match_what_they_say() -> None:
    from bench import filters as bench_filters

    results = bench_filters.main(["--subscribers", "20", "--runs", "1"])
    assert {case: results[case]["matched"] for case in bench_filters.CASES} == {
        "none": 20, "eq": 20, "range": 20, "regex": 20, "mixed": 20, "distinct": 0,
    }


def test_a_stored_filter_this_version_cannot_compile_takes_every_message() -> None:
    newer = {"payload": {"x": {"$near": [1, 2]}}}  # an operator of a later version
    config = ReceiverConfig("r1", "http://127.0.0.1:1/", "whsec_" + "A" * 32, filter=newer)
    assert config.accepts(Message("m1", "r1", "a.b", {"x": 0})) is True
    index = SubscriptionIndex()
    index.put("r1", ["a.*"], None, newer)
    assert index.match("a.b", None, document("a.b", {}, None)) == {"r1"}
