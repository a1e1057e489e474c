"""json-e with a work budget: a template's evaluation ends within bounded steps and memory.

json-e always terminates, but not soon: a `$reduce` that doubles a string or
an array each step, `[acc, acc]` (a shared structure whose JSON doubles at
no cost, until something serialises it), nested `$map` (n^k), `range(0,
1e9)` or `9 ** (9 ** 9)` can each stall a worker's event loop or exhaust its
memory. A static check cannot tell those from useful templates (the payload
decides the sizes), so the evaluation carries a budget:

- steps: every template node rendered and every expression node interpreted
  costs one; every loop of json-e's operators renders or interprets once per
  turn, so the steps bound the time;
- sizes: each value a step builds (a string, an array, an object, a number)
  is measured as its JSON would be, shared parts counted each time they
  occur (memoised by identity, so measuring costs what building cost); no
  value past `max_value` characters or `MAX_VALUE_DEPTH` levels, nor an
  integer past `MAX_INT_BITS`, is ever kept, and `+`, `*`, `**` and the
  `range`/`join` builtins are refused before they would build one;
- the work that is not a step, all told, is bounded by `max_built` units:
  an entry of a new array or object is one, sixteen characters of a new
  string are one; `in`, `==`, `<` and the like are charged what they compare
  before they compare it, and a builtin what its arguments hold (a
  membership test over a long array inside a loop over it would otherwise
  be n^2 in a few steps).

Why a budget rather than a timeout: the evaluation is synchronous Python, so
nothing can interrupt it from outside but another process; counting inside
json-e's own hooks is deterministic (a template fails the same way at every
attempt, so dead-lettering it at once is right), and with each expression
parsed once the bounded evaluator still runs faster than json-e alone
(docs/benchmarks.md, "Transforms").

The hooks go into a private copy of json-e's `render` module (loaded from the
installed file), so the process's own `jsone` is untouched. The names relied
on are checked against the installed version by
tests/unit/test_transform.py (json-e is pinned in pyproject.toml).
Everything raised inside is turned into `TemplateFailed` by `render`.
"""

from __future__ import annotations

import importlib.util
import re
from functools import lru_cache
from typing import Any

import jsone
import jsone.builtins
import jsone.interpreter
import jsone.parser
import jsone.shared

from .jsone_budget import (
    MAX_BUILT,
    MAX_INT_BITS,
    MAX_STEPS,
    MAX_VALUE,
    Budget,
    BudgetSpent,
    LimitExceeded,
    TemplateFailed,
)

MAX_RANGE = 10_000
BUDGET_KEY = "$budget"  # a context key no expression can name (identifiers have no `$`)


def _load_render() -> Any:
    """A private instance of `jsone.render`: its globals can be replaced without touching `jsone`'s."""
    origin = importlib.util.find_spec("jsone.render")
    assert origin is not None and origin.origin is not None and origin.loader is not None
    spec = importlib.util.spec_from_file_location("jsone._bounded_render", origin.origin)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_render = _load_render()
_Interpreter: Any = jsone.interpreter.Interpreter
_AST_BINOP: Any = jsone.parser.BinOp
_ASTNODE: Any = jsone.parser.Primitive
_TOKENIZER: Any = _render.tokenizer
_ORIGINAL_RENDER_VALUE = _render.renderValue
_DELETE = jsone.shared.DeleteMarker


def _budget(context: dict[str, Any]) -> Budget:
    budget = context[BUDGET_KEY]
    assert isinstance(budget, Budget)
    return budget


class _Value(_ASTNODE):  # type: ignore[misc]
    """An operand already evaluated (so json-e's own operator code runs on it, once)."""

    def __init__(self, value: Any) -> None:
        super().__init__(None)
        self.value = value


_GROWING = ("+", "*", "**")
_COMPARING = ("in", "==", "!=", "<", ">", "<=", ">=")
_ALLOCATING = ("List", "Object", "FunctionCall", "ValueAccess")


