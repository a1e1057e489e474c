"""A server span around each intake call (messages, batches, events), when the worker traces.

Its parent is the caller's W3C `traceparent` header, if any; the records the
call produces carry the span's own across the Kafka hop (the worker adds it).
Installed only while tracing is on, so an untraced worker pays nothing here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol

from aiohttp import web

TRACED = frozenset({("POST", "/v1/messages"), ("POST", "/v1/messages/batch"), ("POST", "/v1/events")})
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Spans(Protocol):
    """What the middleware needs of the worker's tracing (dispatcher/tracing.py)."""

    def span(
        self, name: str, kind: str = ..., parent: str | None = ..., attributes: Mapping[str, Any] | None = ...
    ) -> AbstractContextManager[Any]: ...


def add_tracing(app: web.Application, spans: Spans) -> None:
    """Trace the intake calls of `app` (before it starts: aiohttp freezes its middlewares then)."""

    @web.middleware
    async def traced(request: web.Request, handler: Handler) -> web.StreamResponse:
        if (request.method, request.path) not in TRACED:
            return await handler(request)
        attributes = {"http.request.method": request.method, "http.route": request.path}
        name = f"{request.method} {request.path}"
        with spans.span(name, "server", request.headers.get("traceparent"), attributes) as span:
            response = await handler(request)
            span.set_attribute("http.response.status_code", response.status)
            return response

    app.middlewares.append(traced)
