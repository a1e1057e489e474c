"""DISPATCHER_LOG_FORMAT=json: one object per line, the ids a line names lifted into fields."""

from __future__ import annotations

import logging
import sys

import orjson
import pytest

from dispatcher.log_format import JsonFormatter, logging_config
from dispatcher.settings import SettingsError


def record(msg: str, *args: object, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("dispatcher.deliverer", logging.WARNING, __file__, 1, msg, args, None)
    rec.__dict__.update(extra)
    return rec


def test_a_failed_attempt_line_carries_message_receiver_seq_and_attempt() -> None:
    line = JsonFormatter().format(record(
        "attempt failed msg_id=%s receiver_id=%s seq=%s attempt=%d lane=%s status=%s error=%s",
        "msg_1", "rcv_2", 3, 4, "fast", None, "timeout"))
    assert "\n" not in line
    data = orjson.loads(line)
    assert data["level"] == "warning" and data["logger"] == "dispatcher.deliverer"
    assert (data["msg_id"], data["receiver_id"], data["seq"], data["attempt"]) == ("msg_1", "rcv_2", 3, 4)
    assert "status" not in data, "None is no status"
    assert data["time"].endswith("Z") and data["message"].startswith("attempt failed")


def test_extra_fields_win_and_exceptions_stay_on_one_line() -> None:
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        rec = record("cannot apply receiver_id=%s", "from-text", receiver_id="from-extra")
        rec.exc_info = sys.exc_info()
    line = JsonFormatter().format(rec)
    assert "\n" not in line
    data = orjson.loads(line)
    assert data["receiver_id"] == "from-extra" and "ValueError: bad" in data["exception"]


def test_text_is_modes_own_and_an_unknown_format_names_the_variable() -> None:
    assert logging_config("text", "info") is None
    assert logging_config("JSON", "info") is not None
    with pytest.raises(SettingsError, match="DISPATCHER_LOG_FORMAT"):
        logging_config("xml", "info")
