"""Every worker's copy of every receiver's subscriptions, read from the subscriptions topic.

The owner of a receiver publishes its event types and tenant on every
configure (keyed by receiver id); every worker reads the topic into a
`SubscriptionIndex` (compacted_feed.py). Fan-out syncs with the feed first,
so a restarted worker does not fan out against an empty index; the API waits
until a receiver's subscription record is acked before it answers, so an
event seen after that answer, fanned out after a sync, finds the receiver.
The index also tells any worker a receiver's tenant (`tenant_of`), which is how
a tenant token's message to a receiver another worker owns is checked.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from .compacted_feed import IDLE_POLL_MS, CompactedFeed
from .domain.subscriptions import SubscriptionIndex, decode_subscription
from .domain.untrusted import log_token

log = logging.getLogger(__name__)


class SubscriptionFeed(CompactedFeed):
    """The index of every receiver's subscription; once started, a task reads the topic into it."""

    what = "subscriptions"

    def __init__(
        self, topic: str, partitions: int, consumer: dict[str, Any], poll_ms: int = 100,
        index: SubscriptionIndex | None = None, declare: Callable[[], Awaitable[Any]] | None = None,
        idle_poll_ms: int = IDLE_POLL_MS,
    ) -> None:
        super().__init__(topic, partitions, consumer, poll_ms, declare, idle_poll_ms)
        self.index = index or SubscriptionIndex()

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        if not key:
            return
        receiver_id = key.decode("utf-8", "replace")
        try:
            subscription = decode_subscription(value)
        except (ValueError, TypeError, AttributeError):
            log.error("unreadable subscription record for receiver_id=%s: skipped", log_token(receiver_id))
            return
        if subscription is None:
            self.index.remove(receiver_id)
        else:
            self.index.put(receiver_id, *subscription)
        self.records += 1

    def size(self) -> int:
        return len(self.index)
