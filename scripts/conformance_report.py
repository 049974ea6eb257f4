"""Replay every FP8 and 4-bit call site against every conformance target and summarize per target and torch release
(see docs/gpu-conformance.md).

    .venv/bin/python scripts/conformance_report.py            # the table
    .venv/bin/python scripts/conformance_report.py --calls    # and every distinct call (site, layouts, verdict)
    .venv/bin/python scripts/conformance_report.py --surfaces # and the recorded torch API surface of each release

A case either runs on a target (every scaled GEMM it issues is accepted there: meta functions, CUDA rules, and the
target's torch release) or is skipped with a reason that the replay confirms. Exit code 1 if a case fp8bench runs on a
target would be refused there (the conformance tests fail then too).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from fp8bench.core.precisions import RunOptions, resolve_precision
from fp8bench.numerics import torch_api
from fp8bench.verify.cuda_replay import TARGETS, replay_case

RECIPES = ("fp8_tensorwise", "fp8_delayed", "fp8_rowwise", "fp8_blockwise", "mxfp8")
FOUR_BIT = ("nvfp4", "mxfp4")
SHAPES = {"gemm": "192x256x384", "attention": "b=2,h=2,s=64,d=64,kv_heads=1,backward=1",
          "transformer_step": "tiny,layers=1,batch=2,seq=64",
          "grouped_gemm": "g=4,tokens=64,top_k=2,n=128,k=128",
          "grouped_gemm_loop": "g=4,tokens=64,top_k=2,n=128,k=128,impl=loop"}
CASES = ([("gemm", r, f, b) for r in RECIPES for f in ("e4m3", "hybrid", "e5m2") for b in ("torch", "compiled")]
         + [(w, r, f, "torch") for w in ("attention", "transformer_step") for r in RECIPES for f in ("e4m3", "hybrid")]
         + [(w, r, "e4m3", "torch") for w in ("gemm", "attention", "transformer_step") for r in FOUR_BIT]
         + [(w, r, "e4m3", "torch") for w in ("grouped_gemm", "grouped_gemm_loop") for r in ("fp8_rowwise", "mxfp8")]
         + [(w, r, "e4m3", "torchao") for w in ("gemm", "attention", "transformer_step")
            for r in ("fp8_tensorwise", "fp8_rowwise")])


def surface_table() -> None:
    releases = torch_api.recorded()
    names = (*torch_api.ENTRY_POINTS, *torch_api.ENUM_NAMES, *(f"torch.{d}" for d in torch_api.DTYPES))
    print(f"{'entry point':40} " + " ".join(f"{r:>7}" for r in releases))
    for name in names:
        print(f"{name:40} " + " ".join(f"{'yes' if s.has(name) else '-':>7}" for s in releases.values()))
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", action="store_true", help="list every distinct call site and layout")
    parser.add_argument("--surfaces", action="store_true", help="first print the recorded API of each torch release")
    args = parser.parse_args()
    if args.surfaces:
        surface_table()
    sites: Counter[str] = Counter()
    bad = 0
    print(f"{'target':24} {'torch':>6} {'runs':>5} {'skips':>6} {'calls':>6} {'refused runs':>13}")
    for name, target in TARGETS.items():
        runs = skips = calls = refused = 0
        for workload, recipe, fmt, backend in CASES:
            precision = resolve_precision(recipe, RunOptions(fp8_format=fmt))
            replay = replay_case(workload.removesuffix("_loop"), SHAPES[workload], precision, backend, target)
            if replay.skip_reason is not None or replay.refused_by_builder:
                skips += 1
                continue
            runs += 1
            calls += len(replay.calls)
            refused += not replay.conforms
            for call in replay.calls:
                sites[f"{call.site}: {call.op} {call.spec.describe() if call.spec else ''}"
                      f"{' fast-accum' if call.spec and call.spec.fast_accum else ''}"] += 1
        bad += refused
        print(f"{name:24} {'.'.join(map(str, target.torch)):>6} {runs:>5} {skips:>6} {calls:>6} {refused:>13}")
    print(f"\n{len(CASES)} cases x {len(TARGETS)} targets; {sum(sites.values())} scaled GEMMs replayed from "
          f"{len({s.split(': ')[0] for s in sites})} call sites in {len(sites)} distinct (site, layout) forms")
    if args.calls:
        for site, n in sorted(sites.items()):
            print(f"  {n:5} x {site}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
