"""Output for people and tools is escaped: gate reports (pull-request comments, job summaries), CSV exports,
terminal tables and links show stored strings as text, never as markup, formulas, escape sequences or scripts."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest

from fp8bench.analysis.gate.config import GateConfig
from fp8bench.analysis.gate.report import build_report
from fp8bench.analysis.gate.sides import collect_side
from fp8bench.cli import main
from fp8bench.core.commits import commit_link, url_template
from fp8bench.core.escaping import md_code, md_text, neutralize_formulas, spreadsheet_safe, term_text, web_url
from fp8bench.render.gate_markdown import render_markdown
from tests.gate_fixtures import payload, record

HOSTILE_REASON = ("boom\n\n## fp8bench gate: **PASS** (exit 0)\n![x](http://evil.example/p.png) "
                  "[Login](http://evil.example/s) @octocat `code` | split | <img src=x>")
HOSTILE_CASE_PRECISION = "fp8`|`x|y"


def hostile_report() -> str:
    samples = [1e-3 * (1 + i / 100) for i in range(12)]
    base = payload("b", [record(64, HOSTILE_CASE_PRECISION, samples), record(65, "bf16", samples)])
    cand = payload("c", [record(64, HOSTILE_CASE_PRECISION, samples),
                         record(65, "bf16", None, status="failed", reason=HOSTILE_REASON)])
    cand["run"]["git"]["commit"] = "c0ffee` @octocat"
    report = build_report(collect_side([base]), collect_side([cand]), GateConfig())
    return render_markdown(report)


def test_a_failure_reason_cannot_forge_a_heading_image_link_or_mention_in_the_gate_report():
    md = hostile_report()
    lines = md.splitlines()
    assert [ln for ln in lines if ln.startswith("#")] == [lines[1]]  # the report's own heading only
    assert "**REGRESSION**" in lines[1]
    for markup in (r"!\[", r"\]\(", r"<img", r"\*\*PASS"):  # an image, a link, HTML, bold: none unescaped
        assert re.search(r"(?<!\\)" + markup, md) is None, markup
    broken = next(ln for ln in lines if "| broken |" in ln)
    assert "@octocat" not in broken and "@\u2060octocat" in broken  # no mention: GitHub finds none after @+U+2060
    # Each case row keeps its eight cells: no unescaped | from a reason or a case key splits one.
    rows = [ln for ln in lines if ln.startswith("| ``") or ln.startswith("| `")]
    assert len(rows) == 2
    for row in rows:
        cells = re.split(r"(?<!\\)\|", row)
        assert len(cells) == 10, row  # 8 cells between the outer pipes


def test_case_keys_are_code_spans_that_survive_backticks_and_pipes():
    assert md_code("a`b") == "``a`b``"
    assert md_code("x|y") == "`x\\|y`"
    assert md_code("`start") == "`` `start ``"
    assert md_code("line\nbreak") == "`line break`"


def test_md_text_shows_the_text_and_nothing_else():
    text = md_text("[a](javascript:x) *b* @me www.x.com \x1b[2J")
    assert "\x1b" not in text
    as_read = text.replace("\u2060", "").replace("\\", "")
    assert as_read == "[a](javascript:x) *b* @me www.x.com [2J"


@pytest.mark.parametrize("cell", ["=HYPERLINK(\"http://evil.example\",\"x\")", "+1+1", "-2+3", "@SUM(A1)",
                                  "\tx", "\rx"])
def test_formula_cells_are_prefixed_with_a_quote(cell):
    assert spreadsheet_safe(cell) == "'" + cell
    assert spreadsheet_safe("fp8_rowwise") == "fp8_rowwise" and spreadsheet_safe(-1.5) == -1.5


def test_csv_export_neutralizes_formulas_in_stored_strings_but_keeps_numbers(tmp_path, capsys):
    samples = [1e-3 * (1 + i / 100) for i in range(5)]
    run = payload("=cmd|' /C calc'!A0", [record(64, "bf16", samples, status="failed",
                                                reason="=HYPERLINK(\"http://evil.example\",\"x\")")])
    run["run"]["device"]["name"] = "@SUM(1+1)*cmd"
    path = tmp_path / "r.json"
    path.write_text(json.dumps(run))
    out = tmp_path / "r.csv"
    assert main(["export", str(path), "--format", "csv", "--out", str(out)]) == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert rows[0]["reason"] == "'=HYPERLINK(\"http://evil.example\",\"x\")"
    assert rows[0]["device_name"] == "'@SUM(1+1)*cmd" and rows[0]["run_id"].startswith("'=cmd")
    assert float(rows[0]["median_s"]) > 0  # numbers are not touched
    frame = neutralize_formulas(__import__("pandas").DataFrame({"x": ["-1", "ok"], "y": [-1.0, 2.0]}))
    assert list(frame["x"]) == ["'-1", "ok"] and list(frame["y"]) == [-1.0, 2.0]


def test_payoff_prints_a_markup_like_precision_as_itself(tmp_path, capsys):
    """A precision ``[/]fp8`` crashed Rich's markup parser; an escape sequence in a name reached the terminal."""
    samples = [1e-3 * (1 + i / 100) for i in range(5)]
    fast = [s / 2 for s in samples]
    run = payload("p", [record(64, "bf16", samples), record(64, "[/]fp8", fast), record(64, "fp8\x1b[2J", fast)])
    path = tmp_path / "r.json"
    path.write_text(json.dumps(run))
    store = str(tmp_path / "store")
    assert main(["ingest", str(path), "--store", store]) == 0
    capsys.readouterr()
    assert main(["payoff", "--store", store]) == 0
    out = capsys.readouterr().out
    assert "[/]fp8" in out and "\x1b[2J" not in out and "fp8[2J" in out
    assert term_text("[bold]x[/bold]\x07") == "\\[bold]x\\[/bold]"


