"""The worker's event loop: uvloop by default, asyncio's own on request.

Every delivery is a handful of socket reads and writes, timer and callback
hops; uvloop does those in C (libuv), which is the cheapest CPU a worker can
save without touching the delivery path itself.
"""

from __future__ import annotations

import asyncio

from .settings import SettingsError

EVENT_LOOPS = ("uvloop", "asyncio")


def new_event_loop(name: str) -> asyncio.AbstractEventLoop:
    """A new loop of the kind `DISPATCHER_EVENT_LOOP` names, set as the current one (and the policy's)."""
    if name not in EVENT_LOOPS:
        raise SettingsError(f"DISPATCHER_EVENT_LOOP={name!r}: must be one of " + ", ".join(EVENT_LOOPS))
    if name == "uvloop":
        try:
            import uvloop
        except ImportError as exc:
            raise SettingsError(
                "DISPATCHER_EVENT_LOOP='uvloop': uvloop is not installed here; install it or set asyncio"
            ) from exc
        # As the policy, so that the loops Faust makes for its threads (the consumer's) are uvloop too.
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        loop: asyncio.AbstractEventLoop = asyncio.new_event_loop()
    else:
        asyncio.set_event_loop_policy(None)  # asyncio's own
        loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    return loop
