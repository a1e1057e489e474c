"""Events: the API's body, the events-topic record, and the ids of their copies."""

from __future__ import annotations

import orjson
import pytest

from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.events import Event, copy_for, copy_id, decode_event, encode_event, parse_event_spec


def test_an_event_round_trips_through_its_record() -> None:
    event = Event("evt-1", "payment.succeeded", {"amount": 5}, "acme", 12.5)
    assert decode_event(encode_event(event), "fallback", 99.0) == event


def test_a_direct_producer_may_leave_out_id_and_time() -> None:
    raw = orjson.dumps({"event_type": "a.b", "payload": [1]})
    assert decode_event(raw, "kafka_3_17", 42.0) == Event("kafka_3_17", "a.b", [1], None, 42.0)


@pytest.mark.parametrize(
    ("raw", "field"),
    [(b"not json", "record"), (b"[1]", "record"), (b'{"event_type": "a.*", "payload": 1}', "event_type"),
     (b'{"event_type": "a.b"}', "payload"), (b'{"event_type": "a.b", "payload": 1, "tenant": ""}', "tenant")],
)
def test_bad_records_name_the_field(raw: bytes, field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        decode_event(raw, "f", 1.0)
    assert info.value.field == field


def test_copy_ids_are_stable_per_event_and_receiver() -> None:
    assert copy_id("e1", "r1") == copy_id("e1", "r1")
    assert len({copy_id("e1", "r1"), copy_id("e1", "r2"), copy_id("e2", "r1")}) == 3
    # An untenanted event's copies keep the ids of every earlier version (a retry across an upgrade
    # is still a duplicate); a tenant's are its own.
    assert copy_id("e1", "r1") == "evt_ddfd4ebb15156ad4d6ad1563"
    assert len({copy_id("e1", "r1"), copy_id("e1", "r1", "acme"), copy_id("e1", "r1", "globex")}) == 3
    assert copy_for(Event("e1", "a.b", 1, "acme"), "r1").id == copy_id("e1", "r1", "acme")
    event = parse_event_spec({"event_type": "a.b", "payload": {"x": 1}}, lambda: "evt_1", 7.0)
    msg = copy_for(event, "r9")
    assert (msg.id, msg.receiver_id, msg.event_type, msg.payload, msg.accepted_at) == (
        copy_id("evt_1", "r9"), "r9", "a.b", {"x": 1}, 7.0
    )
