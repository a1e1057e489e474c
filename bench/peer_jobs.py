"""What the peers' jobs do for one webhook (bench/peers.py): the body and the signed headers.

Standard Webhooks, as the worker sends them: the JSON body `{"type", "timestamp", "data"}` and
`webhook-id`, `webhook-timestamp` and an HMAC-SHA256 `webhook-signature` over
`<id>.<timestamp>.<body>`, plus the `webhook-sequence` header that lets the bench check order.
Standard library only: the peers' worker processes import nothing of the dispatcher.
"""

from __future__ import annotations

import base64
import hmac
import json
import os
import time
from typing import Any

REDIS_ENV = "BENCH_PEER_REDIS"  # the peers' Redis URL, given to their worker processes
LOOP_ENV = "BENCH_PEER_LOOP"  # "uvloop": the arq worker runs on uvloop, as the dispatcher's worker
KEY = b"A" * 24  # the bench's receivers' secret (whsec_ + 32 x "A", base64)
EVENT_TYPE = "bench.drain"
ARQ_MAX_JOBS = 128  # jobs in flight in each arq process (arq's default is 10)
ARQ_POLL_DELAY = 0.01  # seconds between arq's polls of its queue (arq's default is 0.5)
FUNCTION, QUEUE = "deliver", "default"  # the job's name (arq's function, dramatiq's actor); dramatiq's queue


def redis_url() -> str:
    return os.environ[REDIS_ENV]


def webhook(msg_id: str, seq: int, payload: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    """One delivery's body and headers."""
    now = int(time.time())
    body = json.dumps({"type": EVENT_TYPE, "timestamp": now, "data": payload},
                      separators=(",", ":")).encode()
    digest = hmac.digest(KEY, b"%s.%d.%s" % (msg_id.encode(), now, body), "sha256")
    return body, {"content-type": "application/json", "webhook-id": msg_id,
                  "webhook-timestamp": str(now), "webhook-sequence": str(seq),
                  "webhook-signature": "v1," + base64.b64encode(digest).decode()}
