"""`POST /v1/receivers/{id}/transform/test`: try a receiver's transform on a sample message."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from dispatcher.domain.transform import TransformError, inline_budget
from dispatcher.domain.transform_preview import preview

from .api import _json, read_json
from .engine import ENGINE
from .receiver_ops import receiver_here
from .routing import owner_routed


@owner_routed
async def transform_test(request: web.Request) -> web.Response:
    """The transform's result for `{payload, event_type?, headers?, transform?}`; nothing is sent.

    As at delivery, a template that needs more than a tenth of its budget runs again in a thread,
    so a heavy one cannot hold the loop that serves every other request.
    """
    engine = request.app[ENGINE]
    state = receiver_here(engine, request.match_info["receiver_id"])
    body, now = await read_json(request), time.time()
    try:
        return _json(preview(state.config, body, now, inline_budget()))
    except TransformError as exc:
        if not exc.spent:
            raise
    return _json(await asyncio.to_thread(preview, state.config, body, now))
