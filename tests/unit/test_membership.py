"""A static member's hand-over: the ticket (`dispatcher/membership.py`) and its glue (`overrides/resume.py`).

The glue's real path (a worker stopped and started again on the embedded
broker) is in tests/integration/test_restart_gap.py; here, each branch of it
against a coordinator that records what it was asked.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.errors import KafkaConnectionError
from aiokafka.protocol.admin import DescribeGroupsRequest
from aiokafka.protocol.group import HeartbeatRequest

from dispatcher.membership import (
    Described,
    Membership,
    Ticket,
    TicketError,
    mismatch,
    too_old,
    unsettled,
)
from dispatcher.overrides.resume import Handover, described_group, partitions_of, take_ticket, write_ticket

TOPICS = ("a.requests", "b.changelog")
# What a worker alone in its group is given: every partition of every topic, as their leader.
ASSIGNED = ConsumerProtocolMemberAssignment(0, [(t, [0, 1]) for t in TOPICS], b"faust's").encode()
SHARE = ConsumerProtocolMemberAssignment(0, [(t, [1]) for t in TOPICS], b"faust's").encode()
MEMBERSHIP = Membership(
    group_id="g", instance_id="pod-0", member_id="pod-0-abc", generation=4, protocol="faust",
    assignment=ASSIGNED, topics=TOPICS, group_subscription=TOPICS,
    url="http://pod-0:6066", build="1.0", partition_counts=tuple((t, 2) for t in TOPICS))
TICKET = Ticket(MEMBERSHIP, stopped_at=1000.0)
HERE = {"group_id": "g", "instance_id": "pod-0", "topics": {"b.changelog", "a.requests"},
        "url": "http://pod-0:6066", "build": "1.0"}


def test_a_ticket_reads_back_as_written() -> None:
    assert Ticket.decode(TICKET.encode()) == TICKET
    leader = Ticket(replace(MEMBERSHIP, group_subscription=("a", "x"), partition_counts=(("a", 8), ("x", 1))),
                    5.5)
    assert Ticket.decode(leader.encode()) == leader


@pytest.mark.parametrize(("field", "value", "named"), [
    ("member_id", None, "member_id: must be a string"),
    ("generation", "4", "generation: must be an integer"),
    ("generation", True, "generation: must be an integer"),
    ("assignment", "not base64!", "assignment: must be base64"),
    ("assignment", 7, "assignment: must be a string"),
    ("topics", "a.requests", "topics: must be a list of topic names"),
    ("group_subscription", [1], "group_subscription: must be a list of topic names"),
    ("stopped_at", "yesterday", "stopped_at: must be a number"),
    ("partition_counts", {"a": "8"}, "partition_counts: must be an object of topic names to partition"),
    ("format", 2, "format: 2, this build reads 1"),
])
def test_a_damaged_ticket_names_its_field(field: str, value: Any, named: str) -> None:
    doc = orjson.loads(TICKET.encode())
    doc[field] = value
    with pytest.raises(TicketError, match=named):
        Ticket.decode(orjson.dumps(doc))


@pytest.mark.parametrize("raw", [b"", b"{not json", b"[1, 2]", b"null"])
def test_what_is_no_ticket_is_refused(raw: bytes) -> None:
    with pytest.raises(TicketError):
        Ticket.decode(raw)


def test_a_ticket_of_this_member_may_be_resumed() -> None:
    assert mismatch(TICKET, **HERE) is None


@pytest.mark.parametrize(("change", "reason"), [
    ({"group_id": "other"}, "the group changed ('g' then, 'other' now)"),
    ({"instance_id": "pod-1"}, "the instance id changed"),
    ({"build": "1.1"}, "the build changed ('1.0' then, '1.1' now)"),
    ({"url": "http://elsewhere:6066"}, "the advertised URL changed"),
    ({"topics": {"a.requests"}}, "the subscribed topics changed"),
])
def test_a_ticket_of_another_member_build_or_subscription_is_not(change: dict[str, Any], reason: str) -> None:
    why = mismatch(TICKET, **{**HERE, **change})
    assert why is not None and why.startswith(reason)


@pytest.mark.parametrize("membership", [replace(MEMBERSHIP, member_id=""),
                                        replace(MEMBERSHIP, generation=-1)])
def test_a_ticket_that_names_no_membership_is_not(membership: Membership) -> None:
    assert mismatch(Ticket(membership, 0.0), **HERE) == "it names no membership"


@pytest.mark.parametrize(("described", "reason"), [
    (Described(0, "Stable", {"pod-0-abc": b""}), None),  # the only member (the embedded broker shows none)
    (Described(0, "Stable", {"pod-0-abc": ASSIGNED, "pod-1-x": b"other"}), None),  # shown: the same
    (Described(0, "Stable", {"pod-0-abc": b"\x00\x01moved", "pod-1-x": b"other"}),
     "the broker holds another assignment for it"),
    (Described(0, "Stable", {"pod-0-abc": b"", "pod-1-x": b""}),
     "the group has other members and the broker shows no assignments"),
    (Described(0, "Unknown", {"pod-0-abc": b""}), "the group is Unknown, not Stable"),  # re-forming
    (Described(0, "PreparingRebalance", {"pod-0-abc": b""}), "the group is PreparingRebalance, not Stable"),
    (Described(0, "Stable", {"pod-1-x": b""}), "the group does not list this member"),
    (Described(16, "", {}), "describing the group failed (error 16)"),
])
def test_only_a_settled_group_that_shows_the_assignment_ours_proves_it(
    described: Described, reason: str | None
) -> None:
    assert unsettled(described, MEMBERSHIP, partitions_of(ASSIGNED)) == reason


def test_alone_in_its_group_a_member_proves_nothing_with_a_share_or_as_a_follower() -> None:
    alone = Described(0, "Stable", {"pod-0-abc": b""})
    share = replace(MEMBERSHIP, assignment=SHARE)
    assert unsettled(alone, share, partitions_of(SHARE)) == (
        "it is alone in the group but was not given every partition of a.requests")
    follower = replace(MEMBERSHIP, group_subscription=None, partition_counts=None)
    assert unsettled(alone, follower, partitions_of(ASSIGNED)) == (
        "it is alone in the group but did not make the assignment")


@pytest.mark.parametrize(("now", "fresh"), [(1000.0, True), (1008.0, True), (1008.1, False), (999.0, False)])
def test_a_ticket_is_tried_only_while_its_session_surely_runs(now: float, fresh: bool) -> None:
    # session 10 s, heartbeats every second, 1 s in hand: up to 8 s after the stop
    assert (too_old(TICKET, now, 10.0, 1.0) is None) == fresh


class Answer(SimpleNamespace):
    pass


@pytest.mark.parametrize("members", [
    [("pod-0-abc", "cid", "host", b"meta", b"assigned")],  # v0-v3
    [("pod-0-abc", "pod-0", "cid", "host", b"meta", b"assigned")],  # v4 and up: the instance id second
])
def test_a_describe_answer_of_any_version_is_read(members: list[tuple[Any, ...]]) -> None:
    answer = Answer(groups=[(0, "other", "Stable", "consumer", "faust", []),
                            (0, "g", "Stable", "consumer", "faust", members)])
    assert described_group(answer, "g") == Described(0, "Stable", {"pod-0-abc": b"assigned"})
    assert described_group(answer, "missing") == Described(-1, "", {})


def test_a_ticket_is_taken_once(tmp_path: Path) -> None:
    path = tmp_path / "handover.json"
    assert take_ticket(path) is None
    write_ticket(path, TICKET)
    assert take_ticket(path) == TICKET
    assert list(tmp_path.iterdir()) == [] and take_ticket(path) is None


def test_a_damaged_ticket_is_taken_and_dropped(tmp_path: Path) -> None:
    path = tmp_path / "handover.json"
    path.write_bytes(b'{"format": 1, "group_id": "g"')
    assert take_ticket(path) is None
    assert list(tmp_path.iterdir()) == []


class FakeCoordinator:
    """The parts of aiokafka's GroupCoordinator the hand-over reads and wraps, and what it was asked."""

    def __init__(self, heartbeat_error: int = 0, heartbeat_fails: bool = False, state: str = "Stable",
                 members: dict[str, bytes] | None = None, refuse: bool = False,
                 partitions: dict[str, int] | None = None) -> None:
        self.group_id, self._group_instance_id = "g", "pod-0"
        self.member_id, self.generation = "", -1
        self._closing: asyncio.Future[None] | None = None
        self._subscription = SimpleNamespace(
            subscription=SimpleNamespace(topics={"a.requests", "b.changelog"}, active=True),
            subscribed_pattern=None)
        self._group_subscription: set[str] | None = None
        self._rejoin_needed_fut: Any = None
        self.heartbeat_error, self.heartbeat_fails = heartbeat_error, heartbeat_fails
        self.state, self.members = state, {"pod-0-abc": b""} if members is None else members
        self.refuse = refuse
        self.partitions = {"a.requests": 2, "b.changelog": 2} if partitions is None else partitions
        self._session_timeout_ms, self._heartbeat_interval_ms = 10_000, 1_000
        self._metadata_snapshot: dict[str, int] = {}
        self._client = SimpleNamespace(set_topics=lambda topics: None, _maybe_wait_metadata=self._no_wait)
        self.assigned: list[bytes] = []  # what the assignor was given
        self.sent: list[Any] = []
        self.joined: list[tuple[int, str, str, bytes]] = []
        self.rejoins = 0
        self.leaves = 0

    async def _send_req(self, request: Any) -> Any:
        self.sent.append(request)
        if isinstance(request, DescribeGroupsRequest):
            members = [(m, "cid", "host", b"", a) for m, a in self.members.items()]
            return Answer(groups=[(0, "g", self.state, "consumer", "faust", members)])
        if self.heartbeat_fails:
            raise KafkaConnectionError("broker gone")
        return SimpleNamespace(error_code=self.heartbeat_error)

    async def _no_wait(self) -> None:
        return None

    def _get_metadata_snapshot(self) -> dict[str, int]:
        return {t: self.partitions[t] for t in self._group_subscription or ()}

    def _lookup_assignor(self, name: str) -> Any:
        def on_assignment(assignment: Any) -> None:
            self.assigned.append(assignment)
            assert not self.refuse, "url mismatch"
        return SimpleNamespace(on_assignment=on_assignment) if name == "faust" else None

    async def _on_join_complete(self, generation: int, member_id: str, protocol: str,
                                assignment: bytes) -> None:
        self.joined.append((generation, member_id, protocol, assignment))

    async def _do_rejoin_group(self, subscription: Any) -> bool:  # aiokafka's JoinGroup and SyncGroup
        self.rejoins += 1
        self.member_id, self.generation = "pod-0-new", 9
        await self._on_join_complete(9, "pod-0-new", "faust", b"joined")
        return True

    async def _maybe_leave_group(self) -> None:  # aiokafka's: a static member resets, never leaves
        self.leaves += 1
        self.member_id, self.generation = "", -1


