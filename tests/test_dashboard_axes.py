"""Charts a reader cannot misread: log axes labelled in full, times in milliseconds, the gate's labels off the points.

Plotly's own log axis labelled the ticks between decades with a bare leading digit, so on the Payoff page a 0.2x
speedup read as "2"; History drew end-to-end times in seconds and its gate labels across the top points; the
sidebar's run slider showed whole run ids, clipped at the sidebar's edge. Each page is opened here with Streamlit's
AppTest on a small store and its plotly figure read back.
"""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest

pytest.importorskip("streamlit")
pytest.importorskip("plotly")

from test_dashboard_apptest import no_failures, open_app  # noqa: E402

from fp8bench.dashboard.axes import log_ticks  # noqa: E402
from fp8bench.results.store import open_store  # noqa: E402
from tests.gate_fixtures import payload, record  # noqa: E402


def _timed(m: int, precision: str, seconds: float, peak: float | None = 0.5, **numerics: float) -> dict:
    rec = record(m, precision, [seconds * f for f in (0.98, 1.0, 1.0, 1.02)])
    flops, nbytes = 2 * m**3, 3 * m * m
    rec.update(flops=flops, bytes=nbytes, tflops=flops / seconds / 1e12, peak_tflops=peak,
               numerics={"sqnr_db": 30.0, "rel_err": 0.03, **numerics})
    return rec


@pytest.fixture
def store(tmp_path):
    """Two nightly runs of two shapes: FP8 5x slower than BF16 at 128^3 (0.2x) and 1.5x faster at 1024^3; a gate
    report on the second run."""
    db = open_store(tmp_path)
    for night, commit in enumerate(("aaaaaaa1", "bbbbbbb2")):
        db.ingest_run(payload(f"20261126T0{night}0000Z-abcdef", [
            _timed(128, "bf16", 2e-4), _timed(128, "fp8_rowwise", 1e-3, rel_err=0.001),
            _timed(1024, "bf16", 3e-2), _timed(1024, "fp8_rowwise", 2e-2)],
            commit=commit, started_at=f"2026-11-26T0{night}:00:00+00:00"))
    db.add_gate_report({"report_id": "g1", "created_at": "2026-11-26T02:00:00+00:00",
                        "base_run_id": "20261126T000000Z-abcdef", "cand_run_id": "20261126T010000Z-abcdef",
                        "git_commit": "bbbbbbb2", "verdict": "inconclusive", "exit_code": 2})
    return tmp_path


def spec(at, index: int = 0) -> dict:
    return json.loads(at.get("plotly_chart")[index].proto.spec)


def numbers(values) -> list[float]:
    """A figure's array as numbers: plotly writes numpy arrays as a typed base64 block (``dtype``, ``bdata``)."""
    if isinstance(values, dict):
        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"]).tolist()
    return list(values)


def test_log_ticks_are_1_2_5_steps_each_written_out():
    assert log_ticks([0.2, 1.5], "x") == ([0.2, 0.5, 1.0, 2.0], ["0.2x", "0.5x", "1x", "2x"])
    assert log_ticks([0.03, 0.031]) == ([0.02, 0.05], ["0.02", "0.05"])
    ticks, text = log_ticks([1e-7, 1e5])  # twelve decades: only the decades, each written out
    assert len(ticks) <= 12 and text[0] == "1e-7" and "1000" in text and "2" not in "".join(text)
    assert log_ticks([float("nan"), 0.0, -1.0]) == ([], [])


def _labels(axis: dict) -> dict[float, str]:
    assert axis.get("type") == "log" and axis.get("tickmode") == "array", axis
    return dict(zip(axis["tickvals"], axis["ticktext"], strict=True))


def test_payoff_speedup_axis_reads_0_2x_not_2_and_times_in_ms(monkeypatch, store):
    at = open_app(monkeypatch, store, "payoff")
    no_failures(at)
    figure = spec(at)
    labels = _labels(figure["layout"]["yaxis"])
    assert labels[0.2] == "0.2x" and labels[1.0] == "1x" and labels[2.0] == "2x"
    assert all(" ms against " in t["hovertemplate"] for t in figure["data"])


def test_roofline_axes_are_labelled_in_full(monkeypatch, store):
    at = open_app(monkeypatch, store, "roofline")
    no_failures(at)
    layout = spec(at)["layout"]
    intensity, rate = _labels(layout["xaxis"]), _labels(layout["yaxis"])
    assert "20" in intensity.values() and all(text[0] != "0" or "." in text for text in rate.values())
    points = [t for t in spec(at)["data"] if not t["name"].startswith("ceiling")]
    assert all("ms" in str(t.get("hovertemplate")) for t in points)


