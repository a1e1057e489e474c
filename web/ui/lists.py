"""Pages any worker answers: the overview (every worker asked) and the receivers list (the API's
own merged page)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import Counter
from typing import Any

import orjson
from aiohttp import ClientError, ClientTimeout, web
from yarl import URL

from dispatcher.domain.actor import STATUSES

from ..engine import ENGINE, Engine
from ..middleware import bearer_authorized, error_response
from ..receiver_list import merged_page, parse_filters
from .charts import activity_bars
from .guard import Ui, see_other

PAGE = 50  # receivers a page
FILL_SECONDS = 1.0  # a search that matches nothing yet reads on this long before it shows an empty page
OLDEST = 10
PEER_TIMEOUT = ClientTimeout(total=5)


async def receivers(ui: Ui) -> web.StreamResponse:
    """Search (id or URL), tenant, event type and status filters, a cursor page at a time."""
    wanted = {"search": ui.field("q"), "tenant": ui.field("tenant"), "event_type": ui.field("event_type"),
              "status": ui.field("status")}
    if not ui.principal.admin:  # a tenant's session lists its tenant's receivers, whatever the form says
        wanted["tenant"] = ui.principal.tenant or ""
    query = {k: v for k, v in wanted.items() if v}
    filters = parse_filters(query)
    cursor = ui.field("cursor")
    page = await _fuller_page(ui.engine, query, filters, cursor)
    return ui.render("receivers.html", page=page, form=wanted, statuses=STATUSES, cursor=cursor,
                     query=query, now=time.time())


async def _fuller_page(engine: Engine, query: dict[str, str], filters: Any, cursor: str) -> dict[str, Any]:
    """The API's pages, followed while a filter that matches few leaves this one empty (each API page
    reads a bounded number of receivers), for at most `FILL_SECONDS`; the cursor goes on from there."""
    deadline = time.monotonic() + FILL_SECONDS
    page = await merged_page(engine, query, _bearer(engine), filters, cursor, PAGE)
    rows = page["receivers"]
    while not rows and page["next_cursor"] and time.monotonic() < deadline:
        after = page["next_cursor"]
        page = await merged_page(engine, query, _bearer(engine), filters, after, PAGE - len(rows))
        rows += page["receivers"]
    return {"receivers": rows, "next_cursor": page["next_cursor"]}


def _bearer(engine: Engine) -> str:
    return f"Bearer {engine.settings.api_token}"


async def overview(ui: Ui) -> web.StreamResponse:
    """Workers, readiness and partitions; attempts per minute; receivers by status; the oldest
    undelivered messages; dead letters of the last hour. Figures of every tenant: a tenant's session
    goes to its receivers instead."""
    if not ui.principal.admin:
        return see_other("/ui/receivers")
    engine = ui.engine
    urls = engine.worker_urls() or [engine.own_url()]
    workers, summaries = await asyncio.gather(
        asyncio.gather(*(_worker(engine, url) for url in urls)),
        asyncio.gather(*(_summary_from(engine, url) for url in urls)),
    )
    minutes = _sum_minutes([w.get("activity", {}).get("minutes", []) for w in workers])
    ok, failed = sum(m["ok"] for m in minutes), sum(m["failed"] for m in minutes)
    by_status: Counter[str] = Counter()
    for summary in summaries:
        by_status.update(summary.get("by_status", {}))
    oldest = heapq.nlargest(OLDEST, itertools.chain(*(s.get("oldest", []) for s in summaries)),
                            key=lambda r: r["age"])
    return ui.render(
        "overview.html", workers=workers, minutes=minutes, bars=activity_bars(minutes), ok=ok, failed=failed,
        rate=(ok / (ok + failed)) if ok + failed else None, by_status=by_status, statuses=STATUSES,
        oldest=oldest,
        dead_last_hour=sum(w.get("activity", {}).get("dead_letters_last_hour", 0) for w in workers),
        unreachable=[s["url"] for s in summaries if s.get("error")],
    )


async def _worker(engine: Engine, url: URL) -> dict[str, Any]:
    """A worker's readiness and figures: this one's from the engine, the others' from their /readyz."""
    if str(url) == str(engine.own_url()):
        return {"url": str(url), "ready": engine.ready(), "self": True, **engine.stats()}
    body = await _get_json(engine, url.with_path("/readyz"))
    return {"url": str(url), "ready": body.get("status") == "ready", **body}


async def _summary_from(engine: Engine, url: URL) -> dict[str, Any]:
    if str(url) == str(engine.own_url()):
        return {"url": str(url), **await engine.receiver_survey(OLDEST)}
    return {"url": str(url), **await _get_json(engine, url.with_path("/ui/local/summary"))}


async def _get_json(engine: Engine, url: URL) -> dict[str, Any]:
    """Another worker's answer; `error` when it does not give one (the page says so, and goes on)."""
    try:
        async with engine.http_client.get(
            url, headers={"Authorization": _bearer(engine)}, timeout=PEER_TIMEOUT
        ) as resp:
            body = orjson.loads(await resp.read())
            return body if isinstance(body, dict) else {"error": "not an object"}
    except (ClientError, TimeoutError, orjson.JSONDecodeError) as exc:
        return {"error": type(exc).__name__}


def _sum_minutes(per_worker: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    totals: dict[int, dict[str, Any]] = {}
    for rows in per_worker:
        for row in rows:
            total = totals.setdefault(row["minute"], {"minute": row["minute"], "ok": 0, "failed": 0,
                                                      "dead_letters": 0})
            for key in ("ok", "failed", "dead_letters"):
                total[key] += row[key]
    return [totals[m] for m in sorted(totals)]


async def summary_endpoint(request: web.Request) -> web.Response:
    """GET /ui/local/summary: this worker's part of the overview, for the worker showing it (API token)."""
    engine = request.app[ENGINE]
    if not bearer_authorized(request, engine.settings.api_token):
        return error_response(401, "unauthorized", "missing or wrong bearer token", "Authorization")
    return web.json_response(await engine.receiver_survey(OLDEST))
