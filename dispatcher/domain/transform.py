"""A receiver's transformation: a json-e template that reshapes each message as it is delivered.

The template is rendered over
    {payload, event_type, headers, message: {id, seq, timestamp}, receiver: {id, tenant, event_types}, now}
(no secret of the receiver, nor its URL or its own headers, is in it) and
must give an object:
    {"body"?: any JSON, "headers"?: {name: value}, "path"?: "/suffix?query", "cancel"?: true}
- `body` replaces the whole request body (the Standard Webhooks envelope
  `{type, timestamp, data}` included), as Svix's transformations do; absent,
  the envelope goes as usual. The signature is over the body sent.
- `headers` are added after the receiver's and the message's; the reserved
  ones (ours, `webhook-*`, Host, Content-*, Authorization, hop-by-hop and
  proxy headers) cannot be set.
- `path` is appended to the receiver URL's path (its query to the URL's
  query): never a scheme, a host, `//`, `..`, a backslash or a control
  character; the URL built must have the receiver's scheme, host and port.
- `cancel: true` settles the message without a POST (status `cancelled`).

Evaluation is bounded (`jsone_bounded.py`): a template that runs out of
steps or builds a value too large fails like any other broken template, and
the message is dead-lettered as `transform_error`, its content kept for a
replay once the template is fixed. The template itself is checked at create:
an object, at most `MAX_TEMPLATE_BYTES` of JSON, `MAX_TEMPLATE_DEPTH` levels,
and every expression parses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson
from yarl import URL

from .errors import InvalidInput
from .field_checks import MAX_URL_LEN, check_depth
from .headers import check_headers
from .jsone_bounded import MAX_BUILT, MAX_STEPS, Budget, TemplateFailed, render
from .jsone_syntax import syntax_errors

MAX_TEMPLATE_BYTES = 16 * 1024
MAX_TEMPLATE_DEPTH = 32
MAX_BODY_BYTES = 256 * 1024
MAX_PATH = 1024
RESULT_FIELDS = ("body", "headers", "path", "cancel")
TRANSFORM_ERROR = "transform_error"  # the dead-letter reason
CANCELLED, FAILED = "cancelled", "error"  # an Outcome's `transform`: no POST went
_PATH_RE = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@/%?]*")  # RFC 3986 path and query characters


# A first run on the event loop gets a tenth of the budget: nearly every template ends within it
# (bench.transforms: a small one takes tens of steps); one that does not is run again, with the
# whole budget, in a thread, so a heavy or hostile template cannot hold the loop for its whole run.
INLINE_STEPS = MAX_STEPS // 10
INLINE_WORK = MAX_BUILT // 10


def inline_budget() -> Budget:
    return Budget(steps=INLINE_STEPS, built=INLINE_WORK)


class TransformError(InvalidInput):
    """The template failed on this message, or gave a result out of bounds; `field` names the part.

    `spent`: it ran out of its budget's steps or work, so a larger budget might see it through.
    """

    def __init__(self, field: str, message: str, spent: bool = False) -> None:
        super().__init__(field, message, code=TRANSFORM_ERROR)
        self.spent = spent


@dataclass(slots=True, frozen=True)
class Transformed:
    """What the template made of one message."""

    cancel: bool = False
    body: bytes | None = None  # the JSON to send instead of the envelope; None: the envelope
    headers: dict[str, str] = field(default_factory=dict)
    path: str = ""  # appended to the receiver's URL ("" : none)


def check_transform(value: object, field_name: str = "transform") -> dict[str, Any] | None:
    """A receiver's `transform`: None (none), or a json-e template object within bounds that parses."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidInput(field_name, "must be a json-e template object, or null to remove it")
    check_depth(value, field_name, MAX_TEMPLATE_DEPTH)
    if len(orjson.dumps(value)) > MAX_TEMPLATE_BYTES:
        raise InvalidInput(field_name, f"must be at most {MAX_TEMPLATE_BYTES} bytes of JSON")
    errors = syntax_errors(value, field_name)
    if errors:
        where, message = errors[0]
        raise InvalidInput(where, message)
    return value


def message_context(
    entry: dict[str, Any], receiver: dict[str, Any], timestamp: str, now: str
) -> dict[str, Any]:
    """What a template sees of one backlog entry (`timestamp` and `now` are RFC 3339 strings)."""
    return {
        "payload": entry.get("data"),
        "event_type": entry.get("type", ""),
        "headers": entry.get("headers") or {},
        "message": {"id": entry.get("id", ""), "seq": entry.get("seq", 0), "timestamp": timestamp},
        "receiver": receiver,
        "now": now,
    }


