"""The run table: every column, status and reason included, reads on a console of the width `run` gives it."""

from __future__ import annotations

from rich.console import Console

from fp8bench.report import precision_label, render_table
from tests.gate_fixtures import record


def test_status_and_reason_survive_long_shapes_and_phases_on_a_200_column_console():
    """Key=value shapes and many phases once left the status column zero characters wide when stdout was no
    terminal (`run` then draws on 200 columns)."""
    long_shape = {"op": "reduce_scatter", "m": 4096, "n": 1024, "b": 2, "h": 8, "s": 1024, "d": 64}
    phases = {"quantize": 1e-3, "gemm": 2e-3, "encode": 1e-3, "communicate": 3e-3, "decode": 4e-3}
    ok = {**record(64, "bf16", [1e-3, 1.1e-3]), "shape": long_shape, "phases": phases}
    skipped = {**record(64, "mxfp8", [], status="skipped", reason="torch does not run mxfp8 on cpu"),
               "shape": long_shape}
    console = Console(width=200, record=True, color_system=None)
    render_table([ok, skipped], "bf16", console)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 200
    flat = " ".join(text.split())
    for word in ("ok", "skipped:", "mxfp8", "communicate", "SQNR"):
        assert word in flat, word


def test_the_precision_says_when_a_library_ran_power_of_two_scales():
    """fp8bench's scaled FP8 recipes use FP32 scales; a record whose library rounded them to powers of two is
    another recipe, and the table says so where records sit side by side."""
    te = {**record(64, "fp8_blockwise", [1e-3]), "backend": "te"}
    assert precision_label({**te, "scale_format": "pow2"}) == "fp8_blockwise (pow2 scales)"
    assert precision_label({**te, "scale_format": "fp32"}) == precision_label(te) == "fp8_blockwise"
