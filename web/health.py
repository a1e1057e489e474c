"""Liveness and readiness."""

from __future__ import annotations

import os
from typing import Any

from aiohttp import web

from .engine import ENGINE
from .middleware import bearer_authorized
from .openapi import DOC_PATH


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def openapi(request: web.Request) -> web.Response:
    """The OpenAPI document kept in the repo (web/openapi.json)."""
    return web.Response(body=DOC_PATH.read_bytes(), content_type="application/json")


async def readyz(request: web.Request) -> web.Response:
    """200 once ready, else 503; the worker's figures only for a caller with the API token.

    Probes (Kubernetes) send no token and need only the status. The figures (partitions,
    in-flight deliveries, hosts' slots, subscriptions) map the deployment for whoever can reach
    the port, so they need the same token as /v1. A wrong token is not a 401 here: a probe
    configured with an old token must not take a healthy worker out of service.
    """
    engine = request.app[ENGINE]
    ready = engine.ready()
    body: dict[str, Any] = {"status": "ready" if ready else "starting"}
    if bearer_authorized(request, engine.settings.api_token):
        # The PID tells `dev` that the worker answering is the one it started.
        body.update(engine.stats(), pid=os.getpid())
    return web.json_response(body, status=200 if ready else 503)
