"""A static member's hand-over: what its clean stop leaves on disk for its restart, and when that holds.

A worker with an instance id (Kafka static membership) does not leave its
consumer group when it stops: it is expected back. On its clean stop it writes
this ticket (its member id, generation and assignment) beside its tables; the
next start of the same instance, build and subscription takes it (read, then
deleted, so it is used at most once) and asks the broker how the group stands
(DescribeGroups, which changes nothing), then, with one heartbeat, whether the
membership still stands. It resumes the written assignment, without a
JoinGroup or a SyncGroup, only if the ticket is young, the group is settled
(`Stable`) with this member in it and the written assignment provably still
its own (the broker shows that assignment for it, as Kafka does, or the member
is alone in the group and was given every partition), and the heartbeat is
answered without an error. A heartbeat alone is no proof: the embedded broker
keeps a group's generation number when a returning static member re-forms the
group and answers that generation's heartbeats meanwhile, and a heartbeat
there ends the sessions of silent members (found by review: two owners of one
partition, or a worker waiting for ever, in groups of static workers). Anything
else is a normal join. On the embedded broker, which shows no assignments,
only a worker alone in its group resumes; it then delivers 6 s sooner than a
join, which that broker holds 3 s + 3 s for a static member.
`overrides/resume.py` is the glue; this module is the pure part.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import orjson

FORMAT = 1
FILE_NAME = "membership-handover.json"


class TicketError(ValueError):
    """A ticket that cannot be read: it names the field at fault."""


@dataclass(frozen=True, slots=True)
class Membership:
    """What the broker gave a static member at its last join, and whom it was given to."""

    group_id: str
    instance_id: str
    member_id: str
    generation: int
    protocol: str  # the assignor's name
    assignment: bytes  # the member's assignment, as the SyncGroup answer carried it
    topics: tuple[str, ...]  # the subscription it was given for, sorted
    group_subscription: tuple[str, ...] | None  # the leader's view of every member's topics; None: not leader
    url: str  # the worker's advertised URL (Faust's assignment names it)
    build: str  # the dispatcher version that wrote it
    # The leader's partition count per group topic when it assigned (None: not leader): a count
    # changed while it was stopped needs a new assignment.
    partition_counts: tuple[tuple[str, int], ...] | None = None


@dataclass(frozen=True, slots=True)
class Described:
    """A DescribeGroups answer for one group: its state, and each member's assignment as shown."""

    error_code: int
    state: str
    members: dict[str, bytes]  # member id -> assignment (empty where the broker shows none)


MARGIN = 1.0  # seconds kept in hand for the restart's own requests to reach the broker


def too_old(ticket: Ticket, now: float, session_s: float, heartbeat_s: float) -> str | None:
    """Why `ticket` is too old to try (None: young enough). The member's session runs from its last
    heartbeat, up to `heartbeat_s` before the stop; near its end the broker may be ending it, and on
    the embedded broker the resume's own heartbeat would end it while the group still names it
    leader (the join after that waits for ever). A clock gone back makes any ticket too old."""
    age = now - ticket.stopped_at
    limit = session_s - heartbeat_s - MARGIN
    if not 0 <= age <= limit:
        return f"it was written {age:.1f} s ago, not within the {limit:.1f} s a resume may take"
    return None


def unsettled(described: Described, membership: Membership,
              assigned: dict[str, frozenset[int]]) -> str | None:
    """Why `described` does not prove the written assignment still this member's (None: it does).
    `assigned` is that assignment's partitions per topic."""
    if described.error_code:
        return f"describing the group failed (error {described.error_code})"
    if described.state != "Stable":
        return f"the group is {described.state or 'in no state'}, not Stable"
    shown = described.members.get(membership.member_id)
    if shown is None:
        return "the group does not list this member"
    if shown:
        return None if shown == membership.assignment else "the broker holds another assignment for it"
    if len(described.members) > 1:
        return "the group has other members and the broker shows no assignments"
    return uncovered(membership, assigned)


