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

# The layers and what each may import, stated once (docs/development.md links here). Each layer names the layers
# directly under it; it may import its own modules and everything reachable down that graph, nothing else:
#
#   core (the ground: vocabulary and rules every layer shares)
#   numerics, results, energy        beside each other on the ground, not importing each other
#   hardware                         above all three
#   workloads < kernels < measure    the measuring wing, above hardware
#   analysis < dashboard             the reading wing, above results only: it meets the measuring wing at results
#   render                           each report's text from results and analysis values (on the reading wing)
#   orchestration                    the processes and worktrees of ab and bisect, judged by the analysis
#   commands                         on top of both wings; verify (checks of fp8bench itself) beside it
#
# ``X.*`` is the package X and everything in it; a plain name is that module alone.
LAYERS: dict[str, tuple[str, ...]] = {
    "core": ("fp8bench", "fp8bench.core.*", "fp8bench.exit_codes", "fp8bench.paths"),
    "numerics": ("fp8bench.numerics.*",),
    "results": ("fp8bench.results.*",),
    "energy": ("fp8bench.energy.*",),
    "hardware": ("fp8bench.hardware.*",),
    "workloads": ("fp8bench.workloads.*",),
    "kernels": ("fp8bench.kernels.*",),
    "measure": ("fp8bench.measure.*",),
    "analysis": ("fp8bench.analysis.*",),
    "dashboard": ("fp8bench.dashboard.*",),
    "render": ("fp8bench.render.*",),
    "orchestration": ("fp8bench.orchestration.*",),
    "commands": ("fp8bench.commands.*", "fp8bench.cli", "fp8bench.__main__", "fp8bench.pytest_plugin"),
    "verify": ("fp8bench.verify.*",),
}
BELOW: dict[str, tuple[str, ...]] = {
    "core": (),
    "numerics": ("core",),
    "results": ("core",),
    "energy": ("core",),
    "hardware": ("numerics", "results", "energy"),
    "workloads": ("hardware",),
    "kernels": ("workloads",),
    "measure": ("kernels",),
    "analysis": ("results",),
    "dashboard": ("analysis",),
    "render": ("analysis",),
    "orchestration": ("analysis",),
    "commands": ("measure", "orchestration", "dashboard", "render"),
    "verify": ("measure",),
}


def reachable(layer: str, below: dict[str, tuple[str, ...]] = BELOW) -> set[str]:
    """The layers ``layer`` may import: those under it in the graph, at any depth."""
    seen: set[str] = set()
    todo = list(below[layer])
    while todo:
        lower = todo.pop()
        if lower not in seen:
            seen.add(lower)
            todo.extend(below[lower])
    return seen


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


def layers_of(module: str) -> list[str]:
    """Every layer whose table entry names ``module`` (exactly one, when the table is right)."""
    return [layer for layer, entries in LAYERS.items() if any(_matches(module, e) for e in entries)]


def upward_imports(modules: dict[str, Path]) -> list[str]:
    """Each import of a layer that is not under the importer's in the graph, described for a reader."""
    problems = []
    for name, path in sorted(modules.items()):
        if len(layers_of(name)) != 1:
            continue  # reported by test_every_module_belongs_to_exactly_one_layer
        (layer,) = layers_of(name)
        allowed = reachable(layer) | {layer}
        for target, line in sorted(_import_lines(name, path, set(modules), types_too=False).items()):
            if len(layers_of(target)) != 1:
                continue
            (target_layer,) = layers_of(target)
            if target_layer not in allowed:
                shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                problems.append(f"{name} ({layer}) imports {target} ({target_layer}) at {shown}:{line}")
    return problems


def test_every_module_belongs_to_exactly_one_layer() -> None:
    modules = _modules()
    unassigned = sorted(m for m in modules if not layers_of(m))
    assert not unassigned, (f"modules without a layer: {unassigned}; add each to LAYERS in tests/test_layering.py "
                            "and to the tree in docs/development.md")
    ambiguous = {m: layers_of(m) for m in modules if len(layers_of(m)) > 1}
    assert not ambiguous, f"modules named by more than one layer: {ambiguous}"


def test_imports_point_down_the_layers() -> None:
    problems = upward_imports(_modules())
    graph = "; ".join(f"{layer} > {', '.join(lower)}" for layer, lower in BELOW.items() if lower)
    assert not problems, f"imports of a layer not under the importer (graph: {graph}):\n  " + "\n  ".join(problems)


def test_the_graph_has_no_cycle_and_names_every_layer() -> None:
    assert set(BELOW) == set(LAYERS)
    assert all(lower in LAYERS for lowers in BELOW.values() for lower in lowers)
    assert all(layer not in reachable(layer) for layer in BELOW)


def test_the_two_wings_meet_only_at_results() -> None:
    measuring, reading = {"workloads", "kernels", "measure"}, {"analysis", "dashboard", "render"}
    for layer in reading:
        assert not reachable(layer) & (measuring | {"hardware", "numerics", "energy"}), layer
    for layer in measuring:
        assert not reachable(layer) & reading, layer


def test_the_direction_check_sees_an_upward_import_and_skips_type_only_ones(tmp_path: Path) -> None:
    records, runner, report = tmp_path / "records.py", tmp_path / "runner.py", tmp_path / "report.py"
    records.write_text("import os\n\n\ndef later():\n    from fp8bench.measure.runner import run_cases\n")
    runner.write_text("from typing import TYPE_CHECKING\n\n"
                      "if TYPE_CHECKING:\n    from fp8bench.analysis import report\n")
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
