"""Holes a hostile review found in the hardening, each pinned by a test that fails without its fix."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from dispatcher.actor_runner import encode_letter
from dispatcher.domain.actor import (
    Configure,
    DeadLetter,
    Facts,
    Ignored,
    Intake,
    Policy,
    ReceiverState,
    SaveState,
    decide,
)
from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.events import decode_event
from dispatcher.domain.records import (
    MAX_PAYLOAD_DEPTH,
    Message,
    ReceiverConfig,
    decode_request,
    parse_message_spec,
)
from dispatcher.domain.stall_fence import StallFence
from dispatcher.domain.untrusted import broker_time, producer_time

NOW = 1_800_000_000.0


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def field_of(call: Any) -> tuple[str, str]:
    with pytest.raises(InvalidInput) as caught:
        call()
    return caught.value.field, caught.value.code


@pytest.mark.parametrize("depth", [MAX_PAYLOAD_DEPTH + 1, 253, 900])
def test_payloads_nested_too_deep_for_our_copies_are_refused_naming_the_payload(depth: int) -> None:
    # written by hand: orjson itself refuses to write past 254 levels, though it reads 1,023
    raw = b'{"event_type": "a.b", "payload": ' + b"[" * depth + b"1" + b"]" * depth + b"}"
    assert field_of(lambda: decode_request("r1", raw, "k", NOW)) == ("payload", "malformed")
    spec = {"receiver_id": "r1", "event_type": "a.b", "payload": nested(depth)}
    assert field_of(lambda: parse_message_spec(spec, "", lambda: "m", NOW))[0] == "payload"
    assert field_of(lambda: decode_event(raw, "k", NOW))[0] == "payload"


def test_a_payload_at_the_depth_limit_is_taken_and_every_copy_of_it_encodes() -> None:
    raw = orjson.dumps({"event_type": "a.b", "payload": nested(MAX_PAYLOAD_DEPTH)})
    msg = decode_request("r1", raw, "k", NOW)
    letter = {"receiver_id": "r1", "message": {"data": msg.payload, "headers": {}}, "wrapper": [[[[]]]]}
    assert orjson.loads(encode_letter(letter))["message"]["data"] == msg.payload


def test_a_dead_letter_is_always_encoded_whatever_its_message_holds() -> None:
    letter = {"receiver_id": "r1", "reason": "max_age", "message": {"data": nested(300)}}
    decoded = orjson.loads(encode_letter(letter))
    assert decoded["reason"] == "max_age" and decoded["message"]["data"] is None
    assert "Recursion" in decoded["message"]["unencodable"] or decoded["message"]["unencodable"]


def test_a_message_accepted_before_its_receiver_was_created_is_dead_lettered_not_delivered() -> None:
    """A delete, then a create of the same id, can be read before a message sent to the old one."""
    config = ReceiverConfig("r1", "http://127.0.0.1:1/", "whsec_" + "A" * 32, created_at=NOW)
    state = ReceiverState("r1", config)
    old = Message("m-old", "r1", "a.b", {}, accepted_at=NOW - 60)
    _, effects = decide(state, Intake(old), Facts(NOW + 1), Policy())
    [letter] = [e for e in effects if isinstance(e, DeadLetter)]
    assert letter.reason == "accepted_before_creation" and letter.message == old
    skewed = Message("m-new", "r1", "a.b", {}, accepted_at=NOW - 5)  # another worker's clock, a bit behind
    new_state, effects = decide(state, Intake(skewed), Facts(NOW + 1), Policy())
    assert new_state is not None and new_state.next_seq == 2 and not any(
        isinstance(e, DeadLetter) for e in effects)


@pytest.mark.parametrize(
    ("stamp", "expected"),
    [(NOW - 5, NOW - 5), (0.0, NOW), (-1.0, NOW), (NOW + 10_000, NOW), (float("nan"), NOW), (None, NOW)],
)
def test_a_record_timestamp_counts_only_when_it_is_a_sane_time(stamp: Any, expected: float) -> None:
    assert broker_time(stamp, NOW) == expected


def test_a_producer_time_cannot_escape_the_range_with_a_zero_record_timestamp() -> None:
    at, note = producer_time(1e300, broker_time(0.0, NOW))
    assert at == NOW and "out of range" in note


def test_a_rebalance_under_way_keeps_the_fence_past_its_time() -> None:
    fence = StallFence(stall_limit=3.0, release_after=2.0)
    fence.tick(1.0)
    assert not fence.allows(10.0)
    assert not fence.allows(11.0, rebalancing=True)
    assert not fence.allows(30.0), "the rebalance began: only the assignment lifts it"
    fence.on_assigned(31.0)
    assert fence.allows(31.0)


def test_of_two_creates_that_race_only_the_first_is_stored() -> None:
    """A create is applied only where no receiver has the id, so no caller is shown a secret not stored."""
    first = ReceiverConfig("r1", "http://127.0.0.1:1/", "whsec_" + "A" * 32, created_at=NOW)
    second = ReceiverConfig("r1", "http://127.0.0.1:2/", "whsec_" + "B" * 32, created_at=NOW + 0.01)
    state, _ = decide(None, Configure(first, if_absent=True), Facts(NOW), Policy())
    assert state is not None and state.config == first
    kept, effects = decide(state, Configure(second, if_absent=True), Facts(NOW), Policy())
    assert kept is state and [type(e) for e in effects] == [Ignored]
    again, effects = decide(state, Configure(first, if_absent=True), Facts(NOW), Policy())
    assert again is not None and again.config == first, "the same create applied again after a crash"
    replaced, effects = decide(state, Configure(second), Facts(NOW), Policy())
    assert replaced is not None and replaced.config == second and SaveState() in effects, "a replace"


def test_cleaning_text_is_total_even_for_values_whose_repr_raises() -> None:
    from dispatcher.domain.untrusted import clean_text

    assert clean_text(10**5000, 20) == "<int>"  # repr refuses ints past 4,300 digits
    assert clean_text("ab\udcff", 10) == "ab?" and clean_text(None, 5) == ""
