"""Does fp8bench's timer agree with torch.utils.benchmark? Same process, same threads, alternating rounds.

For each case, build the pipeline once, then alternate: fp8bench's adaptive sampler on the GEMM phase, then
``torch.utils.benchmark.Timer.blocked_autorange`` on the same callable. Prints the medians and their ratio per
round, and the median ratio over rounds.

    python scripts/timing_fidelity.py     # 1024^3: bf16 and fp8_rowwise (torch), fp8_tensorwise (emulated)
    python scripts/timing_fidelity.py --shape 256x256x256 --case torch:fp8_tensorwise
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.utils.benchmark as tbench

from fp8bench.core.devices import resolve_device
from fp8bench.core.pipeline import BuildContext
from fp8bench.core.plugins import BACKENDS, WORKLOADS, load_all
from fp8bench.core.precisions import resolve_precision
from fp8bench.measure.timing import SamplingPolicy, sample, timer_for


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="1024x1024x1024")
    parser.add_argument("--case", nargs="+", default=["torch:bf16", "torch:fp8_rowwise", "emulated:fp8_tensorwise"],
                        help="backend:precision pairs")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-run-time", type=float, default=1.0, help="blocked_autorange min_run_time, seconds")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    load_all()
    device = resolve_device(args.device)
    gemm = WORKLOADS.get("gemm")
    shape = gemm.parse_shape(args.shape)
    inputs = gemm.make_inputs(shape, device, seed=0)
    policy = SamplingPolicy(min_samples=10, min_time_s=args.min_run_time, max_time_s=args.min_run_time * 3)
    timer = timer_for(device)
    print(f"shape {args.shape}, device {device}, torch threads {torch.get_num_threads()}")
    print(f"{'case':<28} {'round':>5} {'fp8bench ms':>12} {'n':>4} {'torch ms':>10} {'ratio':>7}")
    for spec in args.case:
        backend, precision_name = spec.split(":")
        precision = resolve_precision(precision_name)
        pipeline = BACKENDS.get(backend).build(BuildContext("gemm", shape, precision, device, inputs))
        fn = pipeline.phases["gemm"]
        for _ in range(3):
            fn()  # warm-up, as the runner does
        ratios = []
        for r in range(args.rounds):
            ours = sample(fn, timer, policy, time.monotonic() + 600)
            theirs = tbench.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads()
                                  ).blocked_autorange(min_run_time=args.min_run_time)
            ratio = ours.median_s / theirs.median
            ratios.append(ratio)
            print(f"{spec:<28} {r:>5} {ours.median_s * 1e3:>12.4f} {ours.n:>4} {theirs.median * 1e3:>10.4f} "
                  f"{ratio:>7.3f}")
        print(f"{spec:<28} median ratio {statistics.median(ratios):.3f} "
              f"({'within' if abs(statistics.median(ratios) - 1) <= 0.05 else 'OUTSIDE'} 5%)")


if __name__ == "__main__":
    main()
