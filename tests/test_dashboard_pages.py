"""What each dashboard page answers, on a store holding every kind of record the product writes.

The store (``dashboard_support.every_record_store``) is filled by real runs: every workload, precision, backend
family and status, a Zipf-routed MoE shape with named and real-valued shape values, a two-rank collective. Every
page must draw it without an exception, and each page must answer its question: Payoff's facets each on their own
axis, cases ordered by FLOPs, Compare opening on two runs that share cases, Regressions saying when the history is
too short to judge, Phases opening on a GEMM rather than a collective, one definition of an FP8 cell for Overview
and Payoff, one roofline ceiling per compute rate; and a page that raises shows one line and a hint.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from dashboard_support import as_read, every_record_store

pytest.importorskip("streamlit")
pytest.importorskip("plotly")

import streamlit as st  # noqa: E402
from test_dashboard_apptest import TITLES, no_failures, open_app  # noqa: E402

from fp8bench.analysis.payoff import WORKLOAD_ORDER  # noqa: E402
from fp8bench.core.shapes import shape_label  # noqa: E402
from fp8bench.dashboard.widgets import LABEL_WIDTH  # noqa: E402
from fp8bench.results.store import open_store  # noqa: E402
from tests.gate_fixtures import payload, record  # noqa: E402

PAGES = {**TITLES, "regressions": "Regressions"}
WORKLOADS = {"gemm", "attention", "transformer_step", "grouped_gemm", "collective"}
PRECISIONS = {"fp32", "tf32", "bf16", "fp16", "fp8_tensorwise", "fp8_delayed", "fp8_rowwise", "fp8_blockwise",
              "mxfp8", "nvfp4", "mxfp4"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def every_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    return every_record_store(tmp_path_factory)


@pytest.fixture(scope="module")
def stored_records(every_store) -> pd.DataFrame:
    return open_store(every_store["dir"]).records_frame()


def test_the_store_holds_every_workload_precision_backend_and_status(stored_records):
    frame = stored_records
    assert set(frame["workload"]) == WORKLOADS
    assert set(frame["precision"]) == PRECISIONS
    assert set(frame["status"]) == {"ok", "skipped", "failed", "invalid"}
    assert {"torch", "te", "triton", "torchao", "emulated"} <= set(frame["backend"])
    assert frame["interpreted"].fillna(False).astype(bool).any()  # Triton's interpreter on the CPU
    moe = frame.loc[frame["workload"] == "grouped_gemm", "shape"]
    assert moe.str.contains("route=zipf").any() and moe.str.contains("alpha=1.5").any()
    assert (frame.loc[frame["workload"] == "collective", "status"] == "ok").any()  # a real two-rank run
    assert frame["has_losses"].fillna(False).astype(bool).any()  # convergence curves
    assert frame["profile_trace"].notna().any()  # `run --profile`


@pytest.mark.parametrize("page", list(PAGES))
def test_every_page_draws_every_record_the_product_writes(monkeypatch, every_store, page):
    at = open_app(monkeypatch, every_store["dir"], page)
    no_failures(at)
    assert [t.value for t in at.title] == [PAGES[page]]


def test_a_page_that_raises_shows_one_line_and_a_hint_not_a_traceback(monkeypatch, every_store, caplog):
    import fp8bench.analysis.payoff

    def broken(*args, **kwargs):
        raise RuntimeError("the summary broke\n  File \"/srv/fp8bench/payoff.py\", line 1")

    monkeypatch.setattr(fp8bench.analysis.payoff, "payoff_table", broken)
    at = open_app(monkeypatch, every_store["dir"], "payoff")
    assert not at.exception, [e.value for e in at.exception]
    [error] = [as_read(e.value) for e in at.error]
    first, hint = error.split("\n\n")
    assert first == "The Payoff page could not be drawn: RuntimeError: the summary broke"
    assert "Reload the store" in hint and "server's log" in hint
    assert "File" not in error and "/srv/" not in error
    assert any("the summary broke" in r.getMessage() or r.exc_info for r in caplog.records)


def chart_spec(at, index: int = 0) -> dict:
    return json.loads(at.get("plotly_chart")[index].proto.spec)


def flops_order(frame: pd.DataFrame, workload: str) -> list[str]:
    """The shape labels of a workload's stored records, smallest FLOPs first."""
    rows = frame[frame["workload"] == workload].dropna(subset=["flops"]).sort_values("flops", kind="stable")
    return list(dict.fromkeys(rows["shape"].map(shape_label)))


