"""`fp8bench list`: every registered name the other verbs accept."""

from __future__ import annotations

import argparse
from typing import Any

from fp8bench.commands.verb_interface import EXIT_OK, print_json
from fp8bench.core.plugins import BACKENDS, WORKLOADS, load_all
from fp8bench.core.precisions import PRECISIONS
from fp8bench.measure.suites import builtin_suites, load_suite
from fp8bench.workloads.shape_sets import SHAPE_SETS


def execute(args: argparse.Namespace) -> int:
    load_all()
    data: dict[str, Any] = {
        "workloads": {n: {"default_shape": w.default_shape, "phases": list(w.phases), "description": w.description}
                      for n, w in WORKLOADS.items()},
        "precisions": {n: p.describe() for n, p in PRECISIONS.items()},
        "backends": {n: {"kind": b.kind, "description": b.description, "workloads": b.workloads()}
                     for n, b in BACKENDS.items()},
        "suites": {n: load_suite(n).description for n in sorted(builtin_suites())},
        "shape-sets": {n: v for n, v in SHAPE_SETS.items()},
    }
    if args.what != "all":
        data = {args.what: data[args.what]}
    if args.json:
        print_json(data)
        return EXIT_OK
    for section, entries in data.items():
        print(f"{section}:")
        for name, info in entries.items():
            if isinstance(info, list):
                info = f"{len(info)} shapes: {', '.join(info[:4])}{' ...' if len(info) > 4 else ''}"
            elif isinstance(info, dict):
                info = "; ".join(f"{k}: {', '.join(v) if isinstance(v, list) else v}" for k, v in info.items())
            print(f"  {name:<16} {info}")
    return EXIT_OK
