"""Answer per-receiver requests on the worker that owns the receiver's partition."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from dispatcher.domain.errors import InvalidInput

from .engine import ENGINE, Engine
from .scopes import check_visible, principal_of

FORWARDED = "x-dispatcher-forwarded"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def owner_routed(handler: Handler) -> Handler:
    """Run `handler` here if this worker owns `{receiver_id}`, else proxy to the owner; here, another
    tenant's receiver is 404 to a tenant token (the owner holds the receiver's tenant)."""

    async def routed(request: web.Request) -> web.StreamResponse:
        engine = request.app[ENGINE]
        receiver_id = request.match_info["receiver_id"]
        if engine.is_local(receiver_id):
            check_visible(engine, principal_of(request), receiver_id)
            return await handler(request)
        return await forward_to_owner(engine, request, receiver_id)

    return routed


async def forward_to_owner(
    engine: Engine, request: web.Request, receiver_id: str, body: Any = None
) -> web.Response:
    """Proxy `request` (with `body` re-encoded when given) to the receiver's owner."""
    owner = engine.owner_url(receiver_id)
    if owner is None or request.headers.get(FORWARDED):
        # Forwarded here but not ours either: ownership is moving. Never loop.
        raise InvalidInput(
            "receiver_id", "the owner of this receiver is moving (rebalance); retry",
            code="unavailable", status=503,
        )
    url = owner.join(request.rel_url)  # the owner's scheme, host and port; this request's path and query
    headers = {k: v for k, v in request.headers.items() if k.lower() in ("authorization", "content-type")}
    headers[FORWARDED] = "1"
    data = orjson.dumps(body) if body is not None else await request.read()
    async with engine.http_client.request(request.method, url, headers=headers, data=data) as resp:
        return web.Response(status=resp.status, body=await resp.read(), content_type=resp.content_type)


def require_sure_ownership(engine: Engine, receiver_id: str) -> None:
    """Refuse to POST for a receiver whose ownership this worker doubts (after a stall, until the
    group has spoken): the caller retries and reaches whoever owns it then."""
    if not engine.may_post(receiver_id):
        raise InvalidInput(
            "receiver_id", "this worker's ownership of the receiver is in doubt (rebalance); retry",
            code="unavailable", status=503,
        )
