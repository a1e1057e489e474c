"""Content filters: which messages a receiver takes, by their payload and headers.

The syntax is Convoy's and Outpost's JSON filters. A filter is matched against
one document per message, `{"event_type": ..., "payload": ..., "headers": ...}`
(header names lower-cased; an event's copies have no headers), so a filter
addresses `payload` and `headers` at its top level:

    {"payload": {"amount": {"$gte": 10}, "currency": "EUR"},
     "headers": {"x-region": {"$in": ["eu", "uk"]}}}

- A key is a field; a dotted key is a path (`"payload.customer.id"`), the same
  as the nested objects it abbreviates. A numeric segment indexes an array.
- A plain value matches by equality; an object of fields matches nested.
- Operators: `$eq $neq $gt $gte $lt $lte $in $nin $exist $regex` on a field,
  `$and $or` (a list of filters) and `$not` (a filter) at any level, where
  their paths are relative to that level.
- Arrays: a path through an array reaches every element (`payload.items.sku`
  looks at each item's `sku`), and a field holding an array matches a
  condition when the array itself or any element does (`{"tags": "vip"}`
  matches `"tags": ["new", "vip"]`). `$neq`, `$nin` and `$exist: false` hold
  when no value matches, so each is the negation of its positive.
- Comparisons take numbers with numbers and strings with strings; anything
  else does not match (and nothing raises). `true` is not `1`.
- `$regex` is RE2 (linear time; no look-around or back-references), searched
  anywhere in a string value.

A filter is compiled once into closures (`compile_filter`), checked against
the bounds below, and errors name the path at fault (`filter.payload.amount.$gte`).
Evaluation never raises and looks at no more than `MAX_REACHED` values per path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import re2  # google-re2: linear-time matching

from .errors import InvalidInput

MAX_FILTER_BYTES = 16384  # the filter's JSON
MAX_FILTER_DEPTH = 12  # nested objects and lists in the filter
MAX_CONDITIONS = 256  # fields, operators and logical branches together
MAX_PATH_SEGMENTS = 32
MAX_IN_VALUES = 256
MAX_REGEX_LENGTH = 512
MAX_REGEX_MEMORY = 1 << 20  # bytes RE2 may use for one compiled pattern
MAX_REACHED = 1024  # values one path may reach through arrays; beyond, elements are not looked at

TOP_FIELDS = ("payload", "headers", "event_type")
COMPARISONS = ("$eq", "$neq", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exist", "$regex")
LOGICAL = ("$and", "$or", "$not")

Path = tuple[str, ...]
MAX_CACHED_PATHS = 4096  # paths a document remembers what they reached (fan-out asks each many times)


class Document:
    """What a filter is matched against, with each path's values found once however many filters ask."""

    __slots__ = ("_reached", "root")

    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root
        self._reached: dict[tuple[Path, bool], list[Any]] = {}

    def reach(self, key: tuple[Path, bool]) -> list[Any]:
        """The values at path `key[0]` (with `key[1]`: and the elements of those that are arrays)."""
        found = self._reached.get(key)
        if found is None:
            path, elements = key
            found = _resolve(self.root, path)
            if elements:
                found = _with_elements(found)
            if len(self._reached) < MAX_CACHED_PATHS:
                self._reached[key] = found
        return found


Test = Callable[[Document], bool]


class Filter:
    """A compiled filter: `accepts(document)`; `source` is the JSON it was compiled from."""

    __slots__ = ("__weakref__", "_test", "source")

    def __init__(self, source: dict[str, Any], test: Test) -> None:
        self.source = source
        self._test = test

    def accepts(self, document: Document) -> bool:
        return self._test(document)


def document(event_type: str, payload: Any, headers: dict[str, str] | None) -> Document:
    """What a filter is matched against: `{"event_type", "payload", "headers"}`, names lower-cased."""
    lowered = {name.lower(): value for name, value in headers.items()} if headers else {}
    return Document({"event_type": event_type, "payload": payload, "headers": lowered})


def check_filter(value: object, field: str = "filter") -> dict[str, Any] | None:
    """A receiver's `filter` as given (None: no filter; `{}` counts as none), validated."""
    if value is None:
        return None
    compiled = compile_filter(value, field)
    return compiled.source if compiled.source else None


