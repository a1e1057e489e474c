"""The receiver actor's parts, wired one way: by the worker and by `bench.engine` alike.

The store over the table, the deliverer that runs its attempts, and the runner
that applies its commands. What lies outside (the table's I/O, the HTTP
transport, where outcomes, wakes and dead letters go) is passed in, so the
engine bench measures the worker's own wiring over a dict and a fake transport.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .actor_runner import ActorRunner, Publish, SendDeadLetter, publish_nowhere
from .actor_store import ActorStore, TableIO
from .deliverer import Deliverer, LostOutcome, QueueSlow, SendOutcome
from .domain.record_seal import seal_key
from .settings import Settings
from .timers import PartitionTimers
from .transport import Transport


@dataclass(frozen=True, slots=True)
class Outlets:
    """Where the actor's parts send what leaves them."""

    send_outcome: SendOutcome  # an attempt's outcome, to the receiver's actor
    lost_outcome: LostOutcome  # an outcome that could not be sent: wake the receiver
    dead_letter: SendDeadLetter  # a dead-letter record, to the dead-letter topic
    queue_slow: QueueSlow | None = None  # a slow-lane job, to the paced slow-lane queue
    publish_subscription: Publish = publish_nowhere  # a receiver's subscription record


@dataclass(frozen=True, slots=True)
class ActorParts:
    store: ActorStore
    deliverer: Deliverer
    runner: ActorRunner


def build_actor_parts(
    settings: Settings, table: TableIO, partition_of: Callable[[str], int], transport: Transport,
    timers: PartitionTimers, outlets: Outlets, requests_topic: str,
) -> ActorParts:
    store = ActorStore(table, partition_of, settings.attempt_log)
    deliverer = Deliverer(
        transport, outlets.send_outcome, settings.slot_pool(), store.backlog_run, outlets.lost_outcome,
        outlets.queue_slow, batch_max_bytes=settings.batch_max_bytes,
    )
    runner = ActorRunner(
        store, deliverer, timers, outlets.dead_letter, settings.policy(), requests_topic,
        publish_subscription=outlets.publish_subscription, seal_key=group_seal_key(settings),
    )
    return ActorParts(store, deliverer, runner)


def group_seal_key(settings: Settings) -> bytes | None:
    """The key every worker of the group seals its requests records with (none without a token)."""
    return seal_key(settings.api_token) if settings.api_token else None
