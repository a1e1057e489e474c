from __future__ import annotations

import tracemalloc

import orjson
import pytest

from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.headers import check_headers
from dispatcher.domain.ids import check_id, new_id
from dispatcher.domain.records import (
    Message,
    ReceiverConfig,
    ReceiverUpsert,
    decode_command,
    decode_request,
    encode_message_record,
    encode_upsert_record,
    parse_message_spec,
)

SECRET = "whsec_" + "A" * 32


def field_of(call) -> str:
    with pytest.raises(InvalidInput) as info:
        call()
    return info.value.field


def test_ids() -> None:
    assert check_id("a-Z_9", "id") == "a-Z_9"
    assert new_id("msg").startswith("msg_") and len(new_id("msg")) == 30
    for bad in ["", "a b", "x" * 129, "é", None, 5]:
        assert field_of(lambda bad=bad: check_id(bad, "id")) == "id"


@pytest.mark.parametrize(
    ("headers", "field"),
    [
        ("nope", "h"),
        ({"bad name": "v"}, "h.bad name"),
        ({"X-A": "a\nb"}, "h.X-A"),
        ({"X-A": "a\0b"}, "h.X-A"),
        ({"Host": "evil"}, "h.Host"),
        ({"Webhook-Signature": "v1,x"}, "h.Webhook-Signature"),
        ({"X-Forwarded-For": "1.2.3.4"}, "h.X-Forwarded-For"),
        ({"Authorization": "Bearer x"}, "h.Authorization"),
        ({"X-A": 5}, "h.X-A"),
    ],
)
def test_bad_headers_name_the_header(headers: object, field: str) -> None:
    assert field_of(lambda: check_headers(headers, "h")) == field


def test_good_headers_pass() -> None:
    assert check_headers({"X-Tenant": "t-1", "User-Agent-Extra": "x"}, "h") == {
        "X-Tenant": "t-1", "User-Agent-Extra": "x"
    }


def test_batch_message_errors_carry_the_index() -> None:
    spec = {"receiver_id": "r1", "event_type": "a.b"}
    assert field_of(lambda: parse_message_spec(spec, "messages[3].", str, 0.0)) == "messages[3].payload"


def test_message_record_round_trips_and_producer_records_get_defaults() -> None:
    msg = Message("m1", "r1", "a.b", {"x": 1}, {"X-A": "1"}, 5.0)
    assert decode_request("r1", encode_message_record(msg), "fallback", 9.0) == msg
    direct = orjson.dumps({"event_type": "a.b", "payload": [1]})
    assert decode_request("r1", direct, "kafka_0_7", 9.0) == Message("kafka_0_7", "r1", "a.b", [1], {}, 9.0)
    config = ReceiverConfig("r1", "http://x.test/", SECRET, ("a.b",), {}, 1.0)
    assert decode_command("r1", encode_upsert_record(config)) == ReceiverUpsert(config)
    assert decode_command("r1", encode_upsert_record(config, if_absent=True)) == ReceiverUpsert(config, True)


def test_a_config_keeps_its_json_in_memory_sized_to_the_json() -> None:
    configs = [ReceiverConfig(f"r{i}", "http://x.test/", SECRET, ("a.b",), {}, 1.0) for i in range(500)]
    size = len(orjson.dumps(configs[0].as_dict()))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [c.as_json() for c in configs]
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert orjson.dumps(kept[0]) == orjson.dumps(configs[0].as_dict())
    # The JSON, a bytes object's header, the fragment and the list slot: not a 4 KiB buffer each.
    assert held < len(kept) * (size + 150), (held // len(kept), size)


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b"{nope", "value"),
        (b"[1]", "value"),
        (b'{"kind": "other"}', "kind"),
        (b'{"event_type": "a.b"}', "payload"),
        (b'{"event_type": "a b", "payload": 1}', "event_type"),
        (b'{"event_type": "a.b", "payload": 1, "receiver_id": "r2"}', "receiver_id"),
        (b'{"id": "bad id", "event_type": "a.b", "payload": 1}', "id"),
    ],
)
def test_malformed_topic_records_name_the_field(raw: bytes, field: str) -> None:
    assert field_of(lambda: decode_request("r1", raw, "f", 0.0)) == field
