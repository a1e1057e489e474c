"""What the worker's log shows: its own lines, and the libraries' only when they matter.

Faust and mode log every service's start and stop at INFO (about 130 lines
before a worker is ready, as many again when it stops), which buried the lines
that say something. Below DEBUG their INFO and DEBUG records are dropped;
their warnings and errors always show. `DISPATCHER_LOG_LEVEL=debug` shows all.
"""

from __future__ import annotations

import logging
from pathlib import Path

import aiokafka
import faust
import mode

LIBRARIES = (faust, mode, aiokafka)


class LibraryChatter(logging.Filter):
    """Drops INFO and DEBUG records logged from inside the libraries' packages."""

    def __init__(self) -> None:
        super().__init__()
        self._dirs = tuple(str(Path(m.__file__ or "").parent) + "/" for m in LIBRARIES)

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not record.pathname.startswith(self._dirs)


def quiet_libraries(root: logging.Logger, level: int) -> None:
    """Put the filter on every handler of the root logger, unless DEBUG was asked for."""
    if level <= logging.DEBUG:
        return
    chatter = LibraryChatter()
    for handler in root.handlers:
        handler.addFilter(chatter)
