"""Key-ordered receivers: one ordering key's messages in seq order, different keys side by side."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dispatcher.domain.actor import (
    Configure,
    Control,
    DeadLetterHead,
    DeleteBacklog,
    Intake,
    ReceiverState,
    Result,
)
from dispatcher.domain.delivery_options import DeliveryOptions, parse_delivery_options
from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.events import Event, copy_for, decode_event, encode_event, parse_event_spec
from dispatcher.domain.ordering_keys import MAX_KEY_LEN, NO_KEY, check_ordering_key, key_hash
from dispatcher.domain.records import (
    decode_request,
    encode_backlog_entry,
    encode_message_record,
    parse_message_spec,
)
from dispatcher.domain.window import MAX_PARKED, Slot, has_room, parked
from tests.unit.test_actor import CONFIG, RETRY, msg, outcome
from tests.unit.test_actor_isolation import T0
from tests.unit.test_actor_window import Window, seqs

KEYED = DeliveryOptions(ordering="key", concurrency="fixed", max_in_flight=3)


class Keyed(Window):
    def __init__(self, options: DeliveryOptions = KEYED) -> None:
        super().__init__(options)

    def put(self, *pairs: tuple[int, str], now: float = T0) -> list[int]:
        """Messages (seq, key): the seqs posted as they arrive."""
        out: list[int] = []
        for i, key in pairs:
            out += seqs(self.run(Intake(replace(msg(i, at=now), ordering_key=key)), now)[1])
        return out


@pytest.mark.parametrize(("value", "expected"), [
    (None, ""),
    ("", ""),  # as none: a producer's empty key is no key, not a malformed message
    ("account-42", "account-42"),
    ("x" * MAX_KEY_LEN, "x" * MAX_KEY_LEN),
    ("ключ 7", "ключ 7"),
])
def test_ordering_keys_taken(value: object, expected: str) -> None:
    assert check_ordering_key(value, "ordering_key") == expected


@pytest.mark.parametrize(("value", "why"), [
    ("x" * (MAX_KEY_LEN + 1), "at most 128"),
    (42, "string"),
    (["a"], "string"),
    ("a\nb", "unprintable"),
    ("a\x00", "unprintable"),
])
def test_ordering_keys_refused_name_the_field(value: object, why: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_ordering_key(value, "messages[3].ordering_key")
    assert caught.value.field == "messages[3].ordering_key" and why in caught.value.message


def test_key_hashes_are_stable_nonzero_and_none_for_no_key() -> None:
    assert key_hash("") == key_hash(None) == NO_KEY
    assert key_hash("a") == key_hash("a") != key_hash("b")
    assert all(0 < key_hash(str(i)) < 2**63 for i in range(1000))


@pytest.mark.parametrize(("body", "field", "message"), [
    ({"ordering": "key", "max_in_flight": 65}, "max_in_flight", "1..64"),
    ({"ordering": "key", "batch_max": 5}, "batch_max", "strict"),
    ({"ordering": "keys"}, "ordering", "strict, none, key"),
])
def test_key_ordering_options_refused(body: dict[str, object], field: str, message: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_delivery_options(body, None)
    assert caught.value.field == field and message in caught.value.message


def test_key_ordering_takes_a_window_of_many() -> None:
    options = parse_delivery_options({"ordering": "key", "max_in_flight": 10}, None)
    assert (options.keyed, options.ordered, options.max_in_flight) == (True, False, 10)


@pytest.mark.parametrize(("window", "waiting"), [
    ((), set()),
    (((1, 0), (2, 0), (3, 0)), set()),  # no keys: none waits
    (((1, 7), (2, 7), (3, 8), (4, 7)), {2, 4}),
    (((5, 7), (6, 8), (7, 8), (8, 9)), {7}),
])
def test_parked_slots_are_those_behind_an_earlier_one_of_their_key(
    window: tuple[tuple[int, int], ...], waiting: set[int]
) -> None:
    assert parked(tuple(Slot(seq, T0, key=key) for seq, key in window)) == waiting


@pytest.mark.parametrize(("size", "waiting", "max_in_flight", "room"), [
    (0, 0, 1, True),
    (3, 0, 3, False),
    (5, 2, 4, True),
    (6, 2, 4, False),
    (MAX_PARKED + 1, MAX_PARKED, 4, False),
    (MAX_PARKED, MAX_PARKED - 1, 4, True),
])
def test_room_counts_parked_apart(size: int, waiting: int, max_in_flight: int, room: bool) -> None:
    assert has_room(size, waiting, max_in_flight) is room


def test_one_keys_messages_go_in_order_and_other_keys_beside_them() -> None:
    k = Keyed()
    assert k.put((1, "a"), (2, "a"), (3, "b"), (4, "a"), (5, "c")) == [1, 3, 5]
    assert seqs(k.answer(3, 200)) == [], "b had only one; 2 and 4 wait for 1"
    assert seqs(k.answer(1, 200)) == [2]
    assert seqs(k.answer(2, 200)) == [4]
    k.answer(4, 200)
    k.answer(5, 200)
    state = k.state
    assert state is not None and (state.delivered_seq, state.backlog, state.delivered) == (5, 0, 5)


def test_a_failing_key_holds_only_itself() -> None:
    k = Keyed()
    k.put((1, "bad"), (2, "bad"), (3, "bad"))
    assert k.put(*((i, f"ok{i}") for i in range(4, 10))) == [4, 5]
    assert seqs(k.answer(1, 500)) == [], "1 waits for its retry, in its slot; 2 and 3 wait behind it"
    assert [seqs(k.answer(seq, 200)) for seq in (4, 5, 6, 7)] == [[6], [7], [8], [9]]
    state = k.state
    assert state is not None and state.delivered == 4 and sorted(k.sending) == [8, 9]
    assert seqs(k.wake(T0 + RETRY.schedule[0])) == [1]
    assert seqs(k.answer(1, 200, now=T0 + 2)) == [2]
    assert seqs(k.answer(2, 200, now=T0 + 2)) == [3]


def test_messages_without_a_key_are_ordered_with_none() -> None:
    k = Keyed()
    assert k.put((1, ""), (2, ""), (3, "")) == [1, 2, 3]


def test_a_parked_message_takes_no_room_of_max_in_flight() -> None:
    k = Keyed(replace(KEYED, max_in_flight=2))
    assert k.put((1, "a"), (2, "a"), (3, "a"), (4, "b"), (5, "c")) == [1, 4]
    state = k.state
    assert state is not None and [s.seq for s in state.window] == [1, 2, 3, 4]
    assert state.cursor == 5, "5 waits for room: 2 and 3 are parked"


def test_parking_stops_at_its_cap() -> None:
    k = Keyed(replace(KEYED, max_in_flight=2))
    k.put(*((i, "hot") for i in range(1, MAX_PARKED + 2)))  # 1 out, 64 parked
    cold = MAX_PARKED + 2
    assert k.put((cold, "cold")) == []
    state = k.state
    assert state is not None and len(parked(state.window)) == MAX_PARKED
    assert state.cursor == cold, "the cold one waits until the hot key moves"
    assert seqs(k.answer(1, 200)) == [2, cold]


def test_an_expired_parked_message_is_dead_lettered_and_its_key_moves_on() -> None:
    k = Keyed()
    k.put((1, "a"), (2, "a"), (3, "a"))
    late = T0 + RETRY.max_age + 1
    effects = k.answer(1, 500, now=T0 + 1)
    assert seqs(effects) == []
    effects = k.wake(late)
    dead = sorted(e.seq for e in effects if isinstance(e, DeadLetterHead))
    assert dead == [1, 2, 3], "all past max_age, parked or not"


def test_parked_slots_ask_for_no_wake() -> None:
    k = Keyed()
    k.put((1, "a"), (2, "a"))
    wake = k.wakes_at()
    assert wake is not None and wake > T0, "only 2's expiry: its turn comes with 1's answer"


def test_keys_survive_the_state_bytes() -> None:
    k = Keyed()
    k.put((1, "a"), (2, "a"))
    state = k.state
    assert state is not None
    again = ReceiverState.from_bytes(state.to_bytes())
    assert again == state and parked(again.window) == {2}


def test_switching_strict_to_key_carries_the_heads_key() -> None:
    k = Keyed(DeliveryOptions())
    assert k.put((1, "a"), (2, "a"), (3, "b")) == [1], "strict: the head only"
    k.run(Result(outcome(1, 500)))  # its attempts carry over into the window
    assert seqs(k.run(Configure(replace(CONFIG, options=KEYED)), T0)[1]) == [3]
    state = k.state
    assert state is not None and [(s.seq, s.key, s.attempts) for s in state.window] == [
        (1, key_hash("a"), 1), (2, key_hash("a"), 0), (3, key_hash("b"), 0)]


def test_messages_and_events_carry_their_key_through_records() -> None:
    spec = parse_message_spec({"receiver_id": "r1", "event_type": "a.b", "payload": 1, "ordering_key": "k"},
                              "", lambda: "m1", T0)
    assert spec.ordering_key == "k"
    again = decode_request("r1", encode_message_record(spec), "fallback", T0)
    assert again.ordering_key == "k"
    event = parse_event_spec({"event_type": "a.b", "payload": 1, "ordering_key": "k2"}, lambda: "e1", T0)
    assert decode_event(encode_event(event), "x", T0).ordering_key == "k2"
    assert copy_for(event, "r9").ordering_key == "k2"
    assert copy_for(Event("e2", "a.b", 1), "r9").ordering_key == ""
    with pytest.raises(InvalidInput) as caught:
        decode_request("r1", b'{"event_type": "a", "payload": 1, "ordering_key": 5}', "f", T0)
    assert caught.value.field == "ordering_key"


# coalescing ------------------------------------------------------------------------------

COALESCING = replace(KEYED, coalesce=True)


def superseded(effects: list[object]) -> dict[int, int]:
    return {e.seq: e.superseded_by for e in effects if isinstance(e, DeleteBacklog) and e.superseded_by}


def test_a_waiting_message_gives_way_to_a_newer_one_of_its_key() -> None:
    k = Keyed(COALESCING)
    assert k.put((1, "a")) == [1]
    _, effects = k.run(Intake(replace(msg(2, at=T0), ordering_key="a")))
    assert seqs(effects) == [] and superseded(effects) == {}, "2 waits behind 1, out now"
    _, effects = k.run(Intake(replace(msg(3, at=T0), ordering_key="a")))
    assert superseded(effects) == {2: 3}, "2 waited: 3 goes instead"
    assert seqs(k.answer(1, 200)) == [3]
    k.answer(3, 200)
    state = k.state
    assert state is not None and (state.delivered_seq, state.backlog, state.delivered) == (3, 0, 2)


def test_one_out_is_never_superseded() -> None:
    k = Keyed(COALESCING)
    k.put((1, "a"))
    _, effects = k.run(Intake(replace(msg(2, at=T0), ordering_key="a")))
    assert superseded(effects) == {} and k.sending == {1}


def test_one_waiting_for_a_retry_is_superseded() -> None:
    k = Keyed(COALESCING)
    k.put((1, "a"))
    k.answer(1, 500)
    _, effects = k.run(Intake(replace(msg(2, at=T0), ordering_key="a")))
    assert superseded(effects) == {1: 2} and seqs(effects) == [2]


@pytest.mark.parametrize(("keys", "posted", "gone"), [
    # a backlog the window reaches later: only each key's newest goes
    (["a", "b", "a", "b", "a"], [4, 5], {1: 5, 2: 4, 3: 5}),
    (["a", "", "a", ""], [2, 3, 4], {1: 3}),  # no key: none coalesce
    (["a", "b", "c"], [1, 2, 3], {}),
])
def test_a_paused_backlog_keeps_each_keys_newest(
    keys: list[str], posted: list[int], gone: dict[int, int]
) -> None:
    k = Keyed(replace(COALESCING, max_in_flight=8))
    k.run(Control("pause"))
    k.put(*((i + 1, key) for i, key in enumerate(keys)))
    _, effects = k.run(Control("resume"))
    assert sorted(seqs(effects)) == posted and superseded(effects) == gone


def test_the_newest_of_a_key_leaves_the_index_once_settled() -> None:
    k = Keyed(COALESCING)
    k.put((1, "a"), (2, "a"))
    assert k.backlog.newest == {"a": 2}
    k.answer(1, 200)
    k.answer(2, 200)
    assert k.backlog.newest == {}


def test_coalesce_needs_key_ordering() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_delivery_options({"ordering": "none", "coalesce": True}, None)
    assert caught.value.field == "coalesce" and "ordering" in caught.value.message
    with pytest.raises(InvalidInput) as caught:
        parse_delivery_options({"ordering": "key", "coalesce": "yes"}, None)
    assert caught.value.field == "coalesce"
    keyed = parse_delivery_options({"ordering": "key", "coalesce": True}, None)
    assert parse_delivery_options({"ordering": "strict"}, keyed).coalesce is False, "off with the ordering"
    assert parse_delivery_options({"max_in_flight": 4}, keyed).coalesce is True, "kept otherwise"


def test_the_ordered_head_out_is_not_superseded_when_the_receiver_turns_coalescing() -> None:
    k = Keyed(DeliveryOptions())
    assert k.put((1, "a")) == [1], "strict: the head goes"
    k.probing = True  # the strict job is out: the glue says in flight, with no seq of the window
    k.run(Configure(replace(CONFIG, options=COALESCING)))
    _, effects = k.run(Intake(replace(msg(2, at=T0), ordering_key="a")))
    assert superseded(effects) == {} and seqs(effects) == []


def test_slots_started_unordered_take_their_keys_when_the_receiver_turns_key_ordered() -> None:
    k = Keyed(replace(KEYED, ordering="none"))
    k.put((1, "a"))
    k.answer(1, 503)  # waits for its retry, keyless in the window
    k.run(Configure(replace(CONFIG, options=KEYED)))
    assert k.put((2, "a"), (3, "b")) == [3], "2 waits behind 1, of its key"


def test_a_newer_message_past_max_age_supersedes_nothing() -> None:
    k = Keyed(COALESCING)
    later = T0 + 2 * RETRY.max_age
    k.put((1, "a"), (2, "a"), now=later)
    old = replace(msg(3, at=T0), ordering_key="a")  # accepted max_age and more before now
    _, effects = k.run(Intake(old), later)
    assert superseded(effects) == {}, "3 is dead-lettered as too old; 2 still goes"
    assert [e.seq for e in effects if isinstance(e, DeadLetterHead)] == [3]


def test_an_index_naming_a_seq_the_state_never_counted_supersedes_nothing() -> None:
    k = Keyed(replace(COALESCING, max_in_flight=1))
    k.run(Control("pause"))
    k.put((1, "a"))
    # Written before a crash, with seq 2's entry: the state never moved past seq 1.
    k.backlog.newest["a"] = 2
    k.backlog.entries[2] = encode_backlog_entry(replace(msg(2, at=T0), ordering_key="a"), 2)
    _, effects = k.run(Control("resume"))
    assert seqs(effects) == [1] and superseded(effects) == {}
