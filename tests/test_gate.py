"""The gate's logic on constructed samples: verdicts, comparability, thresholds, exit codes, reports."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fp8bench.analysis.gate.config import GateConfig, GateError, parse_override
from fp8bench.analysis.gate.decision import classify
from fp8bench.analysis.gate.report import GateReport, aa_noise_of, gate, merge_rerun
from fp8bench.cli import main
from fp8bench.exit_codes import EXIT_INCONCLUSIVE, EXIT_PASS, EXIT_REGRESSION
from fp8bench.render.gate_markdown import render_markdown
from fp8bench.results.runfile import atomic_write_json
from fp8bench.results.store import open_store
from tests.gate_fixtures import payload, record, rounds

CASES = {(64, "bf16"): 1e-3, (64, "fp32"): 2e-3, (128, "bf16"): 4e-3}


def verdicts(report):
    return {c.case.split(" ")[0] + " " + c.case.split(" ")[1]: c.verdict for c in report.cases}


def test_same_code_passes():
    report = gate(rounds("b", CASES, seed=1), rounds("h", CASES, seed=2))
    assert report.exit_code == EXIT_PASS and report.verdict == "pass"
    assert set(verdicts(report).values()) == {"same"}
    assert report.slower_cases == []
    assert (report.base_sample_unit, report.cand_sample_unit) == ("round medians", "round medians")


def test_slowed_case_is_named_and_fails():
    slowed = {**CASES, (64, "bf16"): 1.2e-3}
    report = gate(rounds("b", CASES, seed=1), rounds("h", slowed, seed=2))
    assert report.exit_code == EXIT_REGRESSION and report.verdict == "regression"
    v = verdicts(report)
    assert v["gemm[m=64,n=64,k=64] bf16"] == "slower"
    assert v["gemm[m=64,n=64,k=64] fp32"] == "same" and v["gemm[m=128,n=128,k=128] bf16"] == "same"
    assert report.slower_cases == ["gemm[m=64,n=64,k=64] bf16 torch cpu"]
    case = next(c for c in report.cases if c.verdict == "slower")
    assert 1.15 < case.ratio < 1.25 and case.ci_low > 1.05 and case.p_slower_adj < 0.01


def test_faster_case_does_not_fail():
    report = gate(rounds("b", CASES, seed=1), rounds("h", {**CASES, (64, "fp32"): 1.5e-3}, seed=2))
    assert verdicts(report)["gemm[m=64,n=64,k=64] fp32"] == "faster"
    assert report.exit_code == EXIT_PASS


def test_slowdown_under_threshold_is_not_a_regression():
    # 3% slower with little noise: real, but under T = 5%, so the interval stays under 1.05 -> same.
    report = gate(rounds("b", CASES, cv=0.002, seed=1), rounds("h", {**CASES, (64, "bf16"): 1.03e-3}, cv=0.002,
                                                               seed=2))
    assert verdicts(report)["gemm[m=64,n=64,k=64] bf16"] == "same"
    # ... and a per-case override of 1% makes the same data a regression of that case only.
    report = gate(rounds("b", CASES, cv=0.002, seed=1), rounds("h", {**CASES, (64, "bf16"): 1.03e-3}, cv=0.002,
                                                               seed=2),
                  GateConfig(overrides=(parse_override("gemm[[]m=64,*bf16*=1%"),)))
    case = next(c for c in report.cases if c.case.startswith("gemm[m=64") and "bf16" in c.case)
    assert case.verdict == "slower" and case.threshold == pytest.approx(0.01)
    assert report.exit_code == EXIT_REGRESSION


def test_noisy_borderline_case_is_inconclusive():
    report = gate(rounds("b", CASES, cv=0.08, seed=3), rounds("h", {**CASES, (64, "bf16"): 1.06e-3}, cv=0.08,
                                                               seed=4))
    assert verdicts(report)["gemm[m=64,n=64,k=64] bf16"] == "inconclusive"
    assert report.exit_code == EXIT_INCONCLUSIVE and report.verdict == "inconclusive"


def test_aa_noise_floor_raises_threshold():
    config = GateConfig(threshold=0.05, aa_noise=0.04)
    t, source = config.threshold_for("anything")
    assert t == pytest.approx(0.12) and "A/A" in source
    assert GateConfig(threshold=0.05, aa_noise=0.01).threshold_for("x")[0] == pytest.approx(0.05)
    aa = gate(rounds("b", CASES, seed=1), rounds("h", CASES, seed=2))
    noise = aa_noise_of(aa)
    assert 0 <= noise < 0.05


def test_incomparable_environment_is_named():
    report = gate(rounds("b", CASES, seed=1), rounds("h", CASES, seed=2, torch="2.14.0"))
    assert set(verdicts(report).values()) == {"incomparable"}
    assert report.cases[0].differences["torch"] == ["2.13.0", "2.14.0"]
    assert report.exit_code == EXIT_INCONCLUSIVE


def test_gpu_power_limit_and_driver_major_in_key():
    gpu = {"driver_version": "550.54.15", "cuda_driver_version": "12.4", "power_limit_w": 700.0,
           "clock_policy": "default"}
    same_major = {**gpu, "driver_version": "550.90.07"}
    report = gate(rounds("b", CASES, seed=1, gpu=gpu), rounds("h", CASES, seed=2, gpu=same_major))
    assert report.exit_code == EXIT_PASS  # a minor driver update keeps cases comparable
    capped = {**gpu, "power_limit_w": 500.0}
    report = gate(rounds("b", CASES, seed=1, gpu=gpu), rounds("h", CASES, seed=2, gpu=capped))
    assert report.cases[0].verdict == "incomparable"
    assert report.cases[0].differences == {"power_limit_w": [700.0, 500.0]}


def test_broken_new_and_missing_cases():
    base = rounds("b", CASES, seed=1)
    cand = rounds("h", {(64, "bf16"): 1e-3, (64, "fp32"): 2e-3, (256, "bf16"): 9e-3}, seed=2)
    for p in cand:
        p["records"][1] = {**record(64, "fp32", None, status="failed", reason="RuntimeError: boom"), "seq": 1}
    report = gate(base, cand)
    v = verdicts(report)
    assert v["gemm[m=64,n=64,k=64] fp32"] == "broken"
    assert v["gemm[m=128,n=128,k=128] bf16"] == "missing" and v["gemm[m=256,n=256,k=256] bf16"] == "new"
    assert report.exit_code == EXIT_REGRESSION
    assert "boom" in next(c.reason for c in report.cases if c.verdict == "broken")
    allowed = verdicts(gate(base, cand, GateConfig(allow_missing=True)))
    assert allowed["gemm[m=128,n=128,k=128] bf16"] == "removed"


def test_single_run_uses_raw_samples_with_a_note():
    base = [payload("b", [record(64, "bf16", [1.0, 1.01, 0.99, 1.0, 1.02, 0.98] * 3)])]
    cand = [payload("h", [record(64, "bf16", [1.3, 1.31, 1.29, 1.3, 1.32, 1.28] * 3)])]
    report = gate(base, cand)
    assert report.cases[0].n_base == 18 and report.cases[0].verdict == "slower"
    assert any("independent" in n for n in report.notes)


# One run per side of unchanged code: the candidate's run shared the cores with another process, so every sample
# of it is slower, and tight around its slow median (the shape of a loaded 2-core run).
QUIET = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98] * 3
LOADED = [2.6 * s for s in QUIET]


def test_a_side_measured_under_load_is_noisy_not_a_regression():
    base = [payload("b", [record(64, "bf16", QUIET)], load=(0.4, 2))]
    cand = [payload("h", [record(64, "bf16", LOADED)], load=(4.1, 2))]
    report = gate(base, cand)
    (case,) = report.cases
    assert case.verdict == "noisy" and case.ratio == pytest.approx(2.6)
    assert "candidate was measured at load average 4.10 on 2 CPU(s)" in case.reason
    assert report.verdict == "noisy" and report.exit_code == EXIT_INCONCLUSIVE
    assert report.slower_cases == []
    assert any("fp8bench ab" in n for n in report.notes)
    assert any("started at load average 4.10" in n for n in report.notes)
    assert "**NOISY** (exit 2)" in render_markdown(report)
    # --fail-on regression lets the job pass; the verdict is still reported as noisy.
    lenient = gate(base, cand, GateConfig(fail_on="regression"))
    assert lenient.exit_code == EXIT_PASS and lenient.verdict == "noisy"


def test_the_same_difference_on_a_quiet_machine_is_a_regression():
    """The noisy rule does not hide a real slowdown: the same samples, both runs quiet, are a regression."""
    report = gate([payload("b", [record(64, "bf16", QUIET)], load=(0.4, 2))],
                  [payload("h", [record(64, "bf16", LOADED)], load=(1.9, 2))])
    assert report.cases[0].verdict == "slower" and report.exit_code == EXIT_REGRESSION


def test_samples_spread_wider_than_the_difference_are_noisy():
    """Many samples make a tight interval of the median even when they spread 30%: the statistics alone would call
    a 20% slowdown, but one run whose samples spread wider than the difference cannot show it; 2% can."""
    spread = list(1.2 * (1 + 0.3 * np.linspace(-1, 1, 201)))  # median 1.2, IQR / median 0.30
    report = gate([payload("b", [record(64, "bf16", QUIET)])], [payload("h", [record(64, "bf16", spread)])])
    case = report.cases[0]
    assert case.verdict == "noisy", case
    assert "candidate's raw samples spread" in case.reason and "more than the 20.0% difference" in case.reason
    tight = [1.2 * s for s in QUIET]
    assert gate([payload("b", [record(64, "bf16", QUIET)])],
                [payload("h", [record(64, "bf16", tight)])]).cases[0].verdict == "slower"


@pytest.mark.parametrize("paired", [True, False])
def test_rounds_under_load_still_decide(paired):
    """Rounds are independent measurements whose interval carries the noise between them (and paired rounds share
    the load, which cancels): the noisy rule is for one run per side only."""
    slowed = {**CASES, (64, "bf16"): 1.2e-3}
    base = rounds("b", CASES, seed=1, load=(4.0, 2))
    cand = rounds("h", slowed, seed=2, load=(4.0, 2))
    report = gate(base, cand, GateConfig(paired=paired))
    assert verdicts(report)["gemm[m=64,n=64,k=64] bf16"] == "slower"
    assert report.verdict == "regression"


def test_too_few_samples_is_inconclusive_and_nothing_compared_is_not_a_pass():
    report = gate([payload("b", [record(64, "bf16", [1.0, 1.1])])], [payload("h", [record(64, "bf16", [1.0])])])
    assert report.cases[0].verdict == "inconclusive" and report.exit_code == EXIT_INCONCLUSIVE
    skipped = [payload("b", [record(64, "bf16", None, status="skipped", reason="over budget")])]
    report = gate(skipped, skipped)
    assert report.cases[0].verdict == "not measured"
    assert report.exit_code == EXIT_INCONCLUSIVE and "no case could be compared" in report.notes


def test_classify_rules():
    assert classify(1.08, 1.12, 0.001, 0.99, 0.05, 0.01)[0] == "slower"
    assert classify(1.08, 1.12, 0.02, 0.99, 0.05, 0.01)[0] == "inconclusive"  # not significant after BH
    assert classify(0.80, 0.90, 0.99, 0.001, 0.05, 0.01)[0] == "faster"
    assert classify(0.98, 1.04, 0.3, 0.3, 0.05, 0.01)[0] == "same"
    assert classify(1.00, 1.09, 0.04, 0.9, 0.05, 0.01)[0] == "inconclusive"


def test_merge_rerun_replaces_only_inconclusive_cases():
    first = gate(rounds("b", CASES, cv=0.08, seed=3), rounds("h", {**CASES, (64, "bf16"): 1.06e-3}, cv=0.08, seed=4))
    assert first.counts["inconclusive"] >= 1
    rerun = gate(rounds("b2", CASES, seed=5), rounds("h2", {**CASES, (64, "bf16"): 1.3e-3}, seed=6))
    merged = merge_rerun(first, rerun)
    m = {c.case: c for c in merged.cases}
    bf16 = m["gemm[m=64,n=64,k=64] bf16 torch cpu"]
    assert bf16.verdict == "slower" and bf16.rerun and bf16.first.verdict == "inconclusive"
    for c in first.cases:
        if c.verdict != "inconclusive":
            assert m[c.case].verdict == c.verdict and not m[c.case].rerun
    assert merged.exit_code == EXIT_REGRESSION and merged.rerun is not None
    assert merged.to_json()["rerun"]["cases"] == [c.case for c in merged.cases if c.rerun] != []


def test_bad_config_is_refused_with_the_value():
    with pytest.raises(GateError, match="0.05 means 5%"):
        GateConfig(threshold=5)
    with pytest.raises(GateError, match="PATTERN=T"):
        parse_override("no-equals-sign")
    with pytest.raises(GateError, match="'abc' is not a number"):
        parse_override("gemm*=abc")
    assert parse_override("gemm*=8%") == ("gemm*", pytest.approx(0.08))


def test_markdown_lists_regressions_first():
    report = gate(rounds("b", CASES, seed=1), rounds("h", {**CASES, (128, "bf16"): 6e-3}, seed=2))
    md = render_markdown(report)
    assert "**REGRESSION**" in md
    table = [line for line in md.splitlines() if line.startswith("| `")]
    assert "128" in table[0] and "slower" in table[0]


def _write_sides(tmp_path, base, cand):
    for name, payloads in (("base", base), ("cand", cand)):
        d = tmp_path / name
        for p in payloads:
            atomic_write_json(d / f"{p['run']['run_id']}.json", p)
    return tmp_path / "base", tmp_path / "cand"


def test_cli_gate_writes_reports_stores_them_and_exits_1(tmp_path, results_dir, capsys):
    b, c = _write_sides(tmp_path, rounds("b", CASES, seed=1, commit="base1"),
                        rounds("h", {**CASES, (64, "bf16"): 1.5e-3}, seed=2, commit="head1"))
    rc = main(["gate", str(b), str(c), "--results-dir", str(results_dir), "--report-dir", str(tmp_path / "rep"),
               "--json"])
    assert rc == EXIT_REGRESSION
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["exit_code"] == 1 and out["slower_cases"] == ["gemm[m=64,n=64,k=64] bf16 torch cpu"]
    saved = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert saved["verdict"] == "regression"
    assert "gemm[m=64,n=64,k=64] bf16 torch cpu" in (tmp_path / "rep" / "report.md").read_text()
    frame = open_store(results_dir).gate_reports_frame()
    assert len(frame) == 1
    row = frame.iloc[0]
    assert row["verdict"] == "regression" and row["git_commit"] == "head1" and row["exit_code"] == 1
    assert row["cand_run_id"].startswith("h-r00") and row["base_run_id"].startswith("b-r00")
    data = row["data"] if isinstance(row["data"], dict) else json.loads(row["data"])
    assert {c.verdict for c in GateReport.from_json(data).cases} == {"slower", "same"}


def test_cli_gate_harness_error_is_3(tmp_path, results_dir, capsys):
    rc = main(["gate", str(tmp_path / "missing.json"), str(tmp_path / "also-missing.json"),
               "--results-dir", str(results_dir)])
    assert rc == 3
    assert "no such results file or folder" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["gate", str(bad), str(bad), "--results-dir", str(results_dir)]) == 3


def test_cli_compare_reports_but_exits_0(tmp_path, results_dir, capsys):
    b, c = _write_sides(tmp_path, rounds("b", CASES, seed=1), rounds("h", {**CASES, (64, "bf16"): 1.5e-3}, seed=2))
    assert main(["compare", str(b), str(c), "--results-dir", str(results_dir)]) == 0
    out = capsys.readouterr().out
    assert "slower" in out and json.loads(out.strip().splitlines()[-1])["would_gate"] == "regression"


def drifting_rounds(prefix: str, seconds: float, factor: float, drift: list[float], seed: int) -> list[dict]:
    """Rounds whose speed jumps (the whole machine, both sides alike) while each side adds 1% noise of its own."""
    rng = np.random.default_rng(seed)
    out = []
    for r, d in enumerate(drift):
        center = seconds * factor * d * float(np.exp(rng.normal(0, 0.01)))
        out.append(payload(f"{prefix}-r{r:02d}", [record(64, "bf16", [center * f for f in (0.99, 1.0, 1.01)])]))
    return out


# A machine that runs at full speed for three rounds and at half speed afterwards (seen on shared CPUs).
DRIFT = [1.0, 1.0, 1.0] + [2.0] * 7


def test_paired_rounds_cancel_shared_drift():
    base, head = drifting_rounds("b", 1e-3, 1.0, DRIFT, 1), drifting_rounds("h", 1e-3, 1.0, DRIFT, 2)
    unpaired = gate(base, head)
    assert unpaired.cases[0].verdict == "inconclusive"  # the drift swamps a 5% threshold
    paired = gate(base, head, GateConfig(paired=True))
    (case,) = paired.cases
    assert case.verdict == "same" and case.paired_rounds == 10
    assert 0.97 < case.ci_low <= case.ratio <= case.ci_high < 1.03
    assert paired.config.paired is True and paired.exit_code == EXIT_PASS


def test_paired_rounds_still_catch_a_slowdown_under_drift():
    base, head = drifting_rounds("b", 1e-3, 1.0, DRIFT, 1), drifting_rounds("h", 1e-3, 1.10, DRIFT, 2)
    (case,) = gate(base, head, GateConfig(paired=True)).cases
    assert case.verdict == "slower" and 1.07 < case.ratio < 1.13
    assert case.p_slower_adj < 0.01


def test_paired_needs_matching_rounds_else_falls_back():
    base = drifting_rounds("b", 1e-3, 1.0, DRIFT, 1)
    single = drifting_rounds("h", 1e-3, 1.0, DRIFT[:1], 2)  # one run: raw samples, nothing to pair with
    (case,) = gate(base, single, GateConfig(paired=True)).cases
    assert case.paired_rounds is None and "paired_rounds" not in case.to_json()


def _capped(rec: dict, strict: bool = False) -> dict:
    """``rec`` as measured at the power limit: by an older fp8bench that invalidated it, or with --strict-clocks."""
    why = "throttled: power cap (sw_power_cap) during the energy window" + (" (--strict-clocks)" if strict else "")
    return {**rec, "status": "invalid", "valid": False, "reason": why,
            "energy": {"invalid_reasons": [why]}, "telemetry": {"reasons": ["sw_power_cap"]}}


def test_power_capping_alone_never_breaks_a_case():
    """A power-capped H100 record compares like any measured one, even from a run that marked it invalid; thermal
    slowdown, or power capping under --strict-clocks, still breaks the case."""
    base = rounds("b", CASES, seed=1)
    cand = rounds("h", CASES, seed=2)
    for p in cand:
        p["records"][1] = {**_capped(p["records"][1]), "seq": 1}
    v = verdicts(gate(base, cand))
    assert v["gemm[m=64,n=64,k=64] fp32"] == "same"

    strict = rounds("h", CASES, seed=2)
    for p in strict:
        p["run"]["settings"]["strict_clocks"] = True
        p["records"][1] = {**_capped(p["records"][1], strict=True), "seq": 1}
    assert verdicts(gate(base, strict))["gemm[m=64,n=64,k=64] fp32"] == "broken"

    # An older fp8bench invalidated the clock drop power capping causes (clock floor), the capping in a note.
    dropped = rounds("h", CASES, seed=2)
    clock = "throttled: median SM clock 1410 MHz is under 90% of the reference 1755 MHz"
    for p in dropped:
        p["records"][1] = {**p["records"][1], "status": "invalid", "valid": False, "reason": clock,
                           "energy": {"invalid_reasons": [clock], "clock_notes": [
                               "power-capped: clocks held by the power limit (sw_power_cap) during the window; "
                               "recorded, not invalidating (--strict-clocks invalidates it)"]}}
    assert verdicts(gate(base, dropped))["gemm[m=64,n=64,k=64] fp32"] == "same"

    hot = rounds("h", CASES, seed=2)
    why = "throttled: thermal slowdown (hardware) (hw_thermal_slowdown) during the energy window"
    for p in hot:
        p["records"][1] = {**p["records"][1], "status": "invalid", "valid": False, "reason": why,
                           "energy": {"invalid_reasons": [
                               "throttled: power cap (sw_power_cap) during the energy window", why]}}
    assert verdicts(gate(base, hot))["gemm[m=64,n=64,k=64] fp32"] == "broken"


def test_cli_aa_report_sets_the_noise_floor_from_a_stored_report(tmp_path, results_dir, capsys):
    b, c = _write_sides(tmp_path, rounds("b", CASES, cv=0.03, seed=1), rounds("h", CASES, cv=0.03, seed=2))
    aa = tmp_path / "aa.json"
    aa_report = gate(rounds("a1", CASES, cv=0.03, seed=3), rounds("a2", CASES, cv=0.03, seed=4))
    aa.write_text(json.dumps(aa_report.to_json()))
    rc = main(["gate", str(b), str(c), "--aa-report", str(aa), "--results-dir", str(results_dir), "--json",
               "--no-store-report"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == EXIT_PASS and out["config"]["aa_noise"] == pytest.approx(aa_noise_of(
        GateReport.from_json(json.loads(aa.read_text()))))
    aa.write_text(json.dumps({"report_id": "x"}))  # no cases: not a gate report
    assert main(["gate", str(b), str(c), "--aa-report", str(aa), "--results-dir", str(results_dir)]) == 3
    assert f"cannot read the A/A report {aa}" in capsys.readouterr().err
