"""``fp8bench run``'s table: one row per case, the columns that fit the console, then what its flags mean.

A row names the case (workload, shape, precision with its variant, backend), its status, and what answers "does it
pay off": the end-to-end time, the speedup against the baseline precision (the arithmetic of
:mod:`fp8bench.analysis.report`, shared with the dashboard), the noise, the accuracy; then pre-quantized time,
TFLOP/s, % of peak, the phase split, errors and launch overhead, which a narrow console drops first (their names
are said under the table). Times are milliseconds with three significant digits, speedups two. A reason is
numbered in its status cell and written once, whole, under the table. ``--table compact`` gives one plain line per
case instead. A second table shows the bytes and bus bandwidth of collectives, and a line per profiled case says
where its trace is.

Every cell is plain text: a stored name or reason is shown as written, never read as Rich markup.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from rich.console import Console
from rich.table import Table
from rich.text import Text

from fp8bench.analysis.report import BaselineKey, baseline_index, shape_text, speedups
from fp8bench.core.noise import NOISY_SPREAD, HostLoad, is_noisy, record_spread
from fp8bench.core.peak_table import above_ceiling, ceiling_advice
from fp8bench.core.records import SCALE_POW2, Record, fields_of, full_accum_variant, load_record


def _fmt(x: float | None, spec: str, suffix: str = "") -> str:
    return "-" if x is None else f"{x:{spec}}{suffix}"


def ms_text(seconds: float | None) -> str:
    """Milliseconds with three significant digits (``0.169``, ``1.00``, ``11.6``; whole ones from 100 on)."""
    if not seconds:
        return "-"
    ms = seconds * 1e3
    return f"{ms:.0f}" if ms >= 100 else f"{ms:#.3g}"


def speedup_text(x: float | None) -> str:
    """A speedup with two significant digits (``0.0011x``, ``0.15x``, ``1.0x``, ``12x``): a case 900x slower
    must not read ``0.00x``, as a case 5x slower does not."""
    if x is None:
        return "-"
    if x >= 10:
        return f"{x:.0f}x"
    return f"{x:#.2g}x"


def phase_split(record: Record) -> str:
    phases = record.samples.phases or {}
    total = sum(phases.values())
    if not total:
        return "-"
    short = {"quantize": "q", "gemm": "g", "epilogue": "e"}
    return " ".join(f"{short.get(k, k)}{100 * v / total:.0f}%" for k, v in phases.items())


def timed(record: Record) -> bool:
    """A record with timings to be noisy or not: measured, with a median (an interpreter's run has none)."""
    return record.status in ("ok", "invalid") and bool(record.samples.median_s)


def noise_text(record: Record, loaded: bool = False) -> str:
    """The record's relative spread (IQR / median) in percent, ``noisy`` appended when :func:`is_noisy` says so."""
    spread = record_spread(record)
    if not timed(record):
        return "-"
    text = "-" if spread is None else f"{100 * spread:.2g}%" if spread < 1 else f"{100 * spread:.0f}%"
    return f"{text} noisy" if is_noisy(spread, loaded) else text


def peak_text(record: Record) -> str:
    """% of peak, with ``!`` where it is above 100 (:func:`fp8bench.core.peak_table.above_ceiling`)."""
    pct = record.throughput.pct_of_peak
    return _fmt(pct, ".1f") + (" !" if above_ceiling(pct) else "")


def delayed_scaling_header(records: list[Record]) -> str | None:
    """One line naming the delayed-scaling settings and FP8 formats the run's ``fp8_delayed`` records used, or
    ``None`` when there are none: those settings change the numbers, so the table says them up front."""
    from fp8bench.core.precisions import TE_DELAYED_SCALING_DEFAULTS

    delayed = [r for r in records if r.delayed_scaling]
    if not delayed:
        return None
    settings = sorted({tuple(sorted((r.delayed_scaling.to_json() or {}).items())) for r in delayed})
    texts = [f"amax history {d['amax_history_len']}, amax {d['amax_compute_algo']}, margin {d['margin']}"
             for d in map(dict, settings)]
    te = all(TE_DELAYED_SCALING_DEFAULTS[k] == v for s in settings for k, v in s)
    formats: dict[str, set[str]] = {}
    for r in delayed:
        formats.setdefault(str(r.fp8_format), set()).add(r.workload)
    where = ", ".join(f"{fmt} on {', '.join(sorted(ws))}" for fmt, ws in sorted(formats.items()))
    return (f"fp8_delayed: {'; '.join(texts)}{' (Transformer Engine DelayedScaling defaults)' if te else ''}; "
            f"format {where}")


def precision_label(record: Record | Mapping[str, Any]) -> str:
    """The precision as the table shows it, with what makes a record a variant of it: full accumulation where fast
    is the default, and power-of-two scales where fp8bench's recipe has FP32 ones (``Record.scale_format``)."""
    precision, scale_format = fields_of(record, "precision", "scale_format")
    return (precision + (" (full acc)" if full_accum_variant(record) else "")
            + (" (pow2 scales)" if scale_format == SCALE_POW2 else ""))


@dataclass(frozen=True)
class Column:
    """One column of the run table. ``priority`` orders what a narrow console keeps (0 is never dropped);
    ``floor`` is the least width of a column that wraps (``None``: the column keeps its cells on one line)."""

    name: str
    justify: Literal["left", "right"]
    priority: int
    floor: int | None = None


def table_columns(baseline: str) -> tuple[Column, ...]:
    """The run table's columns, left to right. The identity of the case and its status are never dropped; then
    what answers "does it pay off": time, speedup, noise, accuracy; the rest goes first on a narrow console."""
    return (Column("workload", "left", 0), Column("shape", "left", 0), Column("precision", "left", 0),
            Column("backend", "left", 0), Column("status", "left", 0, floor=18),
            Column("e2e ms", "right", 1), Column("pre-q ms", "right", 8), Column("TFLOP/s", "right", 10),
            Column("% peak", "right", 5), Column(f"vs {baseline}", "right", 2), Column("pre-q vs", "right", 7),
            Column("noise", "right", 3), Column("phases", "left", 6, floor=12), Column("SQNR dB", "right", 4),
            Column("rel err", "right", 9), Column("ovf/unf %", "right", 11),
            Column("launch ms", "right", 12))  # last: left out when no record has it (render_table)


def _cells(r: Record, index: dict[BaselineKey, tuple[float, float | None]], loaded: bool) -> list[str]:
    e2e, pre = speedups(r, index)
    num = r.numerics
    ovf, unf = num.overflow_frac, num.underflow_frac
    return [r.workload, shape_text(r.shape),
            precision_label(r), r.backend, status_text(r),
            ms_text(r.samples.median_s), ms_text(r.samples.prequant_median_s),
            _fmt(r.throughput.tflops, ".3g"), peak_text(r), speedup_text(e2e), speedup_text(pre),
            noise_text(r, loaded), phase_split(r), _fmt(num.sqnr_db, ".1f"), _fmt(num.rel_err, ".2e"),
            "-" if ovf is None else f"{100 * ovf:.2g}/{100 * (unf or 0):.2g}",
            _launch_text(r.samples.launch_overhead_s)]


def _launch_text(seconds: float | None) -> str:
    """A launch overhead in ms; none at all (the host kept up with the GPU) reads 0, not as a missing figure."""
    return "-" if seconds is None else ms_text(seconds) if seconds > 0 else "0"


def status_text(r: Record) -> str:
    return r.status if not r.reason else f"{r.status}: {r.reason}"


# Box-drawing cost of a column in rich's default table: one space of padding each side and a rule.
_COLUMN_FRAME = 3


def column_widths(columns: tuple[Column, ...], rows: list[list[str]]) -> list[int]:
    """The least width each column takes: its widest cell (or header), or for a wrapping column that, capped at
    its floor."""
    widths = []
    for i, col in enumerate(columns):
        widest = max([len(col.name), *(len(row[i]) for row in rows)])
        widths.append(min(widest, col.floor) if col.floor else widest)
    return widths


def fit_columns(columns: tuple[Column, ...], widths: list[int], width: int) -> list[int]:
    """Indices of the columns kept on a console ``width`` characters wide: the lowest-priority column goes first,
    until the kept ones fit at ``widths``. The priority-0 columns always stay (a shape longer than the console
    wraps rather than vanish)."""
    kept = list(range(len(columns)))
    droppable = sorted((i for i, c in enumerate(columns) if c.priority), key=lambda i: -columns[i].priority)
    while 1 + sum(_COLUMN_FRAME + widths[i] for i in kept) > width and droppable:
        kept.remove(droppable.pop(0))
    return kept


def as_records(records: Iterable[Record | Mapping[str, Any]]) -> list[Record]:
    """Records typed: a stored record's JSON fields (a run file's, the ``--json`` output's) through
    :func:`fp8bench.core.records.load_record`."""
    return [r if isinstance(r, Record) else load_record(r) for r in records]


def table_notes(records: Iterable[Record | Mapping[str, Any]], load: HostLoad | None = None) -> list[str]:
    """What the table's flags mean, said once under it: noisy cases, percentages above the ceiling, the load."""
    records = as_records(records)
    notes = []
    loaded = bool(load and load.overloaded)
    noisy = [r for r in records if timed(r) and is_noisy(record_spread(r), loaded)]
    if noisy:
        why = (f"the run started at {load.describe()}" if loaded and load else
               f"their samples spread more than {NOISY_SPREAD:.0%} (IQR / median)")
        notes.append(f"noisy: {len(noisy)} case(s), {why}; a difference smaller than the noise is not one. "
                     "Rerun on a quiet machine, or compare versions with `fp8bench ab`")
    over = [r for r in records if above_ceiling(r.throughput.pct_of_peak)]
    if over:
        sources = sorted({str(r.throughput.peak_source) for r in over})
        notes.append(f"% peak above 100 (!) on {len(over)} case(s): the ceiling is wrong, not the kernel. "
                     f"{ceiling_advice(over[0].device)} (ceiling: {'; '.join(sources)})")
    return notes


def render_table(records: Iterable[Record | Mapping[str, Any]], baseline: str, console: Console, title: str = "",
                 load: HostLoad | None = None, compact: bool = False) -> None:
    """The run table on ``console``: one row per case, the columns that fit its width (the rest are named under
    it), then the notes of :func:`table_notes`. ``compact`` prints one plain line per case instead (narrow
    consoles, logs). ``load`` is the host's load when the run started; ``records`` typed or as stored."""
    records = as_records(records)
    index = baseline_index(records, baseline)
    header = delayed_scaling_header(records)
    title = "\n".join(filter(None, [title, header]))
    loaded = bool(load and load.overloaded)
    columns = table_columns(baseline)
    rows = [_cells(r, index, loaded) for r in records]
    if all(row[-1] == "-" for row in rows):  # launch overhead exists on GPUs only: no empty column for a CPU run
        columns, rows = columns[:-1], [row[:-1] for row in rows]
    if compact:
        if title:
            console.print(title, markup=False, highlight=False, soft_wrap=True)
        for cells in rows:
            console.print(compact_line(columns, cells), markup=False, highlight=False, soft_wrap=True)
    else:
        rows, reasons = numbered_reasons(records, rows, columns.index(next(c for c in columns if c.name == "status")))
        widths = column_widths(columns, rows)
        kept = fit_columns(columns, widths, console.width)
        # A one-line column (a shape can be copied back into --shape) wraps only when the columns that are never
        # dropped are wider than the console; the floor keeps a wrapping column from being squeezed to nothing.
        fits = 1 + sum(_COLUMN_FRAME + widths[i] for i in kept) <= console.width
        table = Table(title=title or None, show_lines=False, header_style="bold")
        for i in kept:
            col = columns[i]
            table.add_column(col.name, justify=col.justify, no_wrap=col.floor is None and (fits or col.priority > 0),
                             min_width=widths[i] if col.floor else None, overflow="fold")
        for r, cells in zip(records, rows, strict=True):
            style = {"ok": None, "skipped": "dim", "failed": "red", "invalid": "yellow"}[r.status]
            # Text cells: a stored name or reason is shown as written, never read as Rich markup.
            table.add_row(*(Text(cells[i]) for i in kept), style=style)
        console.print(table)
        dropped = [columns[i].name for i in range(len(columns)) if i not in kept]
        if dropped:
            console.print(f"columns left out at {console.width} characters: {', '.join(dropped)} (a wider "
                          "console, --table compact, or the run file has them)", markup=False, highlight=False)
        for i, why in enumerate(reasons, 1):
            console.print(f"({i}) {why}", markup=False, highlight=False)
    for note in table_notes(records, load):
        console.print(note, markup=False, highlight=False)


def numbered_reasons(records: list[Record], rows: list[list[str]],
                     status: int) -> tuple[list[list[str]], list[str]]:
    """``rows`` with each status cell that has a reason cut to the status and a number (``skipped (1)``), and the
    distinct reasons in that numbering: a reason in the cell folded it to several lines per case, repeated for
    every case that shares it; under the table each is one line, once."""
    reasons: list[str] = []
    out = []
    for r, row in zip(records, rows, strict=True):
        why = r.reason
        if why:
            if why not in reasons:
                reasons.append(why)
            row = [*row[:status], f"{r.status} ({reasons.index(why) + 1})", *row[status + 1:]]
        out.append(row)
    return out, reasons


def compact_line(columns: tuple[Column, ...], cells: list[str]) -> str:
    """One case as one plain line: its identity, its status, then ``name value`` for every measured column."""
    ident = " ".join(cells[:4])
    measured = [f"{col.name} {cell}" for col, cell in zip(columns[5:], cells[5:], strict=True) if cell != "-"]
    return f"{ident}: {cells[4]}" + (f" | {', '.join(measured)}" if measured else "")


def render_bandwidths(records: Iterable[Record | Mapping[str, Any]], baseline: str, console: Console) -> None:
    """A second table for the records of collectives (those whose ``extra`` states ``comm_bytes``): bytes sent and
    their ratio to the baseline precision's, the collective's own time, and nccl-tests' algorithm and bus
    bandwidths (:mod:`fp8bench.workloads.collective`). Prints nothing for a run without collectives."""
    comm = [r for r in as_records(records) if r.status in ("ok", "invalid") and "comm_bytes" in (r.extra or {})]
    if not comm:
        return
    base = {(r.workload, shape_text(r.shape), r.backend): r.extra["comm_bytes"]
            for r in comm if r.precision == baseline}
    table = Table(title="communication (bus bandwidth as nccl-tests defines it: algbw x (n-1)/n)",
                  header_style="bold")
    for col in ("workload", "shape", "precision", "backend", "ranks", "bytes", f"vs {baseline}", "comm ms",
                "algbw GB/s", "busbw GB/s"):
        table.add_column(col, justify="left" if col in ("workload", "shape", "precision", "backend") else "right")
    for r in comm:
        extra = r.extra
        ref = base.get((r.workload, shape_text(r.shape), r.backend))
        comm_s = (r.samples.phases or {}).get("communicate")
        table.add_row(Text(r.workload), Text(shape_text(r.shape)), Text(r.precision), Text(r.backend),
                      str(extra.get("world_size", "-")), f"{extra['comm_bytes']:,}",
                      _fmt(ref and extra["comm_bytes"] / ref, ".3f", "x"), _fmt(comm_s and comm_s * 1e3, ".3f"),
                      _fmt(extra.get("algbw_gbps"), ".3g"), _fmt(extra.get("busbw_gbps"), ".3g"))
    console.print(table)


def print_profiles(rows: list[dict[str, Any]], console: Console) -> None:
    """One line per profiled case: its trace, or the command that profiles it under Nsight Systems."""
    for row in rows:
        where = row["trace"] or row["command"] or "not taken (see the record's notes)"
        console.print(f"profile {row['case']}: {where}", markup=False, highlight=False, soft_wrap=True)
