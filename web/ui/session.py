"""The console's session: a signed cookie, its CSRF token, and the slowing of bad logins.

The cookie's key is derived from the API token, so every worker checks a session
any other worker issued (no shared store), and changing the token ends every
session. The cookie holds an expiry and a random nonce, signed; the CSRF token is
the nonce signed under another label, so it is bound to the session. A session
opened with a tenant token also holds the token's id (never its secret), so each
page is scoped to its tenant, and a revoked token ends its sessions.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

COOKIE = "dispatcher_ui"
_LABEL = b"webhook-dispatcher ui session v1"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


@dataclass(slots=True, frozen=True)
class Session:
    nonce: str
    expires: int
    token_id: str = ""  # the tenant token it was opened with ("": the admin token)


class SessionKeys:
    """Issue and check session cookies and CSRF tokens under a key derived from the API token."""

    def __init__(self, api_token: str, ttl: float, clock: Callable[[], float] = time.time) -> None:
        # HMAC as a key-derivation step: the token itself never signs anything the browser holds.
        self._key = hmac.new(api_token.encode(), _LABEL, hashlib.sha256).digest() if api_token else b""
        self.ttl = ttl
        self._clock = clock

    def _mac(self, label: str, text: str) -> str:
        return _b64(hmac.new(self._key, f"{label}:{text}".encode(), hashlib.sha256).digest())

    def issue(self, token_id: str = "") -> str:
        """A new session's cookie value (`token_id`: opened with that tenant token)."""
        expires = int(self._clock() + self.ttl)
        body = f"{expires}.{secrets.token_urlsafe(18)}" + (f".{token_id}" if token_id else "")
        return f"{body}.{self._mac('session', body)}"

    def check(self, cookie: str | None) -> Session | None:
        """The session `cookie` carries, if it is signed here and not expired."""
        if not cookie or not self._key or cookie.count(".") not in (2, 3):
            return None
        body, mac = cookie.rsplit(".", 1)
        if not hmac.compare_digest(mac.encode(), self._mac("session", body).encode()):
            return None
        expires, nonce, *token = body.split(".")
        if not expires.isdigit() or int(expires) <= self._clock() or token == [""]:
            return None
        return Session(nonce, int(expires), token[0] if token else "")

    def csrf(self, session: Session) -> str:
        return self._mac("csrf", session.nonce)

    def csrf_ok(self, session: Session, given: str) -> bool:
        return bool(given) and hmac.compare_digest(given.encode(), self.csrf(session).encode())

    def token_ok(self, given: str, api_token: str) -> bool:
        """The login form's token, compared in constant time (no token configured: nobody logs in)."""
        return bool(api_token) and hmac.compare_digest(given.encode(), api_token.encode())


class LoginThrottle:
    """Bad logins from one address make it wait before its next try: 1 s after the third, doubling up
    to `cap`; a good login clears it. Bounded: the oldest addresses are forgotten past `size`."""

    FREE = 3  # bad tries allowed before waits start

    def __init__(self, cap: float = 60.0, size: int = 10_000, clock: Callable[[], float] = time.monotonic):
        self._cap = cap
        self._size = size
        self._clock = clock
        self._failures: OrderedDict[str, tuple[int, float]] = OrderedDict()  # address -> (count, last)

    def wait_for(self, address: str) -> float:
        """Seconds `address` must still wait before a login is checked (0: go ahead)."""
        count, last = self._failures.get(address, (0, 0.0))
        if count < self.FREE:
            return 0.0
        delay = min(self._cap, 2.0 ** (count - self.FREE))
        return max(0.0, last + delay - self._clock())

    def failed(self, address: str) -> None:
        count, _ = self._failures.pop(address, (0, 0.0))
        self._failures[address] = (count + 1, self._clock())
        while len(self._failures) > self._size:
            self._failures.popitem(last=False)

    def succeeded(self, address: str) -> None:
        self._failures.pop(address, None)
