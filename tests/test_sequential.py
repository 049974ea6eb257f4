"""Sequential A/B (`fp8bench ab --budget`): the confidence sequence, its verdicts, and the real verb.

The statistics are checked on drawn samples with a known truth; the verb runs real (tiny, single-threaded) torch
GEMMs on this CPU, with a threshold wide enough that load on the shared cores cannot flip the verdict.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from fp8bench.analysis.gate.sequential import SequentialConfig, confidence_sequence, sequential_verdict
from fp8bench.cli import main

ROOT = Path(__file__).resolve().parents[1]
RUN_ARGS = ["--", "--shape", "64x64x64", "--precision", "bf16", "--backend", "torch", "--no-phases",
            "--threads", "1", "--min-samples", "10", "--max-time", "0.05", "--budget", "5"]


def test_interval_shrinks_with_rounds_and_holds_the_mean():
    rng = np.random.default_rng(0)
    x = rng.normal(0.1, 0.05, 400)
    widths = []
    for t in (10, 40, 160, 400):
        mean, lo, hi = confidence_sequence(x[:t], 0.01)
        assert lo < 0.1 < hi
        widths.append(hi - lo)
    assert widths == sorted(widths, reverse=True) and widths[-1] < widths[0] / 3


def test_interval_is_scale_free():
    x = np.random.default_rng(1).normal(0, 1, 30)
    _, lo, hi = confidence_sequence(x, 0.05)
    _, lo2, hi2 = confidence_sequence(x * 1e-3, 0.05)
    assert math.isclose(lo2, lo * 1e-3) and math.isclose(hi2, hi * 1e-3)


def test_time_uniform_error_under_optional_stopping():
    """Looking after every round from 10 to 200 and stopping at the first interval that misses the true mean: the
    share of paths that ever miss stays near alpha (the method is asymptotic; docs/gate.md gives the measured
    rates), far under what repeated fixed-n intervals give."""
    rng = np.random.default_rng(7)
    alpha, paths, ever, fixed_ever = 0.05, 200, 0, 0
    for _ in range(paths):
        x = rng.normal(0, 1, 200)
        missed = fixed_missed = False
        for t in range(10, 201):
            mean, lo, hi = confidence_sequence(x[:t], alpha)
            missed = missed or lo > 0 or hi < 0
            half = 1.96 * x[:t].std(ddof=1) / math.sqrt(t)  # an ordinary 95% interval, looked at each round
            fixed_missed = fixed_missed or abs(mean) > half
        ever += missed
        fixed_ever += fixed_missed
    assert ever / paths < 0.09, ever / paths
    assert fixed_ever / paths > 0.2, fixed_ever / paths  # why a fixed interval must not be peeked at


@pytest.mark.parametrize(("shift", "verdict"), [(math.log(1.3), "slower"), (0.0, "same"),
                                                (-math.log(1.3), "faster")])
def test_verdicts_follow_the_interval(shift, verdict):
    x = np.random.default_rng(3).normal(shift, 0.02, 12)
    out = sequential_verdict(x, 0.05, 0.01)
    assert out["verdict"] == verdict, out
    assert out["ci_low"] < out["ratio"] < out["ci_high"]


def test_a_straddling_interval_is_undecided():
    x = np.random.default_rng(4).normal(math.log(1.05), 0.2, 8)
    out = sequential_verdict(x, 0.05, 0.01)
    assert out["verdict"] == "undecided" and "straddles 1.050" in out["reason"]


@pytest.mark.parametrize("kwargs", [{"budget_s": 0}, {"budget_s": 10, "min_rounds": 2},
                                    {"budget_s": 10, "min_rounds": 8, "max_rounds": 5}])
def test_bad_designs_are_refused(kwargs):
    with pytest.raises(ValueError):
        SequentialConfig(**kwargs)


@pytest.mark.parametrize("flags", [["--budget", "0"], ["--budget", "10", "--min-rounds", "2"]])
def test_bad_budget_flags_are_harness_errors(tmp_path, capsys, flags):
    rc = main(["ab", "--base", str(ROOT), "--head", str(ROOT), *flags, "--out", str(tmp_path / "ab"), *RUN_ARGS])
    assert rc == 3
    assert "budget" in capsys.readouterr().err


@pytest.mark.slow  # a real ab run: two worker processes
def test_sequential_ab_of_the_same_code_passes_early(tmp_path, results_dir, capsys):
    """The same code on both sides with a 90% threshold: the case is `same` within a few looks (from round 3; on
    a loaded machine a look or two later), and the run stops there, far inside its budget."""
    out = tmp_path / "ab"
    rc = main(["ab", "--base", str(ROOT), "--head", str(ROOT), "--budget", "600", "--min-rounds", "3",
               "--threshold", "0.9", "--out", str(out), "--results-dir", str(results_dir),
               "--no-store-report", *RUN_ARGS])
    captured = capsys.readouterr()
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert rc == 0 and summary["verdict"] == "pass", summary
    progress = [line for line in captured.err.splitlines() if line.startswith("ab: ")]
    assert progress[0].startswith("ab: round 1 done, ") and progress[0].endswith("s of the 600 s budget")
    full = json.loads((out / "report.json").read_text())
    rounds = full["sequential"]["rounds"]
    assert rounds >= 3 and full["sequential"]["stopped"] == "all decided"
    assert progress[-1] == f"ab: after {rounds} rounds: 0 case(s) undecided"
    (case,) = full["cases"]
    assert case["verdict"] == "same" and case["decided_at_round"] == rounds and case["paired_rounds"] == rounds
    assert len(list((out / "head").glob("r*.json"))) == rounds
    assert any(n.startswith(f"sequential: {rounds} round(s) in ") for n in full["notes"])
    assert "sequential" in (out / "report.md").read_text()


def _gate_quality():
    import importlib.util
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        spec = importlib.util.spec_from_file_location("gate_quality", ROOT / "scripts" / "gate_quality.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    return module


def test_the_quality_study_gates_real_samples():
    """The study's synthetic sides carry their samples into the gate (a clear slowdown is found by both designs,
    identical sides pass the sequential one at its first look)."""
    from fp8bench.analysis.gate.config import GateConfig

    gq = _gate_quality()
    rng = np.random.default_rng(0)
    assert gq.one_trial(rng, 0.01, 0.3, 2, 10, GateConfig(paired=True, n_boot=200)) == ["slower", "slower"]
    verdicts, rounds = gq.sequential_trial(rng, 0.01, 0.0, 2, 8, 60, 0.05, 0.01)
    assert verdicts == ["same", "same"] and rounds == 8
    verdicts, _ = gq.sequential_trial(rng, 0.01, 0.3, 2, 8, 60, 0.05, 0.01)
    assert verdicts == ["slower", "slower"]
