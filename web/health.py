"""Liveness and readiness."""

from __future__ import annotations

from aiohttp import web


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def openapi(request: web.Request) -> web.Response:
    """The OpenAPI document kept in the repo (web/openapi.json)."""
    from .openapi import DOC_PATH

    return web.Response(body=DOC_PATH.read_bytes(), content_type="application/json")


async def readyz(request: web.Request) -> web.Response:
    from .app import DISPATCHER

    dispatcher = request.app[DISPATCHER]
    ready = dispatcher.ownership.ready
    body = {"status": "ready" if ready else "starting", **dispatcher.stats()}
    return web.json_response(body, status=200 if ready else 503)
