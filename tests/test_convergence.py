"""The convergence check: the verdict rules on constructed curves, then short real training runs (BF16, an FP8
recipe, the unscaled control) and the `converge` verb writing loss curves into the store."""

from __future__ import annotations

import json
import math

import pytest

from fp8bench.cli import main
from fp8bench.core.devices import resolve_device
from fp8bench.core.plugins import WORKLOADS, load_all
from fp8bench.core.precisions import resolve_precision
from fp8bench.measure.convergence import BROKEN, ConvergenceSettings, Curve, assess, smooth, train_curve
from fp8bench.results.store import open_store

load_all()
SETTINGS = ConvergenceSettings(steps=40, window=5, tolerance=0.05, diverge_gap=0.25, spike_factor=2.0)
SHORT = "tiny,layers=1,seq=32"  # 128 tokens per step


def _curve(losses: list[float], name: str = "fp8_x") -> Curve:
    return Curve(name, "emulated", losses, [0.01] * len(losses))


BASE = _curve([5.0 - 0.05 * i for i in range(40)], "bf16")


def test_smooth_is_a_trailing_mean():
    assert smooth([1.0, 3.0, 5.0, 7.0], 2) == [1.0, 2.0, 4.0, 6.0]


def test_identical_curve_is_ok_with_zero_gap():
    v = assess(_curve(list(BASE.losses)), BASE, SETTINGS)
    assert v.verdict == "ok" and v.final_gap == 0.0 and v.max_gap == 0.0


def test_small_final_gap_is_ok_and_larger_one_is_a_gap():
    assert assess(_curve([x * 1.03 for x in BASE.losses]), BASE, SETTINGS).verdict == "ok"
    gap = assess(_curve([x * 1.10 for x in BASE.losses]), BASE, SETTINGS)
    assert gap.verdict == "gap" and gap.final_gap == pytest.approx(0.10)
    assert "tolerance 5%" in gap.reasons[0]


def test_curve_leaving_the_baseline_is_diverged():
    flat = _curve([5.0] * 40)  # stops learning: ends far above a falling baseline
    v = assess(flat, BASE, SETTINGS)
    assert v.verdict == "diverged" and v.max_gap > 0.25 and "above bf16" in v.reasons[0]


def test_non_finite_loss_is_diverged_at_its_step():
    losses = list(BASE.losses[:12]) + [math.nan]
    v = assess(_curve(losses), BASE, SETTINGS)
    assert v.verdict == "diverged" and v.max_gap_step == 12 and "non-finite" in v.reasons[0]


def test_spike_is_diverged_even_when_the_end_recovers():
    losses = list(BASE.losses)
    for i in range(20, 25):
        losses[i] = 20.0
    v = assess(_curve(losses), BASE, ConvergenceSettings(steps=40, window=5, diverge_gap=10.0, tolerance=0.05))
    assert v.verdict == "diverged" and any("spiked" in r for r in v.reasons)


@pytest.mark.parametrize("kwargs, message", [
    ({"steps": 1}, "steps must be at least 2"),
    ({"window": 0}, "window must be between 1"),
    ({"tolerance": 0.3, "diverge_gap": 0.2}, "tolerance"),
    ({"spike_factor": 1.0}, "spike_factor"),
])
def test_settings_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ConvergenceSettings(**kwargs)


@pytest.mark.slow
def test_short_training_fp8_tracks_bf16_and_the_control_starves():
    shape = WORKLOADS.get("transformer_step").parse_shape(SHORT)
    cpu = resolve_device("cpu")
    settings = ConvergenceSettings(steps=12, window=4, stats_every=6)
    bf16 = train_curve(shape, resolve_precision("bf16"), "emulated", cpu, settings)
    fp8 = train_curve(shape, resolve_precision("fp8_rowwise"), "emulated", cpu, settings)
    control = train_curve(shape, BROKEN, "emulated", cpu, settings)
    assert len(bf16.losses) == 12 and bf16.losses[-1] < bf16.losses[0]  # it learns
    assert abs(assess(fp8, bf16, settings).final_gap) < 0.02
    # Sampled cast statistics: with scaling on, gradients survive; with it off, they flush to zero.
    fp8_grad = fp8.cast_stats[0]["layers"]["blocks.0.attn.qkv"]["grad_output"]
    ctl_grad = control.cast_stats[0]["layers"]["blocks.0.attn.qkv"]["grad_output"]
    assert fp8_grad["underflow_frac"] < 0.05 and ctl_grad["underflow_frac"] > 0.9
    assert [s["step"] for s in control.cast_stats] == [0, 6]
    assert assess(control, bf16, settings).final_gap > assess(fp8, bf16, settings).final_gap


