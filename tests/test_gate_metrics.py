"""Gate on more than time: --metric median_s|energy_j|sqnr_db, each with its direction; SQNR floors per precision."""

from __future__ import annotations

import json
import math

import pytest

from fp8bench.analysis.gate.config import GateConfig, GateError
from fp8bench.analysis.gate.metrics import floor_for, metric_value, parse_sqnr_floor, sqnr_verdict
from fp8bench.analysis.gate.report import gate
from fp8bench.cli import main
from fp8bench.core.records import load_record
from fp8bench.exit_codes import EXIT_INCONCLUSIVE, EXIT_PASS, EXIT_REGRESSION
from fp8bench.render.gate_markdown import render_markdown
from fp8bench.results.runfile import atomic_write_json
from tests.gate_fixtures import payload, record


def _rounds(prefix, cases, n=10):
    """``cases``: (precision, seconds, joules, sqnr_db) -> n rounds of one record each per case."""
    out = []
    for r in range(n):
        recs = []
        for precision, seconds, joules, sqnr in cases:
            rec = record(64, precision, [seconds * f for f in (0.99, 1.0, 1.01)])
            rec.update(energy_j=None if joules is None else joules * (1 + 0.002 * ((r % 3) - 1)),
                       numerics={"sqnr_db": sqnr})
            recs.append(rec)
        out.append(payload(f"{prefix}-r{r:02d}", recs))
    return out


BASE = [("bf16", 1e-3, 0.50, 48.0), ("fp8_rowwise", 2e-3, 0.40, 28.0)]


def _verdicts(report):
    return {c.case.split()[1].split("/")[0]: c.verdict for c in report.cases}


def test_energy_regression_is_worse_and_time_is_unaffected():
    cand = [("bf16", 1e-3, 0.50, 48.0), ("fp8_rowwise", 2e-3, 0.52, 28.0)]  # 30% more joules, same time
    energy = gate(_rounds("b", BASE), _rounds("h", cand), GateConfig(metric="energy_j", paired=True))
    assert _verdicts(energy) == {"bf16": "same", "fp8_rowwise": "worse"}
    assert energy.exit_code == EXIT_REGRESSION and energy.slower_cases == [energy.cases[1].case]
    time = gate(_rounds("b", BASE), _rounds("h", cand), GateConfig(paired=True))
    assert set(_verdicts(time).values()) == {"same"}


def test_less_energy_is_better():
    cand = [("bf16", 1e-3, 0.40, 48.0), ("fp8_rowwise", 2e-3, 0.40, 28.0)]
    report = gate(_rounds("b", BASE), _rounds("h", cand), GateConfig(metric="energy_j", paired=True))
    assert _verdicts(report) == {"bf16": "better", "fp8_rowwise": "same"} and report.exit_code == EXIT_PASS


def test_energy_needs_rounds_one_run_per_side_is_inconclusive():
    report = gate(_rounds("b", BASE, n=1), _rounds("h", BASE, n=1), GateConfig(metric="energy_j"))
    assert set(_verdicts(report).values()) == {"inconclusive"} and "too few samples" in report.cases[0].reason
    assert report.cand_sample_unit == "one value per run"


def test_no_energy_meter_is_not_measured_not_a_pass():
    none = [("bf16", 1e-3, None, 48.0)]
    report = gate(_rounds("b", none), _rounds("h", none), GateConfig(metric="energy_j"))
    (case,) = report.cases
    assert case.verdict == "not measured" and "no energy_j" in case.reason
    assert report.exit_code == EXIT_INCONCLUSIVE  # nothing compared is never a pass


