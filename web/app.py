"""Web setup in one place: middlewares, routes, the engine they answer from."""

from __future__ import annotations

from typing import Any, Protocol

from aiohttp import web

from . import (
    api,
    health,
    metrics,
    receiver_list,
    receiver_ops,
    receiver_security,
    resend_ops,
    token_ops,
    transform_ops,
)
from .engine import ENGINE, Engine
from .middleware import auth_middleware, errors_middleware
from .ui import setup_ui


class TokenSettings(Protocol):
    """What the middlewares read of the worker's settings."""

    @property
    def api_token(self) -> str: ...


def web_middlewares(settings: TokenSettings) -> list[Any]:
    return [errors_middleware, auth_middleware(settings.api_token)]


def setup_web(app: web.Application, engine: Engine) -> None:
    """Serve the API on `app`, answering from `engine`."""
    app[ENGINE] = engine
    app.router.add_get("/healthz", health.healthz)
    app.router.add_get("/readyz", health.readyz)
    app.router.add_get("/openapi.json", health.openapi)
    app.router.add_post("/v1/receivers", api.create_receiver)
    app.router.add_get("/v1/receivers", receiver_list.list_receivers)
    app.router.add_get("/v1/receivers/{receiver_id}", receiver_ops.get_receiver)
    app.router.add_delete("/v1/receivers/{receiver_id}", receiver_ops.delete_receiver)
    app.router.add_patch("/v1/receivers/{receiver_id}", api.patch_receiver)
    app.router.add_get("/v1/receivers/{receiver_id}/state", receiver_ops.get_state)
    app.router.add_delete("/v1/receivers/{receiver_id}/state", receiver_ops.reset_state)
    app.router.add_get("/v1/receivers/{receiver_id}/messages/{message_id}", receiver_ops.message_status)
    app.router.add_get("/v1/receivers/{receiver_id}/events", receiver_ops.events_after)
    for action in ("pause", "resume", "enable", "disable"):
        app.router.add_post(f"/v1/receivers/{{receiver_id}}/{action}", receiver_ops.control_handler(action))
    app.router.add_post("/v1/receivers/{receiver_id}/ping", receiver_ops.ping)
    app.router.add_get("/v1/receivers/{receiver_id}/attempts", receiver_ops.attempts)
    app.router.add_get("/v1/receivers/{receiver_id}/last-response", receiver_ops.last_response)
    app.router.add_get("/v1/receivers/{receiver_id}/dead-letters", receiver_ops.dead_letters)
    app.router.add_post("/v1/receivers/{receiver_id}/replay", receiver_ops.replay)
    app.router.add_post("/v1/receivers/{receiver_id}/messages/{message_id}/resend", resend_ops.resend)
    app.router.add_post("/v1/receivers/{receiver_id}/recover", resend_ops.recover)
    app.router.add_post("/v1/receivers/{receiver_id}/secrets/rotate", receiver_security.rotate_secret)
    app.router.add_post("/v1/receivers/{receiver_id}/verify", receiver_security.verify_endpoint)
    app.router.add_post("/v1/receivers/{receiver_id}/transform/test", transform_ops.transform_test)
    app.router.add_post("/v1/messages", api.send_message)
    app.router.add_post("/v1/messages/batch", api.send_batch)
    app.router.add_post("/v1/events", api.send_event)
    app.router.add_post("/v1/tokens", token_ops.create_token)
    app.router.add_get("/v1/tokens", token_ops.list_tokens)
    app.router.add_delete("/v1/tokens/{token_id}", token_ops.revoke_token)
    setup_ui(app)  # the developer console under /ui/


def setup_metrics(app: web.Application) -> None:
    """Serve /metrics (Prometheus' text format; not part of the API's OpenAPI document)."""
    app.router.add_get("/metrics", metrics.metrics)