def test_numerics_relative_error_axis_is_labelled_in_full(monkeypatch, store):
    at = open_app(monkeypatch, store, "numerics")
    no_failures(at)
    at.radio[0].set_value("relative error (lower is better)").run()
    labels = _labels(spec(at)["layout"]["xaxis"])
    assert labels[0.001] == "0.001" and labels[0.05] == "0.05"


def test_history_draws_times_in_ms_and_the_gate_label_above_the_plot(monkeypatch, store):
    at = open_app(monkeypatch, store, "history")
    no_failures(at)
    at.selectbox[0].set_value("median time (ms, end-to-end)").run()
    no_failures(at)
    figure = spec(at)
    assert figure["layout"]["yaxis"]["title"]["text"] == "median time (ms, end-to-end)"
    times = sorted(y for t in figure["data"] for y in numbers(t["y"]))
    assert times[0] == pytest.approx(0.2) and times[-1] == pytest.approx(30.0)  # stored as 2e-4 s and 3e-2 s
    (label,) = [a for a in figure["layout"]["annotations"] if a["text"].startswith("gate:")]
    # Anchored by its bottom at the plot's top edge and unrotated: no part of it over the points.
    assert label["yref"] == "paper" and label["y"] >= 1 and label["yanchor"] == "bottom"
    assert label.get("textangle", 0) == 0


def test_the_run_slider_labels_fit_the_sidebar(monkeypatch, store):
    at = open_app(monkeypatch, store, "overview")
    no_failures(at)
    slider = at.select_slider[0]
    labels = [slider.format_func(o) for o in slider.options]
    assert labels == ["11-26 00:00 aaaaaaa", "11-26 01:00 bbbbbbb"]
    # The slider's end labels overflow the sidebar (centred on the thumbs): the range is also written out under it.
    captions = [re.sub(r"\\(.)", r"\1", c.value) for c in at.sidebar.caption]  # as read: escapes dropped
    assert "runs 11-26 00:00 aaaaaaa to 11-26 01:00 bbbbbbb (UTC)" in captions, captions


def test_the_overview_colour_bar_reads_speedups_not_their_log2(monkeypatch, store):
    """The heatmap colours log2 of the speedup (so 2x faster and 2x slower are equally strong); its bar was
    labelled -2, 0, 2, which read as speedups."""
    at = open_app(monkeypatch, store)
    no_failures(at)
    bar = spec(at)["data"][0]["colorbar"]
    labels = dict(zip(bar["tickvals"], bar["ticktext"], strict=True))
    assert labels[0] == "1x" and labels[-2] == "0.25x" and labels[1] == "2x"
    assert bar["title"]["text"].startswith("speedup")


def test_a_number_column_of_empty_cells_reads_a_dash_not_none():
    """Payoff's ``speedup_there`` is empty for every recipe that never pays off: an object column of ``None`` that
    the page formats as a number; it showed ``None`` in every row."""
    import pandas as pd
    import streamlit as st

    from fp8bench.dashboard.widgets import for_display

    frame = pd.DataFrame({"speedup_there": [None, None], "mixed": [1.5, None]}, dtype=object)
    shown, config = for_display(frame, {"speedup_there": st.column_config.NumberColumn(format="%.3gx"),
                                        "mixed": st.column_config.NumberColumn(format="%.3gx")})
    assert list(shown["speedup_there"]) == ["-", "-"] and list(shown["mixed"]) == ["1.5x", "-"]


def test_regressions_draw_times_in_ms_and_empty_text_cells_read_a_dash(monkeypatch, tmp_path):
    """A nightly history slowing 30% from its 17th commit: the change's chart was in seconds (0.00125), and the
    table's bisected commit and commit page read ``None`` where no bisect ran and no link template is known."""
    from test_changes import nightly_store

    nightly_store(tmp_path / "store", n=24, slow_from=16)
    at = open_app(monkeypatch, tmp_path / "store", "regressions")
    no_failures(at)
    figure = spec(at)
    assert figure["layout"]["yaxis"]["title"]["text"] == "median_s (ms)"
    assert min(numbers(figure["data"][0]["y"])) == pytest.approx(1.0, rel=0.05)  # 1e-3 s nights before the step
    shown = at.dataframe[0].value
    assert list(shown["bisected_commit"]) == ["-"]
    assert "first_bad_link" not in shown