def test_sqnr_drop_beyond_tolerance_is_a_regression_in_db():
    cand = [("bf16", 1e-3, 0.5, 47.5), ("fp8_rowwise", 2e-3, 0.4, 26.0)]  # -0.5 dB, -2 dB
    report = gate(_rounds("b", BASE), _rounds("h", cand), GateConfig(metric="sqnr_db"))
    assert _verdicts(report) == {"bf16": "same", "fp8_rowwise": "worse"}
    worse = report.cases[1]
    assert (worse.values.base_value, worse.values.cand_value) == (28.0, 26.0) and "-2.00 dB" in worse.reason
    assert report.exit_code == EXIT_REGRESSION
    loose = gate(_rounds("b", BASE), _rounds("h", cand), GateConfig(metric="sqnr_db", sqnr_tolerance_db=3))
    assert set(_verdicts(loose).values()) == {"same"}


def test_sqnr_floor_fails_a_candidate_whatever_the_base_did():
    low = [("bf16", 1e-3, 0.5, 48.0), ("fp8_rowwise", 2e-3, 0.4, 18.0)]
    floors = (("bf16", 35.0), ("fp8_*", 20.0))
    report = gate(_rounds("b", low, n=1), _rounds("h", low, n=1), GateConfig(metric="sqnr_db", sqnr_floors=floors))
    assert _verdicts(report) == {"bf16": "same", "fp8_rowwise": "worse"}
    assert "under the 20 dB floor for fp8_*" in report.cases[1].reason
    md = render_markdown(report)
    assert "on sqnr_db" in md and "| worse | 18.00 | 18.00 | +0.00 | 20 | 1/1 |" in md and "fp8_*: 20 dB" in md


def test_sqnr_verdict_edges():
    assert sqnr_verdict(math.inf, math.inf, 1.0, None)[0] == "same"  # both exact
    assert sqnr_verdict(math.inf, 60.0, 1.0, None)[0] == "worse"
    assert sqnr_verdict(30.0, 31.5, 1.0, None)[0] == "better"
    assert floor_for("fp8_rowwise", (("fp8_*", 20.0), ("fp8_rowwise", 22.0))) == (22.0, "fp8_rowwise")
    assert floor_for("bf16", (("fp8_*", 20.0),)) is None


def test_metric_values_and_floor_parsing():
    rec = {**record(64, "bf16", [1e-3]), "energy_j": 0.3, "numerics": {"sqnr_db": 40.0}}
    assert (metric_value(load_record(rec), "energy_j"), metric_value(load_record(rec), "sqnr_db")) == (0.3, 40.0)
    assert metric_value(load_record({**rec, "numerics": {"sqnr_db": float("nan")}}), "sqnr_db") is None
    assert parse_sqnr_floor("fp8_*=20") == ("fp8_*", 20.0) and parse_sqnr_floor("bf16=35dB") == ("bf16", 35.0)
    with pytest.raises(ValueError, match="PRECISION=DB"):
        parse_sqnr_floor("20")
    with pytest.raises(GateError, match="metric 'joules'; accepted: median_s, energy_j, sqnr_db"):
        GateConfig(metric="joules")


def test_cli_gates_sqnr_with_floors(tmp_path, results_dir, capsys):
    low = [("bf16", 1e-3, 0.5, 48.0), ("fp8_rowwise", 2e-3, 0.4, 18.0)]
    for name, payloads in (("base", _rounds("b", low, n=3)), ("head", _rounds("h", low, n=3))):
        for p in payloads:
            atomic_write_json(tmp_path / name / f"{p['run']['run_id']}.json", p)
    argv = ["gate", str(tmp_path / "base"), str(tmp_path / "head"), "--paired", "--metric", "sqnr_db",
            "--results-dir", str(results_dir), "--no-store-report", "--json"]
    assert main(argv) == EXIT_PASS
    capsys.readouterr()
    assert main([*argv, "--sqnr-floor", "bf16=35", "--sqnr-floor", "fp8_*=20"]) == EXIT_REGRESSION
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["config"]["sqnr_floors"] == [["bf16", 35.0], ["fp8_*", 20.0]]
    assert main([*argv, "--sqnr-floor", "twenty"]) == 3  # bad input, never a verdict's code
