"""`fp8bench payoff`: per device and workload, the smallest shape from which each FP8 recipe beats BF16."""

from __future__ import annotations

import argparse
import math
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from fp8bench.analysis.payoff import EMULATED_ONLY, NEVER, PAYS_OFF, WITHIN_NOISE, paying_off, payoff_table
from fp8bench.analysis.selection import LATEST_CLASSES
from fp8bench.commands.store_access import check_filter_names, stored_names
from fp8bench.commands.verb_interface import (
    EXIT_OK,
    print_json,
    store_target,
)
from fp8bench.core.escaping import term_text
from fp8bench.core.shapes import shape_label
from fp8bench.results.store import open_store
from fp8bench.results.store import queries as store_queries
from fp8bench.results.store.queries import RecordFilter


def _number(value: Any) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


def _cell(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec) if spec else str(value)


def _ratio(value: Any) -> str:
    number = _number(value)
    return "-" if number is None else f"{number:.3g}x"


def _notes(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Each distinct note of the rows (baseline and energy notes, the reason of a row that does not pay off), once,
    numbered in the order first met."""
    notes: dict[str, int] = {}
    for r in rows:
        for text in (r.get("baseline_note"), None if r["verdict"] == PAYS_OFF else r["reason"],
                     None if _number(r.get("energy_ratio")) is not None else r.get("energy_note")):
            if isinstance(text, str) and text and text not in notes:
                notes[text] = len(notes) + 1
    return notes


def _print_table(rows: list[dict[str, Any]], baseline: str) -> None:
    """The rows as a table that fits the terminal; a note shared by many rows is printed once below it and each
    row's verdict points at it by number."""
    # The verdicts that are not a shape, short in the table; the notes below it say why.
    SHORT = {NEVER: "never", WITHIN_NOISE: "within noise", EMULATED_ONLY: "emulated only"}
    notes = _notes(rows)
    # A shape is read whole: its column is never narrower than the longest shape (up to 30 characters).
    shape_width = min(30, max(len(str(SHORT.get(r["verdict"], r["pays_off_from"]))) for r in rows))
    out = Table(title=f"Where each recipe beats {baseline} end to end (speedup: {baseline} time / recipe time)",
                padding=(0, 1), box=box.SIMPLE_HEAD)
    for name in ("device", "workload", "recipe", "pays off from", "at largest", "SQNR", "energy"):
        # A narrow terminal wraps long cells (the device name first) but never squeezes a column below its header.
        out.add_column(name, overflow="fold", min_width=shape_width if name == "pays off from" else 4)
    for r in rows:
        marks = [notes[t] for t in (r.get("baseline_note"), r["reason"], r.get("energy_note")) if t in notes]
        there = f" ({_ratio(r['speedup_there'])})" if _number(r["speedup_there"]) is not None else ""
        sqnr = _number(r["sqnr_cost_db"])
        # Every name and shape is stored text: shown as itself (a precision `[/]fp8` is not Rich markup).
        out.add_row(term_text(r["device"]), term_text(r["workload"]), term_text(r["precision"]),
                    term_text(SHORT.get(r["verdict"], r["pays_off_from"])) + there
                    + "".join(f" ({m})" for m in sorted(set(marks))),
                    _ratio(r["speedup_at_largest"]), "-" if sqnr is None else f"{sqnr:.1f} dB",
                    _ratio(r.get("energy_ratio")))
    console = Console()
    console.print(out)
    for text, number in notes.items():
        console.print(f"({number}) {term_text(text)}", markup=False, highlight=False)


def execute(args: argparse.Namespace) -> int:
    store = open_store(store_target(args), read_only=True)
    check_filter_names({"workload": args.workload, "backend": args.backend,
                        "precision": [*args.precision, args.baseline]}, stored_names(store))
    flt = RecordFilter(device=tuple(args.device), workload=tuple(args.workload), backend=tuple(args.backend),
                       precision=tuple(args.precision), branch=tuple(args.branch))
    latest = store_queries.latest_records(store, {"speed": LATEST_CLASSES["speed"]}, flt, with_phases=False)
    latest["shape_label"] = latest["shape"].map(shape_label)
    table = payoff_table(latest, args.baseline)
    rows = table.to_dict("records")
    if args.json:
        print_json({"store": store.url, "baseline": args.baseline, "payoff": [
            {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in rows]})
        return EXIT_OK
    if not rows:
        print(f"No recipe has both its own and a {args.baseline} measurement of one shape in {store.url}.")
    else:
        _print_table(rows, args.baseline)
    print_json({"store": store.url, "baseline": args.baseline, "recipes": len(rows),
                "paying_off": len(paying_off(table))})
    return EXIT_OK
