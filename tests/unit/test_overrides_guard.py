"""The guard over `dispatcher/overrides`: every private name it relies on holds in the installed packages.

Each check is also shown failing: against a patched copy of the class it
inspects, the guard names the attribute that moved or changed.
"""

from __future__ import annotations

import importlib.util
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from mode import Service

from dispatcher.overrides import manifest
from dispatcher.overrides.manifest import RELIANCES, Reliance, problems, resolve, version_problems

ROOT = Path(__file__).parents[2]


def test_every_private_name_the_overrides_use_holds() -> None:
    assert problems() == []


def test_installed_versions_are_the_checked_ones_and_pinned() -> None:
    assert version_problems() == []
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = dict(re.match(r"([a-z-]+)==([\d.]+)$", d).groups() for d in declared if "==" in d)  # type: ignore[union-attr]
    assert {name: pins.get(name) for name in manifest.TESTED_WITH} == manifest.TESTED_WITH


def test_a_different_installed_version_is_named() -> None:
    found = version_problems({**manifest.TESTED_WITH, "aiokafka": "0.0.1"})
    assert len(found) == 1 and "aiokafka" in found[0] and "0.0.1" in found[0]


def _copy_of(cls: type, replace: dict[str, Any]) -> type:
    """A stand-alone class with `cls`'s members (bases included) and `replace` applied (None: removed).

    It has no source file, so an instance attribute is found only if a class attribute says so.
    """
    members: dict[str, Any] = {}
    for klass in reversed(cls.__mro__[:-1]):
        members.update(vars(klass))
    members.update(replace)
    members = {k: v for k, v in members.items() if v is not None and k not in ("__dict__", "__weakref__")}
    members["__module__"] = "patched_copy"
    return type(cls.__name__, (), members)


def _lookup_with(owner: str, patched: type) -> Any:
    def lookup(name: str) -> Any:
        return patched if name == owner else resolve(name)
    return lookup


@pytest.mark.parametrize("reliance", RELIANCES, ids=lambda r: f"{r.owner.rsplit(':')[-1]}.{r.name}")
def test_removing_any_listed_name_is_named(reliance: Reliance) -> None:
    cls = resolve(reliance.owner)
    if not isinstance(cls, type) or cls.__module__.startswith(("rocksdict", "builtins")):
        pytest.skip("a compiled class cannot be copied in Python; its names are still checked above")
    patched = _copy_of(cls, {reliance.name: None})
    found = problems([reliance], _lookup_with(reliance.owner, patched))
    assert len(found) == 1
    assert f"{reliance.owner}.{reliance.name}" in found[0] and "no longer exists" in found[0]


def test_a_changed_signature_is_named() -> None:
    owner = manifest.FAUST_CONSUMER

    def _add_gap(self: Any, tp: Any, start: int, end: int) -> None: ...

    patched = _copy_of(resolve(owner), {"_add_gap": _add_gap})
    found = problems(RELIANCES, _lookup_with(owner, patched))
    assert [p for p in found if "_add_gap" in p] == [
        f"{owner}._add_gap (used by dispatcher.overrides.consumer): signature changed from "
        "('tp', 'offset_from', 'offset_to') to ('tp', 'start', 'end')"
    ]


def test_a_changed_copied_function_is_named() -> None:
    owner = manifest.FAUST_CONSUMER

    async def _drain_messages(self: Any, fetcher: Any) -> None:
        return None  # the same name and parameters, another body

    patched = _copy_of(resolve(owner), {"_drain_messages": _drain_messages})
    found = problems(RELIANCES, _lookup_with(owner, patched))
    assert len([p for p in found if "_drain_messages" in p and "its code changed" in p]) == 1


def test_an_instance_attribute_is_looked_for_in_the_class_source(tmp_path: Path) -> None:
    """`_records` is set in aiokafka's Fetcher.__init__: found there, and missed once renamed."""
    kept = _load(tmp_path, "kept_fetcher",
                 "class Fetcher:\n    def __init__(self):\n        self._records = {}\n")
    renamed = _load(tmp_path, "renamed_fetcher",
                    "class Fetcher:\n    def __init__(self):\n        self._records_by_tp = {}\n")
    reliance = next(r for r in RELIANCES if r.name == "_records")
    assert problems([reliance], lambda _: kept) == []
    assert problems([reliance], lambda _: renamed) == [
        "aiokafka.consumer.fetcher:Fetcher._records (used by dispatcher.overrides.fetcher): "
        "attribute no longer exists"
    ]


def test_a_class_that_is_gone_is_named() -> None:
    gone = Reliance("faust.transport.drivers.aiokafka:NoSuchConsumer", "_acked", "consumer")
    assert problems([gone]) == [
        "faust.transport.drivers.aiokafka:NoSuchConsumer._acked (used by dispatcher.overrides.consumer): "
        "its class is gone (AttributeError: module 'faust.transport.drivers.aiokafka' has no attribute "
        "'NoSuchConsumer')"
    ]


def test_no_module_outside_overrides_reaches_into_a_framework() -> None:
    """Private names of faust, aiokafka, mode or rocksdict are used only in dispatcher/overrides."""
    names = {r.name for r in RELIANCES if r.name.startswith("_")}
    offenders = []
    for path in (ROOT / "dispatcher").rglob("*.py"):
        if "overrides" in path.parts:
            continue
        text = path.read_text()
        used = [n for n in names if re.search(rf"(?<!self)\.{n}\b", text)]  # our own `self._x` is ours
        offenders += [f"{path.relative_to(ROOT)}: {n}" for n in used]
    assert offenders == []


def _load(tmp_path: Path, name: str, source: str) -> type:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    cls: type = module.Fetcher
    return cls


def test_a_changed_service_task_the_flush_relies_on_is_named() -> None:
    """The buffer's `_handle_pending` (a mode Service.task) must still send through `_send_pending`."""
    owner = manifest.FAUST_BUFFER

    @Service.task
    async def _handle_pending(self: Any) -> None:
        while not self.should_stop:
            await self.app.producer.send(await self.pending.get())  # the send inlined: `_sending` is blind

    patched = _copy_of(resolve(owner), {"_handle_pending": _handle_pending})
    found = problems(RELIANCES, _lookup_with(owner, patched))
    assert len([p for p in found if "_handle_pending" in p and "its code changed" in p]) == 1