def installed(coordinator: FakeCoordinator, path: Path, ticket: Ticket | None) -> Handover:
    handover = Handover(coordinator, path, ticket, url="http://pod-0:6066", build="1.0", clock=lambda: 1002.5)
    handover.install()
    return handover


async def rejoin(coordinator: FakeCoordinator) -> bool:
    coordinator._closing = asyncio.get_running_loop().create_future()
    coordinator._rejoin_needed_fut = asyncio.get_running_loop().create_future()
    return await coordinator._do_rejoin_group(coordinator._subscription.subscription)


async def test_a_membership_the_broker_confirms_is_resumed_without_a_join(tmp_path: Path) -> None:
    coordinator = FakeCoordinator()
    handover = installed(coordinator, tmp_path / "t.json", TICKET)
    assert await rejoin(coordinator)
    describe, heartbeat = coordinator.sent  # the describe first: it changes nothing on the broker
    assert isinstance(heartbeat, HeartbeatRequest) and isinstance(describe, DescribeGroupsRequest)
    assert (heartbeat._group, heartbeat._generation_id, heartbeat._member_id) == ("g", 4, "pod-0-abc")
    assert coordinator.rejoins == 0
    assert coordinator.joined == [(4, "pod-0-abc", "faust", ASSIGNED)]
    assert [a.assignment for a in coordinator.assigned] == [[(t, [0, 1]) for t in TOPICS]]  # asked first
    assert (coordinator.member_id, coordinator.generation) == ("pod-0-abc", 4)
    assert handover.last == MEMBERSHIP
    # Used once: the next rejoin (a later rebalance) is a join.
    assert await coordinator._do_rejoin_group(coordinator._subscription.subscription)
    assert coordinator.rejoins == 1 and len(coordinator.sent) == 2


