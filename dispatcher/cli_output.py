r"""The CLI's readable form of an API answer: indented `key: value` lines, tables for flat rows.

Nothing is cut: a long string stays whole (the terminal wraps it), a multi-line
one is printed as an indented block. None prints as `-`, an empty list or
object as `(none)`; a time (`at`, `*_at`, `*_until`: epoch seconds) also in UTC. `--json`
bypasses all of this and prints the answer as is.

A receiver's answer reaches the terminal through here, so no control character
does: C0 (but the newline), DEL, C1 and the bidi overrides are shown as `\x1b` or
`\u202e` text; `--json` escapes the same characters as JSON `\u` escapes.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import orjson

from .domain.untrusted import escaped

INDENT = "  "
NULL = "-"
EMPTY = "(none)"

# What a terminal may act on: C0 (but the newline), DEL, C1, the bidi embeddings, overrides and isolates.
UNSAFE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# A key or a table cell: the newline too, and the line and paragraph separators.
UNSAFE_ON_ONE_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
UNSAFE_IN_JSON = re.compile(r"[\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # orjson escapes C0 itself


@dataclass(frozen=True, slots=True)
class Table:
    """Rows shown as a table of the named columns (a command's chosen view; `--json` has every field)."""

    rows: list[dict[str, Any]]
    columns: list[str]


@dataclass(frozen=True, slots=True)
class Plain:
    """Text printed as it is (an id for `--quiet`, a sentence)."""

    text: str


def escape(text: str, one_line: bool = False) -> str:
    r"""`text` with every character a terminal may act on shown as `\x1b` or `\u202e` text.

    Newlines are kept unless `one_line` (a key or a table cell, where a newline would fake a line).
    """
    return (UNSAFE_ON_ONE_LINE if one_line else UNSAFE).sub(escaped, text)


def is_safe(text: str) -> bool:
    """Whether `text` prints as it is: no character a terminal may act on but the newline."""
    return UNSAFE.search(text) is None


def as_json(answer: Any) -> str:
    r"""Indented JSON; C1, DEL and bidi characters as `\u` escapes (the same string, not printed raw)."""
    text = orjson.dumps(answer, option=orjson.OPT_INDENT_2).decode()
    return UNSAFE_IN_JSON.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def readable(answer: Any) -> str:
    """The answer as lines a person reads; every value in it is shown, control characters escaped."""
    if isinstance(answer, Plain):
        return escape(answer.text)
    if isinstance(answer, Table):
        return "\n".join(table(answer.rows, answer.columns))
    return "\n".join(lines(answer, 0))


def lines(value: Any, depth: int) -> list[str]:
    if isinstance(value, dict) and value:
        return _mapping(value, depth)
    if _is_rows(value):
        return _rows(value, depth)
    return [INDENT * depth + line for line in inline(value).splitlines() or [""]]


def inline(value: Any) -> str:
    """A value on one line where it fits: scalars, and lists of scalars comma-joined."""
    if value is None:
        return NULL
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return escape(value) if value else '""'
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, list | dict) and not value:
        return EMPTY
    if isinstance(value, list) and all(_is_scalar(v) for v in value):
        return ", ".join(inline(v) for v in value)
    return escape(orjson.dumps(value).decode())  # a list of lists: rare, and JSON says it best


def _mapping(data: dict[str, Any], depth: int) -> list[str]:
    pad = INDENT * depth
    out = []
    for name, value in data.items():
        key = escape(name, one_line=True)
        if (isinstance(value, dict) and value) or _is_rows(value):
            out.append(f"{pad}{key}:")
            out += lines(value, depth + 1)
            continue
        text = inline(value)
        if _is_time(name, value):
            text += f" ({_utc(value)})"
        if "\n" in text:  # a multi-line string (a response body): a block, so the next key stays clear
            out.append(f"{pad}{key}: |")
            out += [pad + INDENT + line for line in text.splitlines()]
        else:
            out.append(f"{pad}{key}: {text}")
    return out


def _rows(rows: list[dict[str, Any]], depth: int) -> list[str]:
    """Flat rows as a table; rows holding objects or multi-line text as `- key: value` blocks."""
    columns = list(dict.fromkeys(key for row in rows for key in row))
    flat = all(_is_scalar(v) or _is_scalar_list(v) for row in rows for v in row.values())
    if flat and not any("\n" in inline(v) for row in rows for v in row.values()):
        return [INDENT * depth + line for line in table(rows, columns)]
    out = []
    for row in rows:
        block = _mapping(row, depth + 1)
        first = block[0] if block else INDENT * (depth + 1) + EMPTY
        out.append(INDENT * depth + "- " + first.lstrip())
        out += block[1:]
    return out


def table(rows: list[dict[str, Any]], columns: list[str]) -> list[str]:
    cells = [[escape(c.upper(), one_line=True) for c in columns]]
    cells += [[escape(inline(row.get(c)), one_line=True) for c in columns] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells]


def _is_time(key: str, value: Any) -> bool:
    timed = key == "at" or key.endswith(("_at", "_until"))  # paused_until: a time, as next_at is
    return timed and isinstance(value, int | float) and value > 0


def _utc(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _is_scalar_list(value: Any) -> bool:
    return isinstance(value, list) and all(_is_scalar(v) for v in value)


def _is_rows(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)
