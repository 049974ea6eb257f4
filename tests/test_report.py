"""The run table: every column, status and reason included, reads on a console of the width `run` gives it."""

from __future__ import annotations

from rich.console import Console

from fp8bench.render.run_table import precision_label, render_table
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
    for word in ("ok", "skipped (1)", "(1) torch does not run mxfp8 on cpu", "mxfp8", "communicate", "SQNR"):
        assert word in flat, word


def test_the_precision_says_when_a_library_ran_power_of_two_scales():
    """fp8bench's scaled FP8 recipes use FP32 scales; a record whose library rounded them to powers of two is
    another recipe, and the table says so where records sit side by side."""
    te = {**record(64, "fp8_blockwise", [1e-3]), "backend": "te"}
    assert precision_label({**te, "scale_format": "pow2"}) == "fp8_blockwise (pow2 scales)"
    assert precision_label({**te, "scale_format": "fp32"}) == precision_label(te) == "fp8_blockwise"


def _measured(precision: str, median_s: float, **fields) -> dict:
    samples = [median_s * f for f in (0.99, 1.0, 1.0, 1.01)]
    return {**record(512, precision, samples), "iqr_s": 0.01 * median_s, "tflops": 0.5, "pct_of_peak": 50.0,
            "phases": {"quantize": 0.2 * median_s, "gemm": 0.8 * median_s},
            "numerics": {"sqnr_db": 28.6, "rel_err": 0.037, "overflow_frac": 0.0, "underflow_frac": 1e-5},
            **fields}


def test_speedups_keep_two_significant_digits():
    from fp8bench.render.run_table import speedup_text

    assert [speedup_text(x) for x in (1 / 900, 0.15, 0.1, 1.0, 2.345, 12.3, 140.0)] == [
        "0.0011x", "0.15x", "0.10x", "1.0x", "2.3x", "12x", "140x"]
    assert speedup_text(None) == "-"
    # A case 900x slower than the baseline says so; it once printed 0.00x, like a case 5x slower.
    console = Console(width=200, record=True, color_system=None)
    render_table([_measured("bf16", 1e-3), _measured("fp8_tensorwise", 0.9)], "bf16", console)
    assert "0.0011x" in console.export_text()


def test_the_table_fits_every_width_dropping_the_least_important_columns_first():
    long_shape = {"op": "reduce_scatter", "m": 4096, "n": 1024, "b": 2, "h": 8, "s": 1024, "d": 64}
    records = [{**_measured("bf16", 1e-3), "shape": long_shape},
               {**_measured("fp8_rowwise", 2e-3), "shape": long_shape},
               {**record(512, "mxfp8", [], status="skipped", reason="torch does not run mxfp8 on cpu: torch's CPU "
                         "_scaled_mm has tensorwise and rowwise kernels only"), "shape": long_shape}]
    kept_at = {}
    for width in (80, 100, 120, 160, 220, 300):
        console = Console(width=width, record=True, color_system=None)
        render_table(records, "bf16", console)
        text = console.export_text()
        assert max(len(line) for line in text.splitlines()) <= width, width
        flat = " ".join(text.split())
        # The case's identity and its status (reason included) never vanish, whatever the width.
        for word in ("fp8_rowwise", "mxfp8", "skipped (1)", "kernels"):
            assert word in flat, (width, word)
        if width >= 160:  # wide enough for the shape on one line: it can be copied back into --shape
            assert "op=reduce_scatter,m=4096,n=1024,b=2,h=8,s=1024,d=64" in flat
        header = next(line for line in text.splitlines() if "workload" in line)
        kept_at[width] = [c.strip() for c in header.strip("┃ ").split("┃")]
        if "left out" in flat:
            assert "columns left out at" in flat and "--table compact" in flat
    # Time and the speedup stay longest; the overflow fractions go first.
    assert kept_at[120][-1] == "e2e ms" and "vs bf16" in kept_at[160] and "ovf/unf %" not in kept_at[160]
    assert kept_at[220] == kept_at[300] and len(kept_at[300]) == 16  # the short status cell leaves room for all


