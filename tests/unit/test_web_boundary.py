"""The web layer reaches the engine through `web.engine.Engine` only.

Every module under web/ may import from the engine's package only its pure
domain types; an import inside a function (the way round an import cycle)
fails too. `dispatcher/web_port.py` implements the interface, and mypy is the
judge that it does.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from dispatcher.web_port import DispatcherPort
from web.engine import Engine

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "web"
ALLOWED = ("dispatcher.domain",)  # pure: no faust, aiohttp or rocksdict, no clock


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    """The absolute names an import statement in `module` brings in."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level == 0:
        base = node.module or ""
    else:
        package = module.split(".") if is_package else module.split(".")[:-1]
        anchor = package[: len(package) - node.level + 1]
        base = ".".join([*anchor, node.module] if node.module else anchor)
    return [f"{base}.{alias.name}" if alias.name != "*" else base for alias in node.names]


def allowed(name: str, module: str) -> bool:
    if not (name == "dispatcher" or name.startswith("dispatcher.")):
        return True
    return any(name == prefix or name.startswith(prefix + ".") for prefix in ALLOWED)


def violations(module: str, source: str, is_package: bool = False) -> list[str]:
    """`module: import ...` for each import of the engine's insides, or inside a function."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import | ast.ImportFrom):
                    found.append(f"{module}:{inner.lineno}: import inside a function: {ast.unparse(inner)}")
        if isinstance(node, ast.Import | ast.ImportFrom):
            for name in imported(node, module, is_package):
                if not allowed(name, module):
                    found.append(f"{module}:{node.lineno}: imports {name} ({ast.unparse(node)})")
    return found


def web_modules() -> list[Path]:
    return sorted(WEB.rglob("*.py"))


def test_the_web_modules_are_found() -> None:
    names = {module_name(path) for path in web_modules()}
    assert {"web", "web.app", "web.api", "web.engine", "web.routing"} <= names


@pytest.mark.parametrize("path", web_modules(), ids=lambda path: module_name(path))
def test_a_web_module_imports_no_engine_part(path: Path) -> None:
    found = violations(module_name(path), path.read_text(), path.name == "__init__.py")
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from dispatcher.domain.ids import new_id\nimport dispatcher.domain.errors", []),
        ("from .engine import ENGINE\nfrom . import api", []),
        ("from dispatcher.worker import Dispatcher", ["imports dispatcher.worker.Dispatcher"]),
        ("import dispatcher.settings", ["imports dispatcher.settings"]),
        ("from dispatcher import worker", ["imports dispatcher.worker"]),
        ("from ..dispatcher.store import x", ["imports dispatcher.store.x"]),
        (
            "if TYPE_CHECKING:\n    from dispatcher.worker import Dispatcher",
            ["imports dispatcher.worker.Dispatcher"],
        ),
        ("def f():\n    from .app import ENGINE", ["import inside a function: from .app import ENGINE"]),
        ("async def f():\n    import json", ["import inside a function: import json"]),
    ],
)
def test_the_check_names_the_module_and_the_import(source: str, expected: list[str]) -> None:
    found = violations("web.views", source)
    assert len(found) == len(expected), found
    for line, what in zip(found, expected, strict=True):
        assert line.startswith("web.views:") and what in line


def engine_members() -> dict[str, object]:
    return {name: value for name, value in vars(Engine).items() if not name.startswith("_")}


def test_the_port_has_every_member_of_the_engine_of_the_same_kind() -> None:
    """A cheap twin of the mypy check below, for a run without mypy."""
    assert engine_members(), "the protocol declares nothing?"
    for name, declared in engine_members().items():
        implemented = inspect.getattr_static(DispatcherPort, name, None)
        assert implemented is not None, f"DispatcherPort lacks {name}"
        assert isinstance(implemented, property) == isinstance(declared, property), name
        assert inspect.iscoroutinefunction(implemented) == inspect.iscoroutinefunction(declared), name


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed")
def test_mypy_passes_on_the_web_layer_and_the_port() -> None:
    """Including `web_port._conforms`, where a `DispatcherPort` is returned as an `Engine`.

    Imported modules' own errors are silenced: this judges web/ and the port, not the engine.
    """
    command = [
        sys.executable, "-m", "mypy", "--ignore-missing-imports", "--python-version", "3.11",
        "--follow-imports", "silent", "web", "dispatcher/web_port.py",
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
