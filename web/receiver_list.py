"""`GET /v1/receivers`: every receiver, filtered, in id order, a page at a time.

Receivers live on the workers that own their partitions, so the worker asked
lists its own partitions and asks every other worker for theirs
(`?local=true`), then merges the pages by id. `cursor` is the last id of the
previous page. Each worker walks its partitions in key order, so a page costs
the receivers it has to look at, not a sort of all of them, and it looks at
no more than `SCAN_BUDGET`: a filter that matches few of 100,000 receivers
answers a short (even empty) page with a `next_cursor` to go on from, instead
of reading them all in one go.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import orjson
from aiohttp import web

from dispatcher.domain import actor
from dispatcher.domain.actor import STATUSES, ReceiverState
from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.ids import check_id
from dispatcher.domain.receiver_spec import public_view
from dispatcher.domain.subscriptions import check_tenant, matches, parse_pattern
from dispatcher.domain.tokens import scoped_tenant

from .api import _json
from .engine import ENGINE, Engine
from .receiver_ops import MAX_LIST, _int_param
from .routing import FORWARDED
from .scopes import principal_of


@dataclass(slots=True, frozen=True)
class Filters:
    tenant: str | None = None
    event_type: str | None = None
    status: str | None = None
    disabled: bool | None = None
    search: str | None = None  # lower case; in the id or the URL

    def accept(self, state: ReceiverState) -> bool:
        config = state.config
        text = self.search
        if text and not (text in state.receiver_id.lower() or text in config.url.lower()):
            return False
        if self.tenant is not None and config.tenant != self.tenant:
            return False
        if self.event_type is not None and config.event_types and not any(
            matches(tuple(p.split(".")), self.event_type) for p in config.event_types
        ):
            return False
        if self.status is not None and actor.status(state) != self.status:
            return False
        return self.disabled is None or state.disabled == self.disabled


def parse_filters(query: Any) -> Filters:
    event_type = query.get("event_type")
    if event_type is not None:
        pattern = parse_pattern(event_type, "event_type")
        if "*" in pattern:
            raise InvalidInput("event_type", "must be a type: lists receivers that would get it")
    status = query.get("status")
    if status is not None and status not in STATUSES:
        raise InvalidInput("status", f"must be one of {', '.join(STATUSES)}")
    disabled = query.get("disabled")
    if disabled is not None and disabled not in ("true", "false"):
        raise InvalidInput("disabled", "must be true or false")
    search = query.get("search")
    if search is not None and len(search) > MAX_SEARCH:
        raise InvalidInput("search", f"must be at most {MAX_SEARCH} characters")
    return Filters(
        check_tenant(query.get("tenant"), "tenant"), event_type, status,
        None if disabled is None else disabled == "true", search.lower() if search else None,
    )


MAX_SEARCH = 200


# States a worker reads for one page (or the page size per partition, if larger): a filter that
# matches little cannot stall it.
SCAN_BUDGET = 4000


@dataclass(slots=True)
class LocalPage:
    receivers: list[dict[str, Any]]
    scanned_to: str | None  # ids above this were not looked at (the budget ran out); None: all were


def local_page(engine: Engine, filters: Filters, after: str, limit: int) -> LocalPage:
    """Up to `limit` matching receivers of this worker's partitions with ids above `after`, in id order,
    reading at most `SCAN_BUDGET` states: where that runs out, the page stops at the lowest id not
    yet passed, so nothing is skipped, and the caller goes on from there."""
    page, cut = page_of(engine.receiver_states_after(after), filters, limit, SCAN_BUDGET)
    now = time.time()
    return LocalPage([_summary(engine, state, now) for state in page], cut)


def page_of(
    partitions: list[Any], filters: Filters, limit: int, budget: int
) -> tuple[list[ReceiverState], str | None]:
    """The page from each partition's states in id order (`budget` read in all), and where it stops."""
    per_partition = max(limit, budget // max(1, len(partitions)))
    streams, frontiers = [], []
    for states in partitions:
        matched, frontier = _scan(states, filters, limit, per_partition)
        streams.append(matched)
        if frontier is not None:
            frontiers.append(frontier)
    cut = min(frontiers) if frontiers else None
    merged = heapq.merge(*streams, key=lambda s: s.receiver_id)
    return [s for s in merged if cut is None or s.receiver_id <= cut][:limit], cut


def _scan(states: Any, filters: Filters, limit: int, budget: int) -> tuple[list[ReceiverState], str | None]:
    """Matches among at most `budget` states, up to `limit`; and the last id read if the budget ran out."""
    out: list[ReceiverState] = []
    last = None
    for read, state in enumerate(states, 1):
        last = state.receiver_id
        if filters.accept(state):
            out.append(state)
            if len(out) == limit:
                return out, None  # full: the merge takes care of what lies beyond
        if read >= budget:
            return out, last
    return out, None


def _summary(engine: Engine, state: ReceiverState, now: float) -> dict[str, Any]:
    latest = engine.attempts(state.receiver_id, state.attempt_no, 1)
    last = latest[0] if latest else None
    return {
        **public_view(state.config, now, engine.settings.policy),
        "status": actor.status(state),
        "backlog": state.backlog,
        "delivered_seq": state.delivered_seq,
        "circuit": state.breaker.circuit.value,
        "lane": state.health.lane.value,
        "oldest_undelivered_age": round(now - state.head_accepted_at, 3)
        if state.head and state.head_accepted_at else None,
        "last_answer": {k: last.get(k) for k in ("ok", "status", "error", "at")} if last else None,
    }


async def list_receivers(request: web.Request) -> web.Response:
    """A tenant token's list is its tenant's receivers (each worker asked applies the same token)."""
    engine = request.app[ENGINE]
    filters = parse_filters(request.query)
    filters = replace(filters, tenant=scoped_tenant(principal_of(request), filters.tenant, "lists receivers"))
    after = request.query.get("cursor", "")
    if after:
        check_id(after, "cursor")
    limit = _int_param(request, "limit", 100, 1, MAX_LIST)
    if request.query.get("local") == "true" or request.headers.get(FORWARDED):
        local = local_page(engine, filters, after, limit)
        return _json({"receivers": local.receivers, "scanned_to": local.scanned_to})
    authorization = request.headers.get("Authorization", "")
    return _json(await merged_page(engine, request.query, authorization, filters, after, limit))


async def merged_page(
    engine: Engine, query: Mapping[str, str], authorization: str, filters: Filters, after: str, limit: int
) -> dict[str, Any]:
    """One page of every worker's receivers (the API's and the UI's), merged by id; `query` and
    `authorization` go to the other workers."""
    pages = await asyncio.gather(*(
        _page_from(engine, query, authorization, url, filters, after, limit) for url in engine.worker_urls()
    ))
    cuts = [p.scanned_to for p in pages if p.scanned_to is not None]
    cut = min(cuts) if cuts else None
    merged = [r for r in heapq.merge(*(p.receivers for p in pages), key=lambda r: r["id"])
              if cut is None or r["id"] <= cut]
    page = merged[:limit]
    full = len(merged) > limit or any(len(p.receivers) == limit for p in pages)
    # A page cut short by the scan budget goes on from where the scan stopped (it may be empty).
    next_cursor = page[-1]["id"] if page and full else cut
    return {"receivers": page, "next_cursor": next_cursor}


async def _page_from(
    engine: Engine, query: Mapping[str, str], authorization: str, url: Any, filters: Filters, after: str,
    limit: int,
) -> LocalPage:
    if str(url) == str(engine.own_url()):
        return local_page(engine, filters, after, limit)
    target = url.with_path("/v1/receivers").with_query({**query, "local": "true"})
    headers = {"Authorization": authorization, FORWARDED: "1"}
    async with engine.http_client.get(target, headers=headers) as resp:
        if resp.status != 200:
            raise InvalidInput("cursor", f"worker {url} answered {resp.status}; retry", "unavailable", 503)
        body = orjson.loads(await resp.read())
        return LocalPage(body["receivers"], body.get("scanned_to"))
