"""Replay every FP8 call site against every conformance target and summarize (see docs/gpu-conformance.md).

    .venv/bin/python scripts/conformance_report.py            # the table
    .venv/bin/python scripts/conformance_report.py --calls    # and every distinct call (site, layouts, verdict)

Exit code 1 if a case fp8bench runs on a target would be refused there (the conformance tests fail then too).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from fp8bench.conformance import TARGETS, replay_case
from fp8bench.recipes import resolve_precision

RECIPES = ("fp8_tensorwise", "fp8_delayed", "fp8_rowwise", "fp8_blockwise", "mxfp8")
SHAPES = {"gemm": "192x256x384", "attention": "b=2,h=2,s=64,d=64,kv_heads=1,backward=1",
          "transformer_step": "tiny,layers=1,batch=2,seq=64"}
CASES = ([("gemm", r, f, b) for r in RECIPES for f in ("e4m3", "hybrid", "e5m2") for b in ("torch", "compiled")]
         + [(w, r, f, "torch") for w in ("attention", "transformer_step") for r in RECIPES for f in ("e4m3", "hybrid")]
         + [(w, r, "e4m3", "torchao") for w in SHAPES for r in ("fp8_tensorwise", "fp8_rowwise")])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", action="store_true", help="list every distinct call site and layout")
    args = parser.parse_args()
    sites: Counter[str] = Counter()
    bad = 0
    print(f"{'target':28} {'runs':>5} {'skips':>6} {'calls':>6} {'refused runs':>13}")
    for name, target in TARGETS.items():
        runs = skips = calls = refused = 0
        for workload, recipe, fmt, backend in CASES:
            replay = replay_case(workload, SHAPES[workload], resolve_precision(recipe, fmt), backend, target)
            if replay.skip_reason is not None:
                skips += 1
                continue
            runs += 1
            calls += len(replay.calls)
            refused += not replay.conforms
            for call in replay.calls:
                sites[f"{call.site}: {call.spec.describe() if call.spec else call.op}"
                      f"{' fast-accum' if call.spec and call.spec.fast_accum else ''}"] += 1
        bad += refused
        print(f"{name:28} {runs:>5} {skips:>6} {calls:>6} {refused:>13}")
    print(f"\n{len(CASES)} cases x {len(TARGETS)} targets; {sum(sites.values())} scaled GEMMs replayed from "
          f"{len({s.split(': ')[0] for s in sites})} call sites in {len(sites)} distinct (site, layout) forms")
    if args.calls:
        for site, n in sorted(sites.items()):
            print(f"  {n:5} x {site}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
