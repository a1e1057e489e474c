"""Every worker's copy of every tenant token's record, read from the tokens topic.

The worker that mints or revokes a token writes its record (keyed by token
id, compacted: the topic keeps the latest) and puts it in its own book at once;
every other worker reads it within one poll (compacted_feed.py). So a revoked
token is refused by the worker that revoked it as soon as the revoke call
answers, and by the others once the record has arrived (normally within
100 ms). A token id the book does not know is looked up again after a sync, so
a token minted on one worker is taken at once by any other.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from .compacted_feed import IDLE_POLL_MS, CompactedFeed
from .domain.tokens import TokenBook, decode_record
from .domain.untrusted import log_token

log = logging.getLogger(__name__)


class TokenFeed(CompactedFeed):
    """The book of every token record; once started, a task reads the topic into it."""

    what = "tokens"

    def __init__(
        self, topic: str, partitions: int, consumer: dict[str, Any], poll_ms: int = 100,
        declare: Callable[[], Awaitable[Any]] | None = None, idle_poll_ms: int = IDLE_POLL_MS,
    ) -> None:
        super().__init__(topic, partitions, consumer, poll_ms, declare, idle_poll_ms)
        self.book = TokenBook()

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        if not key:
            return
        token_id = key.decode("utf-8", "replace")
        if value is None:
            self.book.remove(token_id)
            return
        try:
            record = decode_record(value)
        except (ValueError, TypeError, KeyError):
            log.error("unreadable token record for token_id=%s: skipped", log_token(token_id, 64))
            return
        if record.id != token_id:
            log.error("token record keyed %s names token_id=%s: skipped", log_token(token_id, 64), record.id)
            return
        self.book.put(record)
        self.records += 1

    def size(self) -> int:
        return len(self.book)