def receiver_context(receiver_id: str, tenant: str | None, event_types: tuple[str, ...]) -> dict[str, Any]:
    """The receiver's fields a template may read: none of them secret."""
    return {"id": receiver_id, "tenant": tenant, "event_types": list(event_types)}


def apply(template: dict[str, Any], context: dict[str, Any], budget: Budget | None = None) -> Transformed:
    """Render `template` over `context`; raise TransformError naming what failed."""
    try:
        result = render(template, context, budget)
    except TemplateFailed as exc:
        raise TransformError("transform", str(exc), exc.spent) from None
    return check_result(result)


def check_result(result: object) -> Transformed:
    """The rendered template as a `Transformed`, or TransformError naming the field at fault."""
    if not isinstance(result, dict):
        raise TransformError("transform", "must evaluate to an object with body, headers, path or cancel")
    unknown = sorted(set(result) - set(RESULT_FIELDS))
    if unknown:
        raise TransformError(f"transform.{unknown[0][:64]}", f"is not one of {', '.join(RESULT_FIELDS)}")
    cancel = result.get("cancel", False)
    if not isinstance(cancel, bool):
        raise TransformError("transform.cancel", "must be true or false")
    if cancel:
        return Transformed(cancel=True)
    return Transformed(False, _body(result), _headers(result.get("headers")), check_path(result.get("path")))


def _body(result: dict[str, Any]) -> bytes | None:
    if "body" not in result:
        return None
    try:
        body = orjson.dumps(result["body"])
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise TransformError("transform.body", f"is not JSON: {str(exc)[:200]}") from None
    if len(body) > MAX_BODY_BYTES:
        raise TransformError("transform.body", f"is {len(body)} bytes of JSON; at most {MAX_BODY_BYTES}")
    return body


def _headers(value: object) -> dict[str, str]:
    try:
        return check_headers(value, "transform.headers")
    except InvalidInput as exc:
        raise TransformError(exc.field[:128], exc.message) from None


def check_path(value: object) -> str:
    """A path suffix (and query) that cannot leave the receiver's host, or TransformError."""
    if value is None or value == "":
        return ""
    where = "transform.path"
    if not isinstance(value, str) or len(value) > MAX_PATH:
        raise TransformError(where, f"must be a string of at most {MAX_PATH} characters")
    if not _PATH_RE.fullmatch(value):
        raise TransformError(where, "may hold only URL path and query characters (percent-encode the rest)")
    path = value.split("?", 1)[0]
    if ":" in path.split("/", 1)[0] and not path.startswith("/"):
        raise TransformError(where, "must not start with a scheme")
    lowered = path.lower()
    if "//" in path or "%2f" in lowered or "%5c" in lowered or "%00" in lowered:
        raise TransformError(where, "must not hold an empty segment or an encoded slash, backslash or NUL")
    segments = [s.lower().replace("%2e", ".") for s in path.split("/")]
    if "." in segments or ".." in segments:
        raise TransformError(where, "must not hold a `.` or `..` segment")
    return value


def join_url(url: str, suffix: str) -> str:
    """The receiver's URL with `suffix` (checked by `check_path`) appended; its host can never change."""
    if not suffix:
        return url
    base = urlsplit(url)
    path, _, query = suffix.partition("?")
    joined_path = base.path.rstrip("/") + ("/" + path.lstrip("/") if path else "")
    if not joined_path and query:
        joined_path = base.path
    joined_query = "&".join(q for q in (base.query, query) if q)
    final = urlunsplit((base.scheme, base.netloc, joined_path or "/", joined_query, ""))
    if len(final) > MAX_URL_LEN:
        raise TransformError("transform.path", f"makes a URL longer than {MAX_URL_LEN} characters")
    _same_target(url, final)
    return final


def sent_url(url: str) -> str:
    """`url` as both delivery clients send it: yarl's form (a stray `%` escaped, an escaped
    unreserved character decoded, a space in the query as `+`), which a preview must show."""
    return str(URL(url))


def _same_target(url: str, final: str) -> None:
    """Two parsers (ours and aiohttp's) agree the URL built goes where the receiver's goes.

    The SSRF guard checks every connection as well; this keeps a path from even naming another host.
    """
    before, after = urlsplit(url), urlsplit(final)
    same = (before.scheme, before.netloc) == (after.scheme, after.netloc)
    try:
        dialled = URL(final)
        same = same and _dialled(url) == (dialled.scheme, dialled.raw_host, dialled.port)
    except ValueError:
        same = False
    if not same:
        raise TransformError("transform.path", "would change the receiver's host")


@lru_cache(maxsize=4096)
def _dialled(url: str) -> tuple[str, str | None, int | None]:
    """The scheme, host and port aiohttp dials for a receiver's URL (parsed once per URL)."""
    parsed = URL(url)
    return parsed.scheme, parsed.raw_host, parsed.port