class BoundedInterpreter(_Interpreter):  # type: ignore[misc]
    """json-e's interpreter with a step per node, and sizes checked where a node builds a value."""

    def visit(self, node: Any) -> Any:
        if type(node) is _Value:  # an operand evaluated (and counted) already
            return node.value
        budget = _budget(self.context)
        budget.step()
        value = super().visit(node)
        if type(node).__name__ in _ALLOCATING:
            budget.check(value)
        return value

    def visit__Value(self, node: _Value) -> Any:
        return node.value

    def visit_BinOp(self, node: Any) -> Any:
        kind = node.token.kind
        if kind not in _GROWING and kind not in _COMPARING:
            return super().visit_BinOp(node)
        left, right = self.visit(node.left), self.visit(node.right)
        budget = _budget(self.context)
        if kind in _COMPARING:
            _charge_comparison(kind, left, right, budget)
        else:
            _refuse_growth(kind, left, right, budget)
        value = super().visit_BinOp(_AST_BINOP(node.token, _Value(left), _Value(right)))
        return budget.check(value)


def _charge_comparison(kind: str, left: Any, right: Any, budget: Budget) -> None:
    """`in`, `==`, `<` and the like cost what they look through: charged before they look."""
    if kind == "in":
        if isinstance(right, list):
            budget.charge(len(right) + 1)
        elif isinstance(right, str):
            budget.charge(len(right) // 16 + 1)
    elif isinstance(left, (list, dict, str)) and isinstance(right, (list, dict, str)):
        budget.charge(min(budget.size(left), budget.size(right)) // 16 + 1)


def _refuse_growth(kind: str, left: Any, right: Any, budget: Budget) -> None:
    """Refuse `+`, `*` or `**` before it builds a string or an integer out of bounds."""
    strings = isinstance(left, str) and isinstance(right, str)
    if kind == "+" and strings and len(left) + len(right) > budget.max_value:
        raise LimitExceeded(f"a string would be longer than {budget.max_value} characters")
    if not (_is_int(left) and _is_int(right)):
        return
    if kind == "*" and left.bit_length() + right.bit_length() > MAX_INT_BITS + 1:
        raise LimitExceeded(f"a number would be larger than {MAX_INT_BITS} bits")
    # json-e computes `a ** b` as b ** a
    if kind == "**" and abs(right) > 1 and left > 0 and left * right.bit_length() > MAX_INT_BITS + 1:
        raise LimitExceeded(f"a number would be larger than {MAX_INT_BITS} bits")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


MAX_EXPRESSION = 1024  # characters: json-e's tokenizer copies the rest of the text at every token


@lru_cache(maxsize=4096)
def _parse(source: str) -> Any:
    """An expression's syntax tree, parsed once per distinct expression (templates repeat them)."""
    if len(source) > MAX_EXPRESSION:
        raise LimitExceeded(f"an expression is longer than {MAX_EXPRESSION} characters")
    parser = jsone.parser.Parser(source, _TOKENIZER)
    tree = parser.parse()
    if parser.current_token is not None:
        raise _render.SyntaxError.unexpected(parser.current_token)
    return tree


def _parse_interpolation(text: str) -> tuple[Any, int]:
    """The tree of the expression at the start of `text` (after a `${`), and where its `}` is.

    Only the first MAX_EXPRESSION characters are read: that bounds the parse, and the cache's keys.
    """
    return _parse_expression_prefix(text[: MAX_EXPRESSION + 1])


@lru_cache(maxsize=4096)
def _parse_expression_prefix(source: str) -> tuple[Any, int]:
    parser = jsone.parser.Parser(source, _TOKENIZER)
    tree = parser.parse()
    if not parser.current_token:
        raise _render.SyntaxError(f"unterminated ${{..}} expression (or longer than {MAX_EXPRESSION})")
    if parser.current_token.kind != "}":
        raise _render.SyntaxError.unexpected(parser.current_token)
    return tree, parser.current_token.start


parse = _parse  # for jsone_syntax.py: the same parse and cache as evaluation
parse_interpolation = _parse_interpolation
INTERPOLATION_RE = _INTERPOLATION_RE = re.compile(r"\$?\${")


def _evaluate(source: str, context: dict[str, Any]) -> Any:
    return BoundedInterpreter(context).interpret(_parse(source))



def _interpolate(string: str, context: dict[str, Any]) -> str:
    """json-e's `interpolate`, counting what it builds before it builds it."""
    budget = _budget(context)
    match = _INTERPOLATION_RE.search(string)
    if not match:
        return string
    parts: list[str] = []
    length = 0
    while match:
        parts.append(string[: match.start()])
        if match.group() == "$${":
            parts.append("${")
            string = string[match.end():]
        else:
            string = string[match.end():]
            tree, offset = _parse_interpolation(string)
            value = BoundedInterpreter(context).interpret(tree)
            if isinstance(value, (list, dict)):
                why = f"interpolation of '{string[:offset]}' produced an array or object"
                raise _render.TemplateError(why)
            parts.append("" if value is None else jsone.shared.to_str(value))
            string = string[offset + 1:]
        length += len(parts[-1]) + len(parts[-2])
        budget.charge(len(parts[-1]))
        if length > budget.max_value:
            raise LimitExceeded(f"a string would be longer than {budget.max_value} characters")
        match = _INTERPOLATION_RE.search(string)
    parts.append(string)
    return "".join(parts)


def _render_value(template: Any, context: dict[str, Any]) -> Any:
    """json-e's `renderValue` with a step, and the size of what a container template built checked."""
    budget = _budget(context)
    budget.step()
    value = _ORIGINAL_RENDER_VALUE(template, context)
    if isinstance(template, (dict, list)):
        budget.check(value)
    return value


def _bounded_range(context: dict[str, Any], *args: Any) -> list[int]:
    if not 2 <= len(args) <= 3 or not all(_is_int(a) for a in args) or (len(args) == 3 and args[2] == 0):
        raise jsone.builtins.BuiltinError("invalid arguments to builtin: range")
    numbers = range(*args)
    if len(numbers) > MAX_RANGE:
        raise LimitExceeded(f"range() of more than {MAX_RANGE} numbers")
    _budget(context).charge(len(numbers))
    return list(numbers)


def _bounded_join(context: dict[str, Any], *args: Any) -> str:
    if len(args) != 2 or not isinstance(args[0], list) or not isinstance(args[1], (str, int, float)):
        raise jsone.builtins.BuiltinError("invalid arguments to builtin: join")
    items, separator = args
    total = sum(len(str(item)) for item in items) + len(str(separator)) * len(items)
    if total > _budget(context).max_value:
        raise LimitExceeded(f"join() would build more than {_budget(context).max_value} characters")
    _budget(context).charge(total)
    return str(separator).join(str(item) for item in items)


_bounded_range._jsone_builtin = True  # type: ignore[attr-defined]
_bounded_join._jsone_builtin = True  # type: ignore[attr-defined]

_render.Interpreter = BoundedInterpreter
_render.parse = _evaluate
_render.interpolate = _interpolate
_render.renderValue = _render_value

def _charged(builtin: Any) -> Any:
    """A builtin that first charges what its arguments hold (`number()` of a long string is O(n))."""

    def invoke(context: dict[str, Any], *args: Any) -> Any:
        _budget(context).charge(1 + sum(_cost(arg) for arg in args))
        return builtin(context, *args)

    invoke._jsone_builtin = True  # type: ignore[attr-defined]
    return invoke


def _cost(arg: Any) -> int:
    if isinstance(arg, str):
        return len(arg) // 16
    return len(arg) if isinstance(arg, (list, dict)) else 0


BUILTINS: dict[str, Any] = {
    name: _charged(builtin)
    for name, builtin in {**jsone.builtins.build(), "range": _bounded_range, "join": _bounded_join}.items()
}


def render(template: Any, context: dict[str, Any], budget: Budget | None = None) -> Any:
    """Render `template` over `context` (json-e's builtins added) within `budget`.

    Returns json-e's result (None when the template deletes itself); raises
    `TemplateFailed` with a one-line reason, whatever went wrong inside.
    """
    budget = budget if budget is not None else Budget()
    full = {**BUILTINS, **context, BUDGET_KEY: budget}
    try:
        value = _render_value(template, full)
        if value is not _DELETE and _render.containsFunctions(value):
            raise _render.TemplateError("evaluated template contained uncalled functions")
    except jsone.shared.JSONTemplateError as exc:
        raise TemplateFailed(str(exc)[:500], isinstance(exc, BudgetSpent)) from None
    except RecursionError:
        raise TemplateFailed("the template nests too deeply") from None
    except MemoryError:
        raise TemplateFailed("the template needs too much memory") from None
    except Exception as exc:  # noqa: BLE001 - a builtin's own error (math domain, overflow): the template's fault
        raise TemplateFailed(f"{type(exc).__name__}: {str(exc)[:300]}") from None
    return None if value is _DELETE else value


__all__ = ["BUILTINS", "MAX_BUILT", "MAX_STEPS", "MAX_VALUE", "Budget", "TemplateFailed", "parse",
           "parse_interpolation", "render"]