def uncovered(membership: Membership, assigned: dict[str, frozenset[int]]) -> str | None:
    """A member alone in its group must have been given every partition of the topics it led the
    assignment for; None if it was. (A group whose other members were dropped without a new
    assignment leaves the survivor its share only.)"""
    if membership.partition_counts is None:
        return "it is alone in the group but did not make the assignment"
    for topic, count in membership.partition_counts:
        if assigned.get(topic, frozenset()) != frozenset(range(count)):
            return f"it is alone in the group but was not given every partition of {topic}"
    return None


@dataclass(frozen=True, slots=True)
class Ticket:
    membership: Membership
    stopped_at: float  # wall-clock seconds: a ticket is tried only while the session surely runs

    def encode(self) -> bytes:
        m = self.membership
        return orjson.dumps({
            "format": FORMAT, "group_id": m.group_id, "instance_id": m.instance_id, "member_id": m.member_id,
            "generation": m.generation, "protocol": m.protocol,
            "assignment": base64.b64encode(m.assignment).decode(), "topics": list(m.topics),
            "group_subscription": None if m.group_subscription is None else list(m.group_subscription),
            "url": m.url, "build": m.build, "stopped_at": self.stopped_at,
            "partition_counts": None if m.partition_counts is None else dict(m.partition_counts),
        })

    @classmethod
    def decode(cls, raw: bytes) -> Ticket:
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise TicketError(f"not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise TicketError("not a JSON object")
        if doc.get("format") != FORMAT:
            raise TicketError(f"format: {doc.get('format')!r}, this build reads {FORMAT}")
        subscription = doc.get("group_subscription")
        membership = Membership(
            group_id=_text(doc, "group_id"), instance_id=_text(doc, "instance_id"),
            member_id=_text(doc, "member_id"), generation=_integer(doc, "generation"),
            protocol=_text(doc, "protocol"), assignment=_bytes(doc, "assignment"),
            topics=_topics(doc, "topics"),
            group_subscription=None if subscription is None else _topics(doc, "group_subscription"),
            url=_text(doc, "url"), build=_text(doc, "build"),
            partition_counts=_counts(doc, "partition_counts"),
        )
        stopped_at = doc.get("stopped_at")
        if not isinstance(stopped_at, int | float) or isinstance(stopped_at, bool):
            raise TicketError("stopped_at: must be a number")
        return cls(membership, float(stopped_at))


def mismatch(ticket: Ticket, *, group_id: str, instance_id: str, topics: frozenset[str] | set[str],
             url: str, build: str) -> str | None:
    """Why `ticket` is not this member's to resume (None: it may be; the broker has the last word)."""
    m = ticket.membership
    checks = (
        ("group", m.group_id, group_id), ("instance id", m.instance_id, instance_id),
        ("build", m.build, build), ("advertised URL", m.url, url),
        ("subscribed topics", m.topics, tuple(sorted(topics))),
    )
    for what, theirs, ours in checks:
        if theirs != ours:
            return f"the {what} changed ({_short(theirs)} then, {_short(ours)} now)"
    if not m.member_id or m.generation < 0:
        return "it names no membership"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _text(doc: dict[str, Any], field: str) -> str:
    value = doc.get(field)
    if not isinstance(value, str):
        raise TicketError(f"{field}: must be a string")
    return value


def _integer(doc: dict[str, Any], field: str) -> int:
    value = doc.get(field)
    if not isinstance(value, int) or isinstance(value, bool):
        raise TicketError(f"{field}: must be an integer")
    return value


def _bytes(doc: dict[str, Any], field: str) -> bytes:
    text = _text(doc, field)
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise TicketError(f"{field}: must be base64") from None


def _topics(doc: dict[str, Any], field: str) -> tuple[str, ...]:
    value = doc.get(field)
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise TicketError(f"{field}: must be a list of topic names")
    return tuple(sorted(value))


def _counts(doc: dict[str, Any], field: str) -> tuple[tuple[str, int], ...] | None:
    value = doc.get(field)
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
            isinstance(n, int) and not isinstance(n, bool) for n in value.values()):
        raise TicketError(f"{field}: must be an object of topic names to partition counts")
    return tuple(sorted(value.items()))
