"""Connection slots: the lane and host bounds hold, and waiters get freed slots fairly."""

from __future__ import annotations

import random

import pytest

from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.slots import SlotPool, parse_host_limits


def pool(
    fast: int = 3, slow: int = 1, per_host: int = 2, overrides: dict[str, int] | None = None
) -> SlotPool[str]:
    return SlotPool({"fast": fast, "slow": slow}, per_host, overrides or {})


def test_lane_and_host_bounds() -> None:
    p = pool()
    assert [p.try_acquire("fast", "a") for _ in range(3)] == [True, True, False]  # host a holds 2
    assert p.try_acquire("fast", "b") is True
    assert p.try_acquire("fast", "c") is False  # the lane holds 3
    assert p.try_acquire("slow", "c") is True  # the slow lane has its own budget
    assert p.try_acquire("slow", "d") is False
    assert p.used == {"fast": 3, "slow": 1} and p.host_used == {"a": 2, "b": 1, "c": 1}


def test_host_override() -> None:
    p = pool(fast=10, overrides={"big": 5})
    assert sum(p.try_acquire("fast", "big") for _ in range(10)) == 5
    assert sum(p.try_acquire("fast", "small") for _ in range(10)) == 2


def test_a_freed_slot_goes_to_the_oldest_waiter_of_a_host_with_room() -> None:
    p = pool(fast=3)
    for host in ("a", "a", "b"):
        assert p.try_acquire("fast", host)
    p.park("fast", "a", "a1")
    p.park("fast", "a", "a2")
    p.park("fast", "c", "c1")
    assert p.waiting == 3
    # b's slot frees a lane slot; a is still full, so c's waiter goes first
    assert p.release("fast", "b") == [("fast", "c", "c1")]
    assert p.release("fast", "a") == [("fast", "a", "a1")]
    assert p.release("fast", "c") == [], "a lane slot is free, but host a is full"
    assert p.release("fast", "a") == [("fast", "a", "a2")]
    assert p.waiting == 0 and p.used["fast"] == 2 and p.host_used == {"a": 2}


def test_hosts_take_turns() -> None:
    p = pool(fast=1, per_host=10)
    assert p.try_acquire("fast", "x")
    for i in range(3):
        p.park("fast", "a", f"a{i}")
        p.park("fast", "b", f"b{i}")
    order = []
    host = "x"
    for _ in range(6):
        [(_, host, item)] = p.release("fast", host)
        order.append(item)
    assert order == ["a0", "b0", "a1", "b1", "a2", "b2"]


def test_a_release_wakes_another_lane_waiting_on_the_same_host() -> None:
    p = pool(fast=5, slow=5, per_host=1)
    assert p.try_acquire("fast", "h")
    p.park("slow", "h", "s1")
    assert p.release("fast", "h") == [("slow", "h", "s1")]


def test_drop_forgets_waiters() -> None:
    p = pool(fast=1)
    assert p.try_acquire("fast", "a")
    for item in ("p1-x", "p2-y", "p1-z"):
        p.park("fast", "b", item)
    assert p.drop(lambda item: item.startswith("p1")) == 2
    assert p.waiting == 1
    assert p.release("fast", "a") == [("fast", "b", "p2-y")]


def test_a_tenant_holds_at_most_its_share_of_each_lane_and_untenanted_receivers_none() -> None:
    p: SlotPool[str] = SlotPool({"fast": 10, "slow": 3}, 100, {}, tenant_share=0.5)
    assert p.tenant_limits == {"fast": 5, "slow": 1}, "a share rounds down, but never below one slot"
    assert sum(p.try_acquire("fast", f"h{i}", "acme") for i in range(10)) == 5
    assert sum(p.try_acquire("slow", "h", "acme") for _ in range(3)) == 1
    assert p.try_acquire("fast", "h", "globex"), "another tenant still has room"
    assert sum(p.try_acquire("fast", "h", "") for _ in range(10)) == 4, "untenanted: only the lane's bound"
    assert p.used == {"fast": 10, "slow": 1}
    assert p.tenant_used == {("fast", "acme"): 5, ("slow", "acme"): 1, ("fast", "globex"): 1}


