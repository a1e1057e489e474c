"""A receiver as the API sees it: the create/replace body, secret rotation, and the public view.

Secrets (signing secrets, the `authorization` value, and `auth`'s private key
or client secret) go in but never come out, except the new signing secret in
the answer to a create or a rotation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

from .actor.inputs import WORKER_DEFAULTED, Policy
from .delivery_options import OPTION_FIELDS, parse_delivery_options
from .errors import InvalidInput
from .filters import check_filter
from .headers import check_header_value, check_headers
from .receiver_auth import MtlsAuth, OAuth2Auth, auth_view, parse_auth, parse_tls, tls_view
from .records import ReceiverConfig, check_url, reject_unknown
from .retry import RetryPolicy
from .signing import SecretError, check_secret, is_asymmetric, public_key_of
from .subscriptions import check_tenant, parse_patterns
from .transform import check_transform

SIGNING_KINDS = ("hmac-sha256", "ed25519")
RECEIVER_FIELDS = {
    "id", "url", "event_types", "tenant", "secret", "signing", "headers", "retry", "authorization",
    "verify", "filter", "auth", "tls", "transform", *OPTION_FIELDS,
}
MAX_GRACE = 7 * 86400.0
MAX_PREVIOUS_SECRETS = 5

MakeSecret = Callable[[str], str]  # signing kind -> a new secret of that kind


def parse_receiver_spec(
    body: object,
    receiver_id: str,
    now: float,
    require_https: bool,
    make_secret: MakeSecret,
    current: ReceiverConfig | None = None,
    verify_default: bool = False,
) -> ReceiverConfig:
    """Validate a create/replace body; a replace keeps what the body leaves out of its secrets.

    `current` is the receiver being replaced: without a new `secret` or
    `signing` kind its secrets carry over, and a verification carries over
    while the URL stays the same.
    """
    if not isinstance(body, dict):
        raise InvalidInput("body", "must be a JSON object")
    reject_unknown(body, RECEIVER_FIELDS, "")
    url = check_url(body.get("url"), "url", require_https)
    types = parse_patterns(body.get("event_types", []), "event_types")
    tenant = check_tenant(body.get("tenant", current.tenant if current else None), "tenant")
    headers = check_headers(body.get("headers"), "headers")
    authorization = _authorization(body.get("authorization", ""))
    retry = _retry_overrides(body.get("retry"))
    verify = body.get("verify", current.verify if current else verify_default)
    if not isinstance(verify, bool):
        raise InvalidInput("verify", "must be true or false")
    options = parse_delivery_options(body, current.options if current else None)
    config = ReceiverConfig(
        receiver_id, url, "", types, headers, current.created_at if current else now, retry,
        authorization=authorization, verify=verify, options=options, tenant=tenant,
        filter=check_filter(body.get("filter"), "filter"),
        transform=_transform(body.get("transform"), options.batching),
    )
    config = _with_auth(config, body, current, now, require_https)
    config = _with_secret(config, body, make_secret, current)
    if current is not None and current.verification is not None and current.verification.url == url:
        config = replace(config, verification=current.verification)
    return config


def _authorization(value: Any) -> Any:
    if value:
        check_header_value(value, "authorization")
    return value


def _with_auth(
    config: ReceiverConfig, body: dict[str, Any], current: ReceiverConfig | None, now: float,
    require_https: bool,
) -> ReceiverConfig:
    """The body's `auth` and `tls` (absent: the current ones, like the signing secret; null: none)."""
    tls = parse_tls(body["tls"]) if "tls" in body else (current.tls if current else None)
    auth = current.auth if current is not None else None
    if "auth" in body:
        auth = parse_auth(body["auth"], auth, now, require_https)
    if isinstance(auth, OAuth2Auth) and config.authorization:
        raise InvalidInput("authorization", "cannot be set with OAuth2 auth: the token is the Authorization "
                           'header (set "authorization": "" to drop it)')
    if urlsplit(config.url).scheme != "https":
        if isinstance(auth, MtlsAuth):
            raise InvalidInput("auth", "mtls needs an https url: a client certificate is presented in TLS")
        if tls is not None:
            raise InvalidInput("tls", "needs an https url")
    return replace(config, auth=auth, tls=tls)


def _transform(value: object, batching: bool) -> dict[str, Any] | None:
    """A batch is one body for many messages: a per-message transform does not fit it."""
    template = check_transform(value, "transform")
    if template is not None and batching:
        raise InvalidInput("transform", 'cannot be used with batching ("batch_max" above 1)')
    return template


def _retry_overrides(retry: Any) -> dict[str, Any] | None:
    """A body's `retry` object, checked against the retry policy's fields (an empty one: None)."""
    if retry is None:
        return None
    RetryPolicy().with_overrides(retry)  # raises naming the field at fault
    return retry or None


