"""Each workload measures its own default shape when none is given; `list` shows the defaults."""

from __future__ import annotations

import json

import pytest

from fp8bench.cli import build_parser, main
from fp8bench.commands.run import _plan
from fp8bench.core.plugins import WORKLOADS, load_all

load_all()


@pytest.mark.parametrize("name", WORKLOADS.names())
def test_every_workload_declares_a_default_shape_that_parses(name):
    workload = WORKLOADS.get(name)
    assert isinstance(workload.default_shape, str) and workload.default_shape
    workload.parse_shape(workload.default_shape)


def _entries(*argv: str) -> list[tuple[str, list[str]]]:
    entries, _, _ = _plan(build_parser().parse_args(["run", *argv]))
    return [(w, shapes) for w, shapes, _p, _b in entries]


def test_run_without_shape_uses_each_workloads_default():
    assert _entries() == [("gemm", ["1024x1024x1024"])]
    assert _entries("--workload", "transformer_step") == [("transformer_step", ["tiny"])]
    assert _entries("--workload", "gemm", "attention", "transformer_step") == [
        ("gemm", ["1024x1024x1024"]), ("attention", ["tiny"]), ("transformer_step", ["tiny"])]


def test_an_explicit_shape_applies_to_every_named_workload():
    assert _entries("--workload", "attention", "--shape", "tiny,s=32") == [("attention", ["tiny,s=32"])]


@pytest.mark.slow  # a real run at the default model shape
def test_transformer_step_without_shape_runs(capsys, results_dir):
    # The failure this replaces: the GEMM default was applied to every workload ("unknown preset '1024x1024x1024'").
    code = main(["run", "--workload", "transformer_step", "--precision", "bf16", "--budget", "120", "--no-phases",
                 "--no-energy", "--results-dir", str(results_dir), "--no-store", "--json"])
    assert code == 0, capsys.readouterr().err
    (rec,) = json.loads(capsys.readouterr().out)["records"]
    assert rec["workload"] == "transformer_step" and rec["status"] == "ok"
    assert rec["shape"] == WORKLOADS.get("transformer_step").parse_shape("tiny")


def test_list_shows_default_shapes(capsys):
    assert main(["list", "workloads", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["workloads"]
    assert {n: w["default_shape"] for n, w in listed.items()} == {n: w.default_shape for n, w in WORKLOADS.items()}
