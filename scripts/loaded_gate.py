#!/usr/bin/env python
"""The same code measured twice, the second time with every core busy, then gated: what a loaded machine does to
one run per side.

1. ``fp8bench run`` measures the cases (the base), on the machine as it is.
2. One busy-looping process per CPU starts; the same ``fp8bench run`` measures the cases again (the candidate):
   its table shows the noise column and the load warning.
3. The busy processes stop, and ``fp8bench gate BASE CANDIDATE`` compares the two runs.

Nothing changed between the runs but the load, so any regression the gate calls is a false alarm. The run files
and the gate report go under ``--out`` (default ``results/loaded-gate``); the script prints each step's output and
exits with the gate's code. ``--gate-with PATH`` gates the same two files with another fp8bench as well (a checkout's
``.venv/bin/fp8bench``), to compare two versions of the gate on identical measurements.

    python scripts/loaded_gate.py
    python scripts/loaded_gate.py --gate-with ../main/.venv/bin/fp8bench -- --shape 256x256x256 --precision bf16
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_RUN_ARGS = ["--shape", "128x128x128", "256x256x256", "--precision", "bf16", "fp32", "--backend", "torch",
                    "--no-phases"]
BUSY_LOOP = "while True: pass"


def fp8bench(*args: str) -> list[str]:
    return [sys.executable, "-m", "fp8bench.cli", *args]


def show(title: str, out: subprocess.CompletedProcess[str]) -> None:
    print(f"--- {title} (exit {out.returncode}) ---", flush=True)
    sys.stdout.write(out.stderr + out.stdout)
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("results/loaded-gate"), help="folder of the run files and report")
    p.add_argument("--busy", type=int, default=os.cpu_count() or 1, help="busy processes (default: one per CPU)")
    p.add_argument("--settle", type=float, default=20.0,
                   help="seconds the busy processes run before the candidate starts (the 1-minute load average "
                        "takes that long to show them)")
    p.add_argument("--gate-with", default=None, metavar="FP8BENCH",
                   help="another fp8bench executable that gates the same two run files too")
    p.add_argument("run_args", nargs=argparse.REMAINDER, help="after --: `fp8bench run` arguments")
    args = p.parse_args(argv)
    run_args = [a for a in args.run_args if a != "--"] or DEFAULT_RUN_ARGS
    args.out.mkdir(parents=True, exist_ok=True)
    base, cand = args.out / "base.json", args.out / "candidate.json"

    common = ["--no-store", "--force", "--results-dir", str(args.out)]
    show("base, the machine as it is", subprocess.run(fp8bench("run", *run_args, *common, "--out", str(base)),
                                                        capture_output=True, text=True))
    busy = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(args.busy)]
    try:
        time.sleep(args.settle)
        show(f"candidate, the same code with {args.busy} busy process(es)",
             subprocess.run(fp8bench("run", *run_args, *common, "--out", str(cand)), capture_output=True, text=True))
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    gate = subprocess.run(fp8bench("gate", str(base), str(cand), "--no-store-report", "--report-dir",
                                   str(args.out / "gate")), capture_output=True, text=True)
    show("gate candidate against base", gate)
    if args.gate_with:
        show(f"the same two files gated by {args.gate_with}",
             subprocess.run([args.gate_with, "gate", str(base), str(cand), "--no-store-report", "--report-dir",
                             str(args.out / "gate-other")], capture_output=True, text=True))
    return gate.returncode


if __name__ == "__main__":
    sys.exit(main())
