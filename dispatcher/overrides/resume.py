"""A static member's clean stop hands its group membership to its restart (`dispatcher/membership.py`).

Without it a restarted static member joins again. The embedded broker holds
every static JoinGroup and SyncGroup for a fixed 3 s each (and re-forms the
group when the member's metadata changed, as Faust's always has: it carries
the worker's current assignment), so a restart with an instance id waited out
both (figures in docs/benchmarks.md, "Performance II"). Kafka answers a
returning static member's JoinGroup at once, and its SyncGroup with its old
assignment (KIP-345): there the hand-over saves those round trips and little
more.

Three of aiokafka's GroupCoordinator methods are wrapped on the instance:
- `_on_join_complete` records the membership each join (or resume) gives;
- `_maybe_leave_group`, on close only, writes that membership down for the
  next start, while it is still the coordinator's (a static member never
  leaves, so the broker keeps it until its session runs out);
- `_do_rejoin_group`, the first time, resumes the written membership if the
  broker proves it still stands (`membership.py` says what counts as proof):
  the ticket young enough, the group described `Stable` with the written
  assignment still this member's, a heartbeat at the written generation
  answered without an error, Faust's assignor taking the assignment (a copy
  of it is asked), and a leader's partition counts unchanged. Anything else is
  a normal join. A close with a rejoin pending writes no ticket.
The ticket is read and deleted as the consumer starts, so it is used at most
once; a kill -9 before the consumer closed writes none (one after it, while
the rest of the worker stops, leaves a ticket as valid as a clean stop's).
After a resume the member is as if it had never stopped.
"""

from __future__ import annotations

import copy
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiokafka.coordinator.protocol import ConsumerProtocol
from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.admin import DescribeGroupsRequest
from aiokafka.protocol.group import HeartbeatRequest
from aiokafka.util import create_future

from ..membership import Described, Membership, Ticket, TicketError, mismatch, too_old, unsettled

log = logging.getLogger(__name__)


def take_ticket(path: Path) -> Ticket | None:
    """The ticket at `path`, deleted as it is read (None: none there, or not readable).

    It is claimed by a rename first: of two processes started on one data dir by mistake, one
    at most gets it (two holders of one member id would fence nothing)."""
    claimed = path.with_name(f"{path.name}.{os.getpid()}")
    try:
        os.rename(path, claimed)
        raw = claimed.read_bytes()
    except FileNotFoundError:  # none there (or another process claimed it first)
        return None
    except OSError as exc:
        log.warning("membership hand-over %s not readable (%s): joining the group", path, exc)
        return None
    finally:
        claimed.unlink(missing_ok=True)
    try:
        return Ticket.decode(raw)
    except TicketError as exc:
        log.warning("membership hand-over %s not usable (%s): joining the group", path, exc)
        return None