def compile_filter(value: object, field: str = "filter", accept_invalid: bool = False) -> Filter:
    """Validate and compile; InvalidInput names the path at fault.

    `accept_invalid`: a stored filter this version cannot compile (one written by a newer version)
    takes every message instead of raising: a message is delivered rather than lost.
    """
    if accept_invalid:
        try:
            return compile_filter(value, field)
        except InvalidInput:
            return Filter(value if isinstance(value, dict) else {}, lambda doc: True)
    if not isinstance(value, dict):
        raise InvalidInput(field, "must be a JSON object (a filter over payload and headers) or null")
    try:
        size = len(orjson.dumps(value))
    except TypeError as exc:
        raise InvalidInput(field, f"is not JSON: {exc}") from exc
    if size > MAX_FILTER_BYTES:
        raise InvalidInput(field, f"is {size} bytes of JSON; at most {MAX_FILTER_BYTES}")
    compiler = _Compiler()
    test = compiler.fields(value, (), field, 1)
    return Filter(value, test)


class _Compiler:
    """Turns a filter into closures, counting its conditions."""

    def __init__(self) -> None:
        self.conditions = 0

    def _count(self, where: str, depth: int) -> None:
        self.conditions += 1
        if self.conditions > MAX_CONDITIONS:
            raise InvalidInput(where, f"the filter has more than {MAX_CONDITIONS} conditions")
        if depth > MAX_FILTER_DEPTH:
            raise InvalidInput(where, f"the filter nests deeper than {MAX_FILTER_DEPTH} levels")

    def fields(self, spec: dict[str, Any], path: Path, where: str, depth: int) -> Test:
        """An object of fields and operators: all of them hold."""
        tests = [self.entry(key, value, path, f"{where}.{key}", depth) for key, value in spec.items()]
        return _all(tests)

    def entry(self, key: object, value: Any, path: Path, where: str, depth: int) -> Test:
        self._count(where, depth)
        if not isinstance(key, str) or not key:
            raise InvalidInput(where, "a field name must be a non-empty string")
        if key in LOGICAL:
            return self.logical(key, value, path, where, depth)
        if key.startswith("$"):
            if key not in COMPARISONS:
                known = ", ".join(COMPARISONS + LOGICAL)
                raise InvalidInput(where, f"unknown operator {key}; known: {known}")
            if not path:
                raise InvalidInput(where, f"{key} needs a field: put it under payload, headers or event_type")
            return _operator(key, value, path, where)
        field_path = _extend(path, key, where)
        if isinstance(value, dict) and value:
            return self.fields(value, field_path, where, depth + 1)
        if isinstance(value, list):
            _check_depth(value, where, depth)
        return _operator("$eq", value, field_path, where)

    def logical(self, key: str, value: Any, path: Path, where: str, depth: int) -> Test:
        if key == "$not":
            if not isinstance(value, dict):
                raise InvalidInput(where, "must be a filter object")
            inner = self.fields(value, path, where, depth + 1)
            return lambda doc: not inner(doc)
        if not isinstance(value, list) or not value or not all(isinstance(v, dict) for v in value):
            raise InvalidInput(where, "must be a non-empty list of filter objects")
        tests = [self.fields(item, path, f"{where}[{i}]", depth + 1) for i, item in enumerate(value)]
        return _all(tests) if key == "$and" else _any(tests)


def _extend(path: Path, key: str, where: str) -> Path:
    segments = tuple(key.split("."))
    if "" in segments:
        raise InvalidInput(where, "a path has no empty segments (no leading, trailing or double dots)")
    extended = path + segments
    if extended[0] not in TOP_FIELDS:
        raise InvalidInput(where, f"a filter's top-level fields are {', '.join(TOP_FIELDS)}")
    if len(extended) > MAX_PATH_SEGMENTS:
        raise InvalidInput(where, f"a path has at most {MAX_PATH_SEGMENTS} segments")
    if extended[0] == "headers" and len(extended) > 1:
        extended = ("headers", extended[1].lower(), *extended[2:])  # header names are case-insensitive
    return extended


def _check_depth(value: Any, where: str, depth: int) -> None:
    if depth > MAX_FILTER_DEPTH:
        raise InvalidInput(where, f"the filter nests deeper than {MAX_FILTER_DEPTH} levels")
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    for child in children:
        _check_depth(child, where, depth + 1)


# operators -------------------------------------------------------------------------


def _operator(op: str, arg: Any, path: Path, where: str) -> Test:
    if op in ("$eq", "$neq"):
        _check_depth(arg, where, 1)
        found = _membership([arg])
        return _reached(path, found, negate=op == "$neq")
    if op in ("$in", "$nin"):
        if not isinstance(arg, list) or len(arg) > MAX_IN_VALUES:
            raise InvalidInput(where, f"must be a list of at most {MAX_IN_VALUES} values")
        _check_depth(arg, where, 1)
        return _reached(path, _membership(arg), negate=op == "$nin")
    if op == "$exist":
        if not isinstance(arg, bool):
            raise InvalidInput(where, "must be true or false")
        return _exists(path, arg)
    if op == "$regex":
        return _reached(path, _regex(arg, where), negate=False)
    return _reached(path, _comparison(op, arg, where), negate=False)


