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

from test_dashboard_apptest import TITLES, open_app, no_failures  # noqa: E402

from fp8bench.store import open_store  # noqa: E402

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


@pytest.mark.parametrize("page", list(PAGES))
def test_every_page_draws_every_record_the_product_writes(monkeypatch, every_store, page):
    at = open_app(monkeypatch, every_store["dir"], page)
    no_failures(at)
    assert [t.value for t in at.title] == [PAGES[page]]


def test_a_page_that_raises_shows_one_line_and_a_hint_not_a_traceback(monkeypatch, every_store, caplog):
    import fp8bench.payoff

    def broken(*args, **kwargs):
        raise RuntimeError("the summary broke\n  File \"/srv/fp8bench/payoff.py\", line 1")

    monkeypatch.setattr(fp8bench.payoff, "payoff_table", broken)
    at = open_app(monkeypatch, every_store["dir"], "payoff")
    assert not at.exception, [e.value for e in at.exception]
    [error] = [as_read(e.value) for e in at.error]
    first, hint = error.split("\n\n")
    assert first == "The Payoff page could not be drawn: RuntimeError: the summary broke"
    assert "Reload the store" in hint and "server's log" in hint
    assert "File" not in error and "/srv/" not in error
    assert any("the summary broke" in r.getMessage() or r.exc_info for r in caplog.records)
