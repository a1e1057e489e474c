"""A json-e template's expressions checked at create: each one parses, and nests no deeper than
MAX_EXPRESSION_DEPTH (interpreting an expression recurses as deep as its tree).

Parsed with `jsone_bounded`'s parser and cache, so a template that passes here parses the same way
at every delivery.
"""

from __future__ import annotations

from typing import Any

import jsone.shared

from .jsone_bounded import INTERPOLATION_RE, parse, parse_interpolation

MAX_EXPRESSION_DEPTH = 64
_EXPRESSION_OPERATORS = ("$eval", "$if")


def syntax_errors(template: Any, path: str) -> list[tuple[str, str]]:
    """(path, error) for each expression of `template` that does not parse, or nests too deeply."""
    found: list[tuple[str, str]] = []
    stack: list[tuple[Any, str]] = [(template, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, str):
            _check_interpolations(node, where, found)
        elif isinstance(node, list):
            stack += [(item, f"{where}[{i}]") for i, item in enumerate(node)]
        elif isinstance(node, dict):
            for key, value in node.items():
                _check_key(node, key, value, f"{where}.{key}", found)
                stack.append((value, f"{where}.{key}"))
    return found


def _check_key(node: dict[str, Any], key: str, value: Any, where: str, found: list[tuple[str, str]]) -> None:
    """Expressions a key holds: `$eval`/`$if` values, `each(..)` of `$find`, `by(..)`, conditions."""
    expressions: list[str] = []
    holds_one = key in _EXPRESSION_OPERATORS or (key.startswith("by(") and "$sort" in node) or (
        key.startswith("each(") and "$find" in node
    )
    if holds_one and isinstance(value, str):
        expressions.append(value)
    elif key in ("$match", "$switch") and isinstance(value, dict):
        expressions += [condition for condition in value if condition != "$default"]
    else:
        _check_interpolations(key, where, found)
    for source in expressions:
        error = _syntax_error(lambda s=source: parse(s))
        if error:
            found.append((where, error))


def _check_interpolations(text: str, where: str, found: list[tuple[str, str]]) -> None:
    match = INTERPOLATION_RE.search(text)
    while match:
        rest = text[match.end():]
        if match.group() == "$${":
            text = rest
        else:
            error = _syntax_error(lambda r=rest: parse_interpolation(r))
            if error:
                found.append((where, error))
                return
            text = rest[parse_interpolation(rest)[1] + 1:]
        match = INTERPOLATION_RE.search(text)


def _syntax_error(parse: Any) -> str:
    try:
        tree = parse()
    except jsone.shared.JSONTemplateError as exc:
        return str(exc)[:300]
    except RecursionError:
        return "the expression nests too deeply"
    root = tree[0] if isinstance(tree, tuple) else tree
    if _ast_depth(root) > MAX_EXPRESSION_DEPTH:
        return f"the expression nests deeper than {MAX_EXPRESSION_DEPTH} levels"
    return ""


def _ast_depth(root: Any) -> int:
    """How deep an expression's tree goes (interpreting it recurses that deep)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if node is None or not hasattr(node, "token"):
            continue
        deepest = max(deepest, depth)
        children = [getattr(node, name, None) for name in ("left", "right", "expr", "arr", "name")]
        children += list(getattr(node, "args", None) or ()) + list(getattr(node, "list", None) or ())
        obj = getattr(node, "obj", None)
        children += list(obj.values()) if isinstance(obj, dict) else []
        stack += [(child, depth + 1) for child in children if child is not None]
    return deepest
