"""Reports sized for where they go: a load warning shared by many round files is said once with its count, the
Markdown report stays under a pull-request comment's size whatever the budget (the details stay in the JSON), and
a sequential report's header names the method it used."""

from __future__ import annotations

from dataclasses import replace

from fp8bench.analysis.gate.config import GateConfig
from fp8bench.analysis.gate.report import SequentialInfo, build_report
from fp8bench.analysis.gate.sequential import METHOD
from fp8bench.analysis.gate.sides import collect_side
from fp8bench.render.gate_markdown import MARKDOWN_BYTES, render_markdown
from tests.gate_fixtures import rounds

CASES = {(64, "bf16"): 1e-3, (64, "fp32"): 2e-3, (128, "bf16"): 4e-3}


def test_one_load_note_per_side_with_its_count_not_one_per_round_file():
    base = collect_side(rounds("b", CASES, n_rounds=40, seed=1, load=(4.0, 2)))
    cand = collect_side(rounds("h", CASES, n_rounds=40, seed=2, load=(4.0, 2)))
    report = build_report(base, cand, GateConfig(paired=True))
    load_notes = [n for n in report.notes if "load average" in n]
    assert len(load_notes) == 2, load_notes
    assert "40 of 40 base runs" in load_notes[0] and "40 of 40 candidate runs" in load_notes[1]
    assert "b-r00" in report.to_json()["loaded_runs"]["base"]  # which runs: in the JSON, not the Markdown


def test_markdown_report_stays_under_a_comment_size_whatever_the_case_count():
    cases = {(m, p): 1e-3 * m / 64 for m in range(64, 64 + 400) for p in ("bf16", "fp32")}
    base = collect_side(rounds("b", cases, n_rounds=3, seed=1))
    cand = collect_side(rounds("h", cases, n_rounds=3, seed=2))
    report = build_report(base, cand, GateConfig(paired=True))
    report = replace(report, cases=tuple(replace(c, reason="x " * 200) for c in report.cases))  # the longest reasons
    md = render_markdown(report)
    assert len(md.encode()) < MARKDOWN_BYTES <= 20_000
    assert "more case(s) in the JSON report" in md


def test_a_sequential_report_names_its_confidence_sequence_not_bh_and_bootstrap():
    base = collect_side(rounds("b", CASES, seed=1))
    cand = collect_side(rounds("h", CASES, seed=2))
    report = build_report(base, cand, GateConfig(paired=True))
    sequential = SequentialInfo(METHOD, 600.0, 8, None, 20, 10, "all decided", 300.0, [30.0] * 10)
    report = replace(report, sequential=sequential)
    md = render_markdown(report)
    assert "Benjamini-Hochberg" not in md and "bootstrap" not in md and "(BH)" not in md
    assert "asymptotic confidence sequence" in md and "Bonferroni" in md
    fixed = render_markdown(build_report(base, cand, GateConfig(paired=True)))
    assert "Benjamini-Hochberg" in fixed
