"""The worker's log: its own lines, the libraries' only from their level up."""

from __future__ import annotations

import logging
from pathlib import Path

import faust
import pytest

from dispatcher.logs import LibraryChatter, library_level
from dispatcher.settings import SettingsError

FAUST_FILE = str(Path(faust.__file__).parent / "worker.py")


def _record(level: int, path: str) -> logging.LogRecord:
    return logging.LogRecord("x", level, path, 1, "Starting...", None, None)


def test_the_libraries_info_lines_are_left_out_and_their_warnings_kept() -> None:
    chatter = LibraryChatter(logging.WARNING)
    assert not chatter.filter(_record(logging.INFO, FAUST_FILE))
    assert chatter.filter(_record(logging.WARNING, FAUST_FILE))
    assert chatter.filter(_record(logging.INFO, __file__))  # ours always
    assert LibraryChatter(logging.INFO).filter(_record(logging.INFO, FAUST_FILE))


def test_an_unknown_library_level_is_refused_naming_the_variable() -> None:
    assert library_level(" Info ") == logging.INFO
    with pytest.raises(SettingsError, match="DISPATCHER_LIBRARY_LOG_LEVEL='loud'"):
        library_level("loud")
