"""Done-callbacks for work nobody awaits: its failure is logged, never lost silently."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

Callback = Callable[[asyncio.Future[Any]], None]


def log_failure(logger: logging.Logger, what: str, level: int = logging.ERROR) -> Callback:
    """A done-callback that logs the future's exception as `what: <type>: <message>`."""

    def done(fut: asyncio.Future[Any]) -> None:
        if not fut.cancelled() and (exc := fut.exception()) is not None:
            logger.log(level, "%s: %s: %s", what, type(exc).__name__, exc)

    return done
