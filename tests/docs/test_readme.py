"""The README's Python examples run as written."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)


def test_readme_has_python_examples() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # A module of its own, as a script would be: libraries that resolve a class's
    # annotations (LangGraph reading a TypedDict state) look its module up in sys.modules.
    module = types.ModuleType(f"readme_example_{index}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(BLOCKS[index], f"README.md example {index + 1}", "exec"), module.__dict__)
