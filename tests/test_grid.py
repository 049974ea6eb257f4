"""The grid sizing of the suite (``tests/grid.py``): the pairwise cover holds every pair, the full product is one
switch away, and the nightly workflow throws that switch."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

import grid
import pytest
import yaml
from grid import FULL_MATRIX_ENV, one_per_kind, pairwise

ROOT = Path(__file__).resolve().parents[1]
NIGHTLY = ROOT / ".github" / "workflows" / "tests-nightly.yml"


def test_pairwise_cover_holds_every_pair_of_every_two_axes_in_fewer_rows():
    axes = (("tensorwise", "delayed", "rowwise", "blockwise", "mxfp8"), ("e4m3", "hybrid", "e5m2"),
            tuple(f"target{i}" for i in range(9)))
    rows = pairwise(*axes)
    for i, j in itertools.combinations(range(len(axes)), 2):
        assert {(r[i], r[j]) for r in rows} == set(itertools.product(axes[i], axes[j])), (i, j)
    assert len(set(rows)) == len(rows) and set(rows) <= set(itertools.product(*axes))
    assert len(rows) < len(list(itertools.product(*axes))) / 2  # 135 points, every pair in well under half
    assert pairwise(("a", "b"), (1, 2)) == list(itertools.product(("a", "b"), (1, 2)))  # two axes: the product


def test_full_matrix_switch_gives_the_whole_product(monkeypatch):
    axes = (("a", "b", "c"), (1, 2, 3), ("x", "y"))
    monkeypatch.setattr(grid, "FULL_MATRIX", True)
    assert grid.grid(*axes) == list(itertools.product(*axes))
    assert one_per_kind(["a1", "a2", "b1"], lambda n: n[0]) == ["a1", "a2", "b1"]
    monkeypatch.setattr(grid, "FULL_MATRIX", False)
    assert grid.grid(*axes) == pairwise(*axes)


def test_one_per_kind_prefers_the_named_ones_and_keeps_the_order(monkeypatch):
    monkeypatch.setattr(grid, "FULL_MATRIX", False)
    names = ["h100-2.10", "h100-2.11", "h100-2.13", "b200-2.13", "l4"]
    kind = {"h100-2.10": "h100-new", "h100-2.11": "h100-new", "h100-2.13": "h100-new", "b200-2.13": "b200",
            "l4": "l4"}.__getitem__
    assert one_per_kind(names, kind) == ["h100-2.10", "b200-2.13", "l4"]
    assert one_per_kind(names, kind, preferred=["h100-2.13", "not-a-name"]) == ["h100-2.13", "b200-2.13", "l4"]


def test_the_nightly_workflow_runs_ci_with_the_full_grids():
    workflow = yaml.safe_load(NIGHTLY.read_text())
    triggers = workflow.get("on", workflow.get(True))
    assert "schedule" in triggers and "workflow_dispatch" in triggers
    (job,) = workflow["jobs"].values()
    assert job["env"][FULL_MATRIX_ENV] == "1"
    runs = [step["run"] for step in job["steps"] if "run" in step]
    assert runs == ["bash .ci/run"]
    assert all("@v" in step["uses"] for step in job["steps"] if "uses" in step)  # actions pinned to a release
    for script in runs:
        assert subprocess.run(["bash", "-n", "-c", script], capture_output=True).returncode == 0


@pytest.mark.parametrize("name", ["test_gemm_workload_conforms", "test_fp8_layers_conform_forward_and_backward"])
def test_the_conformance_grid_covers_every_recipe_format_and_target(name):
    import test_cuda_conformance as conformance

    marks = {m.args[0]: m.args[1] for m in getattr(conformance, name).pytestmark if m.name == "parametrize"}
    (rows,) = marks.values()
    if name == "test_gemm_workload_conforms":
        assert {(r, f) for r, f, _ in rows} == set(itertools.product(conformance.RECIPES, conformance.FORMATS))
        assert {bt for _, _, bt in rows} >= {("torch", t) for t in conformance.CONFORMANCE_TARGETS}
    else:
        assert {(w, r) for w, r, _, _ in rows} == set(itertools.product(("attention", "transformer_step"),
                                                                        conformance.RECIPES))
        assert {t for *_, t in rows} == set(conformance.LAYER_TARGETS)
    # Each GPU x toolkit x torch API generation keeps a target; the installed and the edge releases among them.
    def kind(name):
        t = conformance.TARGETS[name]
        return t.name, t.cuda, conformance._api_generation(t.torch)

    assert {kind(n) for n in conformance.CONFORMANCE_TARGETS} == {kind(n) for n in conformance.TARGETS}
    assert set(conformance.EDGE_TARGETS) <= set(conformance.CONFORMANCE_TARGETS)