ValueTest = Callable[[Any], bool]


def _reached(path: Path, test: ValueTest, negate: bool) -> Test:
    """Some value at `path` (or an element of one) passes `test`; `negate`: none does."""

    key = (path, True)

    def check(doc: Document) -> bool:
        for value in doc.reach(key):
            if test(value):
                return not negate
        return negate

    return check


def _exists(path: Path, wanted: bool) -> Test:
    key = (path, False)
    return lambda doc: bool(doc.reach(key)) is wanted


def _comparison(op: str, arg: Any, where: str) -> ValueTest:
    if isinstance(arg, str):
        kind: tuple[type, ...] = (str,)
    elif isinstance(arg, (int, float)) and not isinstance(arg, bool):
        kind = (int, float)
    else:
        raise InvalidInput(where, "must be a number or a string")
    compare: Callable[[Any], bool] = {
        "$gt": lambda v: v > arg, "$gte": lambda v: v >= arg,
        "$lt": lambda v: v < arg, "$lte": lambda v: v <= arg,
    }[op]
    return lambda v: isinstance(v, kind) and not isinstance(v, bool) and compare(v)


def _regex(arg: Any, where: str) -> ValueTest:
    if not isinstance(arg, str) or not 0 < len(arg) <= MAX_REGEX_LENGTH:
        raise InvalidInput(where, f"must be a regular expression of 1..{MAX_REGEX_LENGTH} characters")
    options = re2.Options()
    options.max_mem = MAX_REGEX_MEMORY
    options.log_errors = False
    try:
        pattern = re2.compile(arg, options)
    except re2.error as exc:
        detail = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise InvalidInput(where, f"is not an RE2 regular expression: {detail}") from exc
    search = pattern.search
    return lambda v: isinstance(v, str) and search(v) is not None


def _membership(values: list[Any]) -> ValueTest:
    """Equal to one of `values` (JSON equality: `true` is not `1`, `1` is `1.0`)."""
    if len(values) == 1 and isinstance(values[0], str):  # the common case, made short
        wanted = values[0]
        return lambda v: v.__class__ is str and v == wanted
    keyed = {_key(v) for v in values if not isinstance(v, (dict, list))}
    composite = [v for v in values if isinstance(v, (dict, list))]

    def member(v: Any) -> bool:
        if isinstance(v, (dict, list)):
            return any(_json_equal(v, c) for c in composite)
        return _key(v) in keyed

    return member


def _key(value: Any) -> tuple[int, Any]:
    if isinstance(value, bool):
        return 0, value
    if isinstance(value, (int, float)):
        return 1, value
    return 2, value  # str or None


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        same_length = isinstance(b, list) and len(a) == len(b)
        return same_length and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(b, (dict, list)):
        return False
    return _key(a) == _key(b)


# paths -----------------------------------------------------------------------------


def _resolve(root: dict[str, Any], path: Path) -> list[Any]:
    """The values `path` reaches (at most MAX_REACHED): through an array, in each element."""
    current: list[Any] = [root]
    for segment in path:
        following: list[Any] = []
        for value in current:
            _step(value, segment, following)
            if len(following) >= MAX_REACHED:
                break
        current = following[:MAX_REACHED]
        if not current:
            break
    return current


def _step(value: Any, segment: str, into: list[Any]) -> None:
    if isinstance(value, dict):
        if segment in value:
            into.append(value[segment])
    elif isinstance(value, list):
        if segment.isascii() and segment.isdigit() and len(segment) < 10 and int(segment) < len(value):
            into.append(value[int(segment)])
            return
        for element in value[:MAX_REACHED]:
            if isinstance(element, dict) and segment in element:
                into.append(element[segment])


def _with_elements(values: list[Any]) -> list[Any]:
    """Each value, and the elements of those that are arrays (at most MAX_REACHED in all)."""
    if not any(isinstance(v, list) for v in values):
        return values
    out: list[Any] = []
    for v in values:
        out.append(v)
        if isinstance(v, list):
            out.extend(v[: MAX_REACHED - len(out)])
        if len(out) >= MAX_REACHED:
            break
    return out


def _all(tests: list[Test]) -> Test:
    if len(tests) == 1:
        return tests[0]
    return lambda doc: all(t(doc) for t in tests)


def _any(tests: list[Test]) -> Test:
    if len(tests) == 1:
        return tests[0]
    return lambda doc: any(t(doc) for t in tests)
