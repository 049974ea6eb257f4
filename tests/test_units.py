"""Units users already type: 5% and 0.05 for fractions everywhere, percent for the noise target (nvbench)."""

from __future__ import annotations

import argparse

import pytest

from fp8bench.analysis.gate.config import GateError, parse_override
from fp8bench.cli import build_parser
from fp8bench.core.units import fraction_arg, parse_fraction, parse_percent, percent_arg
from fp8bench.measure.suites import SuiteError, load_suite


@pytest.mark.parametrize("text,value", [("5%", 0.05), ("0.05", 0.05), (" 8 % ", 0.08), ("0", 0.0), (0.1, 0.1),
                                        ("150%", 1.5)])
def test_fractions_accept_both_forms(text, value):
    assert parse_fraction(text) == pytest.approx(value)


def test_a_non_number_names_the_value_and_both_forms():
    with pytest.raises(ValueError, match=r"--threshold 'five' is not a number; write a fraction \(0.05\) or a "
                                         r"percentage \(5%\)"):
        parse_fraction("five", "--threshold")
    with pytest.raises(argparse.ArgumentTypeError, match="'5%%' is not a number"):
        fraction_arg("--threshold")("5%%")


def test_noise_target_is_percent_like_nvbench():
    assert parse_percent("0.5") == pytest.approx(0.005)
    assert parse_percent("0.5%") == pytest.approx(0.005)
    assert percent_arg("--max-noise")("2") == pytest.approx(0.02)


@pytest.mark.parametrize("argv,threshold", [(["--threshold", "5%"], 0.05), (["--threshold", "0.05"], 0.05),
                                            (["--threshold", "7.5%"], 0.075)])
def test_gate_threshold_flag_accepts_both_forms(argv, threshold):
    args = build_parser().parse_args(["gate", "a", "b", *argv])
    assert args.threshold == pytest.approx(threshold)


def test_override_accepts_both_forms():
    assert parse_override("gemm*=8%") == ("gemm*", pytest.approx(0.08))
    assert parse_override("gemm*=0.08") == ("gemm*", pytest.approx(0.08))
    with pytest.raises(GateError, match="is not a number"):
        parse_override("gemm*=eight")


def test_run_noise_target_flags_agree():
    parser = build_parser()
    new = parser.parse_args(["run", "--max-noise", "0.5"]).target_rse
    old = parser.parse_args(["run", "--target-rse", "0.005"]).target_rse
    pct = parser.parse_args(["run", "--target-rse", "0.5%"]).target_rse
    assert new == pytest.approx(old) == pytest.approx(pct) == pytest.approx(0.005)


def test_clock_floor_and_converge_tolerances_accept_percent():
    parser = build_parser()
    assert parser.parse_args(["run", "--clock-floor", "90%"]).clock_floor == pytest.approx(0.9)
    args = parser.parse_args(["converge", "--tolerance", "5%", "--diverge-gap", "0.25"])
    assert (args.tolerance, args.diverge_gap) == (pytest.approx(0.05), pytest.approx(0.25))


def test_suite_noise_target_accepts_a_percentage(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("settings: {target_rse: '1%'}\ncases:\n  - {workload: gemm, shapes: [32x32x32]}\n")
    assert load_suite(str(path)).settings["target_rse"] == pytest.approx(0.01)
    path.write_text("settings: {target_rse: lots}\ncases:\n  - {workload: gemm, shapes: [32x32x32]}\n")
    with pytest.raises(SuiteError, match="target_rse 'lots' is not a number"):
        load_suite(str(path))
