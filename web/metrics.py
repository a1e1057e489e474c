"""GET /metrics: the worker's metrics in the Prometheus text format.

Outside the API's OpenAPI document, as Prometheus endpoints are; open unless
DISPATCHER_METRICS_TOKEN is set, then it needs that bearer token (a scrape
config's `authorization: {credentials: ...}`), not the API's.
"""

from __future__ import annotations

from aiohttp import web

from .engine import ENGINE
from .middleware import bearer_authorized, error_response

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


async def metrics(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    token = engine.settings.metrics_token
    if token and not bearer_authorized(request, token):
        return error_response(401, "unauthorized", "missing or wrong bearer token (DISPATCHER_METRICS_TOKEN)",
                              "Authorization")
    response = web.Response(body=await engine.metrics())
    response.headers["Content-Type"] = CONTENT_TYPE
    return response
