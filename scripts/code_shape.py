"""Two measures of the code's shape, read from its syntax tree (nothing is imported or run).

``python scripts/code_shape.py longest [N]``
    The N longest functions (default 10) in fp8bench/, workloads/, kernels/ and dashboard/, in lines, longest
    first. ``tests/test_function_length.py`` holds every function but argparse set-up to 60 lines.
``python scripts/code_shape.py any [--list]``
    How many parameters and return values in those folders are annotated exactly ``Any`` (an untyped boundary),
    and with ``--list`` where each one is.
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("fp8bench", "workloads", "kernels", "dashboard")


def functions() -> Iterator[tuple[Path, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method of the product's code, with the file it is in."""
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    yield path.relative_to(ROOT), node


def longest(n: int) -> list[str]:
    rows = [(f.end_lineno - f.lineno + 1, f"{path}:{f.lineno} {f.name}") for path, f in functions()
            if f.end_lineno is not None]
    return [f"{lines} {where}" for lines, where in sorted(rows, reverse=True)[:n]]


def any_annotations() -> list[str]:
    def is_any(annotation: ast.expr | None) -> bool:
        return isinstance(annotation, ast.Name) and annotation.id == "Any"

    found = []
    for path, f in functions():
        params = f.args.posonlyargs + f.args.args + f.args.kwonlyargs
        found += [f"{path}:{f.lineno} {f.name}({a.arg})" for a in params if is_any(a.annotation)]
        if is_any(f.returns):
            found.append(f"{path}:{f.lineno} {f.name} -> Any")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="measure", required=True)
    sub.add_parser("longest").add_argument("n", nargs="?", type=int, default=10)
    sub.add_parser("any").add_argument("--list", action="store_true")
    args = parser.parse_args()
    if args.measure == "longest":
        print("\n".join(longest(args.n)))
    else:
        found = any_annotations()
        print(len(found))
        if args.list:
            print("\n".join(found))


if __name__ == "__main__":
    main()
