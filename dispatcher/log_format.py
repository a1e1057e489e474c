"""DISPATCHER_LOG_FORMAT=json: one JSON object per log line, with the ids a line names as fields.

The worker's lines name what they are about as `key=value` (`msg_id=... receiver_id=...
seq=... attempt=...`); the JSON formatter lifts those into fields of their own, so a
log pipeline can filter on them without parsing the text. Fields passed as `extra`
(`log.info(..., extra={"receiver_id": rid})`) win over the text.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import orjson

from .settings import SettingsError

FORMATS = ("text", "json")
ID_FIELDS = ("msg_id", "receiver_id", "seq", "attempt", "lane", "status", "reason")
_ID = re.compile(r"\b(" + "|".join(ID_FIELDS) + r")=([^\s,;:()]+)")


class JsonFormatter(logging.Formatter):
    """A record as `{"time", "level", "logger", "message", <ids>, "exception"?}` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        line: dict[str, Any] = {
            "time": _iso(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": message,
        }
        for name, found in _ID.findall(message):
            if found != "None":
                line.setdefault(name, int(found) if found.isdigit() and name != "receiver_id" else found)
        for name in ID_FIELDS:
            given = record.__dict__.get(name)
            if given is not None:
                line[name] = given
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


def _iso(created: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(created % 1 * 1000):03d}Z"


def logging_config(log_format: str, level: str) -> dict[str, Any] | None:
    """mode's `logging_config` for the format (None: mode's own text lines); refuses an unknown one."""
    name = log_format.strip().lower()
    if name not in FORMATS:
        raise SettingsError(f"DISPATCHER_LOG_FORMAT={log_format!r}: must be one of {', '.join(FORMATS)}")
    if name == "text":
        return None
    return {
        "merge": True,  # mode's config, its default handler replaced
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {"default": {"level": level.upper(), "class": "logging.StreamHandler",
                                 "formatter": "json", "stream": "ext://sys.stdout"}},
    }
