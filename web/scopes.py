"""Who may make which /v1 call: the admin token every call, a tenant token its tenant's receivers only.

`ROUTE_ACCESS` decides every /v1 route explicitly (a test holds it to the
router): `TENANT` routes take a tenant token and scope what it reaches,
`ADMIN_ONLY` routes refuse it with 403. A route missing from the table is refused
to tenant tokens too. How each `TENANT` route scopes:

- a receiver's own routes (`/v1/receivers/{receiver_id}...`) run on the
  receiver's owner, which answers 404 `not_found` for another tenant's
  receiver, exactly as for one that does not exist (`owner_routed` calls
  `check_visible`; PATCH, which forwards by itself, calls it too);
- the list shows the token's tenant's receivers only (a `tenant` filter naming
  another tenant is a 403);
- a create gets the token's tenant (naming another, or none, is a 403); a
  PATCH cannot change or clear it; an id another tenant's receiver has is a 409;
- a message (one, or in a batch) to another tenant's receiver is a 404;
- an event gets the token's tenant (naming another is a 403).
"""

from __future__ import annotations

import logging

from aiohttp import web

from dispatcher.domain.errors import InvalidInput
from dispatcher.domain.ids import check_id
from dispatcher.domain.tokens import Principal, may_see

from .engine import Engine

log = logging.getLogger(__name__)

TENANT = "tenant"  # a tenant token may call it; the handler scopes what it reaches
ADMIN_ONLY = "admin"  # the admin token only: cluster-wide, or about tokens themselves

_RECEIVER = "/v1/receivers/{receiver_id}"
ROUTE_ACCESS: dict[tuple[str, str], str] = {
    ("/v1/receivers", "get"): TENANT,
    ("/v1/receivers", "post"): TENANT,
    (_RECEIVER, "get"): TENANT,
    (_RECEIVER, "patch"): TENANT,
    (_RECEIVER, "delete"): TENANT,
    (_RECEIVER + "/state", "get"): TENANT,
    (_RECEIVER + "/state", "delete"): TENANT,
    (_RECEIVER + "/events", "get"): TENANT,
    (_RECEIVER + "/messages/{message_id}", "get"): TENANT,
    (_RECEIVER + "/messages/{message_id}/resend", "post"): TENANT,
    (_RECEIVER + "/ping", "post"): TENANT,
    (_RECEIVER + "/attempts", "get"): TENANT,
    (_RECEIVER + "/last-response", "get"): TENANT,
    (_RECEIVER + "/dead-letters", "get"): TENANT,
    (_RECEIVER + "/replay", "post"): TENANT,
    (_RECEIVER + "/recover", "post"): TENANT,
    (_RECEIVER + "/secrets/rotate", "post"): TENANT,
    (_RECEIVER + "/verify", "post"): TENANT,
    (_RECEIVER + "/pause", "post"): TENANT,
    (_RECEIVER + "/resume", "post"): TENANT,
    (_RECEIVER + "/enable", "post"): TENANT,
    (_RECEIVER + "/disable", "post"): TENANT,
    (_RECEIVER + "/transform/test", "post"): TENANT,
    ("/v1/messages", "post"): TENANT,
    ("/v1/messages/batch", "post"): TENANT,
    ("/v1/events", "post"): TENANT,
    ("/v1/tokens", "get"): ADMIN_ONLY,
    ("/v1/tokens", "post"): ADMIN_ONLY,
    ("/v1/tokens/{token_id}", "delete"): ADMIN_ONLY,
}

# Who makes a /v1 call, set by the auth middleware before the view runs.
PRINCIPAL: web.RequestKey[Principal] = web.RequestKey("principal", Principal)


def route_access(request: web.Request) -> str | None:
    """The matched route's access (ADMIN_ONLY for a /v1 route not in the table); None: no route matched
    (the router answers 404 or 405 by itself)."""
    resource = getattr(request.match_info.route, "resource", None)
    if resource is None:
        return None
    method = "get" if request.method == "HEAD" else request.method.lower()
    return ROUTE_ACCESS.get((resource.canonical, method), ADMIN_ONLY)


def principal_of(request: web.Request) -> Principal:
    """Who makes this /v1 call, as the auth middleware found."""
    principal = request.get(PRINCIPAL)
    if principal is None:  # never: every /v1 call passes the middleware, which sets it or answers 401
        raise RuntimeError("a /v1 view ran without the auth middleware")
    return principal


def not_found(receiver_id: str, field: str = "receiver_id") -> InvalidInput:
    """The answer for an id that does not exist, and for another tenant's: the same, word for word."""
    return InvalidInput(field, f"no receiver {receiver_id!r}", code="not_found", status=404)


def hidden(principal: Principal, receiver_id: str, field: str = "receiver_id") -> InvalidInput:
    """404 for another tenant's receiver, logged with the token's id and tenant."""
    log.info("refused: %s asked for receiver_id=%s of another tenant (answered 404)",
             principal.describe(), receiver_id)
    return not_found(receiver_id, field)


def check_visible(engine: Engine, principal: Principal, receiver_id: str) -> None:
    """On the receiver's owner: 404 if `principal` may not see the receiver (a missing one is left to
    the view, which answers 404, or 503 while its partition moves)."""
    if principal.admin:
        return
    state = engine.receiver_state(check_id(receiver_id, "receiver_id"))
    if state is not None and not may_see(principal, state.config.tenant):
        raise hidden(principal, receiver_id)


TENANT_WAIT = 2.0  # s a tenant token's message to a receiver not yet in the subscriptions may wait


async def check_target(engine: Engine, principal: Principal, receiver_id: str, field: str) -> None:
    """Before a message goes to a receiver: 404 for a tenant token if the receiver is not its tenant's.

    The owner reads the receiver's state; any other worker its copy of the subscriptions, which names
    every receiver's tenant (a receiver created a moment ago is looked for again after a sync).
    """
    if principal.admin:
        return
    if engine.is_local(receiver_id):
        state = engine.receiver_state(receiver_id)
        known, tenant = (state is not None, state.config.tenant if state is not None else None)
    else:
        known, tenant = await engine.receiver_tenant(receiver_id, TENANT_WAIT)
    if not known:
        raise not_found(receiver_id, field)
    if not may_see(principal, tenant):
        raise hidden(principal, receiver_id, field)
