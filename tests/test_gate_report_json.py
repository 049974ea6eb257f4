"""Gate reports written before the report was typed still read, and write back byte for byte.

The files under tests/data/gate_reports/ are report.json and report.md as fp8bench wrote them before
:class:`fp8bench.analysis.gate.report.GateReport` existed: a fixed-round gate (paired rounds), a one-run-per-side gate
(raw samples, loaded host, broken and incomparable cases, ``--fail-on regression``), an SQNR gate, an ``fp8bench ab``
that reran its inconclusive case, and a sequential ``fp8bench ab --budget``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fp8bench.analysis.gate.config import GateConfig
from fp8bench.analysis.gate.decision import REGRESSING, CaseResult, Verdict
from fp8bench.analysis.gate.report import AbInfo, GateReport, SequentialInfo, merge_rerun
from fp8bench.render.gate_markdown import render_markdown
from fp8bench.results.runfile import json_safe
from fp8bench.results.store import open_store

OLD = Path(__file__).parent / "data" / "gate_reports"
NAMES = ("gate", "gate_raw", "sqnr", "ab", "seq")


def _old(name: str) -> tuple[str, GateReport]:
    text = (OLD / f"{name}.json").read_text()
    return text, GateReport.from_json(json.loads(text))


@pytest.mark.parametrize("name", NAMES)
def test_old_report_writes_back_key_for_key_and_renders_the_same_markdown(name):
    text, report = _old(name)
    assert json.dumps(json_safe(report.to_json()), indent=1, allow_nan=False) == text
    assert render_markdown(report) == (OLD / f"{name}.md").read_text()


@pytest.mark.parametrize("name", NAMES)
def test_old_report_reads_as_typed_values(name):
    _, report = _old(name)
    stored = json.loads((OLD / f"{name}.json").read_text())
    assert isinstance(report.config, GateConfig)
    assert all(isinstance(c, CaseResult) and isinstance(c.verdict, Verdict) for c in report.cases)
    # Derived values come from the cases and agree with what the old writer stored beside them.
    assert (report.verdict, report.exit_code, report.slower_cases) == (
        stored["verdict"], stored["exit_code"], stored["slower_cases"])
    assert {v.value: n for v, n in report.counts.items()} == stored["counts"]


def test_sections_of_old_ab_reports_are_typed():
    _, ab = _old("ab")
    assert isinstance(ab.ab, AbInfo) and ab.ab.dirty == {"base": False, "head": False} and ab.ab.refs == {}
    (rerun,) = [c for c in ab.cases if c.rerun]
    assert rerun.first is not None and rerun.first.verdict is Verdict.INCONCLUSIVE
    assert ab.rerun is not None and ab.rerun.base_run_id.count(",") == 1  # the rerun's two rounds
    _, seq = _old("seq")
    assert isinstance(seq.sequential, SequentialInfo) and seq.sequential.rounds == 3
    assert seq.sequential.stopped == "all decided" and len(seq.sequential.round_seconds) == 3
    _, sqnr = _old("sqnr")
    worse = next(c for c in sqnr.cases if c.verdict is Verdict.WORSE)
    assert worse.values is not None and worse.values.floor_db == 20.0
    assert sqnr.config.sqnr_floors == (("fp8_*", 20.0),)


def test_a_report_that_predates_fields_reads_with_their_defaults_and_keeps_unknown_sections():
    minimal = {"report_id": "r1", "base_run_id": "a,b", "cand_run_id": "c,d", "verdict": "regression",
               "config": {"threshold": 0.05, "overrides": [], "alpha": 0.01},
               "cases": [{"case": "k", "verdict": "slower", "ratio": 1.2, "ci_low": 1.1, "ci_high": 1.3}],
               "later_section": {"x": 1}}
    report = GateReport.from_json(minimal)
    assert report.config.fail_on == "inconclusive" and report.config.metric == "median_s"
    assert report.base_run_ids == ("a", "b") and report.exit_code == 1 and report.slower_cases == ["k"]
    assert report.cases[0].n_base == 0 and report.cases[0].verdict in REGRESSING
    out = report.to_json()
    assert out["rounds"] == {"base": 2, "cand": 2} and out["later_section"] == {"x": 1}


def test_an_unknown_verdict_is_refused_by_name():
    with pytest.raises(ValueError, match=r"verdict 'sluggish'; accepted: slower, worse"):
        GateReport.from_json({"cases": [{"case": "k", "verdict": "sluggish"}]})


def test_merging_a_rerun_keeps_derived_values_in_step_with_the_cases():
    _, first = _old("gate")
    inconclusive = CaseResult("gemm[m=64,n=64,k=64] fp32 torch cpu", Verdict.INCONCLUSIVE, "straddles")
    first = GateReport(tuple(inconclusive if c.case == inconclusive.case else c for c in first.cases),
                       first.config, first.base_run_ids, first.cand_run_ids)
    rerun = GateReport((CaseResult(inconclusive.case, Verdict.SLOWER, "again"),), first.config, ("b2",), ("h2",))
    merged = merge_rerun(first, rerun)
    assert merged.case(inconclusive.case).verdict is Verdict.SLOWER
    assert inconclusive.case in merged.slower_cases and merged.counts[Verdict.INCONCLUSIVE] == 0
    assert merged.to_json()["rerun"] == {"base_run_id": "b2", "cand_run_id": "h2", "cases": [inconclusive.case]}


def test_the_store_keeps_the_json_and_it_reads_back(tmp_path):
    _, report = _old("ab")
    store = open_store(tmp_path / "results")
    assert store.add_gate_report(report.to_json())
    data = store.gate_reports_frame().iloc[0]["data"]
    back = GateReport.from_json(data if isinstance(data, dict) else json.loads(data))
    assert back.to_json() == json.loads(json.dumps(report.to_json()))
