"""Receiver create/replace bodies, secret rotation, the public view, and the verification verdict."""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
from dataclasses import replace

import orjson
import pytest

from dispatcher.domain.actor import Policy, ReceiverState
from dispatcher.domain.delivery_options import MAX_RATE, MIN_BACKLOG_BYTES, MIN_RATE, DeliveryOptions
from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.ratelimit import Bucket, burst_of
from dispatcher.domain.receiver_spec import (
    parse_receiver_spec,
    parse_rotation,
    patched_body,
    public_view,
    rotate,
    secret_view,
)
from dispatcher.domain.records import ReceiverConfig, Verification
from dispatcher.domain.retry import RetryPolicy
from dispatcher.domain.signing import decode_secret, generate, generate_secret, generate_signing_key
from dispatcher.domain.verification import judge
from tests.unit.test_actor_isolation import T0, Actor, dead

SECRET = "whsec_" + "A" * 32
POLICY = Policy()


def spec(body: object, current: ReceiverConfig | None = None, https: bool = False) -> ReceiverConfig:
    return parse_receiver_spec(body, "r1", 100.0, https, generate, current)


def field_of(body: object) -> str:
    with pytest.raises(InvalidInput) as info:
        spec(body)
    return info.value.field


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ("nope", "body"),
        ({"url": "ftp://x.test/"}, "url"),
        ({"url": "http://user:pw@x.test/"}, "url"),
        ({"url": "http:///path"}, "url"),
        ({"url": "http://x.test/a b"}, "url"),
        ({"url": "http://x.test:99999/"}, "url"),
        ({"url": "http://x.test/", "secret": "nope"}, "secret"),
        ({"url": "http://x.test/", "secret": 5}, "secret"),
        ({"url": "http://x.test/", "secret": "whsk_AAAA"}, "secret"),
        ({"url": "http://x.test/", "secret": SECRET, "signing": "ed25519"}, "signing"),
        ({"url": "http://x.test/", "signing": "rsa"}, "signing"),
        ({"url": "http://x.test/", "event_types": ["ok", "bad type"]}, "event_types[1]"),
        ({"url": "http://x.test/", "colour": "red"}, "colour"),
        ({"url": "http://x.test/", "authorization": "Bearer a\r\nX-Evil: 1"}, "authorization"),
        ({"url": "http://x.test/", "authorization": "Bearer \u00e9"}, "authorization"),
        ({"url": "http://x.test/", "headers": {"Authorization": "Bearer x"}}, "headers.Authorization"),
        ({"url": "http://x.test/", "headers": {"X-A": "1", "x-a": "2"}}, "headers.x-a"),
        ({"url": "http://x.test/", "headers": {"X-A": "a\u2028b"}}, "headers.X-A"),
        ({"url": "http://x.test/", "verify": "yes"}, "verify"),
        ({"url": "http://x.test/", "retry": {"schedule": ["5s", "soon"]}}, "retry.schedule[1]"),
    ],
)
def test_receiver_spec_errors_name_the_field(body: object, field: str) -> None:
    assert field_of(body) == field


def test_https_required_when_configured() -> None:
    with pytest.raises(InvalidInput, match="https"):
        spec({"url": "http://x.test/"}, https=True)
    assert spec({"url": "https://x.test/"}, https=True).url == "https://x.test/"


def test_new_receivers_get_a_secret_of_the_asked_kind() -> None:
    assert spec({"url": "http://x.test/"}).secret.startswith("whsec_")
    assert spec({"url": "http://x.test/", "signing": "ed25519"}).secret.startswith("whsk_")
    assert spec({"url": "http://x.test/", "secret": SECRET}).secret == SECRET


def test_a_replace_keeps_secrets_and_a_verification_of_the_same_url() -> None:
    passed = Verification("passed", "http://x.test/", 50.0)
    current = ReceiverConfig(
        "r1", "http://x.test/", SECRET, created_at=7.0, previous_secrets=(("whsec_old", 200.0),),
        verify=True, verification=passed,
    )
    same = spec({"url": "http://x.test/", "event_types": ["a.b"]}, current)
    assert (same.secret, same.previous_secrets, same.created_at) == (SECRET, current.previous_secrets, 7.0)
    assert same.verify and same.verified
    moved = spec({"url": "http://y.test/"}, current)
    assert moved.verify and not moved.verified and moved.verification is None
    switched = spec({"url": "http://x.test/", "signing": "ed25519"}, current)
    assert switched.secret.startswith("whsk_") and switched.previous_secrets == ()


