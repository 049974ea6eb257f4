#!/usr/bin/env python
"""What reading and writing back one stored record costs: ``load_record`` then ``Record.to_dict``, per record.

Every record the store ingests, the gate compares or an export writes goes through the loader once, so this is a
per-record cost of each of those paths. The records are those of the schema-2 run file in ``tests/data`` (a CPU
run's, measured, skipped and failed), repeated to ``--records``.

    python scripts/record_codec_speed.py                       # this checkout
    python scripts/record_codec_speed.py --code /tmp/old       # and another checkout, alternating with this one

With ``--code``, each round runs both checkouts one after the other in fresh interpreters (each importing its own
``fp8bench``), so that both see the same load; the load average is printed with each figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Run in a fresh interpreter with the checkout first on sys.path: the microseconds per record of one pass.
_ONE_PASS = """
import sys, time
sys.path.insert(0, sys.argv[1])
from fp8bench.core.records import load_record
from fp8bench.results.runfile import read_run_file
stored = read_run_file(sys.argv[1] + "/tests/data/runfiles/schema2-complete.json")["records"]
records = (stored * (int(sys.argv[2]) // len(stored) + 1))[:int(sys.argv[2])]
started = time.perf_counter()
for record in records:
    load_record(record).to_dict()
print((time.perf_counter() - started) / len(records) * 1e6)
"""


def one_pass(code: Path, records: int) -> float:
    """Microseconds per record for ``code``'s fp8bench."""
    out = subprocess.run([sys.executable, "-c", _ONE_PASS, str(code), str(records)], capture_output=True, text=True,
                         check=True)
    return float(out.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--code", type=Path, help="another checkout, measured alternately with this one")
    parser.add_argument("--records", type=int, default=20_000, help="records per pass (default 20,000)")
    parser.add_argument("--rounds", type=int, default=5, help="passes per checkout (default 5)")
    args = parser.parse_args()
    if args.records < 1 or args.rounds < 1:
        parser.error(f"--records {args.records} and --rounds {args.rounds} must be at least 1")
    sides = {"this checkout": ROOT, **({f"--code {args.code}": args.code} if args.code else {})}
    figures: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, code in sides.items():
            figures[name].append(one_pass(code, args.records))
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    for name, values in figures.items():
        print(f"{name}: {statistics.median(values):.1f} us per record (median of {args.rounds} passes of "
              f"{args.records:,}: {', '.join(f'{v:.1f}' for v in values)}); load average {load}")


if __name__ == "__main__":
    main()
