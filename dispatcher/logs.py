"""What the worker's log shows: its own lines, and the libraries' only when they matter.

Faust and mode log every service's start and stop at INFO (about 130 lines
before a worker is ready, as many again when it stops), which buried the lines
that say something. Below DEBUG their records under
`DISPATCHER_LIBRARY_LOG_LEVEL` (warning) are dropped: `info` brings back their
service starts and stops; `DISPATCHER_LOG_LEVEL=debug` shows all.
"""

from __future__ import annotations

import logging
from pathlib import Path

import aiokafka
import faust
import mode

from .settings import SettingsError

LIBRARIES = (faust, mode, aiokafka)


LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


class LibraryChatter(logging.Filter):
    """Drops records under `level` logged from inside the libraries' packages."""

    def __init__(self, level: int = logging.WARNING) -> None:
        super().__init__()
        self.level = level
        self._dirs = tuple(str(Path(m.__file__ or "").parent) + "/" for m in LIBRARIES)

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= self.level or not record.pathname.startswith(self._dirs)


def library_level(name: str) -> int:
    """DISPATCHER_LIBRARY_LOG_LEVEL's level; an unknown name is refused, naming the variable."""
    level = LEVELS.get(name.strip().lower())
    if level is None:
        raise SettingsError(f"DISPATCHER_LIBRARY_LOG_LEVEL={name!r}: must be one of {', '.join(LEVELS)}")
    return level


def quiet_libraries(root: logging.Logger, level: int, libraries: int = logging.WARNING) -> None:
    """Put the filter on every handler of the root logger, unless DEBUG was asked for."""
    if level <= logging.DEBUG:
        return
    chatter = LibraryChatter(libraries)
    for handler in root.handlers:
        handler.addFilter(chatter)
