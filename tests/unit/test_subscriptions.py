"""Subscription patterns and the index that matches events to receivers."""

from __future__ import annotations

import random
import time

import pytest

from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.subscriptions import SubscriptionIndex, matches, parse_pattern, parse_patterns

TABLE = [
    # pattern, event type, match?
    ("payment.succeeded", "payment.succeeded", True),
    ("payment.succeeded", "payment.failed", False),
    ("payment.succeeded", "payment.succeeded.late", False),
    ("payment.*", "payment.succeeded", True),
    ("payment.*", "payment.card.succeeded", True),
    ("payment.*", "payment", False),
    ("payment.*", "payments.succeeded", False),
    ("payment.*.succeeded", "payment.card.succeeded", True),
    ("payment.*.succeeded", "payment.card.failed", False),
    ("payment.*.succeeded", "payment.succeeded", False),
    ("payment.*.succeeded", "payment.card.x.succeeded", False),
    ("*.succeeded", "refund.succeeded", True),
    ("*.succeeded", "refund.card.succeeded", False),
    ("*", "anything", True),
    ("*", "a.b.c.d", True),
    ("*.*", "a", False),
    ("*.*", "a.b.c", True),
]


@pytest.mark.parametrize(("pattern", "event_type", "expected"), TABLE)
def test_pattern_table(pattern: str, event_type: str, expected: bool) -> None:
    assert matches(parse_pattern(pattern, "p"), event_type) is expected
    index = SubscriptionIndex()
    index.put("r", [pattern])
    assert (index.match(event_type) == {"r"}) is expected


@pytest.mark.parametrize("bad", ["", "payment..x", ".payment", "payment.", "pay ment", "a.b*", 7, "x" * 300])
def test_bad_patterns_name_the_field(bad: object) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_patterns(["ok.type", bad], "event_types")
    assert info.value.field == "event_types[1]"


def test_tenant_scoping() -> None:
    index = SubscriptionIndex()
    index.put("everyone", ["invoice.*"])
    index.put("acme-only", ["invoice.*"], tenant="acme")
    index.put("globex-only", ["invoice.paid"], tenant="globex")
    assert index.match("invoice.paid") == {"everyone"}, "an event without a tenant reaches unscoped ones"
    assert index.match("invoice.paid", "acme") == {"everyone", "acme-only"}
    assert index.match("invoice.paid", "globex") == {"everyone", "globex-only"}
    assert index.match("invoice.paid", "initech") == {"everyone"}


def test_the_index_counts_the_tenants_that_have_receivers() -> None:
    index = SubscriptionIndex()
    assert index.tenants() == 0
    index.put("a1", [], "acme")
    index.put("a2", ["order.*"], "acme")
    assert index.tenants() == 1, "one tenant: a deployment of one tenant keeps whole lanes"
    index.put("u1", [])  # untenanted, of every type
    index.put("u2", ["order.created"])
    assert index.tenants() == 2, "the untenanted count as one"
    index.put("a1", [], None)  # moved out of acme: acme still has a2
    index.remove("a2")
    assert index.tenants() == 1
    for rid in ("a1", "u1", "u2", "u2", "never"):
        index.remove(rid)
    assert index.tenants() == 0


def test_no_patterns_means_every_type_and_resubscribing_replaces() -> None:
    index = SubscriptionIndex()
    index.put("r", [])
    assert index.match("x.y") == {"r"}
    index.put("r", ["a.b"])
    assert index.match("x.y") == set() and index.match("a.b") == {"r"}
    index.remove("r")
    assert index.match("a.b") == set() and len(index) == 0
    assert index._root.empty(), "unsubscribing prunes the trie"


def test_receivers_of_every_type_keep_their_place_through_changes() -> None:
    """The default subscription (no patterns, no tenant) is kept apart from the others: same rules."""
    index = SubscriptionIndex()
    index.put("all1", [])
    index.put("all2", ["*"])  # the same as no patterns
    index.put("mixed", ["*", "a.b"])
    index.put("scoped", [], tenant="acme")
    assert index.match("x.y") == {"all1", "all2", "mixed"}
    assert index.match("x.y", "acme") == {"all1", "all2", "mixed", "scoped"}
    assert len(index) == 4 and all(rid in index for rid in ("all1", "all2", "mixed", "scoped"))
    assert index._subscriptions.keys() == {b"mixed", b"scoped"}, "the default costs no entry of its own"
    index.put("all1", ["a.b"])  # from every type to one
    index.put("mixed", [])  # and the other way
    index.put("all2", [])  # again: still one subscription
    assert index.match("x.y") == {"all2", "mixed"} and index.match("a.b") == {"all1", "all2", "mixed"}
    assert len(index) == 4
    index.remove("all2")
    index.remove("all2")  # twice: nothing more goes
    index.remove("never-there")
    assert index.match("x.y") == {"mixed"} and len(index) == 3 and "all2" not in index
    for rid in ("all1", "mixed", "scoped"):
        index.remove(rid)
    assert len(index) == 0 and index._root.empty()


def test_matching_does_not_scan_receivers() -> None:
    """100,000 receivers on one type, 100,000 spread over others: matching stays cheap (figures printed)."""
    index = SubscriptionIndex()
    for i in range(100_000):
        index.put(f"hot{i}", ["payment.succeeded"])
    rng = random.Random(5)
    for i in range(100_000):
        index.put(f"cold{i}", [f"team{rng.randrange(1000)}.thing{rng.randrange(50)}.*"])
    started = time.perf_counter()
    for _ in range(1000):
        assert index.match("team7.thing3.made") == index.match("team7.thing3.made")
    cold = (time.perf_counter() - started) / 2000
    started = time.perf_counter()
    hot = index.match("payment.succeeded")
    print(f"\nmatch among 200,000 receivers: {cold * 1e6:.1f} us for a type with few subscribers; "
          f"{(time.perf_counter() - started) * 1e3:.1f} ms to collect 100,000 subscribers of one type")
    assert len(hot) == 100_000
    assert all(r.startswith("cold") for r in index.match("team7.thing3.made"))