def test_payoff_draws_each_workload_on_its_own_axis_in_order_of_flops(monkeypatch, every_store, stored_records):
    at = open_app(monkeypatch, every_store["dir"], "payoff")
    no_failures(at)
    spec = chart_spec(at)
    layout = spec["layout"]
    panels = [t["text"] for t in layout["annotations"] if t["text"] in WORKLOAD_ORDER]
    assert panels == [w for w in WORKLOAD_ORDER if w in panels] and len(panels) >= 2
    for n, workload in enumerate(panels, start=1):
        axis = layout["xaxis" if n == 1 else f"xaxis{n}"]
        assert "matches" not in axis  # its own categories, not every workload's
        ticks = [t.replace("<br>", "") for t in axis["categoryarray"]]
        assert ticks == [label for label in flops_order(stored_records, workload) if label in ticks]
        points = {x.replace("<br>", "") for t in spec["data"] if t.get("xaxis", "x") == ("x" if n == 1 else f"x{n}")
                  for x in t["x"]}
        assert points == set(ticks)
        assert layout["yaxis" if n == 1 else f"yaxis{n}"]["title"]["text"] == "speedup vs bf16"
    assert layout["height"] >= 300 * len(panels)


def test_a_payoff_line_joins_sizes_of_one_shape_family_only(monkeypatch, every_store):
    """The every-record store holds grouped GEMMs routed balanced and Zipf-skewed, and collectives of several ops:
    each line stays within one routing or op, so no line zigzags between two families of one size."""
    from fp8bench.analysis.payoff import shape_family

    assert shape_family("e=8,route=zipf,alpha=1.2,m=64") == "route=zipf"
    assert shape_family("512x512x512") == "" and shape_family("op=all_gather,m=256,n=128") == "op=all_gather"
    at = open_app(monkeypatch, every_store["dir"], "payoff")
    no_failures(at)
    for trace in chart_spec(at)["data"]:
        families = {shape_family(x.replace("<br>", "")) for x in trace["x"]}
        assert len(families) == 1, (trace["name"], families)
        (family,) = families
        assert not family or trace["name"].endswith(family)


def test_overview_and_payoff_count_the_same_fp8_cells(monkeypatch, every_store):
    overview = open_app(monkeypatch, every_store["dir"])
    no_failures(overview)
    heatmap = chart_spec(overview)["data"][0]
    cell_backends = {line.split("<br>")[1] for row in heatmap["text"] for line in row if line}
    assert "emulated" not in cell_backends and cell_backends
    [count] = [m.value for m in overview.metric if m.label.startswith("FP8/4-bit recipes that pay off")]
    payoff = open_app(monkeypatch, every_store["dir"], "payoff")
    [paying] = [m.value for m in payoff.metric if m.label == "Recipes that pay off"]
    assert count == paying  # one rule (fp8bench.analysis.payoff.paying_off), one answer


def test_numerics_lists_cases_down_the_page_in_reading_order(monkeypatch, every_store, stored_records):
    at = open_app(monkeypatch, every_store["dir"], "numerics")
    no_failures(at)
    spec = chart_spec(at)
    cases = spec["layout"]["yaxis"]["categoryarray"][::-1]  # plotly stacks a category array from the bottom up
    assert "autorange" not in spec["layout"]["yaxis"]
    workloads = [c.split("<br>")[0] for c in cases]
    assert workloads == sorted(workloads, key=WORKLOAD_ORDER.index)  # GEMMs first, collectives last
    gemms = [c.split("<br>", 1)[1].replace("<br>", "") for c in cases if c.startswith("gemm<br>")]
    assert gemms == [s for s in flops_order(stored_records, "gemm") if s in gemms]
    assert all(len(line) <= LABEL_WIDTH + 1 or "," not in line for c in cases for line in c.split("<br>")[1:])
    assert all(t["orientation"] == "h" for t in spec["data"])  # the metric runs across, the cases down
    assert spec["layout"]["height"] >= 40 * len(cases)


def test_regressions_says_the_history_is_too_short_instead_of_no_regression(monkeypatch, every_store):
    at = open_app(monkeypatch, every_store["dir"], "regressions")
    no_failures(at)
    [warning] = [w.value for w in at.warning]
    assert warning.startswith("Not enough history to look for regressions")
    assert "1 commit(s)" in warning and "3 commits on each side" in warning
    assert not [s.value for s in at.success]  # never "No open regression"


def test_phases_opens_on_the_first_gemm_not_a_collective(monkeypatch, every_store, stored_records):
    at = open_app(monkeypatch, every_store["dir"], "phases")
    no_failures(at)
    chosen = at.selectbox[0].value
    assert " · gemm " in chosen and chosen.endswith(flops_order(stored_records, "gemm")[0])
    options = at.selectbox[0].options
    assert [o for o in options if " · collective " in o] == options[-2:]  # listed last
    phases = [c for c in at.dataframe[0].value.columns if c.startswith("phase:")]
    assert phases and all(at.dataframe[0].value[c].notna().any() for c in phases)  # the case's own phases only
    assert not {"phase:optimizer", "phase:communicate", "phase:attention"} & set(phases)


