"""Module layering: no import cycles inside the project, and the dashboard never reaches into the CLI.

Imports are read from the source (module level and inside functions alike: a lazy import still ties two modules
together), with the installed package names (``workloads/`` is ``fp8bench.workloads`` and so on).
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"fp8bench": ROOT / "fp8bench", "fp8bench.workloads": ROOT / "workloads",
            "fp8bench.kernels": ROOT / "kernels", "fp8bench.dashboard": ROOT / "dashboard"}


def _modules() -> dict[str, Path]:
    out = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = [p for p in path.relative_to(folder).with_suffix("").parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """Project modules that ``name`` imports anywhere in its source."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [base, *(f"{base}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        found |= {t for t in targets if t in known and t != name}
    return found


def test_project_modules_import_each_other_without_cycles() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, set(modules)) for name, path in modules.items()}
    # A package imports its own submodules by design (fp8bench.kernels -> fp8bench.kernels.x); only module-to-module
    # edges between siblings or across packages can form a real cycle.
    graph = {n: {d for d in deps if not d.startswith(n + ".")} for n, deps in graph.items()}
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError naming the cycle


def test_cycle_detection_sees_a_cycle() -> None:
    try:
        graphlib.TopologicalSorter({"a": {"b"}, "b": {"a"}}).prepare()
    except graphlib.CycleError:
        return
    raise AssertionError("graphlib did not report a two-module cycle")


def test_dashboard_reads_through_the_engine_not_the_command_line() -> None:
    modules = _modules()
    for name, path in modules.items():
        if name.startswith("fp8bench.dashboard"):
            bad = {m for m in _imports(name, path, set(modules)) if m.startswith(("fp8bench.commands", "fp8bench.cli"))}
            assert not bad, f"{name} imports {sorted(bad)}: the dashboard reads through fp8bench's engine modules"
