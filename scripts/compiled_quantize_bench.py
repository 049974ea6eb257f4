"""Fused FP8 quantization: torch.compile (Inductor) against eager, in one run, and against the copy bandwidth.

For each recipe, fp8bench's shared quantizer (amax, scale, saturating cast of one BF16 activation tensor) runs eager
and compiled, interleaved round by round so that a busy machine slows both alike. Reported per recipe:

* median seconds of each, and the ratio eager / compiled (> 1: compiled is faster);
* achieved bandwidth of each in GB/s, counting the minimum traffic (read 2 bytes, write 1 byte per element, plus
  the FP32 scales), against the device's measured copy bandwidth (``fp8bench.hardware.peaks``: read + write of a 256 MiB
  copy, the same accounting);
* the same tensor's copy (``dst.copy_(x)``), timed in the same rounds, as a ceiling measured under the same load;
* the compile time, paid once, outside every timed sample.

Usage::

    .venv/bin/python scripts/compiled_quantize_bench.py [--rows 8192] [--cols 4096] [--rounds 15]

The last stdout line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from fp8bench.core.devices import resolve_device
from fp8bench.core.precisions import resolve_precision
from fp8bench.hardware.peaks import Peaks
from fp8bench.measure.timing import timer_for
from fp8bench.numerics.quantize import quantizer_for

RECIPES = ("fp8_tensorwise", "fp8_rowwise", "fp8_blockwise")


def quantize_fn(recipe: str) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    quant = quantizer_for(resolve_precision(recipe), "lhs")

    def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = quant(x)
        return q.data, q.scale

    return quantize


def min_bytes(x: torch.Tensor, scale: torch.Tensor) -> int:
    """Read the BF16 input once, write the FP8 output and the FP32 scales once."""
    return x.numel() * x.element_size() + x.numel() * 1 + scale.numel() * 4


def measure(recipe: str, x: torch.Tensor, rounds: int, device: Any) -> dict[str, Any]:
    eager = quantize_fn(recipe)
    compiled = torch.compile(quantize_fn(recipe), dynamic=False)
    t0 = time.perf_counter()
    data_c, scale_c = compiled(x)
    device.synchronize()
    compile_s = time.perf_counter() - t0
    data_e, scale_e = eager(x)
    identical = torch.equal(scale_c, scale_e) and torch.equal(data_c.view(torch.uint8), data_e.view(torch.uint8))
    timer = timer_for(device, flush_l2=True)
    for fn in (eager, compiled):  # warm-up: allocator, thread pool
        fn(x)
    times: dict[str, list[float]] = {"eager": [], "compiled": [], "copy": []}
    dst = torch.empty_like(x)
    for _ in range(rounds):
        times["eager"].append(timer.time(lambda: eager(x)))
        times["compiled"].append(timer.time(lambda: compiled(x)))
        times["copy"].append(timer.time(lambda: dst.copy_(x)))  # same-conditions ceiling: read + write x
    nbytes = min_bytes(x, scale_e)
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "recipe": recipe, "shape": list(x.shape), "bytes": nbytes, "compile_s": compile_s,
        "identical_output": identical,
        "eager_median_s": med["eager"], "compiled_median_s": med["compiled"],
        "speedup": med["eager"] / med["compiled"],
        "round_ratio_median": statistics.median(e / c for e, c in zip(times["eager"], times["compiled"],
                                                                        strict=True)),
        "eager_gbps": nbytes / med["eager"] / 1e9, "compiled_gbps": nbytes / med["compiled"] / 1e9,
        "inrun_copy_gbps": 2 * x.numel() * x.element_size() / med["copy"] / 1e9,
        "eager_iqr_s": _iqr(times["eager"]), "compiled_iqr_s": _iqr(times["compiled"]),
    }


def _iqr(values: list[float]) -> float:
    q = statistics.quantiles(values, n=4)
    return q[2] - q[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--cols", type=int, default=4096, help="a multiple of 128 (blockwise tiles)")
    p.add_argument("--rounds", type=int, default=15, help="interleaved eager/compiled sample pairs")
    p.add_argument("--device", default="auto")
    p.add_argument("--recipes", default=",".join(RECIPES))
    p.add_argument("--results", default="results", help="cache folder of the measured CPU ceilings")
    args = p.parse_args(argv)
    if args.cols % 128 or args.rows < 1 or args.rounds < 3:
        p.error(f"need cols a multiple of 128 and rounds >= 3; got cols={args.cols}, rounds={args.rounds}")
    device = resolve_device(args.device)
    peaks = Peaks(device, device.name(), Path(args.results))
    bw = peaks.bandwidth()
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(args.rows, args.cols, generator=gen).to(device.torch, torch.bfloat16)
    rows = [measure(r, x, args.rounds, device) for r in args.recipes.split(",")]
    peak_gbps = bw.value * 1e3 if bw else None
    print(f"device {device} ({device.name()}), {torch.get_num_threads()} threads; x = {args.rows}x{args.cols} bf16; "
          f"copy bandwidth {peak_gbps:.1f} GB/s ({bw.source})" if bw else "no bandwidth ceiling")
    print(f"{'recipe':16} {'eager ms':>9} {'compiled ms':>11} {'speedup':>8} {'eager GB/s':>10} "
          f"{'comp GB/s':>9} {'% copy bw':>9} {'copy GB/s now':>13} {'compile s':>9} identical")
    for r in rows:
        pct = 100 * r["compiled_gbps"] / peak_gbps if peak_gbps else float("nan")
        r["compiled_pct_of_copy_bw"] = pct
        print(f"{r['recipe']:16} {r['eager_median_s'] * 1e3:9.2f} {r['compiled_median_s'] * 1e3:11.2f} "
              f"{r['speedup']:8.2f} {r['eager_gbps']:10.2f} {r['compiled_gbps']:9.2f} {pct:9.1f} "
              f"{r['inrun_copy_gbps']:13.2f} "
              f"{r['compile_s']:9.1f} {r['identical_output']}")
    print(json.dumps({"device": str(device), "device_name": device.name(), "threads": torch.get_num_threads(),
                      "copy_bw_gbps": peak_gbps, "copy_bw_source": bw.source if bw else None, "results": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