def test_compare_opens_on_the_newest_two_runs_that_share_cases(monkeypatch, every_store, stored_records):
    newest, before = every_store["run_ids"][-1], every_store["run_ids"][-2]
    keys = stored_records.groupby("run_id")["case_key"].agg(set)
    assert not keys[newest] & keys[before]  # the two latest runs share nothing
    at = open_app(monkeypatch, every_store["dir"], "compare")
    no_failures(at)
    base, cand = (box.value for box in at.selectbox[:2])
    assert [base, cand] == every_store["gate_run_ids"]
    assert len(at.dataframe[0].value) >= 1  # compared cases, not an empty page


def _timed(m: int, precision: str, seconds: float, backend: str = "torch", peak: float | None = None) -> dict:
    rec = record(m, precision, [seconds * f for f in (0.98, 1.0, 1.0, 1.02)], backend=backend)
    flops, nbytes = 2 * m**3, 3 * m * m
    rec.update(flops=flops, bytes=nbytes, tflops=flops / seconds / 1e12, peak_tflops=peak)
    return rec


def test_overview_fp8_cells_leave_out_the_emulated_reference_and_keep_4bit(monkeypatch, tmp_path):
    """The emulated reference is the fastest fp8_rowwise here; nvfp4 (4-bit) runs on a vendor kernel."""
    open_store(tmp_path).ingest_run(payload("cells", [
        _timed(256, "bf16", 2e-3), _timed(256, "fp8_rowwise", 1.5e-3), _timed(256, "fp8_rowwise", 1e-4, "emulated"),
        _timed(256, "nvfp4", 1e-3), _timed(256, "bf16", 3e-3, "emulated")]))
    at = open_app(monkeypatch, tmp_path)
    no_failures(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["FP8/4-bit recipes that pay off vs bf16"] == "2 of 2"
    assert metrics["Best FP8/4-bit cell"] == "2x"  # nvfp4 on torch: 2e-3 / 1e-3, not the emulated 20x
    assert metrics["Worst FP8/4-bit cell"] == "1.33x"
    heatmap = chart_spec(at)["data"][0]
    assert heatmap["x"] == ["bf16", "fp8_rowwise", "nvfp4"] and "emulated" not in json.dumps(heatmap["text"])


def test_roofline_draws_one_ceiling_per_rate_however_often_it_was_measured(monkeypatch, tmp_path):
    """BF16's ceiling measured in four runs, a few percent apart (a CPU's matmul rate under other load), and
    FP32's at half of it: two lines."""
    store = open_store(tmp_path)
    for i, peak in enumerate((0.41, 0.43, 0.44, 0.45)):
        store.ingest_run(payload(f"run{i}", [_timed(128 * (i + 1), "bf16", 1e-3, peak=peak),
                                             _timed(128 * (i + 1), "fp32", 2e-3, peak=0.2 + i * 0.004)],
                                 started_at=f"2026-11-2{i}T00:00:00+00:00"))
    at = open_app(monkeypatch, tmp_path, "roofline")
    no_failures(at)
    ceilings = [t["name"] for t in chart_spec(at)["data"] if t["name"].startswith("ceiling")]
    assert ceilings == ["ceiling 0.212 TFLOP/s (fp32)", "ceiling 0.45 TFLOP/s (bf16)"]


def test_every_table_reads_three_significant_digits_whole_seconds_and_no_none():
    """Tables showed 4.108e-5 and 0.0000002 seconds as stored, 3.223e-3 in the page's own format, timestamps to the
    microsecond and `None` in empty cells, text and number alike (Streamlit draws a missing number as `None`
    whatever the format or Styler). A time reads in ms; a number column with an empty cell is shown as text, each
    number formatted and the empty one `-`. The CSV download is the stored frame; only the display changes."""
    from fp8bench.dashboard.widgets import for_display

    frame = pd.DataFrame({"median_s": [4.108e-5, 2e-7], "speedup": [1.23456, None], "n": [10, 12],
                          "started_at": ["2026-11-26T10:11:12.345678+00:00", None], "reason": ["over budget", None],
                          "ratio": [1.0, 2.0], "gain": [0.5, None], "wall_s": [3.223e-3, None]})
    shown, config = for_display(frame, {"ratio": "explicit",
                                        "gain": st.column_config.NumberColumn("gain", format="%.2fx")})
    assert config["median_s"]["type_config"]["format"] == "%.3g" and config["median_s"]["label"] == "median (ms)"
    assert shown["median_s"].tolist() == pytest.approx([4.108e-2, 2e-4])
    assert config["ratio"] == "explicit" and "n" not in config  # a page's own format, and integers, are kept
    assert list(shown["started_at"]) == ["2026-11-26 10:11:12", "-"]
    assert list(shown["reason"]) == ["over budget", "-"]
    assert list(shown["speedup"]) == ["1.23", "-"] and list(shown["gain"]) == ["0.50x", "-"]
    assert list(shown["wall_s"]) == ["3.22", "-"] and config["wall_s"]["label"] == "wall (ms)"
    assert config["gain"]["label"] == "gain" and config["gain"]["type_config"]["type"] == "text"
    assert config["gain"]["alignment"] == "right"  # still read as a number column
