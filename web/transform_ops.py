"""`POST /v1/receivers/{id}/transform/test`: try a receiver's transform on a sample message."""

from __future__ import annotations

import time

from aiohttp import web

from dispatcher.domain.transform_preview import preview

from .api import _json, read_json
from .engine import ENGINE
from .receiver_ops import receiver_here
from .routing import owner_routed


@owner_routed
async def transform_test(request: web.Request) -> web.Response:
    """The transform's result for `{payload, event_type?, headers?, transform?}`; nothing is sent."""
    engine = request.app[ENGINE]
    state = receiver_here(engine, request.match_info["receiver_id"])
    return _json(preview(state.config, await read_json(request), time.time()))
