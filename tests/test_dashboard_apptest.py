"""The dashboard under Streamlit's AppTest, against a store filled by real CPU runs.

Every page must render without an exception or an error box; tables must show the stored numbers; the URL must
carry the filters; an empty store must show the command that fills it and a corrupted one a readable message.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from dashboard_support import as_read, shared_store
from dashboard_support import fp8bench as run_cli

pytest.importorskip("streamlit")
pytest.importorskip("plotly")

import streamlit as st  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

import fp8bench.dashboard  # noqa: E402
from fp8bench.analysis.stats import compare_samples  # noqa: E402
from fp8bench.dashboard.data import FILL_COMMAND, STORE_ENV, loss_curve, shape_label  # noqa: E402
from fp8bench.dashboard.widgets import for_display, with_short_paths  # noqa: E402
from fp8bench.results.runfile import read_run_file  # noqa: E402
from fp8bench.results.store import open_store  # noqa: E402

APP = Path(fp8bench.dashboard.__file__).parent / "app.py"
TITLES = {"overview": "Overview: does FP8 pay off?", "roofline": "Roofline", "phases": "Phases", "energy": "Energy",
          "numerics": "Numerics", "history": "History by commit", "payoff": "Where FP8 pays off",
          "compare": "Compare two runs",
          "environment": "Environment"}


@pytest.fixture(scope="module")
def cpu_run_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    return shared_store(tmp_path_factory)


def open_app(monkeypatch: pytest.MonkeyPatch, target: Path | str, page: str = "overview",
             query: dict[str, str] | None = None) -> AppTest:
    monkeypatch.setenv(STORE_ENV, str(target))
    at = AppTest.from_file(str(APP), default_timeout=120)
    for key, value in (query or {}).items():
        at.query_params[key] = value
    at.run()
    if page != "overview":
        at.switch_page(f"views/{page}.py")
        at.run()
    return at


def no_failures(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def as_ms(shown: object) -> float:
    """A time as a table shows it: milliseconds, a number, or three significant digits as text where the column
    has an empty cell (widgets.for_display)."""
    return float(shown)  # type: ignore[arg-type]


def stored(store_dir: Path, run_id: str) -> pd.DataFrame:
    return open_store(store_dir).records_frame(run_ids=[run_id])


@pytest.mark.slow
@pytest.mark.parametrize("page", list(TITLES))
def test_every_page_renders_with_a_chart_and_a_csv_download(monkeypatch, cpu_run_store, page):
    at = open_app(monkeypatch, cpu_run_store["dir"], page)
    no_failures(at)
    assert [t.value for t in at.title] == [TITLES[page]]
    assert len(at.get("plotly_chart")) >= 1
    assert len(at.get("download_button")) >= 1
    assert len(at.dataframe) >= 1


@pytest.mark.slow
def test_overview_table_shows_the_stored_times_and_speedups(monkeypatch, cpu_run_store):
    at = open_app(monkeypatch, cpu_run_store["dir"])
    no_failures(at)
    shown = at.dataframe[0].value
    shown = shown[shown["workload"] == "gemm"]  # the store also holds the convergence run's training steps
    latest = stored(cpu_run_store["dir"], cpu_run_store["run_ids"][-1])
    ok = latest[latest["status"] == "ok"].set_index(["precision", "backend"])
    assert len(shown) == len(ok)  # one row per measured case of the latest run; the skipped one is not timed
    for row in shown.itertuples():
        rec = ok.loc[(row.precision, row.backend)]
        assert as_ms(row.median_s) == pytest.approx(rec["median_s"] * 1e3, rel=5e-3)
        assert as_ms(row.prequant_median_s) == pytest.approx(rec["prequant_median_s"] * 1e3, rel=5e-3)
        assert row.run_id == cpu_run_store["run_ids"][-1]
        assert row.speedup_e2e == pytest.approx(ok.loc[("bf16", row.backend), "median_s"] / rec["median_s"])
    assert set(shown["shape_label"]) == {"128x128x128"}
    # Each row carries the command that measures its case again: the one stored with its record.
    from fp8bench.results.store import open_store

    payload = open_store(cpu_run_store["dir"]).run_payload(cpu_run_store["run_ids"][-1])
    commands = {(r["precision"], r["backend"]): r["repro"] for r in payload["records"] if r["workload"] == "gemm"}
    for row in shown.itertuples():
        assert row.repro == commands[(row.precision, row.backend)]
    first = at.dataframe[0].value.iloc[0]
    assert at.code[0].value == first["repro"] and at.code[0].language == "bash"


@pytest.mark.slow
def test_phases_and_roofline_show_the_stored_phase_times_and_ceilings(monkeypatch, cpu_run_store):
    records = read_run_file(cpu_run_store["run_files"][-1])["records"]
    by_case = {(r["precision"], r["backend"]): r for r in records if r["status"] == "ok"}
    at = open_app(monkeypatch, cpu_run_store["dir"], "phases")
    no_failures(at)
    assert at.selectbox[0].value.endswith("gemm 128x128x128")
    phases = at.dataframe[0].value.set_index(["precision", "backend"])
    for key, rec in by_case.items():
        for name, seconds in rec["phases"].items():  # shown in ms (stored in seconds), as every time on a page
            assert as_ms(phases.loc[key, f"phase:{name}_s"]) == pytest.approx(seconds * 1e3, rel=5e-3)
    at = open_app(monkeypatch, cpu_run_store["dir"], "roofline")
    no_failures(at)
    bandwidth = by_case[("bf16", "torch")]["peak_mem_tbps"]
    assert bandwidth > 0  # the runner stores the device's measured copy bandwidth with each record
    assert f"Bandwidth ceiling: {bandwidth:.3g} TB/s (stored with the records)" in as_read(at.caption[0].value)
    roof = at.dataframe[0].value.set_index(["precision", "backend"])
    for key, rec in by_case.items():
        if rec["workload"] == "gemm":
            assert roof.loc[key, "tflops"] == rec["tflops"]
            assert roof.loc[key, "intensity"] == pytest.approx(rec["flops"] / rec["bytes"])


def _roofline_run(run_id: str, load: tuple[float, int], ceiling_load: str = "0.50") -> dict:
    """One CPU run of two GEMM cases: a quiet one within its ceiling, a spread one at 131% of a low ceiling
    (measured at load average ``ceiling_load`` on 2 CPUs)."""
    from tests.gate_fixtures import payload, record

    def case(precision: str, median_s: float, iqr_s: float, pct: float) -> dict:
        flops, nbytes = 2 * 128**3, 3 * 128 * 128 * 2
        samples = [median_s - iqr_s / 2, median_s, median_s, median_s + iqr_s / 2]
        return {**record(128, precision, samples), "iqr_s": iqr_s, "median_s": median_s, "flops": flops,
                "bytes": nbytes, "tflops": flops / median_s / 1e12, "pct_of_peak": pct,
                "peak_tflops": flops / median_s / 1e12 / pct * 100, "peak_mem_tbps": 0.02,
                "peak_source": f"measured 2026-11-26 at load average {ceiling_load} on 2 CPU(s): best of 5"}

    return payload(run_id, [case("bf16", 1e-3, 0.01e-3, 40.0), case("fp32", 2e-3, 1e-3, 131.5)], load=load)


def test_roofline_says_where_its_ceilings_come_from_and_flags_points_above_them(monkeypatch, tmp_path):
    open_store(tmp_path).ingest_run(_roofline_run("quiet-run", (0.5, 2)))
    at = open_app(monkeypatch, tmp_path, "roofline")
    no_failures(at)
    caption = as_read(at.caption[0].value)
    assert "Ceilings come from fp8bench's own measurement of this CPU" in caption
    assert "load average 0.50" in caption  # the stored ceiling's own source, its load included
    (warning,) = at.warning
    assert "1 point(s) above their ceiling" in warning.value and "fp8bench selfcheck --check cpu_ceiling" in as_read(
        warning.value)
    shown = at.dataframe[0].value.set_index("precision")
    assert bool(shown.loc["fp32", "above_ceiling"]) and not bool(shown.loc["bf16", "above_ceiling"])
    # The noise column is the run table's: IQR / median, noisy over 10%.
    assert shown.loc["fp32", "noise"] == pytest.approx(0.5) and bool(shown.loc["fp32", "noisy"])
    assert shown.loc["bf16", "noise"] == pytest.approx(0.01) and not bool(shown.loc["bf16", "noisy"])


def test_a_ceiling_measured_under_load_is_neither_drawn_nor_judged_against(monkeypatch, tmp_path):
    """Records written before runs withheld a loaded CPU ceiling still carry one: the page draws no line at it,
    puts no % of peak against it, and says so."""
    open_store(tmp_path).ingest_run(_roofline_run("old-run", (0.5, 2), ceiling_load="7.75"))
    at = open_app(monkeypatch, tmp_path, "roofline")
    no_failures(at)
    caption = as_read(at.caption[0].value)
    assert "2 record(s) carry a ceiling measured under load (load average 7.75 on 2 CPU(s))" in caption, caption
    assert not at.warning  # no point "above its ceiling": there is no ceiling to be above
    shown = at.dataframe[0].value.set_index("precision")
    assert (shown["pct_of_peak"] == "-").all() and (shown["peak_tflops"] == "-").all()  # empty cells read "-"


def test_a_run_started_under_load_is_noisy_on_the_overview(monkeypatch, tmp_path):
    open_store(tmp_path).ingest_run(_roofline_run("loaded-run", (5.0, 2)))
    at = open_app(monkeypatch, tmp_path)
    no_failures(at)
    shown = at.dataframe[0].value.set_index("precision")
    assert shown["noisy"].astype(bool).all()  # the quiet-looking bf16 case too: its run shared the cores
    assert shown.loc["bf16", "noise"] == pytest.approx(0.01)


@pytest.mark.slow
def test_numerics_table_shows_the_stored_errors(monkeypatch, cpu_run_store):
    at = open_app(monkeypatch, cpu_run_store["dir"], "numerics")
    no_failures(at)
    shown = at.dataframe[0].value.set_index(["precision", "backend"])
    latest = stored(cpu_run_store["dir"], cpu_run_store["run_ids"][-1])
    measured = latest[latest["sqnr_db"].notna()].set_index(["precision", "backend"])
    assert set(shown.index) == set(measured.index)
    for key, rec in measured.iterrows():
        assert shown.loc[key, "sqnr_db"] == rec["sqnr_db"]
        assert shown.loc[key, "rel_err"] == rec["rel_err"]
    # FP8 loses accuracy against BF16 on the same inputs: the page must show that, not hide it.
    assert shown.loc[("fp8_rowwise", "torch"), "sqnr_db"] < shown.loc[("bf16", "torch"), "sqnr_db"]


@pytest.mark.slow
def test_energy_page_plots_metered_records_and_excludes_throttled_ones(monkeypatch, tmp_path, cpu_run_store):
    """No meter exists on this machine, so the CPU run's records get the energy fields an NVML window would
    write (the vendor boundary); one window is marked throttled, as the runner marks it."""
    payload = read_run_file(cpu_run_store["run_files"][0])
    metered = [r for r in payload["records"] if r["status"] == "ok"]
    for i, r in enumerate(metered):
        r.update(energy_j=0.5 + i, avg_power_w=300.0, tflops_per_w=r["flops"] / (0.5 + i) / 1e12,
                 energy={"method": "nvml_energy_counter", "reason": None, "invalid_reasons": []})
    throttled = metered[-1]
    throttled.update(status="invalid", valid=False, reason="throttled: sw power cap",
                     energy={"method": "nvml_energy_counter", "invalid_reasons": ["throttled: sw power cap"]})
    open_store(tmp_path).ingest_run(payload)
    at = open_app(monkeypatch, tmp_path, "energy")
    no_failures(at)
    assert len(at.get("plotly_chart")) == 3  # coverage, joules per iteration, TFLOPS per watt
    assert "1 measurement(s) excluded as invalid" in at.warning[0].value
    assert "throttled: sw power cap" in as_read(at.warning[0].value)
    shown = at.dataframe[-1].value.set_index(["precision", "backend"])
    for r in metered:
        key = (r["precision"], r["backend"])
        assert shown.loc[key, "energy_j"] == r["energy_j"]
        assert bool(shown.loc[key, "valid"]) is (r is not throttled)
    coverage = at.dataframe[0].value.set_index("outcome")["records"]
    assert coverage["measured"] == len(metered) - 1 and coverage["measured, excluded (invalid)"] == 1


@pytest.mark.slow
def test_numerics_shows_the_stored_loss_curves_and_verdicts(monkeypatch, cpu_run_store):
    at = open_app(monkeypatch, cpu_run_store["dir"], "numerics")
    no_failures(at)
    payload = open_store(cpu_run_store["dir"]).run_payload(cpu_run_store["converge_run_id"])
    curves = {r["precision"]: r for r in payload["records"]}
    assert set(curves) == {"bf16", "fp8_rowwise"}
    spec = json.loads(at.get("plotly_chart")[-1].proto.spec)
    lines = {t["name"]: t["y"] for t in spec["data"] if t.get("name", "").endswith("(emulated)")}
    assert lines["bf16 (emulated)"] == curves["bf16"]["extra"]["losses"]
    assert lines["fp8_rowwise (emulated)"] == curves["fp8_rowwise"]["extra"]["losses"]
    shown = at.dataframe[-1].value.set_index("precision")
    for precision, rec in curves.items():
        assert shown.loc[precision, "conv_verdict"] == rec["extra"]["convergence"]["verdict"]
        assert shown.loc[precision, "conv_final_gap"] == rec["extra"]["convergence"]["final_gap"]


@pytest.mark.slow
def test_compare_ratio_and_interval_are_the_stats_module_on_stored_samples(monkeypatch, cpu_run_store):
    at = open_app(monkeypatch, cpu_run_store["dir"], "compare")
    no_failures(at)
    shown = at.dataframe[0].value.set_index("case_key")
    base, cand = (read_run_file(f)["records"] for f in cpu_run_store["run_files"])
    pairs = {(b["precision"], b["backend"]): (b, c) for b, c in zip(base, cand, strict=True) if b["status"] == "ok"}
    assert len(shown) == len(pairs)
    b, c = pairs[("fp8_rowwise", "torch")]
    est = compare_samples(b["samples_s"], c["samples_s"])
    row = shown[shown.index.str.contains("fp8_rowwise") & shown.index.str.contains(" torch ")].iloc[0]
    assert (row["ratio"], row["ci_low"], row["ci_high"]) == (est.ratio, est.ci_low, est.ci_high)
    assert row["ci_low"] <= row["ratio"] <= row["ci_high"]
    not_compared = at.dataframe[1].value
    assert list(not_compared["reason"]) == ["status skipped"]  # mxfp8 on torch: skipped on the CPU


@pytest.mark.slow
def test_history_marks_the_gate_verdict(monkeypatch, cpu_run_store):
    at = open_app(monkeypatch, cpu_run_store["dir"], "history")
    no_failures(at)
    spec = at.get("plotly_chart")[0].proto.spec
    assert f"gate: {cpu_run_store['gate_verdict']}" in spec
    reports = at.dataframe[-1].value
    assert list(reports["verdict"]) == [cpu_run_store["gate_verdict"]]


def test_history_is_in_commit_order_with_links_and_regressions_lists_the_step(monkeypatch, tmp_path):
    from tests.test_changes import commit_of, nightly_store

    nightly_store(tmp_path / "store", n=24, slow_from=16)
    (tmp_path / "store" / "bisects").mkdir()
    (tmp_path / "store" / "bisects" / "x.json").write_text(json.dumps({
        "cases": ["gemm[m=64,n=64,k=64] bf16 torch cpu"], "good": {"sha": commit_of(15)}, "bad": {"sha": commit_of(16)},
        "first_bad": {"sha": commit_of(16), "subject": "the slow one"}}))
    monkeypatch.setenv("FP8BENCH_REPO_URL", "https://git.example.com/fp8bench")
    at = open_app(monkeypatch, tmp_path / "store", "history")
    at.selectbox[0].select("median time (ms, end-to-end)").run()
    no_failures(at)
    points = at.dataframe[0].value
    assert list(points["position"]) == sorted(points["position"]) and points["position"].max() == 23
    assert points["commit_url"].iloc[0] == f"https://git.example.com/fp8bench/commit/{commit_of(0)}"
    ticks = json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]["xaxis"]["ticktext"]
    assert ticks[0] == f"<a href='https://git.example.com/fp8bench/commit/{commit_of(0)}'>{commit_of(0)[:7]}</a>"
    at = open_app(monkeypatch, tmp_path / "store", "regressions")
    no_failures(at)
    [change] = at.dataframe[0].value.to_dict("records")
    assert change["first_bad_commit"] == commit_of(16) and change["last_good_commit"] == commit_of(15)
    assert change["open"] and change["kind"] == "regression" and change["size"] == pytest.approx(0.3, abs=0.03)
    assert change["first_bad_link"] == f"https://git.example.com/fp8bench/commit/{commit_of(16)}"
    assert change["bisected_commit"] == commit_of(16)  # the stored bisect of this range
    assert len(at.get("plotly_chart")) == 1


@pytest.mark.slow
def test_payoff_page_is_the_payoff_verb(monkeypatch, cpu_run_store):
    at = open_app(monkeypatch, cpu_run_store["dir"], "payoff")
    no_failures(at)
    shown = at.dataframe[0].value
    verb = pd.DataFrame(json.loads(run_cli("payoff", "--results-dir", cpu_run_store["dir"], "--json").stdout)["payoff"])
    # The same rows as every table shows them (absolute paths shortened, as on every page); the page formats its
    # number columns itself.
    formatted = {"speedup_there": st.column_config.NumberColumn(format="%.3gx"),
                 "speedup_at_largest": st.column_config.NumberColumn(format="%.3gx"),
                 "sqnr_cost_db": st.column_config.NumberColumn("SQNR cost (dB)", format="%.1f"),
                 "energy_ratio": st.column_config.NumberColumn("energy vs baseline", format="%.2fx")}
    expected, _ = for_display(with_short_paths(verb[list(shown.columns)]), formatted)
    pd.testing.assert_frame_equal(shown.reset_index(drop=True), expected, check_dtype=False)
    assert set(shown["precision"]) == {"fp8_rowwise", "mxfp8"}
    # mxfp8 ran on the emulated reference only: listed as such, with nothing to compare
    assert set(shown.loc[shown["precision"] == "mxfp8", "verdict"]) == {"measured only on the emulated reference"}


@pytest.mark.slow
def test_filters_come_from_the_url_and_go_back_into_it(monkeypatch, cpu_run_store):
    at = open_app(monkeypatch, cpu_run_store["dir"], query={"backend": "emulated"})
    no_failures(at)
    assert set(at.dataframe[0].value["backend"]) == {"emulated"}
    at.multiselect(key="filter_precision").select("fp8_rowwise").select("bf16").run()
    no_failures(at)
    assert at.query_params["precision"] == "fp8_rowwise,bf16"
    assert at.query_params["backend"] == "emulated"
    assert set(at.dataframe[0].value["precision"]) == {"fp8_rowwise", "bf16"}


@pytest.mark.slow
def test_run_range_in_the_url_selects_those_runs(monkeypatch, cpu_run_store):
    first = cpu_run_store["run_ids"][0]
    at = open_app(monkeypatch, cpu_run_store["dir"], "environment", query={"runs": f"{first}..{first}"})
    no_failures(at)
    runs_table = next(df.value for df in at.dataframe if "finished_at" in df.value.columns)
    assert list(runs_table["run_id"]) == [first]
    assert at.query_params["runs"] == f"{first}..{first}"


@pytest.mark.slow
def test_unknown_url_filter_value_is_named_with_the_accepted_ones(monkeypatch, cpu_run_store):
    at = open_app(monkeypatch, cpu_run_store["dir"], query={"precision": "fp9"})
    no_failures(at)
    warning = " ".join(as_read(w.value) for w in at.warning)
    assert "precision=fp9" in warning and "accepted: bf16, fp8_rowwise, mxfp8" in warning


@pytest.mark.parametrize("page", ["overview", "history"])
@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_empty_store_shows_the_command_that_fills_it(monkeypatch, tmp_path, kind, page):
    target = tmp_path / "results"
    if kind == "empty":
        open_store(target)  # a store with its tables and no records
    at = open_app(monkeypatch, target, page)
    no_failures(at)
    assert [c.value for c in at.code] == [FILL_COMMAND]
    assert "holds no records" in at.info[0].value
    if kind == "missing":
        assert not (target / "fp8bench.sqlite").exists()  # looking never creates a store


@pytest.mark.slow
def test_a_run_ingested_while_the_dashboard_is_open_appears_on_the_next_rerun(monkeypatch, tmp_path,
                                                                               cpu_run_store):
    target = tmp_path / "results"
    open_store(target)
    at = open_app(monkeypatch, target)
    assert [c.value for c in at.code] == [FILL_COMMAND]
    run_cli("ingest", cpu_run_store["run_files"][0], "--results-dir", target)
    at.run()
    no_failures(at)
    # The command that fills the store is gone; the one code block left is the chosen record's own command.
    assert [c.value for c in at.code] == [at.dataframe[0].value["repro"].iloc[0]]
    assert set(at.dataframe[0].value["run_id"]) == {cpu_run_store["run_ids"][0]}


@pytest.mark.parametrize("page", ["overview", "compare"])
def test_corrupted_store_is_a_readable_message(monkeypatch, tmp_path, page):
    db = tmp_path / "fp8bench.sqlite"
    db.write_bytes(b"this is not a database " * 200)
    at = open_app(monkeypatch, tmp_path, page)
    assert not at.exception, [e.value for e in at.exception]
    message = as_read(at.error[0].value)
    assert "could not be read" in message and "file is not a database" in message
    # The page names the store by its file, never by the server's folder (docs/security.md, "Server paths").
    assert f"\u2026/{db.name}" in message and str(db.parent) not in message


def test_loss_curve_and_shape_label_read_record_fields():
    assert loss_curve({"extra": {"losses": [2.5, 2.0, 1.5]}}) == [2.5, 2.0, 1.5]
    nan_step = loss_curve({"extra": {"losses": [2.5, None]}})
    assert nan_step[0] == 2.5 and nan_step[1] != nan_step[1]  # a non-finite step stored as null is NaN
    assert loss_curve({"extra": {"losses": "n/a"}, "numerics": {}}) is None
    assert shape_label("m=128,n=256,k=64") == "128x256x64"
    assert shape_label("b=2,h=8,s=1024,d=64") == "b=2,h=8,s=1024,d=64"


def test_dashboard_verb_serves_the_app_on_loopback_by_default(tmp_path):
    out = run_cli("dashboard", "--print-command", "--json", "--results-dir", tmp_path).stdout
    plan = json.loads(out.strip().splitlines()[-1])
    cmd = plan["command"]
    assert cmd[1:4] == ["-m", "fp8bench.dashboard.serve", "run"] and Path(cmd[4]) == APP
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--client.showErrorDetails") + 1] == "none"  # no traceback reaches a browser
    assert plan["env"] == {STORE_ENV: str(tmp_path)}
    bad = run_cli("dashboard", "--print-command", "--port", "70000", check=False)
    assert bad.returncode == 2 and "--port 70000" in bad.stderr and "1..65535" in bad.stderr


def test_downsample_keeps_each_stretchs_extremes_and_the_step():
    from fp8bench.dashboard.widgets import downsample

    y = [1.0] * 5000 + [2.0] * 5000
    y[1234] = 9.0  # a spike
    frame = pd.DataFrame({"position": range(10_000), "median_s": y})
    drawn = downsample(frame, "position", "median_s", max_points=200)
    assert len(drawn) <= 200 and drawn["median_s"].max() == 9.0 and set(drawn["median_s"]) == {1.0, 2.0, 9.0}
    assert list(drawn["position"]) == sorted(drawn["position"])
    small = frame.iloc[:50]
    assert downsample(small, "position", "median_s", max_points=200) is small


@pytest.mark.slow
def test_phases_page_lists_the_profile_trace_of_a_profiled_case(monkeypatch, tmp_path):
    from fp8bench.dashboard.profiles import PERFETTO_URL, readable_trace

    results = tmp_path / "results"
    out = run_cli("run", "--shape", "64x64x64", "--precision", "bf16", "--backend", "emulated", "--device", "cpu",
                  "--budget", "2", "--max-time", "0.2", "--no-energy", "--profile", "--json",
                  "--results-dir", results).stdout
    (record,) = json.loads(out.strip().splitlines()[-1])["records"]
    trace = record["extra"]["profile"]["trace"]
    at = open_app(monkeypatch, results, "phases")
    no_failures(at)
    assert "Profile traces" in [s.value for s in at.subheader]
    # Shown relative to the results folder: the server's folders above it are nobody's business.
    assert f"bf16 / emulated: {Path(trace).relative_to(results)}" in [t.value for t in at.text]
    assert [b.proto.url for b in at.get("link_button")] == [PERFETTO_URL]
    (download,) = [b for b in at.get("download_button") if b.proto.label.startswith("Download the trace")]
    assert readable_trace(trace) == Path(trace)
    # Paths that do not look like a trace fp8bench wrote are shown but never read.
    link = Path(trace).with_name("link" + Path(trace).name)
    link.symlink_to(trace)
    elsewhere = tmp_path / Path(trace).name
    elsewhere.write_text("{}")
    assert readable_trace(str(link)) is None and readable_trace(str(elsewhere)) is None
    assert readable_trace("/etc/passwd") is None and readable_trace(None) is None
