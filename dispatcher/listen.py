"""`webhook-dispatcher listen`: a receiver for trying things out, which prints what it gets.

It checks each request as a careful receiver would (signature under the given
`whsec_` secret or `whpk_` public key, timestamp within the tolerance), answers
endpoint-verification challenges, and answers every delivery with the status
it was told to, so retries and the circuit breaker can be watched from a
terminal. Loopback by default.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import TextIO

import orjson
from aiohttp import web

from .cli_output import escape
from .domain.signing import SecretError, verify_with

TOLERANCE = 300  # seconds a timestamp may be off, as the Standard Webhooks libraries allow
BODY_SHOWN = 300


@dataclass(frozen=True)
class Listener:
    key: str | None  # whsec_ or whpk_; None: signatures are not checked
    status: int = 200
    tolerance: int = TOLERANCE
    out: TextIO = sys.stdout

    def check(self, headers: dict[str, str], body: bytes, now: float) -> str:
        """'ok', 'not checked' (no key), or what is wrong with the request's signature."""
        msg_id, stamp, signature = (headers.get(h, "") for h in
                                    ("webhook-id", "webhook-timestamp", "webhook-signature"))
        if self.key is None:
            return "not checked"
        if not (msg_id and stamp and signature):
            return "BAD: webhook-id, -timestamp or -signature missing"
        well_formed = stamp.isascii() and stamp.isdigit() and len(stamp) <= 12  # not `²`, nor 5,000 digits
        if not well_formed or abs(now - int(stamp)) > self.tolerance:
            return f"BAD: timestamp {stamp!r} is more than {self.tolerance} s off"
        try:
            good = verify_with(self.key, msg_id, int(stamp), body, signature)
        except SecretError as exc:
            return f"BAD: {exc}"
        return "ok" if good else "BAD: no signature matches the key"

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        challenge = headers.get("webhook-challenge")
        if request.method == "GET" and challenge:
            # Endpoint verification: the challenge is the signed content.
            verdict = self.check(headers, challenge.encode(), time.time())
            self._print(f"verification challenge  signature {verdict}  -> 200")
            return web.Response(text=challenge)
        verdict = self.check(headers, body, time.time())
        seq = headers.get("webhook-sequence", "-")
        kind = headers.get("webhook-event-type", "-")
        msg_id = headers.get("webhook-id", "-")
        self._print(f"seq {escape(seq, True)}  {escape(kind, True)}  {escape(msg_id, True)}"
                    f"  signature {escape(verdict, True)}  -> {self.status}\n    {_shown(body)}")
        return web.Response(status=self.status)

    def _print(self, line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')}  {line}", file=self.out, flush=True)


def _shown(body: bytes) -> str:
    try:
        text = orjson.dumps(orjson.loads(body)).decode()
    except orjson.JSONDecodeError:
        text = body.decode("utf-8", "replace")
    shown = text if len(text) <= BODY_SHOWN else f"{text[:BODY_SHOWN]}... ({len(body)} bytes)"
    return escape(shown, one_line=True)  # a receiver's bytes never drive the terminal


def run_listener(host: str, port: int, key: str | None, status: int) -> int:
    listener = Listener(key or None, status)
    app = web.Application(client_max_size=16 * 1024 * 1024)
    app.router.add_route("*", "/{path:.*}", listener.handle)
    checked = "checking signatures" if key else "not checking signatures (no --secret)"
    shown = f"[{host}]" if ":" in host else host
    print(f"listening on http://{shown}:{port}/ (any path), answering {status}, {checked}; Ctrl-C stops",
          flush=True)
    web.run_app(app, host=host, port=port, print=None, handle_signals=True)
    return 0
