"""A worker's seal vouches for exactly one record of its group; a producer's claims are dropped."""

from __future__ import annotations

import orjson
import pytest

from dispatcher.domain.events import copy_id
from dispatcher.domain.record_seal import SEAL_HEADER, WORKER_ONLY_FIELDS, is_sealed, seal, seal_key
from dispatcher.domain.records import Message, decode_request, encode_message_record
from dispatcher.domain.throttle import Throttle

KEY = seal_key("token-of-the-group")
COPY = Message("m1", "r1", "a.b", {"x": 1}, {}, 5.0, replay_of=3, from_event=True, time_note="late")


def test_a_seal_holds_for_its_record_only() -> None:
    value = encode_message_record(COPY)
    sealed = [("webhook-dispatcher-source", b"api"), (SEAL_HEADER, seal(KEY, "r1", value))]
    assert is_sealed(KEY, "r1", value, sealed)
    assert is_sealed(KEY, "r1", value, dict(sealed)), "headers as a mapping too"
    assert not is_sealed(KEY, "r2", value, sealed), "another receiver's record"
    assert not is_sealed(KEY, "r1", value.replace(b'"x":1', b'"x":2'), sealed), "another value"
    assert not is_sealed(seal_key("another-group"), "r1", value, sealed), "another group's key"
    assert not is_sealed(KEY, "r1", value, [("webhook-dispatcher-source", b"api")])
    assert not is_sealed(KEY, "r1", value, None)
    assert not is_sealed(KEY, "r1", value, [(SEAL_HEADER, seal(KEY, "r1", value).upper())])
    assert seal_key("token-of-the-group") == KEY and KEY != b"token-of-the-group"


def test_worker_only_fields_are_kept_only_when_vouched_for() -> None:
    value = encode_message_record(COPY)
    assert decode_request("r1", value, "f", 9.0, lambda: True) == COPY
    plain = decode_request("r1", value, "f", 9.0, lambda: False)
    assert (plain.replay_of, plain.from_event, plain.time_note) == (None, False, "")
    assert (plain.id, plain.payload, plain.accepted_at) == (COPY.id, COPY.payload, COPY.accepted_at)
    assert decode_request("r1", value, "f", 9.0) == plain, "nothing is vouched for by default"


@pytest.mark.parametrize("claim", [{"replay_of": "x"}, {"from_event": "yes"}, {"time_note": 5}])
def test_a_producers_bad_worker_field_is_dropped_not_dead_lettered(claim: dict[str, object]) -> None:
    raw = orjson.dumps({"id": "m2", "event_type": "a.b", "payload": 1, **claim})
    msg = decode_request("r1", raw, "f", 9.0, lambda: False)
    assert (msg.replay_of, msg.from_event) == (None, False) and msg.id == "m2"


def test_the_seal_is_checked_only_for_a_record_that_claims_a_worker_field() -> None:
    asked: list[int] = []

    def vouched() -> bool:
        asked.append(1)
        return False

    plain = encode_message_record(Message("m3", "r1", "a.b", 1, {}, 5.0, ordering_key="k"))
    decode_request("r1", plain, "f", 9.0, vouched)
    assert asked == [], "a producer's ordinary message costs no HMAC"
    for name in WORKER_ONLY_FIELDS:
        claim = {"replay_of": 1, "from_event": True, "time_note": "t"}[name]
        raw = orjson.dumps({"event_type": "a.b", "payload": 1, name: claim})
        decode_request("r1", raw, "f", 9.0, vouched)
    assert len(asked) == len(WORKER_ONLY_FIELDS)


@pytest.mark.parametrize("taken", [copy_id("e1", "r1"), copy_id("e1", "r1", "acme"), "kafka_3_1000"])
def test_a_producer_may_not_take_an_id_of_the_dispatchers_forms(taken: str) -> None:
    raw = orjson.dumps({"id": taken, "event_type": "a.b", "payload": 1})
    assert decode_request("r1", raw, "kafka_0_7", 9.0, lambda: False).id == "kafka_0_7", "its own position's"
    assert decode_request("r1", raw, "kafka_0_7", 9.0, lambda: True).id == taken, "a worker's record may"


@pytest.mark.parametrize("free", ["evt_1NZxYz2eZvKYlo2C", "evt_" + "A" * 24, "evt_" + "a" * 23, "kafka_x_1",
                                  "kafka_3_1000_", "msg_kafka_3_1000"])
def test_ids_near_those_forms_stay_the_producers(free: str) -> None:
    raw = orjson.dumps({"id": free, "event_type": "a.b", "payload": 1})
    assert decode_request("r1", raw, "f", 9.0, lambda: False).id == free


def test_a_throttle_admits_a_line_per_interval_and_counts_the_rest() -> None:
    throttle = Throttle(10.0)
    assert throttle.admit(100.0) == 0
    assert [throttle.admit(t) for t in (100.0, 105.0, 109.9)] == [None, None, None]
    assert throttle.admit(110.0) == 3, "the next line says how many were held back"
    assert throttle.admit(110.1) is None and throttle.admit(125.0) == 1