def test_a_freed_slot_skips_a_tenant_at_its_share_for_the_next_waiter() -> None:
    p: SlotPool[str] = SlotPool({"fast": 4}, 100, {}, tenant_share=0.5)
    assert p.try_acquire("fast", "a", "acme") and p.try_acquire("fast", "b", "acme")
    assert p.try_acquire("fast", "c", "") and p.try_acquire("fast", "d", "")
    p.park("fast", "a", "acme-1", "acme")
    p.park("fast", "a", "globex-1", "globex")  # the same host, another tenant: not behind acme's
    assert p.release("fast", "c") == [("fast", "a", "globex-1")]
    assert p.release("fast", "d") == [], "acme holds its share; the lane slot stays free"
    assert p.release("fast", "b", "acme") == [("fast", "a", "acme-1")]
    assert p.waiting == 0 and p.tenant_used == {("fast", "acme"): 2, ("fast", "globex"): 1}
    for host, tenant in (("a", "acme"), ("a", "acme"), ("a", "globex")):
        p.release("fast", host, tenant)
    assert p.used == {"fast": 0} and p.tenant_used == {} and p.host_used == {}


def releases_try_nobody(p: SlotPool[str], host: str, tenant: str) -> bool:
    """100 rounds of a slot taken and freed on `host` start no waiter and try none of them."""
    tried: list[str] = []
    acquire = p.try_acquire

    def counted(lane: str, host: str, tenant: str = "") -> bool:
        tried.append(host)
        return acquire(lane, host, tenant)

    p.try_acquire = counted  # type: ignore[method-assign]
    for _ in range(100):
        assert acquire("fast", host, tenant)
        assert p.release("fast", host, tenant) == []
    p.try_acquire = acquire  # type: ignore[method-assign]
    return tried == []


def test_a_tenant_at_its_share_is_passed_over_without_trying_its_hosts() -> None:
    """However many hosts a tenant at its share waits on, a release by anyone else does not look at them:
    50,000 such waiters made every release take 85 ms of the worker's loop."""
    p: SlotPool[str] = SlotPool({"fast": 100}, 100, {}, tenant_share=0.5)
    while p.try_acquire("fast", "held", "acme") or p.try_acquire("fast", "held2", "acme"):
        pass
    for i in range(1000):
        p.park("fast", f"h{i}", f"acme-{i}", "acme")
    assert releases_try_nobody(p, "good", "globex") and p.waiting == 1000


def test_one_tenant_alone_keeps_the_whole_lane() -> None:
    p: SlotPool[str] = SlotPool({"fast": 4}, 100, {}, tenant_share=0.5)
    alone = True
    p.shared = lambda: not alone
    assert sum(p.try_acquire("fast", f"h{i}", "acme") for i in range(6)) == 4
    p.park("fast", "h9", "acme-w", "acme")
    alone = False  # another tenant's receiver appears: acme is over its share until it releases
    assert p.release("fast", "h0", "acme") == []
    assert p.release("fast", "h1", "acme") == []
    assert p.release("fast", "h2", "acme") == [("fast", "h9", "acme-w")]


def test_parse_host_limits() -> None:
    assert parse_host_limits(" Hooks.Example.com=50, [::1]=3 ,", "X") == {"hooks.example.com": 50, "::1": 3}
    for bad, why in [("a.com", "host=limit"), ("a.com=x", "whole number"), ("a.com=0", "at least 1"),
                     ("=5", "host=limit")]:
        with pytest.raises(InvalidInput, match=why) as err:
            parse_host_limits(bad, "DISPATCHER_HOST_LIMITS")
        assert err.value.field == "DISPATCHER_HOST_LIMITS"


def test_many_tenants_behind_one_full_host_are_not_looked_at_by_other_releases() -> None:
    """Thousands of tenants each waiting on one busy host (one that every tenant posts to): a release
    elsewhere does not try them all again (28 ms a release at 10,000), and a release of that host
    starts the first of them."""
    p: SlotPool[str] = SlotPool({"fast": 100}, 2, {}, tenant_share=0.5)
    assert p.try_acquire("fast", "busy", "a") and p.try_acquire("fast", "busy", "b")
    for i in range(1000):
        p.park("fast", "busy", f"t{i}-job", f"t{i}")
    assert p.try_acquire("fast", "other", "x")
    assert p.release("fast", "other", "x") == [], "they wait behind the busy host from the start"
    assert releases_try_nobody(p, "other", "x")
    assert p.release("fast", "busy", "a") == [("fast", "busy", "t0-job")]
    assert p.release("fast", "busy", "b") == [("fast", "busy", "t1-job")]
    assert p.waiting == 998


