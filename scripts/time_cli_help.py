"""Wall time of ``fp8bench --help`` and ``fp8bench VERB --help`` in fresh interpreters, optionally beside another
checkout's (``--code DIR``), alternating the two so that load falls on both alike.

    python scripts/time_cli_help.py --repeat 10 [--code /path/to/other/checkout]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARGVS = (["--help"], ["gate", "--help"], ["run", "--help"])


def _once(code: Path, argv: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(code)}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fp8bench", *argv], env=env, cwd=code, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--code", type=Path, help="another checkout to time beside this one")
    args = parser.parse_args()
    codes = {"this": ROOT, **({"other": args.code.resolve()} if args.code else {})}
    print(f"load average {os.getloadavg()[0]:.2f}")
    for argv in ARGVS:
        walls: dict[str, list[float]] = {name: [] for name in codes}
        for _ in range(args.repeat):
            for name, code in codes.items():
                walls[name].append(_once(code, argv))
        line = "  ".join(f"{name} {statistics.median(w) * 1e3:.0f} ms" for name, w in walls.items())
        print(f"fp8bench {' '.join(argv):<14} median of {args.repeat}: {line}")


if __name__ == "__main__":
    main()
