from dataclasses import dataclass, field, replace

import orjson
import pytest

from dispatcher.domain.actor import ReceiverState
from dispatcher.domain.aimd import Congestion
from dispatcher.domain.breaker import Breaker, Circuit
from dispatcher.domain.delivery_control import Asked
from dispatcher.domain.lanes import Health, Lane
from dispatcher.domain.plain import plain
from dispatcher.domain.ratelimit import Bucket
from dispatcher.domain.records import ReceiverConfig
from dispatcher.domain.window import Slot


@dataclass(slots=True, frozen=True)
class Inner:
    a: int = 1
    b: tuple[float, ...] = ()


@dataclass(slots=True, frozen=True)
class Outer:
    name: str
    inner: Inner = field(default_factory=Inner)
    hidden: int = field(default=0, init=False)


def test_plain_is_the_document_orjson_writes_of_the_dataclass() -> None:
    value = Outer("x", Inner(7, (0.5, 2.0)))
    as_plain = plain(Outer, {"inner": plain(Inner)})
    assert as_plain(value) == {"name": "x", "inner": {"a": 7, "b": (0.5, 2.0)}}
    assert orjson.dumps(as_plain(value)) == orjson.dumps({"name": "x", "inner": value.inner})


def test_a_nested_encoder_for_a_field_the_class_lacks_is_refused() -> None:
    with pytest.raises(TypeError, match="'inners'"):
        plain(Outer, {"inners": plain(Inner)})


def test_state_bytes_are_what_orjson_writes_of_the_state_itself() -> None:
    config = ReceiverConfig("r1", "http://127.0.0.1:9/", "whsec_" + "A" * 32)
    state = ReceiverState(
        "r1", config, next_seq=9, delivered_seq=3,
        breaker=Breaker(Circuit.OPEN, 3, 7, 3, 1, 0, 12.5, 10.0),
        health=Health(Lane.SLOW, (120, 80), 1, 0, 5.0, 2),
        bucket=Bucket(0.5, 11.0),
        window=(Slot(4, 1.0, 2, 13.0), Slot(6, 2.0, key=77)),
        cursor=7,
    )
    reference = orjson.loads(orjson.dumps(state))  # orjson's own dataclass writing, slower
    reference["config"] = config.as_dict()
    del reference["congestion"], reference["asked"]  # untouched defaults are left out of every save
    del reference["window"][0]["key"]  # a slot without an ordering key is written as before keys
    assert orjson.loads(state.to_bytes()) == reference
    assert ReceiverState.from_bytes(state.to_bytes()) == state
    steered = replace(state, congestion=Congestion(3, 6, 1, 20.0, 5.0, 4.0, "429", 1, 22.0),
                      asked=Asked(30.0, 2, 0.5, 4.0, "pause 26s"))
    reference = orjson.loads(orjson.dumps(steered))
    reference["config"] = config.as_dict()
    del reference["window"][0]["key"]
    assert orjson.loads(steered.to_bytes()) == reference
    assert ReceiverState.from_bytes(steered.to_bytes()) == steered