@pytest.mark.parametrize(("coordinator", "ticket"), [
    (FakeCoordinator(heartbeat_error=25), TICKET),  # UnknownMemberId: the session ran out
    (FakeCoordinator(heartbeat_error=27), TICKET),  # RebalanceInProgress
    (FakeCoordinator(heartbeat_error=22), TICKET),  # IllegalGeneration
    (FakeCoordinator(heartbeat_fails=True), TICKET),
    (FakeCoordinator(), Ticket(replace(MEMBERSHIP, build="0.9"), 1000.0)),
    (FakeCoordinator(), None),
    (FakeCoordinator(state="Unknown"), TICKET),  # the embedded broker re-forming at the same generation
    (FakeCoordinator(members={"pod-0-abc": b"", "pod-1-x": b""}), TICKET),
    (FakeCoordinator(members={"pod-0-abc": b"moved"}), TICKET),
    (FakeCoordinator(refuse=True), TICKET),
    (FakeCoordinator(), Ticket(replace(MEMBERSHIP, protocol="range"), 1000.0)),
    (FakeCoordinator(partitions={"a.requests": 4, "b.changelog": 2}), TICKET),
    (FakeCoordinator(), Ticket(MEMBERSHIP, 990.0)),  # written 12.5 s ago, with a session of 10
    (FakeCoordinator(), Ticket(MEMBERSHIP, 1010.0)),  # written "later": the clock went back
    (FakeCoordinator(), Ticket(replace(MEMBERSHIP, assignment=SHARE), 1000.0)),
], ids=["unknown-member", "rebalancing", "illegal-generation", "no-answer", "other-build", "no-ticket",
        "re-forming", "others-unshown", "another-assignment", "assignor-refuses", "unknown-assignor",
        "partitions-added", "too-old", "clock-back", "alone-with-a-share"])
