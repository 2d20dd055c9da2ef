"""Small functions: none over 80 lines in caption_debias/ or cli/, the demo's linear script aside."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 80
EXEMPT = ROOT / "caption_debias" / "demo"  # a linear script, read top to bottom


def long_functions(paths, root: Path = ROOT) -> list[str]:
    """'path:line name (N lines)' for every function or method over MAX_LINES, decorators included."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                lines = node.end_lineno - first + 1
                if lines > MAX_LINES:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_over_80_lines():
    paths = [
        p for d in ("caption_debias", "cli") for p in sorted((ROOT / d).rglob("*.py")) if not p.is_relative_to(EXEMPT)
    ]
    assert len(paths) > 100  # the scan sees the package
    assert long_functions(paths) == []


def test_the_rule_sees_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "long.py").write_text(f"def too_long():\n{body}\n")
    (tmp_path / "short.py").write_text("def fine():\n    return 1\n")
    assert long_functions([tmp_path / "long.py", tmp_path / "short.py"], tmp_path) == [
        f"long.py:1 too_long ({MAX_LINES + 1} lines)"
    ]