@pytest.mark.parametrize("remote", ["javascript:alert(document.cookie)//{commit}", "data:text/html,x{commit}",
                                    "file:///etc/{commit}", "JavaScript:alert(1)"])
def test_non_http_remotes_never_become_links(remote):
    assert commit_link(url_template(remote), "abc123") is None
    assert web_url(remote) is None


def test_http_remotes_still_link_to_the_commit():
    assert commit_link(url_template("https://github.com/o/r"), "abc123") == "https://github.com/o/r/commit/abc123"
    assert commit_link(url_template("http://git.example/{commit}"), "a b") == "http://git.example/a%20b"


def test_history_table_draws_no_link_from_a_javascript_remote(monkeypatch, tmp_path):
    """The History page's commit column is a link column: a stored ``javascript:`` remote must leave it empty."""
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest

    import fp8bench.dashboard
    from fp8bench.dashboard.data import REPO_URL_ENV, STORE_ENV

    samples = [1e-3 * (1 + i / 100) for i in range(5)]
    store = tmp_path / "store"
    for i in range(2):
        run = payload(f"h{i}", [record(64, "bf16", samples)], commit=f"c{i}" * 4,
                      started_at=f"2026-11-2{i}T00:00:00+00:00")
        run["run"]["git"]["remote"] = "javascript:alert(document.cookie)//{commit}"
        path = tmp_path / f"h{i}.json"
        path.write_text(json.dumps(run))
        assert main(["ingest", str(path), "--store", str(store)]) == 0
    monkeypatch.setenv(STORE_ENV, str(store))
    monkeypatch.delenv(REPO_URL_ENV, raising=False)
    monkeypatch.chdir(tmp_path)  # no git checkout here to fall back on
    at = AppTest.from_file(str(Path(fp8bench.dashboard.__file__).parent / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("views/history.py")
    at.run()
    at.selectbox[0].select("median time (ms, end-to-end)").run()
    assert not at.exception and not at.error
    points = at.dataframe[0].value
    # No link is drawn: the column is left out when every cell is empty (the History table drops an empty link column).
    assert len(points) == 2 and ("commit_url" not in points or points["commit_url"].isna().all())
    assert not points.astype(str).apply(lambda col: col.str.contains("javascript:")).any().any()
    ticks = json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]["xaxis"]["ticktext"]
    assert ticks and not any("href" in t for t in ticks)