def test_rotation_keeps_the_old_secret_for_the_grace_period_only() -> None:
    config = ReceiverConfig("r1", "http://x.test/", SECRET)
    second = generate_secret()
    rotated = rotate(config, second, now=1000.0, grace=60.0)
    assert rotated.secret == second
    assert rotated.active_secrets(1059.0) == [second, SECRET]
    assert rotated.active_secrets(1060.0) == [second]
    third = generate_secret()
    again = rotate(rotated, third, now=1070.0, grace=0.0)
    assert again.previous_secrets == (), "an expired secret and a zero grace leave nothing behind"
    with pytest.raises(InvalidInput, match="current secret"):
        rotate(again, third, now=1080.0, grace=10.0)


def test_rotations_keep_at_most_five_previous_secrets() -> None:
    config = ReceiverConfig("r1", "http://x.test/", SECRET)
    for i in range(8):
        config = rotate(config, generate_secret(), now=float(i), grace=3600.0)
    assert len(config.previous_secrets) == 5


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"grace_seconds": -1}, "grace_seconds"),
        ({"grace_seconds": 8 * 86400}, "grace_seconds"),
        ({"grace_seconds": True}, "grace_seconds"),
        ({"signing": "dsa"}, "signing"),
        ({"secret": "whsec_x"}, "secret"),
        ({"secret": SECRET, "signing": "ed25519"}, "signing"),
        ({"later": 1}, "later"),
        ([], "body"),
    ],
)
def test_rotation_errors_name_the_field(body: object, field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_rotation(body, 86400.0)
    assert info.value.field == field


def test_rotation_defaults() -> None:
    assert parse_rotation(None, 86400.0) == (None, None, 86400.0)
    assert parse_rotation({"grace_seconds": 0, "signing": "ed25519"}, 1.0) == (None, "ed25519", 0.0)


def test_views_never_show_a_secret_except_the_new_one_once() -> None:
    old, key = generate_secret(), generate_signing_key()
    config = ReceiverConfig(
        "r1", "http://x.test/", key, previous_secrets=((old, 500.0),), authorization="Bearer hunter2"
    )
    public = orjson.dumps(public_view(config, 100.0, POLICY)).decode()
    for hidden in (key, old, "hunter2", key.removeprefix("whsk_")):
        assert hidden not in public
    view = public_view(config, 100.0, POLICY)
    assert view["signing"] == "ed25519" and view["public_key"].startswith("whpk_")
    assert view["authorization_set"] and view["previous_secrets_valid_until"] == [500.0]
    assert "secret" not in secret_view(config, 100.0, POLICY), "a whsk_ key stays inside; receivers get whpk_"
    hmac_config = ReceiverConfig("r1", "http://x.test/", old)
    assert secret_view(hmac_config, 100.0, POLICY)["secret"] == old


def _verify_config(secret: str = SECRET) -> ReceiverConfig:
    return ReceiverConfig("r1", "http://x.test/", secret, verify=True)


def test_verification_passes_on_an_echo_or_the_hmac_of_the_challenge() -> None:
    config = _verify_config()
    mac = base64.b64encode(hmac.new(decode_secret(SECRET), b"abc", hashlib.sha256).digest()).decode()
    for body in [b"abc", b"  abc\n", b'{"challenge": "abc"}', mac.encode(), f"v1,{mac}".encode(),
                 orjson.dumps({"challenge": mac})]:
        result = judge(config, "abc", 200, body, None, 5.0)
        assert (result.status, result.url, result.at) == ("passed", "http://x.test/", 5.0), body
    assert judge(config, "abc", 200, b"abc", None, 5.0) == Verification("passed", "http://x.test/", 5.0)


@pytest.mark.parametrize(
    ("status", "body", "error", "reason"),
    [
        (404, b"abc", None, "HTTP 404"),
        (200, b"", None, "without the challenge"),
        (200, b"abd", None, "without the challenge"),
        (200, b'{"challenge": 1}', None, "without the challenge"),
        (None, b"", "timeout", "no response: timeout"),
    ],
)
def test_verification_fails_with_a_reason(
    status: int | None, body: bytes, error: str | None, reason: str
) -> None:
    result = judge(_verify_config(), "abc", status, body, error, 5.0)
    assert result.status == "failed" and reason in result.reason


def test_ed25519_receivers_can_only_echo() -> None:
    config = _verify_config(generate_signing_key())
    assert judge(config, "abc", 200, b"abc", None, 1.0).status == "passed"
    assert judge(config, "abc", 200, b"not-it", None, 1.0).status == "failed"


# delivery options ----------------------------------------------------------------

URL = "http://127.0.0.1:9/"


@pytest.mark.parametrize(
    ("extra", "field", "why"),
    [
        ({"ordering": "random"}, "ordering", "must be one of"),
        ({"ordering": "none", "max_in_flight": 65}, "max_in_flight", "1..64"),
        ({"ordering": "none", "batch_max": 10}, "batch_max", "batches are sent in order"),
        ({"max_in_flight": 4}, "max_in_flight", "must be 1 for ordered"),
        ({"max_in_flight": 0}, "max_in_flight", "whole number"),
        ({"batch_max": 0}, "batch_max", "1..1000"),
        ({"batch_max": 1001}, "batch_max", "1..1000"),
        ({"batch_max": 2.5}, "batch_max", "whole number"),
        ({"batch_max_bytes": -1}, "batch_max_bytes", "whole number"),
        ({"rate_limit": -1}, "rate_limit", "events per second"),
        ({"rate_limit": "fast"}, "rate_limit", "events per second"),
        ({"rate_limit": True}, "rate_limit", "events per second"),
        ({"backlog_max": -5}, "backlog_max", "whole number"),
        ({"backlog_max_bytes": "1GB"}, "backlog_max_bytes", "whole number"),
        ({"backlog_overflow": "drop_newest"}, "backlog_overflow", "dead_letter_oldest, reject"),
    ],
)
def test_bad_delivery_options_name_their_field(extra: dict[str, object], field: str, why: str) -> None:
    with pytest.raises(InvalidInput, match=why) as info:
        spec({"url": URL, **extra})
    assert info.value.field == field


def test_delivery_options_are_kept_on_replace_unless_given() -> None:
    first = spec({"url": URL, "batch_max": 50, "rate_limit": 10, "backlog_overflow": "reject"})
    assert (first.options.batch_max, first.options.rate_limit, first.options.backlog_overflow) == (
        50, 10.0, "reject"
    )
    second = spec({"url": URL, "rate_limit": None}, current=first)
    assert (second.options.batch_max, second.options.rate_limit) == (50, 0.0)
    view = public_view(second, 100.0, POLICY)
    assert view["batch_max"] == 50 and view["ordering"] == "strict" and view["backlog_overflow"] == "reject"


def test_the_view_shows_what_deliveries_get_and_names_what_follows_the_worker() -> None:
    """Left out, an option is stored as 0 or "" (a later change of the default reaches it), and the
    view shows the worker's value for it; chosen, it shows as chosen."""
    worker = Policy(RetryPolicy(schedule=(), base=0.5, max_attempts=7, max_age=60.0), backlog_max=9,
                    backlog_max_bytes=3 << 20, backlog_overflow="reject", batch_max_bytes=4096)
    defaults = spec({"url": URL})
    assert (defaults.options.backlog_max, defaults.options.backlog_overflow, defaults.retry) == (0, "", None)
    view = public_view(defaults, 100.0, worker)
    shown = [view[k] for k in ("backlog_max", "backlog_max_bytes", "backlog_overflow", "batch_max_bytes")]
    assert shown == [9, 3 << 20, "reject", 4096]
    assert (view["retry"]["schedule"], view["retry"]["base"], view["retry"]["max_attempts"]) == (
        "exponential", 0.5, 7
    )
    assert view["worker_defaults"] == [
        "batch_max_bytes", "backlog_max", "backlog_max_bytes", "backlog_overflow",
        *(f"retry.{name}" for name in RetryPolicy().as_dict()),
    ]
    chosen = spec({"url": URL, "backlog_max": 5, "backlog_overflow": "dead_letter_oldest",
                   "retry": {"max_attempts": 3}})
    view = public_view(chosen, 100.0, worker)
    assert (view["backlog_max"], view["backlog_overflow"], view["backlog_max_bytes"]) == (
        5, "dead_letter_oldest", 3 << 20
    )
    assert (view["retry"]["max_attempts"], view["retry"]["max_age"]) == (3, 60.0), "an override over the rest"
    followed = set(view["worker_defaults"])
    assert not {"backlog_max", "backlog_overflow", "retry.max_attempts"} & followed
    assert {"backlog_max_bytes", "retry.max_age"} <= followed


def test_unordered_receivers_choose_their_window_and_strict_goes_back_to_one() -> None:
    unordered = spec({"url": URL, "ordering": "none", "max_in_flight": 8})
    assert (unordered.options.ordered, unordered.options.max_in_flight) == (False, 8)
    assert spec({"url": URL, "max_in_flight": 4}, current=unordered).options.max_in_flight == 4
    ordered = spec({"url": URL, "ordering": "strict"}, current=unordered)
    assert (ordered.options.ordered, ordered.options.max_in_flight) == (True, 1)


def test_a_patch_changes_only_what_it_names() -> None:
    current = spec({"url": URL, "event_types": ["a.*"], "tenant": "acme", "authorization": "Bearer x",
                    "ordering": "none", "max_in_flight": 8, "rate_limit": 5})
    patched = spec(patched_body(current, {"event_types": ["b.c"]}), current=current)
    assert patched.event_types == ("b.c",)
    assert (patched.url, patched.tenant, patched.authorization, patched.secret) == (
        current.url, "acme", "Bearer x", current.secret
    )
    assert (patched.options.max_in_flight, patched.options.rate_limit) == (8, 5.0)
    strict = spec(patched_body(current, {"ordering": "strict"}), current=current)
    assert (strict.options.ordered, strict.options.max_in_flight) == (True, 1)
    with pytest.raises(InvalidInput) as info:
        patched_body(current, {"id": "other"})
    assert info.value.field == "id"
    with pytest.raises(InvalidInput) as info:
        spec(patched_body(current, {"tenant": "no spaces allowed"}), current=current)
    assert info.value.field == "tenant"


# numeric delivery options: ranges that keep a receiver working ----------------------------------


@pytest.mark.parametrize(
    "rate",
    [1e-310, 5e-324, 1e-300, 0.009, 100_000.5, 1e300, 2**64 - 1, -0.5, True, False, "1", [1]],
)
def test_rate_limits_that_would_stall_or_mean_nothing_are_refused(rate: object) -> None:
    with pytest.raises(InvalidInput, match=r"0\.01\.\.100000") as info:
        spec({"url": URL, "rate_limit": rate})
    assert info.value.field == "rate_limit"


@pytest.mark.parametrize(
    ("rate", "stored"),
    [(None, 0.0), (0, 0.0), (0.0, 0.0), (-0.0, 0.0), (MIN_RATE, 0.01), (1, 1.0), (MAX_RATE, 100_000.0)],
)
def test_rate_limits_in_range_or_none_are_kept(rate: object, stored: float) -> None:
    got = spec({"url": URL, "rate_limit": rate}).options.rate_limit
    assert (got, str(got)) == (stored, str(stored)), "-0.0 is stored as the plain 0.0"


def test_the_slowest_rate_waits_at_most_100_s_and_its_state_encodes() -> None:
    """Why MIN_RATE: the wait for a token is 1/rate; 1e-310 made it inf (JSON null, no timer)."""
    a = Actor(DeliveryOptions(rate_limit=MIN_RATE))
    a.send(1)
    a.send(2)
    a.answer(200)
    assert a.state.next_attempt_at == pytest.approx(T0 + 100.0)
    assert ReceiverState.from_bytes(a.state.to_bytes()).next_attempt_at == a.state.next_attempt_at
    assert Bucket(0.0, T0).wait(1, 1e-310, burst_of(1e-310), T0) == math.inf, "what the range refuses"


@pytest.mark.parametrize("name", ["batch_max", "batch_max_bytes", "backlog_max", "backlog_max_bytes"])
@pytest.mark.parametrize("value", [True, False, 1.0, 1e300, 2**64, -(2**63), "5", None])
def test_whole_number_options_refuse_bools_floats_and_out_of_range(name: str, value: object) -> None:
    with pytest.raises(InvalidInput, match="whole number") as info:
        spec({"url": URL, name: value})
    assert info.value.field == name


@pytest.mark.parametrize("value", [True, 1.0, 65, 2**64])
def test_max_in_flight_refuses_bools_floats_and_out_of_range(value: object) -> None:
    with pytest.raises(InvalidInput, match=r"whole number in 1\.\.64") as info:
        spec({"url": URL, "ordering": "none", "max_in_flight": value})
    assert info.value.field == "max_in_flight"


@pytest.mark.parametrize("value", [1, 10, 200_000, MIN_BACKLOG_BYTES - 1, (1 << 50) + 1])
def test_a_backlog_byte_cap_that_cannot_hold_a_message_is_refused(value: int) -> None:
    with pytest.raises(InvalidInput, match=r"0 \(the worker's default\)|whole number") as info:
        spec({"url": URL, "backlog_max_bytes": value})
    assert info.value.field == "backlog_max_bytes"


def test_a_tiny_backlog_byte_cap_would_dead_letter_every_message_on_arrival() -> None:
    """Why MIN_BACKLOG_BYTES: the actor drops whatever is over the cap before it is ever sent."""
    a = Actor(DeliveryOptions(backlog_max_bytes=10))
    assert dead(a.send(1)) == [(1, "backlog_full")]


@pytest.mark.parametrize("value", [0, MIN_BACKLOG_BYTES, 1 << 30, 1 << 50])
def test_backlog_byte_caps_in_range_or_default_are_kept(value: int) -> None:
    assert spec({"url": URL, "backlog_max_bytes": value}).options.backlog_max_bytes == value


def test_a_stored_option_out_of_range_is_named_on_the_next_patch() -> None:
    """A receiver stored before the range existed (rate 1e-310) is mended by a PATCH naming it."""
    old = replace(spec({"url": URL}), options=DeliveryOptions(rate_limit=1e-310))
    with pytest.raises(InvalidInput) as info:
        spec(patched_body(old, {"event_types": ["a.b"]}), current=old)
    assert info.value.field == "rate_limit"
    assert spec(patched_body(old, {"rate_limit": 1}), current=old).options.rate_limit == 1.0
