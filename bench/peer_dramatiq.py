"""The dramatiq peer's actor (bench/peers.py): `python -m dramatiq bench.peer_dramatiq`.

Its Redis broker with dramatiq's default middleware; the actor POSTs one webhook with `requests`,
one Session per worker thread, and raises (dramatiq retries it) on anything but 200.
"""

from __future__ import annotations

import threading
from typing import Any

import dramatiq
import requests
from dramatiq.brokers.redis import RedisBroker

from .peer_jobs import FUNCTION, QUEUE, redis_url, webhook

dramatiq.set_broker(RedisBroker(url=redis_url()))
_local = threading.local()


def session() -> requests.Session:
    if not hasattr(_local, "session"):
        _local.session = requests.Session()
    return _local.session  # type: ignore[no-any-return]


@dramatiq.actor(actor_name=FUNCTION, queue_name=QUEUE)
def deliver(url: str, msg_id: str, seq: int, payload: dict[str, Any]) -> None:
    body, headers = webhook(msg_id, seq, payload)
    resp = session().post(url, data=body, headers=headers, timeout=30)
    if resp.status_code != 200:
        raise RuntimeError(f"{url} answered {resp.status_code}")
