"""Which ``torch._scaled_mm`` paths are fast on this CPU: operand dtypes x scale granularity.

Times one ``[n, n] x [n, n]`` FP8 GEMM (best of 3 after a warm-up call) for every pair of E4M3/E5M2 operands with
per-tensor (0-dim) and per-row scales. It explains the CPU timings of the backends that reach ``_scaled_mm`` with
per-tensor scales (``torch``, ``compiled``, ``torchao``'s tensorwise forward and its rowwise backward).

Usage::

    .venv/bin/python scripts/scaled_mm_cpu_paths.py [--n 256]

The last stdout line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable

import torch

DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)


def best_of_3(fn: Callable[[], object]) -> float:
    fn()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=256, help="square GEMM size, a multiple of 16")
    args = p.parse_args(argv)
    if args.n % 16 or args.n < 16:
        p.error(f"--n must be a positive multiple of 16, got {args.n}")
    n = args.n
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen)
    one = torch.tensor(1.0)
    rows = []
    for da in DTYPES:
        for db in DTYPES:
            qa, qb = a.to(da), b.to(db).t()  # B column-major, as _scaled_mm requires
            tw = best_of_3(lambda qa=qa, qb=qb: torch._scaled_mm(qa, qb, scale_a=one, scale_b=one,
                                                                 out_dtype=torch.bfloat16))
            rw = best_of_3(lambda qa=qa, qb=qb: torch._scaled_mm(qa, qb, scale_a=torch.ones(n, 1),
                                                                 scale_b=torch.ones(1, n), out_dtype=torch.bfloat16))
            rows.append({"a": str(da).removeprefix("torch."), "b": str(db).removeprefix("torch."),
                         "tensorwise_s": tw, "rowwise_s": rw})
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {n}^3 FP8 GEMM, best of 3")
    print(f"{'A':14} {'B':14} {'tensorwise ms':>14} {'rowwise ms':>11}")
    for r in rows:
        print(f"{r['a']:14} {r['b']:14} {r['tensorwise_s'] * 1e3:14.1f} {r['rowwise_s'] * 1e3:11.1f}")
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "n": n, "results": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
