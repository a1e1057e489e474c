"""Secret rotation and endpoint verification of one receiver, on its owner."""

from __future__ import annotations

import time
from dataclasses import replace

from aiohttp import web

from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.receiver_spec import parse_rotation, public_view, rotate, secret_view, signing_kind
from dispatcher.domain.signing import generate

from .api import _json, read_json, store_config
from .engine import ENGINE
from .receiver_ops import _receiver
from .routing import owner_routed, require_sure_ownership


@owner_routed
async def rotate_secret(request: web.Request) -> web.Response:
    """Sign with a new secret from now on; the old one also signs for `grace_seconds` (default 24 h).

    The answer is the only time the new secret is shown.
    """
    engine = request.app[ENGINE]
    config = _receiver(engine, request).config
    body = await read_json(request, required=False)
    secret, kind, grace = parse_rotation(body, engine.settings.secret_grace)
    now = time.time()
    new = secret or generate(kind or signing_kind(config.secret))
    rotated = rotate(config, new, now, grace)
    await store_config(engine, rotated)
    return _json(secret_view(rotated, now, engine.settings.policy))


@owner_routed
async def verify_endpoint(request: web.Request) -> web.Response:
    """Run the verification handshake again (after fixing the receiver, say) and store its result.

    409 `verification_off` for a receiver created with `"verify": false`: nothing waits for a
    handshake there, so a result would only contradict its `verified` (always true).
    """
    engine = request.app[ENGINE]
    config = _receiver(engine, request).config
    if not config.verify:
        raise InvalidInput(
            "verify", 'verification is off for this receiver; set "verify": true (PATCH) to require it, '
            "which runs the handshake", "verification_off", 409,
        )
    await engine.check_url(config.url)
    require_sure_ownership(engine, config.id)
    verified = replace(config, verification=await engine.verify(config))
    await store_config(engine, verified)
    return _json(public_view(verified, time.time(), engine.settings.policy))