def test_random_slot_traffic_never_leaves_a_waiter_parked_that_could_start() -> None:
    """A model of the deliverer's calls (acquire or park, release and start what it hands out, the share
    turning on and off, waiters dropped): after each, no waiter could hold a slot, and the counts match
    what is held."""
    for seed in range(500):
        rng = random.Random(seed)
        p: SlotPool[int] = SlotPool({"fast": 6, "slow": 2}, 3, {"h0": 1}, tenant_share=0.5)
        shared = [True]
        p.shared = lambda shared=shared: shared[0]  # type: ignore[misc]
        held: list[tuple[str, str, str]] = []
        parked: dict[int, tuple[str, str, str]] = {}
        for n in range(300):
            roll = rng.random()
            if roll < 0.5:
                lane = rng.choice(["fast", "fast", "slow"])
                job = (lane, f"h{rng.randrange(5)}", rng.choice(["", "a", "b", "c"]))
                if p.try_acquire(*job):
                    held.append(job)
                else:
                    p.park(job[0], job[1], n, job[2])
                    parked[n] = job
            elif roll < 0.95 and held:
                lane, host, tenant = held.pop(rng.randrange(len(held)))
                for _, _, item in p.release(lane, host, tenant):
                    held.append(parked.pop(item))
            elif roll < 0.975:
                shared[0] = not shared[0]
                for _, _, item in p.hand_out():
                    held.append(parked.pop(item))
            else:  # a partition moves away: its waiters are dropped
                gone = {item for item in parked if item % 3 == n % 3}
                assert p.drop(lambda item, gone=gone: item in gone) == len(gone)  # type: ignore[misc]
                for item in gone:
                    del parked[item]
                for _, _, item in p.hand_out():
                    held.append(parked.pop(item))
            assert p.waiting == len(parked), seed
            assert sum(p.used.values()) == len(held), seed
            for lane, host, tenant in parked.values():
                could = (p.used[lane] < p.limits[lane] and not p._host_full(host)
                         and not p._at_share(lane, tenant))
                assert not could, (seed, n, lane, host, tenant)


def test_a_host_that_frees_a_slot_while_the_lane_is_full_gets_its_waiter_a_turn() -> None:
    """Its first waiting tenant takes its turn at once, not only once nobody else wants the lane:
    under another tenant's steady stream it waited for ever, its host idle."""
    p: SlotPool[str] = SlotPool({"fast": 2}, 1, {"g": 10}, tenant_share=1.0)
    assert p.try_acquire("fast", "h", "A") and p.try_acquire("fast", "g", "B")  # the lane is full
    p.park("fast", "h", "A-2", "A")  # h is full too
    p.park("fast", "g", "B-1", "B")
    assert p.release("fast", "h", "A") in ([("fast", "h", "A-2")], [("fast", "g", "B-1")])
    started = []
    for i in range(2, 6):  # B keeps an attempt waiting
        p.park("fast", "g", f"B-{i}", "B")
        started += [item for _, _, item in p.release("fast", "g", "B")]
    assert "A-2" in started or p.host_used.get("h") == 1, "A's waiter started within B's next releases"


def test_a_share_that_stops_applying_again_before_a_release_frees_the_waiters_held_for_it() -> None:
    p: SlotPool[str] = SlotPool({"fast": 3}, 10, {}, tenant_share=0.5)
    shared = [False]
    p.shared = lambda: shared[0]
    assert p.try_acquire("fast", "h0", "a")
    assert p.try_acquire("fast", "h1", "b") and p.try_acquire("fast", "h2", "b")
    p.park("fast", "h3", "W1", "b")
    assert p.release("fast", "h1", "b") == [("fast", "h3", "W1")]
    shared[0] = True  # a second tenant's receiver appears: a is at its share
    p.park("fast", "h4", "W2", "a")
    shared[0] = False  # ... and goes again before any slot frees
    assert p.share_turned_off()
    assert p.release("fast", "h2", "b") == [("fast", "h4", "W2")]
