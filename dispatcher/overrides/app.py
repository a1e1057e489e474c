"""The Faust app, transport, table manager and worker the dispatcher runs on.

Each class swaps one part of Faust for the override in this package, through
the factory Faust offers for it (`_new_transport`, the `TableManager` setting,
`on_setup_root_logger`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import faust
from faust.tables.manager import TableManager
from faust.transport.drivers import aiokafka as faust_aiokafka

from ..fetch_wait import IDLE_CAP_MS
from ..logs import quiet_libraries
from .consumer import _Consumer
from .producer import _Producer


class _Transport(faust_aiokafka.Transport):
    Consumer = _Consumer
    Producer = _Producer


class DispatcherApp(faust.App):
    """A Faust app on the transport above; the fetch wait and the broker's quirks are settings."""

    fetch_max_wait_ms: int = 1500
    fetch_idle_wait_ms: int = IDLE_CAP_MS
    contiguous_changelogs: bool = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Topic -> its records' handler, called by the consumer in place of the agent's stream
        # (`_Consumer._apply_direct`); the agent still subscribes the topic.
        self.direct_sources: dict[str, Callable[[Any], Awaitable[None]]] = {}
        # Called with (topic partition, offset) when the consumer positions a direct source's
        # partition at `offset`: every record below it is applied (or committed) and not handed over again.
        self.seek_hooks: list[Callable[[Any, int], None]] = []
        # Awaited before every flush of the producer (so before every offset commit).
        self.flush_hooks: list[Callable[[], Awaitable[None]]] = []

    def _new_transport(self) -> Any:
        return _Transport(self.conf.broker_consumer, self)

    def _new_producer_transport(self) -> Any:
        return _Transport(self.conf.broker_producer, self)


class QuickTableManager(TableManager):
    """Faust's table manager without its one-second nap at start.

    Faust sleeps 1 s before it reads the registered tables, so that tables
    declared late get in; ours are all declared before the app starts, and
    that second delayed every start, a restart after kill -9 included.
    """

    async def on_start(self) -> None:
        if not self.should_stop:
            await self._update_channels()
            await self.recovery.start()


SHUTDOWN_YIELD = 0.05  # seconds the loop runs after the last task is gathered, before it closes


class QuietWorker(faust.Worker):
    """Faust's worker without its terminal spinner, the libraries' INFO chatter, and a nap at stop.

    For a level of WARN or above the spinner sets the root logger to DEBUG, so
    every debug call of Faust and aiokafka (several per record) built a log
    record only for the spinner to drop it; that cost more CPU than the actor.
    """

    library_log_level = logging.WARNING

    def on_setup_root_logger(self, logger: logging.Logger, level: int) -> None:
        self.spinner = None
        quiet_libraries(logger, level, self.library_log_level)

    async def _sentinel_task(self) -> None:
        """mode's last step of a stop, once every service has stopped and every task is gathered:
        it slept a full second before the loop closed, and a restarted worker's successor (a
        StatefulSet's next pod) started that much later. One short yield lets the callbacks of
        transports closed just before run."""
        await asyncio.sleep(SHUTDOWN_YIELD)