def patched_body(current: ReceiverConfig, patch: object) -> dict[str, Any]:
    """A full create body: the current receiver with the fields `patch` names replaced.

    Secrets are not in it: without `secret` or `signing` in the patch they carry over.
    """
    if not isinstance(patch, dict):
        raise InvalidInput("body", "must be a JSON object")
    reject_unknown(patch, RECEIVER_FIELDS - {"id"}, "")
    base: dict[str, Any] = {
        "url": current.url,
        "event_types": list(current.event_types),
        "tenant": current.tenant,
        "headers": current.headers,
        "retry": current.retry,
        "authorization": current.authorization,
        "verify": current.verify,
        "filter": current.filter,
        "transform": current.transform,
        **current.options.as_dict(),
    }
    if "ordering" in patch and "max_in_flight" not in patch:
        del base["max_in_flight"]  # the new ordering's own default (strict: 1)
    if "ordering" in patch and "coalesce" not in patch:
        del base["coalesce"]  # kept with ordering key, off with another
    return {**base, **patch}


def _with_secret(
    config: ReceiverConfig, body: dict[str, Any], make_secret: MakeSecret, current: ReceiverConfig | None
) -> ReceiverConfig:
    secret, kind = _signing_fields(body)
    if secret is not None:
        return replace(config, secret=secret)
    if current is not None and kind in (None, signing_kind(current.secret)):
        return replace(config, secret=current.secret, previous_secrets=current.previous_secrets)
    return replace(config, secret=make_secret(kind or "hmac-sha256"))


def _signing_fields(body: dict[str, Any]) -> tuple[str | None, str | None]:
    """The body's `secret` and `signing` kind (either may be absent), checked against each other."""
    kind = body.get("signing")
    if kind is not None and kind not in SIGNING_KINDS:
        raise InvalidInput("signing", f"must be one of {', '.join(SIGNING_KINDS)}")
    secret = check_signing_secret(body["secret"], "secret") if "secret" in body else None
    if secret is not None and kind is not None and kind != signing_kind(secret):
        raise InvalidInput("signing", f"is {kind} but the secret is an {signing_kind(secret)} secret")
    return secret, kind


def check_signing_secret(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(field, "must be a string: 'whsec_<base64>' or 'whsk_<base64>'")
    try:
        check_secret(value)
    except SecretError as exc:
        raise InvalidInput(field, str(exc)) from exc
    return value


def signing_kind(secret: str) -> str:
    return "ed25519" if is_asymmetric(secret) else "hmac-sha256"


def parse_rotation(body: object, default_grace: float) -> tuple[str | None, str | None, float]:
    """`{"secret"?, "signing"?, "grace_seconds"?}` -> (secret or None, kind or None, grace)."""
    body = body if body is not None else {}
    if not isinstance(body, dict):
        raise InvalidInput("body", "must be a JSON object")
    reject_unknown(body, {"secret", "signing", "grace_seconds"}, "")
    grace = body.get("grace_seconds", default_grace)
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 <= grace <= MAX_GRACE:
        raise InvalidInput("grace_seconds", f"must be a number of seconds in 0..{MAX_GRACE:g}")
    secret, kind = _signing_fields(body)
    return secret, kind, float(grace)


def rotate(config: ReceiverConfig, new_secret: str, now: float, grace: float) -> ReceiverConfig:
    """Sign with `new_secret` from now on; the old one keeps signing for `grace` seconds too."""
    if new_secret == config.secret:
        raise InvalidInput("secret", "is the current secret; a rotation needs a new one")
    previous = [(config.secret, now + grace)] if grace > 0 else []
    previous += [(s, until) for s, until in config.previous_secrets if until > now and s != new_secret]
    return replace(config, secret=new_secret, previous_secrets=tuple(previous[:MAX_PREVIOUS_SECRETS]))


def public_view(config: ReceiverConfig, now: float, policy: Policy) -> dict[str, Any]:
    """The receiver's config with every secret left out (a `whpk_` public key is not secret).

    Options and retry settings show the values deliveries get: what the receiver left to the
    worker (stored as 0, "" or no `retry` key, so a later change of the worker's default reaches
    it) shows the worker's default, and `worker_defaults` names those fields.
    """
    view = config.as_dict()
    for key in ("secret", "previous_secrets", "authorization"):
        view.pop(key)
    view["auth"] = auth_view(config.auth)  # the stored form holds the key or the client secret
    view["tls"] = tls_view(config.tls)
    view.update(policy.effective_options(config).as_dict())
    view["retry"] = policy.retry_for(config).as_dict()
    view["worker_defaults"] = worker_defaults(config)
    view["signing"] = signing_kind(config.secret)
    if is_asymmetric(config.secret):
        view["public_key"] = public_key_of(config.secret)
    view["authorization_set"] = bool(config.authorization)
    view["previous_secrets_valid_until"] = [until for _, until in config.previous_secrets if until > now]
    view["verified"] = config.verified
    return view


def worker_defaults(config: ReceiverConfig) -> list[str]:
    """The fields the receiver leaves to the worker's settings (`retry.<name>` for the retry object's)."""
    options = [name for name in WORKER_DEFAULTED if not getattr(config.options, name)]
    overridden = config.retry or {}
    return options + [f"retry.{name}" for name in RETRY_FIELDS if name not in overridden]


RETRY_FIELDS = tuple(RetryPolicy().as_dict())


def secret_view(config: ReceiverConfig, now: float, policy: Policy) -> dict[str, Any]:
    """The answer to a create or a rotation: the public view plus the new secret, shown this once."""
    view = public_view(config, now, policy)
    if is_asymmetric(config.secret):
        view["public_key"] = public_key_of(config.secret)  # receivers need only this
    else:
        view["secret"] = config.secret
    return view