def write_ticket(path: Path, ticket: Ticket) -> None:
    """Write `ticket` whole or not at all (a torn file would only be refused, but need not exist)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(ticket.encode())
    os.replace(partial, path)


def hand_over_on_stop(consumer: Any, path: Path, *, url: str, build: str) -> None:
    """Install the hand-over on aiokafka's `consumer` (a static member's; a dynamic one leaves on
    stop). Any ticket at `path` is taken now, used or not."""
    ticket = take_ticket(path)
    coordinator = consumer._coordinator
    if coordinator is None or coordinator._group_instance_id is None:
        return
    Handover(coordinator, path, ticket, url=url, build=build).install()


class Handover:
    """One consumer's hand-over: what its last join gave, and the ticket its start found."""

    def __init__(self, coordinator: Any, path: Path, ticket: Ticket | None, *, url: str, build: str,
                 clock: Callable[[], float] = time.time) -> None:
        self._coordinator = coordinator
        self._path = path
        self._ticket = ticket
        self._url, self._build = url, build
        self._clock = clock
        self.last: Membership | None = None
        self._theirs_join_complete: Callable[..., Awaitable[None]] = coordinator._on_join_complete
        self._theirs_rejoin: Callable[[Any], Awaitable[bool]] = coordinator._do_rejoin_group
        self._theirs_leave: Callable[[], Awaitable[None]] = coordinator._maybe_leave_group

    def install(self) -> None:
        self._coordinator._on_join_complete = self._on_join_complete
        self._coordinator._do_rejoin_group = self._do_rejoin_group
        self._coordinator._maybe_leave_group = self._maybe_leave_group

    async def _on_join_complete(self, generation: int, member_id: str, protocol: str,
                                assignment: bytes) -> None:
        self._ticket = None  # a membership is set: a ticket not used by now never will be
        c = self._coordinator
        subscription = c._subscription.subscription
        if subscription is not None:
            group = c._group_subscription
            counts = None if group is None else tuple(sorted(c._metadata_snapshot.items()))
            self.last = Membership(
                group_id=c.group_id, instance_id=c._group_instance_id, member_id=member_id,
                generation=generation, protocol=protocol, assignment=bytes(assignment),
                topics=tuple(sorted(subscription.topics)),
                group_subscription=None if group is None else tuple(sorted(group)),
                url=self._url, build=self._build, partition_counts=counts)
        await self._theirs_join_complete(generation, member_id, protocol, assignment)

    async def _maybe_leave_group(self) -> None:
        c = self._coordinator
        last = self.last
        if (c._closing.done() and last is not None and c.member_id == last.member_id
                and c.generation == last.generation and not c._rejoin_needed_fut.done()):
            try:
                write_ticket(self._path, Ticket(last, self._clock()))
            except OSError as exc:  # the next start joins as it would have without the ticket
                log.warning("could not write the membership hand-over %s: %s", self._path, exc)
            else:
                log.info("handed the membership of consumer group %s (generation %d) to this instance's "
                         "next start", c.group_id, last.generation)
        await self._theirs_leave()

    async def _do_rejoin_group(self, subscription: Any) -> bool:
        ticket, self._ticket = self._ticket, None
        if ticket is not None and await self._resume(ticket, subscription):
            return True
        return await self._theirs_rejoin(subscription)

    async def _resume(self, ticket: Ticket, subscription: Any) -> bool:
        c = self._coordinator
        m = ticket.membership
        why = mismatch(ticket, group_id=c.group_id, instance_id=c._group_instance_id,
                       topics=subscription.topics, url=self._url, build=self._build)
        why = why or too_old(ticket, self._clock(), c._session_timeout_ms / 1000,
                             c._heartbeat_interval_ms / 1000)
        # The describe first: it changes nothing, where a heartbeat may end other members' sessions.
        for check in (self._settled_as_written, self._still_a_member, self._assignor_accepts,
                      self._partitions_unchanged):
            if why is None:
                why = await check(m)
        if why is None and not subscription.active:
            why = "the subscription changed meanwhile"
        if why is not None:
            c._group_subscription = None  # as before `_partitions_unchanged` took up a leader's watch
            log.info("joining consumer group %s: the membership handed over by the clean stop does not "
                     "hold (%s)", c.group_id, why)
            return False
        c.member_id, c.generation = m.member_id, m.generation
        # As after a SyncGroup: a metadata change from here on asks for a join.
        c._rejoin_needed_fut = create_future()
        await self._on_join_complete(m.generation, m.member_id, m.protocol, m.assignment)
        log.info("resumed the membership of consumer group %s (member %s, generation %d) handed over by "
                 "the clean stop %.1f s ago, without a join", c.group_id, m.member_id, m.generation,
                 self._clock() - ticket.stopped_at)
        return True

    async def _settled_as_written(self, m: Membership) -> str | None:
        """None if the group, as the broker describes it, proves the written assignment still ours."""
        try:
            response = await self._coordinator._send_req(DescribeGroupsRequest([m.group_id]))
            assigned = partitions_of(m.assignment)
        except (KafkaError, ValueError) as exc:
            return f"describing the group failed: {exc}"
        return unsettled(described_group(response, m.group_id), m, assigned)

    async def _still_a_member(self, m: Membership) -> str | None:
        """None if the broker answers a heartbeat of `m` without an error; else why not."""
        try:
            request = HeartbeatRequest(m.group_id, m.generation, m.member_id)
            response = await self._coordinator._send_req(request)
        except KafkaError as exc:
            return f"the heartbeat failed: {exc}"
        if response.error_code != 0:
            return f"the broker answered the heartbeat {for_code(response.error_code).__name__}"
        return None

    async def _assignor_accepts(self, m: Membership) -> str | None:
        """Faust's assignor checks an assignment as it takes it (its URL, its topics), setting its own
        fields first: a copy of it is asked, so a refusal leaves nothing behind for the join after."""
        assignor = self._coordinator._lookup_assignor(m.protocol)
        if assignor is None:
            return f"no assignor {m.protocol!r} here"
        try:
            copy.copy(assignor).on_assignment(ConsumerProtocol.ASSIGNMENT.decode(m.assignment))
        except Exception as exc:  # noqa: BLE001 - any refusal, an assertion or a decoding error, is a join
            return f"the assignor refused the assignment ({type(exc).__name__}: {exc})"
        return None

    async def _partitions_unchanged(self, m: Membership) -> str | None:
        """A leader's assignment stands only for the partition counts it was made for; None if they hold.
        It then watches every member's topics for a change, as after an assignment (undone by the
        caller if the resume is refused after all)."""
        if m.group_subscription is None:
            return None
        c = self._coordinator
        c._group_subscription = set(m.group_subscription)
        if not c._subscription.subscribed_pattern:
            c._client.set_topics(c._group_subscription)
        await c._client._maybe_wait_metadata()
        c._metadata_snapshot = c._get_metadata_snapshot()
        counts = tuple(sorted(c._metadata_snapshot.items()))
        if m.partition_counts is not None and counts != m.partition_counts:
            return "a topic's partition count changed while it was stopped"
        return None


def partitions_of(assignment: bytes) -> dict[str, frozenset[int]]:
    """An encoded consumer assignment's partitions per topic."""
    decoded = ConsumerProtocol.ASSIGNMENT.decode(assignment)
    return {topic: frozenset(partitions) for topic, partitions in decoded.assignment}


def described_group(response: Any, group_id: str) -> Described:
    """The DescribeGroups answer's entry for `group_id` (any version: a member's id comes first and its
    assignment last)."""
    for group in response.groups:
        if group[1] == group_id:
            return Described(group[0], group[2], {member[0]: bytes(member[-1] or b"") for member in group[5]})
    return Described(-1, "", {})
