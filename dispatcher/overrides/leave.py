"""A clean stop leaves the consumer group, whatever number the broker gave the group's generation.

aiokafka leaves on a clean stop only from a generation above 0: Kafka numbers a
group's generations from 1. The embedded broker numbers them from 0, so the
worker of a group's first generation (every `make run`, every worker started
alone, every bench drain) stopped without leaving, and the worker that took
over waited out the stopped one's session before the broker answered its join:
11.1 s with a 6 s session, against 3 s after a leave (docs/benchmarks.md,
"Performance II"). A static member (an instance id) still never leaves: it is
expected back under the same id.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka.errors import KafkaError
from aiokafka.protocol.group import LeaveGroupRequest

log = logging.getLogger(__name__)

FIRST_GENERATION = 0  # the embedded broker's; aiokafka's "no generation" is -1


def leave_on_stop(consumer: Any) -> None:
    """A clean stop of aiokafka's `consumer` leaves its group from generation 0 too (once started;
    a consumer with no group has nothing to leave)."""
    if consumer._coordinator is not None and hasattr(consumer._coordinator, "_maybe_leave_group"):
        leave_from_every_generation(consumer._coordinator)


def leave_from_every_generation(coordinator: Any) -> None:
    """Make `coordinator` (aiokafka's GroupCoordinator) leave from generation 0 too on close."""
    theirs: Callable[[], Awaitable[None]] = coordinator._maybe_leave_group

    async def maybe_leave_group() -> None:
        if (coordinator.generation == FIRST_GENERATION and coordinator._group_instance_id is None
                and coordinator.member_id):
            try:
                await coordinator._send_req(LeaveGroupRequest(coordinator.group_id, coordinator.member_id))
            except KafkaError as exc:  # as aiokafka's: one attempt, the session ends it otherwise
                log.warning("could not leave consumer group %s: %s", coordinator.group_id, exc)
            else:
                log.info("left consumer group %s (its first generation)", coordinator.group_id)
            coordinator.reset_generation()
        await theirs()

    coordinator._maybe_leave_group = maybe_leave_group