def test_compact_mode_is_one_plain_line_per_case():
    console = Console(width=80, record=True, color_system=None)
    render_table([_measured("bf16", 1e-3), {**record(512, "mxfp8", [], status="skipped", reason="over budget")}],
                 "bf16", console, compact=True)
    lines = console.export_text().splitlines()
    assert lines[0].startswith("gemm 512x512x512 bf16 torch: ok | e2e ms 1.00, ")
    assert "vs bf16 1.0x" in lines[0] and "noise 1% " not in lines[0] and "noise 1%" in lines[0]
    assert lines[1] == "gemm 512x512x512 mxfp8 torch: skipped: over budget"
    assert not any(ch in "".join(lines) for ch in "┃│┏")


def test_percent_of_peak_above_100_is_flagged_as_a_ceiling_problem():
    over = _measured("bf16", 1e-3, pct_of_peak=131.5, peak_source="measured 2026-11-26 at load average 7.75 on 2 "
                     "CPU(s): best of 5", device="cpu")
    console = Console(width=200, record=True, color_system=None)
    render_table([over], "bf16", console)
    text = " ".join(console.export_text().split())
    assert "131.5 !" in text
    assert "% peak above 100 (!) on 1 case(s): the ceiling is wrong, not the kernel" in text
    assert "fp8bench selfcheck --check cpu_ceiling" in text and "load average 7.75" in text


def test_an_untimed_record_is_never_noisy():
    """An interpreter's run (Triton on the CPU) has no samples: no noise to show, even when the run was loaded."""
    from fp8bench.core.noise import HostLoad
    from fp8bench.core.records import load_record
    from fp8bench.render.run_table import noise_text, table_notes

    interpreted = {**record(64, "fp8_rowwise", [], backend="triton"), "interpreted": True, "reason": "interpreted"}
    timed = _measured("bf16", 1e-3)
    assert noise_text(load_record(interpreted), loaded=True) == "-"
    assert noise_text(load_record(timed), loaded=True) == "1% noisy"
    (note,) = table_notes([interpreted, timed], HostLoad(6.0, 2))
    assert note.startswith("noisy: 1 case(s), the run started at load average 6.00 on 2 CPU(s)")


def test_stored_names_and_reasons_are_never_read_as_markup():
    """A failure reason or precision holding Rich markup (``[/]`` closes a tag that is not open) prints as written."""
    bad = {**record(64, "[/]fp8", [], status="failed", reason="boom [bold]x[/bold] [/]")}
    console = Console(width=200, record=True, color_system=None)
    render_table([bad], "bf16", console)
    text = " ".join(console.export_text().split())
    assert "[/]fp8" in text and "boom [bold]x[/bold] [/]" in text


def test_a_long_skip_reason_takes_one_line_under_the_table_not_eight_in_a_cell():
    """A skipped case's reason folded the status column to 5-8 lines per case; the table now says
    ``skipped (1)`` and lists each distinct reason once under it, whole, on its own line."""
    why = "torch does not run mxfp8 on cpu: torch's CPU _scaled_mm has tensorwise and rowwise kernels only"
    ok = record(128, "bf16", [1e-3, 1.1e-3])
    skipped = [{**record(128, p, [], status="skipped", reason=why)} for p in ("mxfp8", "nvfp4")]
    failed = record(128, "fp32", [], status="failed", reason="RuntimeError: boom")
    console = Console(width=120, record=True, color_system=None)
    render_table([ok, *skipped, failed], "bf16", console)
    lines = console.export_text().splitlines()
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) == 4, "\n".join(lines)  # one line per case
    assert sum("skipped (1)" in row for row in rows) == 2 and sum("failed (2)" in row for row in rows) == 1
    assert f"(1) {why}" in lines and "(2) RuntimeError: boom" in lines
