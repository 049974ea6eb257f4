"""Figures of the code's shape: imports between layers, function-local imports, ``.get("`` walks over dicts, ``Any``
annotations, and (``--walk-ab``) how often control enters the gate's modules from outside while ``fp8bench ab`` runs.

    python scripts/architecture_counts.py                 # the static counts, for this checkout
    python scripts/architecture_counts.py --code DIR      # the same for another checkout (e.g. an older commit)
    python scripts/architecture_counts.py --walk-ab       # also trace one small `fp8bench ab` of this checkout

The layers are the ones ``tests/test_layering.py`` states; "imports that run back up" is its list of violations.
"""

from __future__ import annotations

import argparse
import ast
import collections
import contextlib
import importlib.util
import io
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GATE_PREFIX = "fp8bench.analysis.gate"


def _load_layering(code: Path):
    spec = importlib.util.spec_from_file_location("layering_of_checkout", code / "tests" / "test_layering.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def static_counts(code: Path) -> dict[str, int]:
    """Function-local imports (all, and in the command verbs), ``.get("`` calls and ``Any`` names in the product."""
    counts = collections.Counter()
    for path in (code / "fp8bench").rglob("*.py"):
        source = path.read_text()
        counts['.get(" calls'] += source.count('.get("')
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Name) and node.id == "Any":
                counts["Any names"] += 1
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                local = sum(isinstance(n, ast.Import | ast.ImportFrom) for n in ast.walk(node))
                counts["function-local imports"] += local
                if "commands" in path.parts or path.name == "cli.py":
                    counts["  of them in the CLI and its verbs"] += local
    return dict(counts)


def _layer_name(entry: str | tuple[int, str]) -> str:
    """A layer's name, from the layering test of any version (older ones ranked layers: ``(rank, name)``)."""
    return entry if isinstance(entry, str) else entry[1]


def layer_figures(code: Path) -> tuple[list[str], dict[tuple[str, str], int]]:
    """The layering test's violations, and the number of imports between each pair of distinct layers."""
    layering = _load_layering(code)
    modules = layering._modules()
    edges: collections.Counter = collections.Counter()
    for name, path in modules.items():
        own = [_layer_name(x) for x in layering.layers_of(name)]
        for target in layering._imports(name, path, set(modules)):
            theirs = [_layer_name(x) for x in layering.layers_of(target)]
            if len(own) == 1 and len(theirs) == 1 and own[0] != theirs[0]:
                edges[(own[0], theirs[0])] += 1
    return layering.upward_imports(modules), dict(edges)


def walk_ab() -> collections.Counter:
    """Calls from fp8bench's own modules outside the gate package into it, by (caller, callee) function, while the
    parent of one small ``fp8bench ab`` runs (its workers are other processes). Module bodies run at import and
    calls made by the standard library (``dataclasses.replace`` building a result) are not entries."""
    sys.path.insert(0, str(ROOT))
    from fp8bench.cli import main

    entries: collections.Counter = collections.Counter()

    def profile(frame, event, _arg):
        if event != "call" or frame.f_back is None or frame.f_code.co_name == "<module>":
            return
        callee = frame.f_globals.get("__name__", "")
        caller = frame.f_back.f_globals.get("__name__", "")
        if (callee.startswith(GATE_PREFIX) and caller.startswith("fp8bench")
                and not caller.startswith(GATE_PREFIX)):
            entries[f"{caller}.{frame.f_back.f_code.co_name} -> {callee}.{frame.f_code.co_name}"] += 1

    with tempfile.TemporaryDirectory() as folder:
        argv = ["ab", "--base", str(ROOT), "--head", str(ROOT), "--rounds", "2", "--threshold", "0.9",
                "--out", f"{folder}/ab", "--results-dir", f"{folder}/results", "--json", "--", "--shape",
                "64x64x64", "--precision", "bf16", "--backend", "torch", "--no-phases", "--threads", "1",
                "--min-samples", "5", "--max-time", "0.02", "--budget", "5"]
        sys.setprofile(profile)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                main(argv)
        finally:
            sys.setprofile(None)
    return entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout to count (default: this one)")
    parser.add_argument("--walk-ab", action="store_true", help="also trace one small `fp8bench ab` of this checkout")
    args = parser.parse_args()
    code = args.code.resolve()
    for name, value in static_counts(code).items():
        print(f"{name:<36} {value}")
    violations, edges = layer_figures(code)
    print(f"imports that run back up             {len(violations)}")
    for line in violations:
        print(f"  {line}")
    print("imports between layers (importer -> imported: count)")
    for (a, b), n in sorted(edges.items()):
        print(f"  {a:<10} -> {b:<10} {n}")
    if args.walk_ab:
        entries = walk_ab()
        print(f"calls into {GATE_PREFIX}.* from other fp8bench modules while `ab` ran: {sum(entries.values())} "
              f"({len(entries)} distinct caller -> callee pairs)")
        for edge, n in entries.most_common():
            print(f"  {n:>4}  {edge}")


if __name__ == "__main__":
    main()
