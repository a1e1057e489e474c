"""aiokafka's fetcher, made to set its next fetch's wait by `FetchWait` after every response.

aiokafka has no hook after a fetch response: its fetcher's `_proc_fetch_request`
is wrapped, and its `_fetch_max_wait_ms` (read when the next request is built)
set. Why the wait must move on the embedded broker, with the failure and the
figures, is in `dispatcher/fetch_wait.py`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from ..fetch_wait import CAP_MS, IDLE_CAP_MS, FetchWait

log = logging.getLogger(__name__)


def adapt_fetch_wait(
    consumer: AIOKafkaConsumer, cap_ms: int = CAP_MS, idle_cap_ms: int = IDLE_CAP_MS
) -> FetchWait:
    """Make a started consumer's fetcher set its wait by `FetchWait` after every fetch response."""
    fetcher: Any = consumer._fetcher
    if fetcher is None:
        raise RuntimeError("adapt_fetch_wait needs a started consumer")
    wait = FetchWait(fetcher._fetch_max_wait_ms, cap_ms, idle_cap_ms)
    fetch = fetcher._proc_fetch_request
    answered = [time.monotonic()]  # when the previous answer was handled

    async def fetch_then_adapt(assignment: Any, node_id: int, request: Any) -> bool:
        asked_behind = _behind_when_asked(assignment, request)
        woke = await fetch(assignment, node_id, request)
        now = time.monotonic()
        took_ms, answered[0] = (now - answered[0]) * 1000, now
        if assignment.active:
            behind, starved, brought = _progress(fetcher, assignment, request, asked_behind)
            before = wait.current_ms
            fetcher._fetch_max_wait_ms = wait.after_fetch(behind, starved, brought, took_ms,
                                                          asked_behind=bool(asked_behind))
            if wait.current_ms != before:
                why = ("a partition behind got no records" if starved else
                       "idle" if wait.idle_ms >= wait.idle_after_ms else
                       "records flow" if wait.current_ms > wait.base_ms else "caught up")
                log.debug("fetch wait %d -> %d ms (%s)", before, wait.current_ms, why)
                if starved and wait.current_ms == wait.cap_ms:
                    log.warning("the broker answered a fetch of partitions that are behind with no records "
                                "even with a %d ms wait; now %d ms, the most", before, wait.cap_ms)
        return woke

    fetcher._proc_fetch_request = fetch_then_adapt
    return wait


def _requested(assignment: Any, request: Any) -> Iterator[tuple[TopicPartition, int, Any]]:
    """Each partition of a fetch request, the offset asked for, and its state in the assignment."""
    for topic, partitions in request.topics:
        for partition, offset, *_ in partitions:
            tp = TopicPartition(topic, partition)
            yield tp, offset, assignment.state_value(tp)


def _below_highwater(offset: int, state: Any) -> bool:
    return state.highwater is not None and offset < state.highwater


def _behind_when_asked(assignment: Any, request: Any) -> set[TopicPartition]:
    """The request's partitions whose offset was below the high watermark known as it was sent."""
    return {tp for tp, offset, state in _requested(assignment, request)
            if state is not None and _below_highwater(offset, state)}


def _progress(
    fetcher: Any, assignment: Any, request: Any, asked_behind: set[TopicPartition]
) -> tuple[bool, bool, bool]:
    """(a partition is behind, one behind when asked got nothing, the answer brought records)"""
    behind = starved = brought = False
    for tp, offset, state in _requested(assignment, request):
        if state is None or not state.has_valid_position or state.position != offset:
            continue  # sought during the fetch: its answer was dropped
        got = tp in fetcher._records
        brought = brought or got
        if _below_highwater(offset, state):
            behind = True
            starved = starved or (tp in asked_behind and not got)
    return behind, starved, brought
