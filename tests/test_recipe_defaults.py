"""Delayed scaling defaults to Transformer Engine's DelayedScaling; each default is overridable, recorded in the
record and shown in the table header.

TE's defaults, read from transformer_engine/common/recipe/__init__.py (class DelayedScaling): margin = 0,
fp8_format = Format.HYBRID, amax_history_len = 1024, amax_compute_algo = "max".
"""

from __future__ import annotations

import json

import pytest
import torch
from rich.console import Console

from fp8bench.cli import main
from fp8bench.core.comparability import definition_hash
from fp8bench.core.formats import E4M3
from fp8bench.core.precisions import (
    TE_DELAYED_SCALING_DEFAULTS,
    Fp8Recipe,
    RunOptions,
    default_fp8_format,
    delayed_scaling_settings,
    resolve_precision,
)
from fp8bench.core.records import load_record
from fp8bench.measure.runner import expand_cases
from fp8bench.measure.settings import RecipeSettings, RunSettings
from fp8bench.numerics.quantize import AmaxHistory, scale_from_amax
from fp8bench.render.run_table import render_table

TE_DEFAULTS = {"amax_history_len": 1024, "amax_compute_algo": "max", "margin": 0, "fp8_format": "hybrid"}


def test_defaults_are_transformer_engines():
    assert TE_DELAYED_SCALING_DEFAULTS == TE_DEFAULTS
    delayed = resolve_precision("fp8_delayed", RunOptions(fp8_format=None, trains=True))
    assert isinstance(delayed, Fp8Recipe)
    assert (delayed.amax_history_len, delayed.amax_compute_algo, delayed.margin, delayed.fp8_format.value) == (
        1024, "max", 0, "hybrid")


def test_te_backend_passes_the_same_defaults_to_te():
    from fp8bench.kernels import te_backend as teb

    spec = teb.te_recipe_spec(resolve_precision("fp8_delayed", RunOptions(fp8_format=None, trains=True)))
    assert spec.cls == "DelayedScaling"
    assert spec.kwargs == {"fp8_format": "HYBRID", "margin": 0, "amax_history_len": 1024, "amax_compute_algo": "max"}


@pytest.mark.parametrize("name,trains,fmt", [("fp8_delayed", True, "hybrid"), ("fp8_delayed", False, "e4m3"),
                                             ("fp8_tensorwise", True, "e4m3"), ("fp8_rowwise", False, "e4m3")])
def test_default_format_is_hybrid_for_delayed_scaling_on_workloads_that_train(name, trains, fmt):
    recipe = resolve_precision(name)
    assert isinstance(recipe, Fp8Recipe)
    assert default_fp8_format(recipe, trains) == fmt


def _formats(fp8_format=None):
    settings = RunSettings(recipe=RecipeSettings(fp8_format=fp8_format))
    cases = expand_cases([("gemm", ["64x64x64"]), ("transformer_step", ["tiny"]),
                          ("attention", ["tiny", "tiny,backward=1"])], ["fp8_delayed", "fp8_rowwise"], ["emulated"],
                         settings)
    return [(c.workload, c.shape.get("backward"), c.precision.name, c.precision.fp8_format.value) for c in cases]


def test_cases_take_the_format_of_their_workload():
    assert _formats() == [
        ("gemm", None, "fp8_delayed", "e4m3"), ("gemm", None, "fp8_rowwise", "e4m3"),
        ("transformer_step", None, "fp8_delayed", "hybrid"), ("transformer_step", None, "fp8_rowwise", "e4m3"),
        ("attention", 0, "fp8_delayed", "e4m3"), ("attention", 0, "fp8_rowwise", "e4m3"),
        ("attention", 1, "fp8_delayed", "hybrid"), ("attention", 1, "fp8_rowwise", "e4m3")]
    assert {fmt for *_, fmt in _formats("e4m3")} == {"e4m3"}  # --fp8-format wins everywhere


def test_most_recent_takes_the_latest_amax_and_max_the_largest():
    latest, largest = AmaxHistory(4, algo="most_recent"), AmaxHistory(4)
    for history in (latest, largest):
        history.push(torch.tensor(4.0))
        history.push(torch.tensor(1.0))
    assert torch.equal(latest.scale(E4M3), scale_from_amax(torch.tensor(1.0), E4M3, 0))
    assert torch.equal(largest.scale(E4M3), scale_from_amax(torch.tensor(4.0), E4M3, 0))
    with pytest.raises(ValueError, match="amax algorithm 'mean'; accepted: max, most_recent"):
        AmaxHistory(4, algo="mean")
    with pytest.raises(ValueError, match="amax_compute_algo 'mean'; accepted: max, most_recent"):
        resolve_precision("fp8_delayed", RunOptions(amax_compute_algo="mean"))


def test_flags_override_and_records_keep_the_settings(capsys, results_dir):
    code = main(["run", "--shape", "32x32x32", "--precision", "fp8_delayed", "bf16", "--backend", "emulated",
                 "--amax-history-len", "16", "--amax-compute-algo", "most_recent", "--margin", "1", "--budget", "20",
                 "--no-phases", "--no-energy", "--no-store", "--results-dir", str(results_dir), "--json"])
    assert code == 0, capsys.readouterr().err
    delayed, bf16 = json.loads(capsys.readouterr().out)["records"]
    assert delayed["delayed_scaling"] == {"amax_history_len": 16, "amax_compute_algo": "most_recent", "margin": 1}
    assert delayed["fp8_format"] == "e4m3" and bf16["delayed_scaling"] == {}


def test_a_bad_algorithm_is_bad_input(capsys):
    assert main(["run", "--amax-compute-algo", "mean"]) == 2
    assert "invalid choice: 'mean'" in capsys.readouterr().err


def _record(**fields):
    base = {"workload": "gemm", "shape": {"m": 32, "n": 32, "k": 32}, "precision": "fp8_delayed",
            "backend": "emulated", "device": "cpu", "status": "ok", "reason": None, "fp8_format": "e4m3",
            "median_s": 1e-3, "numerics": {}, "phases": {}}
    return {**base, **fields}


def test_the_table_header_names_the_settings():
    console = Console(record=True, width=250)
    te = delayed_scaling_settings(resolve_precision("fp8_delayed"))
    render_table([_record(delayed_scaling=te), _record(workload="transformer_step", fp8_format="hybrid",
                                                        delayed_scaling=te)], "bf16", console, title="run X")
    text = console.export_text()
    assert ("fp8_delayed: amax history 1024, amax max, margin 0 (Transformer Engine DelayedScaling defaults); "
            "format e4m3 on gemm, hybrid on transformer_step") in text
    console = Console(record=True, width=250)
    render_table([_record(delayed_scaling={**te, "amax_history_len": 16})], "bf16", console)
    text = console.export_text()
    assert "amax history 16" in text and "Transformer Engine" not in text


def test_delayed_settings_are_part_of_the_case_definition():
    te = delayed_scaling_settings(resolve_precision("fp8_delayed"))
    run = {"settings": {}}
    assert definition_hash(load_record(_record(delayed_scaling=te)), run) != definition_hash(
        load_record(_record(delayed_scaling={**te, "amax_history_len": 16})), run)
    plain = _record(precision="bf16", fp8_format=None)
    assert definition_hash(load_record(plain), run) == definition_hash(
        load_record({**plain, "delayed_scaling": {}}), run)
