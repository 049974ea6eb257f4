"""The human table of a run, and the speedup arithmetic the table and dashboard share.

Speedup of a record = baseline precision's end-to-end median / this record's end-to-end median, for the same
workload, shape, device and backend (falling back to the ``torch`` backend's baseline when this backend has none),
so ``2.0x`` means twice as fast as BF16 *including* quantization. The pre-quantized speedup (the number vendors
quote) sits next to it.
"""

from __future__ import annotations

from typing import Any, Literal

from rich.console import Console
from rich.table import Table

from fp8bench.records import SCALE_POW2, full_accum_variant


def _shape_text(shape: dict[str, int]) -> str:
    if set(shape) == {"m", "n", "k"}:
        return f"{shape['m']}x{shape['n']}x{shape['k']}"
    return ",".join(f"{k}={v}" for k, v in shape.items())


def baseline_index(records: list[dict[str, Any]], baseline: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    index = {}
    for r in records:
        if r["precision"] == baseline and r["status"] == "ok" and r.get("median_s"):
            index[(r["workload"], _shape_text(r["shape"]), r["device"], r["backend"])] = r
    return index


def speedups(record: dict[str, Any], index: dict[tuple[Any, ...], dict[str, Any]]) -> tuple[float | None, float | None]:
    """(end-to-end speedup, pre-quantized speedup) of ``record`` against the baseline, or ``None``s."""
    if record["status"] not in ("ok", "invalid") or not record.get("median_s"):
        return None, None
    if record.get("interpreted"):  # interpreter timings (Triton on the CPU) are never compared on speed
        return None, None
    key = (record["workload"], _shape_text(record["shape"]), record["device"])
    base = index.get((*key, record["backend"])) or index.get((*key, "torch"))
    if base is None:
        return None, None
    e2e = base["median_s"] / record["median_s"]
    base_pre = base.get("prequant_median_s") or base["median_s"]
    pre = base_pre / record["prequant_median_s"] if record.get("prequant_median_s") else None
    return e2e, pre


def _fmt(x: float | None, spec: str, suffix: str = "") -> str:
    return "-" if x is None else f"{x:{spec}}{suffix}"


def phase_split(record: dict[str, Any]) -> str:
    phases = record.get("phases") or {}
    total = sum(phases.values())
    if not total:
        return "-"
    short = {"quantize": "q", "gemm": "g", "epilogue": "e"}
    return " ".join(f"{short.get(k, k)}{100 * v / total:.0f}%" for k, v in phases.items())


def delayed_scaling_header(records: list[dict[str, Any]]) -> str | None:
    """One line naming the delayed-scaling settings and FP8 formats the run's ``fp8_delayed`` records used, or
    ``None`` when there are none: those settings change the numbers, so the table says them up front."""
    from fp8bench.recipes import TE_DELAYED_SCALING_DEFAULTS

    delayed = [r for r in records if r.get("delayed_scaling")]
    if not delayed:
        return None
    settings = sorted({tuple(sorted(r["delayed_scaling"].items())) for r in delayed})
    texts = [f"amax history {d['amax_history_len']}, amax {d['amax_compute_algo']}, margin {d['margin']}"
             for d in map(dict, settings)]
    te = all(TE_DELAYED_SCALING_DEFAULTS[k] == v for s in settings for k, v in s)
    formats: dict[str, set[str]] = {}
    for r in delayed:
        formats.setdefault(str(r.get("fp8_format")), set()).add(r["workload"])
    where = ", ".join(f"{fmt} on {', '.join(sorted(ws))}" for fmt, ws in sorted(formats.items()))
    return (f"fp8_delayed: {'; '.join(texts)}{' (Transformer Engine DelayedScaling defaults)' if te else ''}; "
            f"format {where}")


def precision_label(record: dict[str, Any]) -> str:
    """The precision as the table shows it, with what makes a record a variant of it: full accumulation where fast
    is the default, and power-of-two scales where fp8bench's recipe has FP32 ones (``Record.scale_format``)."""
    return (record["precision"] + (" (full acc)" if full_accum_variant(record) else "")
            + (" (pow2 scales)" if record.get("scale_format") == SCALE_POW2 else ""))


def render_table(records: list[dict[str, Any]], baseline: str, console: Console, title: str = "") -> None:
    index = baseline_index(records, baseline)
    header = delayed_scaling_header(records)
    title = "\n".join(filter(None, [title, header]))
    table = Table(title=title or None, show_lines=False, header_style="bold")
    columns: tuple[tuple[str, Literal["left", "right"]], ...] = (("workload", "left"), ("shape", "left"), ("precision", "left"), ("backend", "left"),
                         ("status", "left"), ("e2e ms", "right"), ("pre-q ms", "right"), ("TFLOP/s", "right"),
                         ("% peak", "right"), (f"vs {baseline}", "right"), ("pre-q vs", "right"),
                         ("phases", "left"), ("SQNR dB", "right"), ("rel err", "right"), ("ovf/unf %", "right"))
    # Status (with its reason) and the phase shares wrap; every other column keeps one line (a shape stays whole,
    # so it can be copied back into --shape). The floors stop rich from squeezing a wrapping column away on a
    # console that is narrow for the rest.
    min_widths = {"status": 18, "phases": 12}
    for col, justify in columns:
        table.add_column(col, justify=justify, no_wrap=col not in min_widths, min_width=min_widths.get(col))
    for r in records:
        e2e, pre = speedups(r, index)
        num = r.get("numerics") or {}
        status = r["status"] if not r.get("reason") else f"{r['status']}: {r['reason']}"
        style = {"ok": None, "skipped": "dim", "failed": "red", "invalid": "yellow"}[r["status"]]
        ovf = num.get("overflow_frac")
        unf = num.get("underflow_frac")
        table.add_row(
            r["workload"], _shape_text(r["shape"]),
            precision_label(r), r["backend"], status,
            _fmt(r.get("median_s") and r["median_s"] * 1e3, ".3f"),
            _fmt(r.get("prequant_median_s") and r["prequant_median_s"] * 1e3, ".3f"),
            _fmt(r.get("tflops") and r["tflops"], ".3g"), _fmt(r.get("pct_of_peak"), ".1f"),
            _fmt(e2e, ".2f", "x"), _fmt(pre, ".2f", "x"), phase_split(r),
            _fmt(num.get("sqnr_db"), ".1f"), _fmt(num.get("rel_err"), ".2e"),
            "-" if ovf is None else f"{100 * ovf:.2g}/{100 * (unf or 0):.2g}",
            style=style,
        )
    console.print(table)


def render_bandwidths(records: list[dict[str, Any]], baseline: str, console: Console) -> None:
    """A second table for the records of collectives (those whose ``extra`` states ``comm_bytes``): bytes sent and
    their ratio to the baseline precision's, the collective's own time, and nccl-tests' algorithm and bus
    bandwidths (:mod:`fp8bench.workloads.collective`). Prints nothing for a run without collectives."""
    comm = [r for r in records if r["status"] in ("ok", "invalid") and "comm_bytes" in (r.get("extra") or {})]
    if not comm:
        return
    base = {(r["workload"], _shape_text(r["shape"]), r["backend"]): r["extra"]["comm_bytes"]
            for r in comm if r["precision"] == baseline}
    table = Table(title="communication (bus bandwidth as nccl-tests defines it: algbw x (n-1)/n)",
                  header_style="bold")
    for col in ("workload", "shape", "precision", "backend", "ranks", "bytes", f"vs {baseline}", "comm ms",
                "algbw GB/s", "busbw GB/s"):
        table.add_column(col, justify="left" if col in ("workload", "shape", "precision", "backend") else "right")
    for r in comm:
        extra = r["extra"]
        ref = base.get((r["workload"], _shape_text(r["shape"]), r["backend"]))
        comm_s = (r.get("phases") or {}).get("communicate")
        table.add_row(r["workload"], _shape_text(r["shape"]), r["precision"], r["backend"],
                      str(extra.get("world_size", "-")), f"{extra['comm_bytes']:,}",
                      _fmt(ref and extra["comm_bytes"] / ref, ".3f", "x"), _fmt(comm_s and comm_s * 1e3, ".3f"),
                      _fmt(extra.get("algbw_gbps"), ".3g"), _fmt(extra.get("busbw_gbps"), ".3g"))
    console.print(table)


def summary_counts(records: list[dict[str, Any]]) -> dict[str, int]:
    counts = {s: 0 for s in ("ok", "skipped", "failed", "invalid")}
    for r in records:
        counts[r["status"]] += 1
    return counts

