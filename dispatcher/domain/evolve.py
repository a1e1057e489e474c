"""`dataclasses.replace` for the slotted, frozen records that change on every delivery.

`replace` walks the class's fields in Python on every call and then runs the
generated `__init__`; a receiver's state has 30 fields and changes several
times per delivery, which made `replace` the actor's largest single cost.
`evolve` copies the slots in a function generated once per class (as
dataclasses generates `__init__`) and then sets the changed fields.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, TypeVar

T = TypeVar("T")

_COPIERS: dict[type, Callable[[Any, dict[str, Any]], Any]] = {}


def evolve(obj: T, **changes: Any) -> T:
    """A copy of `obj` with `changes`, like `dataclasses.replace` (no `__post_init__` runs)."""
    cls = type(obj)
    copier = _COPIERS.get(cls)
    if copier is None:
        copier = _COPIERS[cls] = _copier(cls)
    return copier(obj, changes)  # type: ignore[no-any-return]


def _copier(cls: type) -> Callable[[Any, dict[str, Any]], Any]:
    if not hasattr(cls, "__slots__") or hasattr(cls, "__post_init__"):
        raise TypeError(f"evolve needs a slotted dataclass without __post_init__, not {cls.__name__}")
    names = [f.name for f in fields(cls) if f.init]
    body = [
        "def copy(obj, changes):",
        "    new = make(cls)",
        *(f"    put(new, {name!r}, obj.{name})" for name in names),
        "    for name, value in changes.items():",
        "        if name not in known:",
        "            raise TypeError(f'{cls.__name__} has no field {name!r}')",
        "        put(new, name, value)",
        "    return new",
    ]
    scope: dict[str, Any] = {"make": object.__new__, "put": object.__setattr__, "cls": cls,
                             "known": frozenset(names)}
    exec("\n".join(body), scope)  # the code above, built from the class's own field names
    return scope["copy"]  # type: ignore[no-any-return]
