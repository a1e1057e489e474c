"""`/v1/tokens`: the admin mints, lists and revokes tenant tokens (web/scopes.py keeps tenant tokens out).

Any worker answers: every worker holds every token's record (dispatcher/token_feed.py). The
plaintext token is in the mint's answer only; the listing shows each token's id, tenant, name,
times, status and `prefix`/`last4` to tell tokens apart, never the secret or its hash.
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import replace

from aiohttp import web
from ulid import ULID

from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.subscriptions import check_tenant
from dispatcher.domain.tokens import SECRET_BYTES, mint, parse_mint

from .api import _json, read_json
from .engine import ENGINE
from .middleware import TOKEN_WAIT

log = logging.getLogger(__name__)


async def create_token(request: web.Request) -> web.Response:
    """Mint a token for a tenant: 201 with the record and `token`, the plaintext, shown this once."""
    engine = request.app[ENGINE]
    now = time.time()
    ask = parse_mint(await read_json(request), now)
    plaintext, record = mint(str(ULID()), secrets.token_bytes(SECRET_BYTES), ask.tenant, ask.name, now,
                             ask.expires_at)
    stored = await engine.store_token(record)
    log.info("token_id=%s minted for tenant=%s", stored.id, stored.tenant)
    return _json({**stored.view(now), "token": plaintext}, status=201)


async def list_tokens(request: web.Request) -> web.Response:
    """Every token (one tenant's with `?tenant=`), revoked and expired ones too, in the order minted."""
    engine = request.app[ENGINE]
    tenant = check_tenant(request.query.get("tenant"), "tenant")
    now = time.time()
    records = await engine.list_tokens(TOKEN_WAIT)
    return _json({"tokens": [r.view(now) for r in records if tenant is None or r.tenant == tenant]})


async def revoke_token(request: web.Request) -> web.Response:
    """Revoke a token for good: refused on this worker from this answer on, on the others once the
    record reaches them. Revoking a revoked token changes nothing (200 again)."""
    engine = request.app[ENGINE]
    token_id = request.match_info["token_id"]
    record = await engine.find_token(token_id, TOKEN_WAIT) if len(token_id) <= 128 else None
    if record is None:
        raise InvalidInput("token_id", "no such token", code="not_found", status=404)
    now = time.time()
    if record.revoked_at is None:
        record = await engine.store_token(replace(record, revoked_at=now))
        log.info("token_id=%s of tenant=%s revoked", record.id, record.tenant)
    return _json(record.view(now))
