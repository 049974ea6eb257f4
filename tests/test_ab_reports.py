"""What A/B and gate reports carry and say: environment values given to a side are masked, each side's dirty flag
is reported, a hung side fails its round by name, a store error is one line without SQL, a store URL without a
database is bad input, and --fail-on regression says loudly when nothing was compared."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from fp8bench.analysis.gate.config import GateConfig
from fp8bench.analysis.gate.report import build_report
from fp8bench.analysis.gate.sides import collect_side
from fp8bench.cli import main
from fp8bench.orchestration.ab import AbError, SideSpec, run_ab
from fp8bench.render.gate_markdown import render_markdown
from fp8bench.results.store import open_store
from tests.ab_support import DIRTY, RUN_ARGS, SECRET, two_round_aa
from tests.gate_fixtures import payload, record

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = Path(__file__).resolve().parent / "plugins"


@pytest.fixture(scope="session")
def two_rounds(tmp_path_factory):
    return two_round_aa(tmp_path_factory)


@pytest.mark.slow  # a real A/B run: two worker processes (shared with test_ab.py)
def test_ab_masks_side_environments_and_reports_each_sides_dirty_flag(two_rounds):
    code, out, results = two_rounds["code"], two_rounds["out"], two_rounds["results"]
    assert code in (0, 2), two_rounds["stderr"]  # two rounds may well be inconclusive; a verdict either way
    report = json.loads((out / "report.json").read_text())
    assert report["ab"]["head_env"] == {"FP8BENCH_TEST_TOKEN": "***"}
    assert report["ab"]["base_env"] == {"DATABASE_URL": "***"}
    assert report["ab"]["dirty"] == DIRTY  # the base's checkout clean, the head's with a changed tracked file
    for text in ((out / "report.json").read_text(), (out / "report.md").read_text(), two_rounds["stdout"],
                 two_rounds["stderr"]):
        assert SECRET not in text
    stored = open_store(results).gate_reports_frame()["data"].iloc[0]
    assert SECRET not in (stored if isinstance(stored, str) else json.dumps(stored))
    md = (out / "report.md").read_text()
    assert "A/B: base checkout" in md and "`FP8BENCH_TEST_TOKEN`" in md and "values masked" in md


# The round limit of the hung-side test: above what a round of its one tiny case takes on a loaded machine (the
# base's round must finish within it), and short, since the test waits it out.
HUNG_ROUND_TIMEOUT_S = 12


@pytest.mark.slow
def test_a_hung_side_fails_its_round_by_name(tmp_path, worker_ceilings_dir):
    head = SideSpec("head", ROOT, {"FP8BENCH_PLUGINS": "fp8bench_test_hang", "PYTHONPATH": str(PLUGINS)})
    one_case = [*RUN_ARGS, "--precision", "bf16", "--results-dir", str(worker_ceilings_dir)]  # bf16: the one that hangs
    with pytest.raises(AbError) as hung:
        run_ab(SideSpec("base", ROOT), head, one_case, tmp_path / "ab", rounds=2, round_timeout_s=HUNG_ROUND_TIMEOUT_S)
    assert f"head round 1 of 2 did not finish within {HUNG_ROUND_TIMEOUT_S} s (--round-timeout)" in str(hung.value)
    assert (tmp_path / "ab" / "base" / "r00.json").is_file()  # the base's round before it is kept


def test_round_timeout_must_be_positive_seconds(capsys):
    for bad in ("0", "-5", "inf", "soon"):
        assert main(["ab", "--base", str(ROOT), "--round-timeout", bad, "--", *RUN_ARGS]) == 3
        assert "--round-timeout" in capsys.readouterr().err


def test_side_dirty_reads_the_rounds_git_flag(tmp_path):
    from fp8bench.orchestration.ab import side_dirty

    for name, flags in (("clean", [False, False]), ("dirty", [False, True]), ("unknown", [None])):
        folder = tmp_path / name
        folder.mkdir()
        for i, flag in enumerate(flags):
            run = payload(f"{name}{i}", [])
            run["run"]["git"]["dirty"] = flag
            (folder / f"r{i:02d}.json").write_text(json.dumps(run))
    assert [side_dirty(tmp_path / n) for n in ("clean", "dirty", "unknown")] == [False, True, None]


def test_a_store_error_is_one_line_without_the_statement_or_its_parameters(tmp_path, capsys):
    store = tmp_path / "store"
    open_store(store).engine.dispose()
    with sqlite3.connect(store / "fp8bench.sqlite") as conn:  # a database that refuses every report
        conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON gate_reports BEGIN SELECT RAISE(ABORT, 'refused'); END")
    samples = [1e-3 * (1 + i / 100) for i in range(10)]
    run = tmp_path / "r.json"
    run.write_text(json.dumps(payload("r1", [record(64, "bf16", samples)])))
    code = main(["gate", str(run), str(run), "--store", str(store), "--report-dir", str(tmp_path / "rep")])
    err = capsys.readouterr().err
    line = next(ln for ln in err.splitlines() if "report not stored" in ln)
    assert code == 0 and "IntegrityError: refused" in line
    assert "[SQL" not in err and "INSERT" not in err and "parameters" not in err


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///"])
def test_a_store_url_without_a_database_is_bad_input(tmp_path, capsys, url):
    run = tmp_path / "r.json"
    run.write_text(json.dumps(payload("r1", [record(64, "bf16", [1e-3])])))
    assert main(["ingest", str(run), "--store", url]) == 2
    assert "names no database file" in capsys.readouterr().err


def test_fail_on_regression_with_nothing_compared_says_so_loudly(tmp_path, capsys):
    samples = [1e-3 * (1 + i / 100) for i in range(12)]
    base = payload("b", [record(64, "bf16", samples)], torch="2.13.0")
    cand = payload("c", [record(64, "bf16", samples)], torch="2.9.1")  # another torch: incomparable
    report = build_report(collect_side([base]), collect_side([cand]), GateConfig(fail_on="regression"))
    assert report.exit_code == 0 and report.counts["incomparable"] == 1
    assert "**Warning: nothing was compared.**" in render_markdown(report)
    strict = build_report(collect_side([base]), collect_side([cand]), GateConfig())
    assert "nothing was compared" not in render_markdown(strict)  # exit 2 says it already
    paths = []
    for side in (base, cand):
        paths.append(tmp_path / f"{side['run']['run_id']}.json")
        paths[-1].write_text(json.dumps(side))
    assert main(["gate", *map(str, paths), "--fail-on", "regression", "--no-store-report",
                 "--report-dir", str(tmp_path / "rep")]) == 0
    assert "warning: nothing was compared" in capsys.readouterr().err


def test_a_failing_store_query_is_one_line_without_the_statement(tmp_path, capsys):
    samples = [1e-3 * (1 + i / 100) for i in range(5)]
    run = tmp_path / "r.json"
    run.write_text(json.dumps(payload("r1", [record(64, "bf16", samples)])))
    store = tmp_path / "store"
    assert main(["ingest", str(run), "--store", str(store)]) == 0
    with sqlite3.connect(store / "fp8bench.sqlite") as conn:  # a damaged store: a table the queries read is gone
        conn.execute("DROP TABLE record_data")
    capsys.readouterr()
    assert main(["export", "--format", "csv", "--store", str(store)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the store failed: OperationalError: no such table: record_data" in err
    assert "[SQL" not in err and "SELECT" not in err
