"""`overrides/leave.py`: a clean stop leaves the group from generation 0 too, never as a static member."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError
from aiokafka.protocol.group import LeaveGroupRequest

from dispatcher.overrides.leave import leave_from_every_generation


class FakeCoordinator:
    """The parts of aiokafka's GroupCoordinator that the override reads, and what it was asked."""

    def __init__(self, generation: int, instance_id: str | None = None, fail: bool = False) -> None:
        self.group_id = "g"
        self.member_id = "m-1"
        self.generation = generation
        self._group_instance_id = instance_id
        self.fail = fail
        self.sent: list[Any] = []
        self.theirs = 0

    async def _send_req(self, request: Any) -> None:
        self.sent.append(request)
        if self.fail:
            raise KafkaConnectionError("broker gone")

    def reset_generation(self) -> None:
        self.generation, self.member_id = -1, ""

    async def _maybe_leave_group(self) -> None:  # aiokafka's: leaves only from generation 1 up
        self.theirs += 1
        self.reset_generation()


def leave(coordinator: FakeCoordinator) -> None:
    leave_from_every_generation(coordinator)
    asyncio.run(coordinator._maybe_leave_group())


def test_generation_0_leaves_then_hands_over_to_aiokafka() -> None:
    coordinator = FakeCoordinator(generation=0)
    leave(coordinator)
    [request] = coordinator.sent
    assert isinstance(request, LeaveGroupRequest)
    assert (request._group, request._member_id) == ("g", "m-1")
    assert (coordinator.theirs, coordinator.generation, coordinator.member_id) == (1, -1, "")


@pytest.mark.parametrize("generation", [-1, 1, 7])
def test_other_generations_are_aiokafka_s_to_leave(generation: int) -> None:
    coordinator = FakeCoordinator(generation)
    leave(coordinator)
    assert coordinator.sent == [] and coordinator.theirs == 1


def test_a_static_member_never_leaves() -> None:
    coordinator = FakeCoordinator(generation=0, instance_id="pod-0")
    leave(coordinator)
    assert coordinator.sent == [] and coordinator.theirs == 1


def test_a_failed_leave_still_resets_and_stops() -> None:
    coordinator = FakeCoordinator(generation=0, fail=True)
    leave(coordinator)
    assert len(coordinator.sent) == 1 and coordinator.theirs == 1 and coordinator.generation == -1
