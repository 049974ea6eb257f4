"""The worked examples of docs/development.md are the files in ``examples/``, loaded and run here.

A backend (``examples/numpy_backend.py``) and a workload (``examples/axpy.py``), each with its test, are what a
contributor copies into ``kernels/`` or ``workloads/`` and ``tests/``. Each file must be its block of the document
word for word; it is loaded under the module name it would have in the project (so its test imports it as written),
its own tests run, and ``fp8bench run`` measures through it with the statuses the document states. The registrations
are removed afterwards, so no other test sees a ``numpy`` backend or an ``axpy`` workload.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from fp8bench.cli import main
from fp8bench.core.plugins import BACKENDS, WORKLOADS

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
DOC = ROOT / "docs" / "development.md"
# example file -> (the module it would be in the project, the registry and name it adds)
MODULES = {"numpy_backend.py": ("fp8bench.kernels.numpy_backend", BACKENDS, "numpy"),
           "axpy.py": ("fp8bench.workloads.axpy", WORKLOADS, "axpy")}
QUICK = ["--min-samples", "5", "--max-time", "0.05", "--budget", "3", "--no-phases", "--no-store", "--json"]


def doc_blocks() -> dict[str, str]:
    """Each ``python`` block of the document, by the file name the line above it gives (``kernels/x.py``: x.py)."""
    lines = DOC.read_text().splitlines()
    blocks = {}
    for i, line in enumerate(lines):
        if line.strip() == "```python":
            above = next(lines[j] for j in range(i - 1, 0, -1) if lines[j].strip())
            name = re.findall(r"`([\w/]+\.py)`", above)[-1].rsplit("/", 1)[-1]
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            blocks[name] = "\n".join(lines[i + 1:end]) + "\n"
    return blocks


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def examples() -> Iterator[dict[str, ModuleType]]:
    """The example modules, loaded under their project names; unregistered and forgotten afterwards."""
    loaded = {}
    try:
        for file, (name, _, _) in MODULES.items():
            loaded[file] = _load(EXAMPLES / file, name)
        yield loaded
    finally:
        for name, registry, item in MODULES.values():
            if item in registry:
                registry.remove(item)
            sys.modules.pop(name, None)


def test_each_example_file_is_its_block_of_the_document():
    blocks = doc_blocks()
    files = sorted(p.name for p in EXAMPLES.glob("*.py"))
    assert files == sorted(blocks), "examples/ and the document's python blocks differ in which files they hold"
    for name in files:
        assert (EXAMPLES / name).read_text() == blocks[name], f"examples/{name} differs from its block in {DOC.name}"


def _calls(module: ModuleType) -> Iterator[tuple[str, dict[str, object]]]:
    """(test name, arguments) for every test function of ``module``, one per parameter of a parametrized one."""
    for name, fn in vars(module).items():
        if not (name.startswith("test_") and callable(fn)):
            continue
        params = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]
        if not params:
            yield name, {}
        for mark in params:
            yield from ((name, {mark.args[0]: value}) for value in mark.args[1])


@pytest.mark.parametrize("test_file", ["test_numpy_backend.py", "test_axpy.py"])
def test_each_examples_own_tests_pass(examples, test_file):
    module = _load(EXAMPLES / test_file, f"fp8bench_example_{test_file[:-3]}")
    try:
        calls = list(_calls(module))
        assert len(calls) >= 2, calls
        for name, kwargs in calls:
            getattr(module, name)(**kwargs)
    finally:
        sys.modules.pop(module.__name__, None)


def _statuses(capsys: pytest.CaptureFixture[str], tmp_path: Path, *args: str) -> dict[tuple[str, str], str]:
    capsys.readouterr()
    code = main(["run", *args, *QUICK, "--out", str(tmp_path / "run.json")])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0, report
    return {(r["precision"], r["backend"]): r["status"] if r["status"] != "skipped" else f"skipped: {r['reason']}"
            for r in report["records"]}


def test_the_numpy_backend_measures_fp32_and_records_bf16_skipped(examples, capsys, tmp_path):
    main(["list"])
    assert "numpy" in capsys.readouterr().out
    statuses = _statuses(capsys, tmp_path, "--workload", "gemm", "--shape", "64x64x64", "--precision", "fp32",
                         "bf16", "--backend", "torch", "numpy")
    assert statuses[("fp32", "numpy")] == "ok"
    assert statuses[("bf16", "numpy")] == "skipped: numpy does not run bf16 on cpu: NumPy's GEMM runs fp32 only"


def test_the_axpy_workload_runs_its_float_precisions_through_torch(examples, capsys, tmp_path):
    statuses = _statuses(capsys, tmp_path, "--workload", "axpy", "--shape", "n=4096", "--precision", "fp32", "bf16",
                         "fp8_tensorwise", "--backend", "torch", "emulated")
    assert statuses[("fp32", "torch")] == statuses[("bf16", "torch")] == "ok"
    skipped = [k for k, s in statuses.items() if s.startswith("skipped")]
    assert sorted(skipped) == sorted([("fp8_tensorwise", "torch"), ("fp32", "emulated"), ("bf16", "emulated"),
                                      ("fp8_tensorwise", "emulated")]), statuses