def test_a_stochastically_rounded_curve_depends_on_the_seed_alone():
    """NVFP4 rounds gradients stochastically: the same recipe trains to the same losses whatever drew random numbers
    before it in the process (another precision's curve, say), and a different seed gives different losses."""
    import torch

    shape = WORKLOADS.get("transformer_step").parse_shape(SHORT)
    cpu = resolve_device("cpu")
    settings = ConvergenceSettings(steps=4, window=2, stats_every=0)
    nvfp4 = resolve_precision("nvfp4")
    assert nvfp4.stochastic_rounding
    first = train_curve(shape, nvfp4, "emulated", cpu, settings).losses
    torch.rand(1000)  # what another curve's stochastic rounding would have consumed
    again = train_curve(shape, nvfp4, "emulated", cpu, settings).losses
    other = train_curve(shape, nvfp4, "emulated", cpu, ConvergenceSettings(steps=4, window=2, stats_every=0,
                                                                            seed=1)).losses
    assert first == again and first != other


@pytest.mark.slow
def test_converge_verb_stores_loss_curves(tmp_path, capsys):
    code = main(["converge", "--shape", SHORT, "--steps", "12", "--window", "4", "--precision", "bf16",
                 "fp8_rowwise", "--no-control", "--results-dir", str(tmp_path), "--json"])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0, summary
    assert [c["precision"] for c in summary["curves"]] == ["bf16", "fp8_rowwise"]
    assert summary["curves"][0]["verdict"] == "baseline"
    assert summary["curves"][1]["verdict"] in ("ok", "gap")
    frame = open_store(tmp_path).records_frame(with_data=True)
    assert len(frame) == 2
    data = frame["data"].iloc[1]
    data = json.loads(data) if isinstance(data, str) else data
    assert data["workload"] == "transformer_step" and len(data["extra"]["losses"]) == 12
    assert data["extra"]["convergence"]["baseline"] == "bf16"


def test_converge_verb_rejects_bad_input(tmp_path, capsys):
    assert main(["converge", "--steps", "1", "--results-dir", str(tmp_path)]) == 2
    assert "steps must be at least 2" in capsys.readouterr().err
    assert main(["converge", "--shape", "tiny,heads=5", "--results-dir", str(tmp_path)]) == 2
    assert main(["converge", "--backend", "triton", "--results-dir", str(tmp_path)]) == 2


@pytest.mark.slow
def test_converge_trains_four_bit_recipes_and_records_their_options(tmp_path, capsys):
    """nvfp4 and mxfp4 train through the emulated layers; each curve keeps its gradient options and e2m1."""
    code = main(["converge", "--shape", SHORT, "--steps", "8", "--window", "4", "--precision", "bf16", "nvfp4",
                 "mxfp4", "--rht", "on", "--no-control", "--stats-every", "4", "--results-dir", str(tmp_path),
                 "--json", "--fp8-format", "hybrid"])  # hybrid is for FP8 recipes: the 4-bit ones ignore it
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0, summary
    assert [c["precision"] for c in summary["curves"]] == ["bf16", "nvfp4", "mxfp4"], summary
    assert [c["verdict"] for c in summary["curves"]][1:] in (["ok", "ok"], ["ok", "gap"], ["gap", "ok"],
                                                            ["gap", "gap"]), summary
    frame = open_store(tmp_path).records_frame(with_data=True)
    data = [json.loads(d) if isinstance(d, str) else d for d in frame["data"]]
    by_name = {d["precision"]: d for d in data}
    # --rht on reaches both; stochastic rounding stays each recipe's default (nvfp4 on, as TE; mxfp4 off).
    assert by_name["nvfp4"]["extra"]["fp4_options"] == {"stochastic_rounding": True, "rht": True}
    assert by_name["mxfp4"]["extra"]["fp4_options"] == {"stochastic_rounding": False, "rht": True}
    assert by_name["nvfp4"]["fp8_format"] == "e2m1" and "fp4_options" not in by_name["bf16"]["extra"]
    grads = by_name["mxfp4"]["extra"]["cast_stats"][0]["layers"]["blocks.0.attn.qkv"]["grad_output"]
    assert grads["underflow_frac"] < 0.5  # per-block scales keep gradients in E2M1's range


def test_converge_rejects_a_bad_on_off_value(tmp_path, capsys):
    assert main(["converge", "--rht", "maybe", "--results-dir", str(tmp_path)]) == 2
    assert "maybe" in capsys.readouterr().err