async def test_anything_the_broker_does_not_confirm_is_a_join(
    coordinator: FakeCoordinator, ticket: Ticket | None, tmp_path: Path
) -> None:
    installed(coordinator, tmp_path / "t.json", ticket)
    assert await rejoin(coordinator)
    assert coordinator.rejoins == 1
    assert coordinator.joined == [(9, "pod-0-new", "faust", b"joined")]
    assert coordinator._group_subscription is None  # no leader duties taken up for a join


async def test_a_resumed_leader_watches_its_topics_partition_counts(tmp_path: Path) -> None:
    coordinator = FakeCoordinator()
    installed(coordinator, tmp_path / "t.json", TICKET)
    assert await rejoin(coordinator)
    assert coordinator.rejoins == 0
    assert coordinator._group_subscription == set(TOPICS)
    assert coordinator._metadata_snapshot == {"a.requests": 2, "b.changelog": 2}


async def test_a_follower_resumes_what_the_broker_shows_it_beside_others(tmp_path: Path) -> None:
    follower = replace(MEMBERSHIP, assignment=SHARE, group_subscription=None, partition_counts=None)
    coordinator = FakeCoordinator(members={"pod-0-abc": SHARE, "pod-1-x": b"the rest"})
    installed(coordinator, tmp_path / "t.json", Ticket(follower, 1000.0))
    assert await rejoin(coordinator)
    assert coordinator.rejoins == 0 and coordinator.joined == [(4, "pod-0-abc", "faust", SHARE)]
    assert coordinator._group_subscription is None


async def test_a_close_with_a_rejoin_pending_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    coordinator = FakeCoordinator()
    installed(coordinator, path, None)
    await rejoin(coordinator)
    coordinator._rejoin_needed_fut.set_result(None)  # a heartbeat answered RebalanceInProgress
    assert coordinator._closing is not None
    coordinator._closing.set_result(None)
    await coordinator._maybe_leave_group()
    assert not path.exists() and coordinator.leaves == 1


async def test_only_a_close_writes_the_membership_down(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    coordinator = FakeCoordinator()
    installed(coordinator, path, None)
    await rejoin(coordinator)
    await coordinator._maybe_leave_group()  # the heartbeat task's leave of an idle consumer: no ticket
    assert not path.exists() and coordinator.leaves == 1
    await rejoin(coordinator)
    assert coordinator._closing is not None
    coordinator._closing.set_result(None)
    await coordinator._maybe_leave_group()
    written = take_ticket(path)
    assert written is not None and coordinator.leaves == 2
    assert (written.membership.member_id, written.membership.generation) == ("pod-0-new", 9)
    assert written.membership.assignment == b"joined" and written.stopped_at == 1002.5


async def test_a_membership_the_broker_took_back_is_not_written_down(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    coordinator = FakeCoordinator()
    installed(coordinator, path, None)
    await rejoin(coordinator)
    coordinator.member_id, coordinator.generation = "", -1  # a heartbeat error reset the generation
    assert coordinator._closing is not None
    coordinator._closing.set_result(None)
    await coordinator._maybe_leave_group()
    assert not path.exists() and coordinator.leaves == 1
