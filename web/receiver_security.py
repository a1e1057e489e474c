"""Secret rotation and endpoint verification of one receiver, on its owner."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from aiohttp import web

from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.receiver_spec import parse_rotation, public_view, rotate, secret_view, signing_kind
from dispatcher.domain.records import ReceiverConfig
from dispatcher.domain.signing import generate

from .api import _json, read_json, store_config
from .engine import ENGINE, Engine
from .receiver_ops import _receiver
from .routing import owner_routed, require_sure_ownership


@owner_routed
async def rotate_secret(request: web.Request) -> web.Response:
    """Sign with a new secret from now on; the old one also signs for `grace_seconds` (default 24 h).

    The answer is the only time the new secret is shown.
    """
    engine = request.app[ENGINE]
    config = _receiver(engine, request).config
    return _json(await rotate_with(engine, config, await read_json(request, required=False)))


async def rotate_with(engine: Engine, config: ReceiverConfig, body: Any) -> dict[str, Any]:
    """Rotate as `body` asks (the API's and the UI's); the answer shows the new secret, once."""
    secret, kind, grace = parse_rotation(body, engine.settings.secret_grace)
    now = time.time()
    new = secret or generate(kind or signing_kind(config.secret))
    rotated = rotate(config, new, now, grace)
    await store_config(engine, rotated)
    return secret_view(rotated, now, engine.settings.policy)


@owner_routed
async def verify_endpoint(request: web.Request) -> web.Response:
    """Run the verification handshake again (after fixing the receiver, say) and store its result.

    409 `verification_off` for a receiver created with `"verify": false`: nothing waits for a
    handshake there, so a result would only contradict its `verified` (always true).
    """
    engine = request.app[ENGINE]
    return _json(await verify_again(engine, _receiver(engine, request).config))


async def verify_again(engine: Engine, config: ReceiverConfig) -> dict[str, Any]:
    """The handshake again, its result stored (the API's and the UI's); the receiver's public view."""
    if not config.verify:
        raise InvalidInput(
            "verify", 'verification is off for this receiver; set "verify": true (PATCH) to require it, '
            "which runs the handshake", "verification_off", 409,
        )
    await engine.check_url(config.url)
    require_sure_ownership(engine, config.id)
    verified = replace(config, verification=await engine.verify(config))
    await store_config(engine, verified)
    return public_view(verified, time.time(), engine.settings.policy)
