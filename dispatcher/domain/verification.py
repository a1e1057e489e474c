"""Endpoint verification: the receiver proves it wants our webhooks before it gets any.

We GET the URL with a random challenge in the `webhook-challenge` header,
signed like a webhook (the challenge is the signed content). The receiver
answers 2xx with the challenge in its body, as plain text or as
`{"challenge": ...}`; with an HMAC secret it may instead answer the base64
HMAC-SHA256 of the challenge, which also proves it holds the secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

import orjson

from .records import ReceiverConfig, Verification
from .signing import decode_secret, is_asymmetric
from .webhook import custom_headers, signed_headers

CHALLENGE_HEADER = "webhook-challenge"
MAX_ANSWER = 1024


def new_challenge(random_bytes: bytes) -> str:
    return base64.urlsafe_b64encode(random_bytes).decode().rstrip("=")


def challenge_headers(config: ReceiverConfig, challenge: str, request_id: str, now: float) -> dict[str, str]:
    """The receiver's own headers, the challenge, and our signature over the challenge."""
    headers = custom_headers(config, {})
    headers.update(signed_headers(config, request_id, challenge.encode(), now))
    headers[CHALLENGE_HEADER] = challenge
    headers["webhook-event-type"] = "webhook.verify"
    return headers


def hmac_answer(config: ReceiverConfig, challenge: str) -> str | None:
    """The HMAC a receiver holding the secret may answer with (None for ed25519 receivers)."""
    if is_asymmetric(config.secret):
        return None
    digest = hmac.new(decode_secret(config.secret), challenge.encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def judge(
    config: ReceiverConfig, challenge: str, status: int | None, body: bytes, error: str | None, now: float
) -> Verification:
    """Passed, or failed with a reason the receiver's developer can act on."""
    if status is None:
        return Verification("failed", config.url, now, f"no response: {error or 'unknown error'}")
    if not 200 <= status < 300:
        return Verification("failed", config.url, now, f"the verification GET was answered HTTP {status}")
    answer = _answer(body[:MAX_ANSWER])
    accepted = {challenge, hmac_answer(config, challenge)} - {None}
    if answer in accepted or answer.removeprefix("v1,") in accepted:
        return Verification("passed", config.url, now)
    return Verification(
        "failed", config.url, now,
        f"HTTP {status} without the challenge: answer the {CHALLENGE_HEADER} header's value "
        "(or its base64 HMAC-SHA256 with the receiver's secret) as the body or as {\"challenge\": ...}",
    )


def _answer(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    if text.startswith("{"):
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            return text
        challenge = data.get("challenge") if isinstance(data, dict) else None
        if isinstance(challenge, str):
            return challenge.strip()
    return text
