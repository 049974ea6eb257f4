"""`fp8bench payoff`: per device and workload, the smallest shape from which each FP8 recipe beats BF16."""

from __future__ import annotations

import argparse
import math
from typing import Any

from fp8bench.commands.common import (
    BAD_INPUT,
    EXIT_OK,
    EXIT_USAGE,
    ExitCodes,
    add_json_flag,
    add_store_flags,
    check_filter_names,
    print_json,
    store_target,
    stored_names,
)

NAME = "payoff"
HELP = "where FP8 pays off: the smallest shape from which each recipe beats BF16 end to end, per device"
DESCRIPTION = """Answer the headline question from the store: per device and workload, the smallest shape from
which each FP8 (or 4-bit) recipe is faster than the baseline end to end (quantization included) at every larger
measured shape, the speedup there and at the largest shape measured, its SQNR cost in dB and its energy per
iteration against the baseline. "never within the measured shapes" where it never pays off.

Reads the latest valid, non-interpreted record of each case; each cell takes the fastest backend (the emulated
reference backend is left out). Narrow it with --device, --workload, --precision, --backend or --branch.

examples:
  fp8bench payoff
  fp8bench payoff --store postgresql://bench@db/fp8bench --workload gemm --json"""
EXIT_CODES = ExitCodes(((EXIT_OK, "listed, also when no recipe pays off"),
                        (EXIT_USAGE, BAD_INPUT + "; or the store cannot be read")))
DOC = "docs/payoff.md"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--baseline", default="bf16", help="precision the recipes are measured against (default bf16)")
    for name in ("device", "workload", "backend", "precision", "branch"):
        p.add_argument(f"--{name}", nargs="+", default=[], help=f"only these {name}es" if name.endswith("h")
                       else f"only these {name}s")
    add_store_flags(p)
    add_json_flag(p)


def _cell(value: Any, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec) if spec else str(value)


def execute(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from fp8bench.analysis.payoff import payoff_table
    from fp8bench.core.escaping import term_text
    from fp8bench.core.shapes import shape_label
    from fp8bench.results.store import open_store
    from fp8bench.results.store import queries as store_queries
    from fp8bench.results.store.queries import RecordFilter

    store = open_store(store_target(args), read_only=True)
    check_filter_names({"workload": args.workload, "backend": args.backend,
                        "precision": [*args.precision, args.baseline]}, stored_names(store))
    flt = RecordFilter(device=tuple(args.device), workload=tuple(args.workload), backend=tuple(args.backend),
                       precision=tuple(args.precision), branch=tuple(args.branch))
    latest = store_queries.latest_records(store, flt, classes=("speed",), with_phases=False)
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
        out = Table(title=f"Where each recipe beats {args.baseline} end to end")
        for name in ("device", "workload", "recipe", "shapes", "pays off from", "speedup there",
                     "largest shape", "speedup at largest", "SQNR cost (dB)", "energy vs baseline"):
            out.add_column(name, overflow="fold")
        for r in rows:
            energy = _cell(r["energy_ratio"], ".2f") + "x" if r["energy_ratio"] is not None else r["energy_note"]
            # Every name and shape is stored text: shown as itself (a precision `[/]fp8` is not Rich markup).
            out.add_row(term_text(r["device"]), term_text(r["workload"]), term_text(r["precision"]), str(r["shapes"]),
                        term_text(r["pays_off_from"]), _cell(r["speedup_there"], ".2f"), term_text(r["largest_shape"]),
                        _cell(r["speedup_at_largest"], ".2f"), _cell(r["sqnr_cost_db"], ".1f"), term_text(energy))
        Console(width=200).print(out)
    print_json({"store": store.url, "baseline": args.baseline, "recipes": len(rows),
                "paying_off": sum(r["pays_off_from"] != "never within the measured shapes" for r in rows)})
    return EXIT_OK
