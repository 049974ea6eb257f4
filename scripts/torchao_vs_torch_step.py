"""fp8bench's own FP8 linear (``torch`` backend) against torchao's ``Float8Linear`` on the same training step.

Both backends build the ``transformer_step`` workload from the same initial weights and batch; only the linear
layers differ (fp8bench's ``Fp8Linear`` with native ``torch._scaled_mm`` against torchao's converted layers). In one
process, with rounds interleaved so that a busy machine slows both alike, it reports:

* the median step time of each and the ratio torchao / torch (> 1: torchao is slower);
* numerics of one forward + backward from the initial weights (the loss followed by every gradient, the workload's
  ``output()``): SQNR of each against the FP64 reference, and of torchao against torch;
* the loss of each over the timed steps (the same batch every step), and the largest gap between the two curves.

Usage::

    .venv/bin/python scripts/torchao_vs_torch_step.py [--shape tiny,layers=1,batch=2] [--precision fp8_rowwise]
                                                      [--rounds 5] [--wgrad-hp]

The last stdout line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import torch

from fp8bench.core.devices import resolve_device
from fp8bench.core.pipeline import BuildContext, Unsupported
from fp8bench.core.plugins import BACKENDS, WORKLOADS, load_all
from fp8bench.core.precisions import RunOptions, resolve_precision
from fp8bench.numerics.accuracy import compare


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="tiny,layers=1,batch=2", help="transformer_step shape")
    p.add_argument("--precision", default="fp8_rowwise", help="an FP8 recipe both backends run")
    p.add_argument("--fp8-format", default="e4m3")
    p.add_argument("--rounds", type=int, default=5, help="interleaved steps per backend")
    p.add_argument("--wgrad-hp", action="store_true", help="torchao's rowwise_with_gw_hp recipe")
    p.add_argument("--device", default="auto")
    args = p.parse_args(argv)
    if args.rounds < 3:
        p.error(f"--rounds must be >= 3 for a median, got {args.rounds}")
    load_all()
    device = resolve_device(args.device)
    workload = WORKLOADS.get("transformer_step")
    shape = workload.parse_shape(args.shape)
    precision = resolve_precision(args.precision, RunOptions(fp8_format=args.fp8_format))
    inputs = workload.make_inputs(shape, device, seed=0)
    reference = workload.reference(inputs)

    pipelines: dict[str, Any] = {}
    build_s: dict[str, float] = {}
    for backend, options in (("torch", {}), ("torchao", {"wgrad_hp": args.wgrad_hp})):
        why = BACKENDS.get(backend).unsupported_reason("transformer_step", precision, device)
        if why:
            print(json.dumps({"error": why}))
            return 2
        t0 = time.perf_counter()
        try:
            pipelines[backend] = BACKENDS.get(backend).build(
                BuildContext("transformer_step", shape, precision, device, inputs, options))
        except Unsupported as exc:
            print(json.dumps({"error": f"{backend}: {exc}"}))
            return 2
        build_s[backend] = time.perf_counter() - t0

    outputs = {b: pl.output() for b, pl in pipelines.items()}
    numerics = {b: compare(out, reference).to_dict() for b, out in outputs.items()}
    agreement = compare(outputs["torchao"], outputs["torch"].double()).to_dict()
    loss0 = {b: float(out[0]) for b, out in outputs.items()}

    times: dict[str, list[float]] = {b: [] for b in pipelines}
    losses: dict[str, list[float]] = {b: [] for b in pipelines}
    for _ in range(args.rounds):
        for b, pl in pipelines.items():
            t0 = time.perf_counter()
            loss = pl.end_to_end()
            device.synchronize()
            times[b].append(time.perf_counter() - t0)
            losses[b].append(float(loss))
    med = {b: statistics.median(v) for b, v in times.items()}
    gap = max(abs(a - c) for a, c in zip(losses["torch"], losses["torchao"], strict=True))
    recipe = pipelines["torchao"].extra.get("torchao_recipe")
    result = {
        "device": str(device), "device_name": device.name(), "threads": torch.get_num_threads(),
        "shape": shape, "precision": precision.name, "fp8_format": args.fp8_format, "torchao_recipe": recipe,
        "rounds": args.rounds, "build_s": build_s, "step_median_s": med, "step_samples_s": times,
        "step_ratio_torchao_over_torch": med["torchao"] / med["torch"],
        "numerics_vs_fp64": numerics, "torchao_vs_torch": agreement, "initial_loss": loss0,
        "losses": losses, "max_loss_gap": gap,
    }
    print(f"transformer_step {args.shape} on {device} ({device.name()}, {torch.get_num_threads()} threads), "
          f"{precision.name} ({args.fp8_format}); torchao recipe {recipe}")
    print(f"{'backend':8} {'step s (median)':>15} {'SQNR vs FP64 dB':>16} {'initial loss':>12} {'last loss':>10}")
    for b in pipelines:
        print(f"{b:8} {med[b]:15.3f} {numerics[b]['sqnr_db'] or float('inf'):16.2f} {loss0[b]:12.5f} "
              f"{losses[b][-1]:10.5f}")
    print(f"step time ratio torchao/torch: {result['step_ratio_torchao_over_torch']:.2f}; "
          f"torchao vs torch SQNR {agreement['sqnr_db'] or float('inf'):.2f} dB; max loss gap over "
          f"{args.rounds} steps {gap:.2e}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
