"""Module layering: every module belongs to one layer, imports point down the layers only, there are no import
cycles, and the dashboard never reaches into the CLI.

Imports are read from the source (module level and inside functions alike: a lazy import still ties two modules
together), with the installed package names (``workloads/`` is ``fp8bench.workloads`` and so on). An import under
``if TYPE_CHECKING:`` names a type for the checker and runs nothing, so the direction rule skips it; the cycle rule
reads it too.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"fp8bench": ROOT / "fp8bench", "fp8bench.workloads": ROOT / "workloads",
            "fp8bench.kernels": ROOT / "kernels", "fp8bench.dashboard": ROOT / "dashboard"}

# The layers, lowest first: a module may import its own layer or a lower one, never a higher one. Layers that share
# a rank (the command line, the dashboard and the checks of fp8bench itself) may not import each other. ``X.*`` is the package X and everything in
# it; a plain name is that module alone. docs/development.md explains each layer and why it sits where it does.
LAYERS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (0, "core", ("fp8bench", "fp8bench.core.*", "fp8bench.exit_codes", "fp8bench.paths")),
    (1, "results", ("fp8bench.results.*",)),
    (2, "numerics", ("fp8bench.numerics.*",)),
    (3, "energy", ("fp8bench.energy.*",)),
    (4, "hardware", ("fp8bench.hardware.*",)),
    (5, "workloads", ("fp8bench.workloads.*",)),
    (6, "kernels", ("fp8bench.kernels.*",)),
    (7, "measure", ("fp8bench.measure.*",)),
    (8, "analysis", ("fp8bench.analysis.*",)),
    (9, "orchestration", ("fp8bench.orchestration.*",)),
    (10, "commands", ("fp8bench.commands.*", "fp8bench.cli", "fp8bench.__main__", "fp8bench.pytest_plugin")),
    (10, "dashboard", ("fp8bench.dashboard.*",)),
    (10, "verify", ("fp8bench.verify.*",)),
)


def _modules() -> dict[str, Path]:
    out = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = [p for p in path.relative_to(folder).with_suffix("").parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of the nodes under an ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``) block."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
                (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
                or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")):
            skipped |= {id(inner) for statement in node.body for inner in ast.walk(statement)}
    return skipped


def _import_lines(name: str, path: Path, known: set[str], types_too: bool = True) -> dict[str, int]:
    """Project modules that ``name`` imports anywhere in its source, each with the line of its first import."""
    found: dict[str, int] = {}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    skipped = set() if types_too else _type_checking_only(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        targets: list[str] = []
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [base, *(f"{base}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        for target in targets:
            if target in known and target != name:
                found.setdefault(target, node.lineno)
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    return set(_import_lines(name, path, known))


def _matches(module: str, entry: str) -> bool:
    if entry.endswith(".*"):
        package = entry[:-2]
        return module == package or module.startswith(package + ".")
    return module == entry


def layers_of(module: str) -> list[tuple[int, str]]:
    """Every layer whose table entry names ``module`` (exactly one, when the table is right)."""
    return [(rank, layer) for rank, layer, entries in LAYERS if any(_matches(module, e) for e in entries)]


def upward_imports(modules: dict[str, Path]) -> list[str]:
    """Each import of a higher layer (or of a layer of the same rank), described for a reader."""
    problems = []
    for name, path in sorted(modules.items()):
        if len(layers_of(name)) != 1:
            continue  # reported by test_every_module_belongs_to_exactly_one_layer
        ((rank, layer),) = layers_of(name)
        for target, line in sorted(_import_lines(name, path, set(modules), types_too=False).items()):
            if len(layers_of(target)) != 1:
                continue
            ((target_rank, target_layer),) = layers_of(target)
            if target_rank > rank or (target_rank == rank and target_layer != layer):
                shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                problems.append(f"{name} ({layer}) imports {target} ({target_layer}) at {shown}:{line}")
    return problems


def test_every_module_belongs_to_exactly_one_layer() -> None:
    modules = _modules()
    unassigned = sorted(m for m in modules if not layers_of(m))
    assert not unassigned, (f"modules without a layer: {unassigned}; add each to LAYERS in tests/test_layering.py "
                            "and to the tree in docs/development.md")
    ambiguous = {m: [layer for _, layer in layers_of(m)] for m in modules if len(layers_of(m)) > 1}
    assert not ambiguous, f"modules named by more than one layer: {ambiguous}"


def test_imports_point_down_the_layers() -> None:
    problems = upward_imports(_modules())
    order = " -> ".join(" | ".join(layer for r, layer, _ in LAYERS if r == rank)
                        for rank in sorted({r for r, _, _ in LAYERS}))
    assert not problems, f"imports of a higher layer (order: {order}):\n  " + "\n  ".join(problems)


def test_the_direction_check_sees_an_upward_import_and_skips_type_only_ones(tmp_path: Path) -> None:
    records, runner, report = tmp_path / "records.py", tmp_path / "runner.py", tmp_path / "report.py"
    records.write_text("import os\n\n\ndef later():\n    from fp8bench.measure.runner import run_cases\n")
    runner.write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from fp8bench.analysis import report\n")
    report.write_text("")
    modules = {"fp8bench.core.records": records, "fp8bench.measure.runner": runner,
               "fp8bench.analysis.report": report}
    assert upward_imports(modules) == [
        f"fp8bench.core.records (core) imports fp8bench.measure.runner (measure) at {records}:5"]


def test_project_modules_import_each_other_without_cycles() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, set(modules)) for name, path in modules.items()}
    # A package imports its own submodules by design (fp8bench.kernels -> fp8bench.kernels.x); only module-to-module
    # edges between siblings or across packages can form a real cycle.
    graph = {n: {d for d in deps if not d.startswith(n + ".")} for n, deps in graph.items()}
    assert import_cycle(graph) is None, f"import cycle: {import_cycle(graph)}"


def import_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (module -> the modules it imports), or ``None`` when it has none."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return None


def test_cycle_detection_sees_a_cycle() -> None:
    assert import_cycle({"a": {"b"}, "b": {"a"}}) in (["a", "b", "a"], ["b", "a", "b"])
    assert import_cycle({"a": {"b"}, "b": set()}) is None


def test_dashboard_reads_through_the_engine_not_the_command_line() -> None:
    modules = _modules()
    for name, path in modules.items():
        if name.startswith("fp8bench.dashboard"):
            bad = {m for m in _imports(name, path, set(modules)) if m.startswith(("fp8bench.commands", "fp8bench.cli"))}
            assert not bad, f"{name} imports {sorted(bad)}: the dashboard reads through fp8bench's engine modules"
