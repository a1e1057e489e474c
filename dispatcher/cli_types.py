"""The CLI's argument types: a bad value is an argparse error naming the option (exit status 2).

An error never repeats a JSON or NAME=VALUE argument's text: it may be a secret
(`--set secret=whsec_...` without quotes); the JSON error's position says where.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import orjson

SIGNING = {"hmac": "hmac-sha256", "hmac-sha256": "hmac-sha256", "ed25519": "ed25519"}


def _json(text: str) -> Any:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc})") from None
    try:  # the request nests it two levels deeper ({"messages": [...]}); orjson writes at most 254 levels
        orjson.dumps([[value]])
    except orjson.JSONEncodeError:
        raise argparse.ArgumentTypeError("JSON nested too deeply to send (at most ~250 levels)") from None
    return value


def _read(source: str) -> str:
    """`-`: stdin; `@path` or (for files) a path: the file's text."""
    if source == "-":
        return sys.stdin.read()
    try:
        return Path(source.removeprefix("@")).read_text()
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {source}: {exc.strerror}") from None


def payload(text: str) -> Any:
    return _json(_read(text) if text == "-" else text)


def json_object(text: str) -> dict[str, Any]:
    value = _json(_read(text) if text.startswith("@") else text)
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object of body fields")
    return value


class Given:
    """An option's value that may be JSON null (argparse's None means the option was not given)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def content_filter(text: str) -> Given:
    """`--filter`: a JSON object (a content filter), `@FILE` holding one, or `null` (no filter)."""
    value = _json(_read(text) if text.startswith("@") else text)
    if value is not None and not isinstance(value, dict):
        example = '{"payload": {"amount": {"$gte": 10}}}'
        raise argparse.ArgumentTypeError(f"must be a JSON object (e.g. '{example}') or null")
    return Given(value)


def transform(text: str) -> Given:
    """`--transform`: a json-e template object, `@FILE` holding one, or `null` (no transform)."""
    value = _json(_read(text) if text.startswith("@") else text)
    if value is not None and not isinstance(value, dict):
        example = '{"body": {"text": "${event_type}"}}'
        raise argparse.ArgumentTypeError(f"must be a JSON object (e.g. '{example}') or null")
    return Given(value)


def field(text: str) -> tuple[str, Any]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError("must be FIELD=JSON")
    try:
        return name, _json(value)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{name}: {exc} (a string needs quotes: {name}='\"...\"')") from None


def header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError("must be NAME=VALUE (the value may be a credential: not shown)")
    return name.strip(), value.strip()


def batch(source: str) -> list[Any]:
    """A JSON list of messages, `{"messages": [...]}`, or JSON Lines (one message a line)."""
    text = _read(source)
    try:
        value = _json(text)
    except argparse.ArgumentTypeError:
        value = [_json(line) for line in text.splitlines() if line.strip()]
    if isinstance(value, dict) and "messages" in value:
        value = value["messages"]
    if not isinstance(value, list):
        raise argparse.ArgumentTypeError(f"{source}: must hold a list of messages")
    return value


def signing(text: str) -> str:
    if text not in SIGNING:
        raise argparse.ArgumentTypeError(f"must be hmac or ed25519, not {text!r}")
    return SIGNING[text]


def positive(text: str) -> int:
    return _whole(text, 1)


def not_negative(text: str) -> int:
    return _whole(text, 0)


def _whole(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        raise argparse.ArgumentTypeError(f"must be a whole number >= {low}, not {text!r}")
    return value


def ident(text: str) -> str:
    """A receiver or message id: any text but the empty one (the client quotes it into the URL)."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def finite(text: str) -> float:
    """A number >= 0: nan and inf are refused (JSON has neither; they would be sent as null)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, not {text!r}")
    return value


def seconds(text: str) -> float:
    """A finite number of seconds above 0."""
    value = finite(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, not {text!r}")
    return value


def pem_file(text: str) -> str:
    """`--client-cert` / `--client-key`: a PEM file (`@path` or path; `-`: stdin), its text."""
    value = _read(text if text == "-" else "@" + text.removeprefix("@"))
    if "-----BEGIN " not in value:
        raise argparse.ArgumentTypeError(f"{text} holds no PEM block (-----BEGIN ...-----)")
    return value


def secret_text(text: str) -> str:
    """`--oauth2-client-secret`: the value, `@path` (a file holding it) or `-` (stdin), one line."""
    return (_read(text) if text == "-" or text.startswith("@") else text).strip()
