"""`GET /v1/receivers`: every receiver, filtered, in id order, a page at a time.

Receivers live on the workers that own their partitions, so the worker asked
lists its own partitions and asks every other worker for theirs
(`?local=true`), then merges the pages by id. `cursor` is the last id of the
previous page. Each worker walks its partitions in key order, so a page costs
the receivers it has to look at, not a sort of all of them.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from dispatcher.domain.actor import ReceiverState
from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.ids import check_id
from dispatcher.domain.receiver_spec import public_view
from dispatcher.domain.subscriptions import check_tenant, matches, parse_pattern

from .api import _dispatcher, _json
from .receiver_ops import MAX_LIST, STATUSES, _int_param, _status
from .routing import FORWARDED

if TYPE_CHECKING:
    from dispatcher.worker import Dispatcher


@dataclass(slots=True, frozen=True)
class Filters:
    tenant: str | None = None
    event_type: str | None = None
    status: str | None = None
    disabled: bool | None = None

    def accept(self, state: ReceiverState) -> bool:
        config = state.config
        if self.tenant is not None and config.tenant != self.tenant:
            return False
        if self.event_type is not None and config.event_types and not any(
            matches(tuple(p.split(".")), self.event_type) for p in config.event_types
        ):
            return False
        if self.status is not None and _status(state) != self.status:
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
    return Filters(
        check_tenant(query.get("tenant"), "tenant"), event_type, status,
        None if disabled is None else disabled == "true",
    )


def local_page(dispatcher: Dispatcher, filters: Filters, after: str, limit: int) -> list[dict[str, Any]]:
    """Up to `limit` matching receivers of this worker's partitions with ids above `after`, in id order."""
    now = time.time()
    streams = []
    for partition in sorted(dispatcher.ownership.owned):
        matching = (s for s in dispatcher.store.states_after(partition, after) if filters.accept(s))
        streams.append(_take(matching, limit))
    merged = heapq.merge(*streams, key=lambda s: s.receiver_id)
    return [_summary(state, now) for state, _ in zip(merged, range(limit), strict=False)]


def _take(states: Any, limit: int) -> list[ReceiverState]:
    out: list[ReceiverState] = []
    for state in states:
        out.append(state)
        if len(out) == limit:
            break
    return out


def _summary(state: ReceiverState, now: float) -> dict[str, Any]:
    return {
        **public_view(state.config, now),
        "status": _status(state),
        "backlog": state.backlog,
        "delivered_seq": state.delivered_seq,
    }


async def list_receivers(request: web.Request) -> web.Response:
    dispatcher = _dispatcher(request)
    filters = parse_filters(request.query)
    after = request.query.get("cursor", "")
    if after:
        check_id(after, "cursor")
    limit = _int_param(request, "limit", 100, 1, MAX_LIST)
    if request.query.get("local") == "true" or request.headers.get(FORWARDED):
        return _json({"receivers": local_page(dispatcher, filters, after, limit)})
    pages = await asyncio.gather(*(
        _page_from(dispatcher, request, url, filters, after, limit) for url in dispatcher.worker_urls()
    ))
    merged = list(heapq.merge(*pages, key=lambda r: r["id"]))
    page = merged[:limit]
    more = len(merged) > limit or any(len(p) == limit for p in pages)
    return _json({"receivers": page, "next_cursor": page[-1]["id"] if page and more else None})


async def _page_from(
    dispatcher: Dispatcher, request: web.Request, url: Any, filters: Filters, after: str, limit: int
) -> list[dict[str, Any]]:
    if str(url) == str(dispatcher.app.conf.canonical_url):
        return local_page(dispatcher, filters, after, limit)
    target = url.with_path("/v1/receivers").with_query({**request.query, "local": "true"})
    headers = {"Authorization": request.headers.get("Authorization", ""), FORWARDED: "1"}
    async with dispatcher.app.http_client.get(target, headers=headers) as resp:
        if resp.status != 200:
            raise InvalidInput("cursor", f"worker {url} answered {resp.status}; retry", "unavailable", 503)
        return orjson.loads(await resp.read())["receivers"]
