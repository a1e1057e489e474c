"""Property tests: nothing a receiver answers or a producer writes makes the domain raise.

Each parser that takes outside input is driven with arbitrary values; it
either accepts or refuses with InvalidInput naming a field, never anything
else. The actor is driven with arbitrary answers and must never raise, never
make a state or attempt record that cannot be encoded, and never schedule a
retry earlier than the schedule says.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatcher.actor_runner import attempt_record
from dispatcher.domain import actor
from dispatcher.domain.actor import Facts, LogAttempt, Policy, ReceiverState, Result, decide
from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.events import decode_event, parse_event_spec
from dispatcher.domain.headers import check_headers
from dispatcher.domain.receiver_spec import parse_receiver_spec
from dispatcher.domain.records import (
    Message,
    Outcome,
    ReceiverConfig,
    decode_command,
    decode_request,
    parse_message_spec,
)
from dispatcher.domain.retry import MAX_RETRY_AFTER, RetryPolicy, parse_retry_after
from dispatcher.domain.untrusted import MAX_FUTURE_SKEW, MAX_PAST, producer_time
from tests.unit.test_actor import AcceptedAt

pytestmark = pytest.mark.filterwarnings("ignore")
EXAMPLES = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = 1_800_000_000.0
RETRY = RetryPolicy(schedule=(1.0, 2.0, 4.0, 8.0), jitter=0.2, max_attempts=100, max_age=10_000.0)
POLICY = Policy(RETRY)
CONFIG = ReceiverConfig("r1", "http://127.0.0.1:1/", "whsec_" + "A" * 32)

# Any text, lone surrogates included (what a non-UTF-8 header decodes to with surrogateescape).
any_text = st.text(st.characters(blacklist_categories=()), max_size=200)
json_scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
                | st.floats(allow_nan=False, allow_infinity=False) | any_text)
json_values: st.SearchStrategy[Any] = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
    max_leaves=12,
)
statuses = st.none() | st.integers(-(2**63), 2**63) | st.sampled_from([200, 204, 301, 404, 410, 429, 503])
retry_afters = st.none() | any_text | st.sampled_from(
    ["²", "٣", "1e9", "-5", "99999999999999999999", "Wed, 21 Oct 2015 07:28:00 GMT",
     "Fri, 31 Dec 9999 23:59:59 GMT", "Mon, 01 Jan 0001 00:00:00 GMT", "120", " 7 "]
)


def _refuses_or_returns(call: Any) -> None:
    try:
        call()
    except InvalidInput as exc:
        assert exc.field, "an error must name the field at fault"


@EXAMPLES
@given(status=statuses, retry_after=retry_afters, headers=st.dictionaries(any_text, any_text, max_size=6),
       body=any_text, latency=st.floats() | st.integers(), at=st.floats(), attempts=st.integers(0, 50),
       rand=st.floats(0, 0.999))
def test_no_answer_makes_decide_raise_or_retry_early(
    status: Any, retry_after: Any, headers: dict[str, str], body: str, latency: Any, at: Any,
    attempts: int, rand: float,
) -> None:
    if retry_after is not None:
        headers = {**headers, "retry-after": retry_after}
    state = ReceiverState("r1", CONFIG, next_seq=2, attempts=attempts, head_accepted_at=NOW - 1)
    ok = isinstance(status, int) and 200 <= status < 300
    result = Outcome(1, "m1", "t", ok, status, None if status else "timeout", latency, at,
                     body_prefix=body, headers=headers, attempt=attempts + 1)
    new, effects = decide(state, Result(result), Facts(NOW, rand, False, AcceptedAt(every=NOW - 1)), POLICY)
    assert new is not None
    new.to_bytes()  # the state can be stored
    for effect in effects:
        if isinstance(effect, LogAttempt):
            orjson.loads(attempt_record(effect))  # the attempt log entry can be stored
    if new.delivered_seq == 0 and new.attempts == attempts + 1 and not new.disabled:
        # retried: never before the schedule's delay (Retry-After may only stretch it)
        assert new.next_attempt_at >= NOW + RETRY.delay(attempts + 1, rand) - 1e-6
        assert new.next_attempt_at <= NOW + max(MAX_RETRY_AFTER, RETRY.delay(attempts + 1, rand)) + 1e-6
        assert not any(isinstance(e, actor.Deliver) for e in effects), "no re-POST at once"


@EXAMPLES
@given(value=retry_afters, now=st.floats(0, 4e9))
def test_retry_after_parser_is_total(value: Any, now: float) -> None:
    got = parse_retry_after(value, now)
    assert got is None or got >= 0


@EXAMPLES
@given(value=json_values, broker=st.floats(0, 4e9))
def test_producer_times_outside_the_range_fall_back_to_the_broker(value: Any, broker: float) -> None:
    at, note = producer_time(value, broker)
    if note:
        assert at == broker
    elif value is not None:
        assert broker - MAX_PAST <= at <= broker + MAX_FUTURE_SKEW or broker == 0


def _json_bytes(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:  # infinity, or text with lone surrogates: what no producer's JSON holds
        return orjson.dumps(repr(value).encode("utf-8", "replace").decode())


raw_records = st.binary(max_size=300) | json_values.map(_json_bytes) | st.sampled_from(
    [b'{"event_type": "a.b", "payload": 123456789012345678901234567890}',
     b'{"event_type": "a.b", "payload": 1, "accepted_at": 1.8e12}',
     b'{"kind": "receiver.upsert", "receiver": {"id": "r1", "url": "http://evil/", "secret": "x"}}',
     b'{"kind": "receiver.control", "action": "delete"}']
)


@EXAMPLES
@given(raw=raw_records)
def test_requests_topic_records_decode_or_name_the_field(raw: bytes) -> None:
    try:
        got = decode_request("r1", raw, "kafka_0_1", NOW)
    except InvalidInput as exc:
        assert exc.field and exc.code in ("malformed", "forbidden_record")
    else:
        assert isinstance(got, Message)
        orjson.dumps(got.payload)


@EXAMPLES
@given(raw=raw_records)
def test_events_and_commands_decode_or_name_the_field(raw: bytes) -> None:
    _refuses_or_returns(lambda: decode_event(raw, "kafka_0_1", NOW))
    _refuses_or_returns(lambda: decode_command("r1", raw))


@EXAMPLES
@given(body=json_values | st.dictionaries(st.sampled_from(
    ["receiver_id", "event_type", "payload", "id", "headers", "url", "retry", "rate_limit", "tenant",
     "event_types", "secret", "batch_max", "max_in_flight", "ordering"]), json_values, max_size=8))
def test_api_specs_accept_or_name_the_field(body: Any) -> None:
    _refuses_or_returns(lambda: parse_message_spec(body, "", lambda: "msg_1", NOW))
    _refuses_or_returns(lambda: parse_event_spec(body, lambda: "evt_1", NOW))
    _refuses_or_returns(lambda: check_headers(body, "headers"))
    _refuses_or_returns(lambda: parse_receiver_spec(body, "r1", NOW, False, lambda kind: "whsec_" + "A" * 32))


@given(st.text())
def test_an_outside_value_stays_one_token_or_one_line_in_a_log(text: str) -> None:
    from dispatcher.domain.untrusted import log_token, one_line

    token = log_token(text, 10_000)
    assert all(c.isascii() and (c.isalnum() or c in "_-\\") for c in token), token
    assert token == text or "\\x" in token or "\\u" in token
    line = one_line(text)
    assert not any(c in line for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"), line


def test_log_escapes_keep_what_is_safe() -> None:
    from dispatcher.domain.untrusted import log_token, one_line

    assert log_token("rcv_01JD-x") == "rcv_01JD-x"
    assert log_token("a b=c\n") == "a\\x20b\\x3dc\\x0a"
    assert one_line("plain text, é and 中\tnext\u202e") == "plain text, é and 中\\x09next\\u202e"
    assert one_line("x seq=7") == "x seq\\x3d7"  # no field of its own in the JSON log
