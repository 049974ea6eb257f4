"""What the gate tells CI: --fail-on, the job summary ($GITHUB_STEP_SUMMARY) and the report's hidden marker."""

from __future__ import annotations

import json

from fp8bench.analysis.gate.config import GateConfig
from fp8bench.analysis.gate.report import gate, merge_rerun
from fp8bench.cli import main
from fp8bench.exit_codes import EXIT_INCONCLUSIVE, EXIT_PASS
from fp8bench.render.gate_markdown import REPORT_MARKER, render_markdown
from fp8bench.results.runfile import atomic_write_json
from tests.gate_fixtures import rounds

CASES = {(64, "bf16"): 1e-3, (64, "fp32"): 2e-3}
NOISY = {"cv": 0.08}


def _inconclusive():
    return rounds("b", CASES, seed=3, **NOISY), rounds("h", {**CASES, (64, "bf16"): 1.06e-3}, seed=4, **NOISY)


def test_fail_on_regression_lets_an_inconclusive_outcome_pass_but_says_so():
    base, cand = _inconclusive()
    strict = gate(base, cand)
    assert strict.verdict == "inconclusive" and strict.exit_code == EXIT_INCONCLUSIVE
    lenient = gate(base, cand, GateConfig(fail_on="regression"))
    assert lenient.verdict == "inconclusive" and lenient.exit_code == EXIT_PASS
    assert lenient.config.fail_on == "regression"
    assert "INCONCLUSIVE** (exit 0 under --fail-on regression)" in render_markdown(lenient)


def test_fail_on_regression_still_fails_a_regression():
    report = gate(rounds("b", CASES, seed=1), rounds("h", {**CASES, (64, "bf16"): 1.5e-3}, seed=2),
                  GateConfig(fail_on="regression"))
    assert report.exit_code == 1


def test_merge_rerun_keeps_fail_on():
    base, cand = _inconclusive()
    first = gate(base, cand, GateConfig(fail_on="regression"))
    merged = merge_rerun(first, first)
    assert merged.exit_code == EXIT_PASS and merged.verdict == "inconclusive"


def test_markdown_report_starts_with_the_hidden_marker():
    report = gate(rounds("b", CASES, seed=1), rounds("h", CASES, seed=2))
    assert render_markdown(report).splitlines()[0] == REPORT_MARKER
    assert REPORT_MARKER.startswith("<!--") and REPORT_MARKER.endswith("-->")


def _write(tmp_path, name, payloads):
    for p in payloads:
        atomic_write_json(tmp_path / name / f"{p['run']['run_id']}.json", p)
    return str(tmp_path / name)


def test_gate_appends_its_report_to_the_step_summary(tmp_path, results_dir, monkeypatch, capsys):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    base, cand = _inconclusive()
    rc = main(["gate", _write(tmp_path, "b", base), _write(tmp_path, "c", cand), "--results-dir", str(results_dir),
               "--no-store-report", "--fail-on", "regression", "--json"])
    assert rc == EXIT_PASS
    text = summary.read_text()
    assert text.startswith("earlier step\n" + REPORT_MARKER)  # appended, never overwritten
    assert "fp8bench gate: **INCONCLUSIVE**" in text
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["exit_code"] == EXIT_PASS


def test_an_unwritable_step_summary_is_reported_and_the_verdict_stands(tmp_path, results_dir, monkeypatch, capsys):
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "no-such-dir" / "summary.md"))
    base = rounds("b", CASES, seed=1)
    rc = main(["gate", _write(tmp_path, "b", base), _write(tmp_path, "c", rounds("h", CASES, seed=2)),
               "--results-dir", str(results_dir), "--no-store-report"])
    assert rc == EXIT_PASS
    assert "cannot append the report to $GITHUB_STEP_SUMMARY" in capsys.readouterr().err



def test_gate_prints_a_plain_table_and_keeps_the_markdown_for_the_report(tmp_path, results_dir, capsys):
    """On a terminal or in a log the verdicts read as a plain table (no Markdown escapes, no pipes, cells cut to
    the console); the Markdown goes to report.md, the job summary and the pull-request comment."""
    base, cand = _inconclusive()
    folder = tmp_path / "report"
    rc = main(["gate", _write(tmp_path, "b", base), _write(tmp_path, "c", cand), "--results-dir", str(results_dir),
               "--no-store-report", "--report-dir", str(folder)])
    out = capsys.readouterr().out
    assert rc == EXIT_INCONCLUSIVE
    table = out.strip().splitlines()[:-1]  # the last line is the JSON summary
    assert not any(line.startswith("|") or "**" in line or "\\[" in line for line in table), out
    assert any(line.startswith("fp8bench gate: INCONCLUSIVE (exit 2)") for line in table), out
    assert any("inconclusive" in line and "[" in line and "]" in line for line in table[3:]), out
    assert max(len(line) for line in table) <= 200, out
    assert "fp8bench gate: **INCONCLUSIVE**" in (folder / "report.md").read_text()
