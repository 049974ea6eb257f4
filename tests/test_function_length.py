"""No function in the product's code is longer than a screen: a long one is split into named steps (a verb into
parse -> compute -> render, a measurement into its phases). The one exception is a verb's argparse set-up,
``add_arguments``, a flat list of flags whose length is its number of options."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("fp8bench", "workloads", "kernels", "dashboard")
MAX_LINES = 60
EXEMPT = {"add_arguments"}  # argparse set-up: one statement per flag


def function_lengths(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """``(lines, "path:line name")`` of every function and method in ``path`` (named relative to ``root``), nested
    ones included; a function's lines run from its ``def`` to its last line, its decorators not counted."""
    tree = ast.parse(path.read_text(), str(path))
    return [(node.end_lineno - node.lineno + 1, f"{path.relative_to(root)}:{node.lineno} {node.name}")
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None
            and node.name not in EXEMPT]


def test_the_counter_counts_a_long_function(tmp_path):
    long_one = tmp_path / "long.py"
    long_one.write_text("@staticmethod\ndef f():\n" + "    x = 1\n" * 70
                        + "\n\ndef add_arguments(p):\n" + "    p.x = 1\n" * 70)
    assert function_lengths(long_one, tmp_path) == [(71, "long.py:2 f")]


def test_no_function_is_over_sixty_lines():
    files = sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))
    assert len(files) > 50, f"expected the product's modules under {FOLDERS}, found {len(files)}"
    too_long = sorted((n, where) for path in files for n, where in function_lengths(path) if n > MAX_LINES)
    assert not too_long, (f"functions over {MAX_LINES} lines (split them into named steps): "
                          + "; ".join(f"{where} ({n} lines)" for n, where in too_long))
