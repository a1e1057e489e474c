"""Slotted dataclasses as plain dicts for orjson, by a function generated once per class.

orjson writes a dataclass itself, but slowly for small nested ones: a
two-field `Bucket` costs as much as a 30-key dict, and a receiver's state,
written at every delivery, holds three of them. A dict display over the
fields, made once per class (as dataclasses makes `__init__`), gives orjson
the same document in under half the time (docs/benchmarks.md, "Figures
behind the code").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any

import orjson

Plain = Callable[[Any], dict[str, Any]]


def plain(cls: type, nested: Mapping[str, Callable[[Any], Any]] | None = None) -> Plain:
    """A function from an instance of `cls` to a dict of its fields, in field order.

    `nested` maps a field to what its value becomes (another `plain`, or an
    encoder of one's own); other values are kept as they are.
    """
    nested = dict(nested or {})
    names = [f.name for f in fields(cls) if f.init]
    unknown = set(nested) - set(names)
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {sorted(unknown)[0]!r}")
    items = [f"{name!r}: nested_{name}(obj.{name})" if name in nested else f"{name!r}: obj.{name}"
             for name in names]
    scope: dict[str, Any] = {f"nested_{name}": encode for name, encode in nested.items()}
    exec("def as_plain(obj):\n    return {" + ", ".join(items) + "}", scope)  # built from the field names
    return scope["as_plain"]  # type: ignore[no-any-return]


def json_to_keep(value: Any) -> bytes:
    """`orjson.dumps` for bytes that stay in memory: a copy sized to the JSON.

    orjson (3.12 on) returns its output in the buffer it wrote to: 4 KiB or more,
    however short the JSON. A config keeps its JSON while its state is cached, so
    uncopied buffers grew with the receivers (docs/benchmarks.md, "Figures behind the code").
    """
    return bytes(memoryview(orjson.dumps(value)))
