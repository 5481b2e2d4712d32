"""No test asserts a wall-clock bound.

A bound on elapsed time (``assert time.monotonic() - started < 0.9``) fails on a busy
machine without any change in behaviour, and passes a behaviour that is merely fast. Tests
assert order instead (marks recorded in a list, events that had or had not happened, a
call that was cancelled rather than waited out). Deadlines that only stop a wait
(``fail_after``, polling until a server answers) are timeouts, not assertions, and are
fine.

This scans every test module for ``assert`` statements that order-compare a clock
reading, an ``elapsed``/``duration`` value, or a difference against a number, and for
Hypothesis tests that keep its default per-example deadline.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
CLOCK_CALLS = frozenset({"monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
                         "process_time", "time", "current_time"})
TIME_WORDS = ("elapsed", "duration", "took")
ORDERING = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _reads_a_clock(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and _name(sub.func) in CLOCK_CALLS:
            return True
        if any(word in _name(sub).lower() for word in TIME_WORDS):
            return True
    return False


def _is_number(node: ast.AST) -> bool:
    """A literal bound such as ``0.9`` or ``3 * U``: numbers and names, at least one
    number."""
    parts = list(ast.walk(node))
    numbers = [p for p in parts if isinstance(p, ast.Constant)
               and isinstance(p.value, int | float) and not isinstance(p.value, bool)]
    allowed = (ast.Constant, ast.Name, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop,
               ast.Load)
    return bool(numbers) and all(isinstance(p, allowed) for p in parts)


def _is_difference(node: ast.AST) -> bool:
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub)


def _bounded_pairs(compare: ast.Compare) -> list[tuple[ast.AST, ast.AST]]:
    sides = [compare.left, *compare.comparators]
    return [(a, b) for a, op, b in zip(sides[:-1], compare.ops, sides[1:], strict=True)
            if isinstance(op, ORDERING)]


def _bounds_a_measurement(a: ast.AST, b: ast.AST) -> bool:
    """``a < b`` (or ``<=``, ``>``, ``>=``) puts a bound on a clock reading, or on a
    difference (of two readings, presumably) against a number."""
    if _reads_a_clock(a) or _reads_a_clock(b):
        return True
    return (_is_difference(a) and _is_number(b)) or (_is_difference(b) and _is_number(a))


def wall_clock_asserts(source: str, filename: str = "<source>") -> list[str]:
    """``line N: <assert>`` for every assert that bounds a wall-clock measurement."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Assert) and any(
            _bounds_a_measurement(a, b)
            for compare in ast.walk(node.test) if isinstance(compare, ast.Compare)
            for a, b in _bounded_pairs(compare)
        ):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def _decorator_name(node: ast.expr) -> str:
    return _name(node.func) if isinstance(node, ast.Call) else _name(node)


def hypothesis_deadlines(source: str, filename: str = "<source>") -> list[str]:
    """``line N: <test>`` for every ``@given`` test without ``@settings(deadline=None)``."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        names = [_decorator_name(d) for d in node.decorator_list]
        if "given" not in names:
            continue
        no_deadline = any(
            isinstance(d, ast.Call) and _decorator_name(d) == "settings"
            and any(k.arg == "deadline" and isinstance(k.value, ast.Constant)
                    and k.value.value is None for k in d.keywords)
            for d in node.decorator_list)
        if not no_deadline:
            found.append(f"line {node.lineno}: {node.name} keeps Hypothesis's deadline")
    return found


def _test_modules() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("path", _test_modules(), ids=lambda p: str(p.relative_to(TESTS)))
def test_no_assert_bounds_wall_clock_time(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    assert wall_clock_asserts(source, str(path)) + hypothesis_deadlines(source, str(path)) == []


@pytest.mark.parametrize("source", [
    "assert time.monotonic() - started < 0.9",
    "assert time.perf_counter() - t0 <= 2",
    "assert anyio.current_time() - start > 1.5",
    "assert elapsed < 3 * U",
    "assert 0.5 < run.duration",
    "assert log['A2'][0] - log['A1'][1] < 3 * U",
    "assert ok and stop - start < 0.1",
])
def test_the_scan_finds_wall_clock_bounds(source: str) -> None:
    assert wall_clock_asserts(source) == [f"line 1: {ast.unparse(ast.parse(source))}"]


@pytest.mark.parametrize("source", [
    "assert marks.index('A1 ended') < marks.index('A2 started')",
    "assert log['A2'][0] >= log['B1'][1]",
    "assert offsets['A'] < offsets['B1']",
    "assert low - 1e-9 <= p <= high + 1e-9",
    "assert 3 <= len(found) <= 5",
    "assert model.outcomes == ['cancelled', 'answered']",
    "deadline = time.monotonic() + 40\nwhile time.monotonic() < deadline:\n    pass",
])
def test_the_scan_leaves_order_and_value_checks_alone(source: str) -> None:
    assert wall_clock_asserts(source) == []


def test_the_scan_finds_hypothesis_tests_with_a_deadline() -> None:
    kept = "@given(x=st.integers())\ndef test_x(x):\n    pass\n"
    lifted = "@settings(deadline=None)\n" + kept
    assert hypothesis_deadlines(kept) == ["line 2: test_x keeps Hypothesis's deadline"]
    assert hypothesis_deadlines(lifted) == []
