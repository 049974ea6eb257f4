"""The ``axpy`` workload: ``y = alpha * x + y`` over ``n`` values, the BLAS level-1 kernel.

It reads two vectors and writes one, two FLOPs per element, so it measures memory bandwidth, not tensor cores: a
precision changes the bytes moved, never the arithmetic rate. It brings its own PyTorch pipeline for the float
precisions, which the ``torch`` backend runs without a builder of its own.
"""

from __future__ import annotations

import torch

from fp8bench.core.devices import Device
from fp8bench.core.pipeline import BuildContext, Pipeline
from fp8bench.core.plugins import WORKLOADS, Workload
from fp8bench.core.precisions import Precision
from fp8bench.core.shapes import Shape, parse_keyvalue
from fp8bench.workloads.memory import CHECKED_OUTPUTS, refusal

ALPHA = 0.5


class Axpy(Workload):
    name = "axpy"
    phases = ("axpy",)
    description = "y = alpha * x + y over n values (memory-bound)"
    default_shape = "n=1048576"

    def parse_shape(self, text: str) -> Shape:
        return parse_keyvalue(text, ("n",))

    def flops(self, shape: Shape) -> int:
        return 2 * shape["n"]

    def min_bytes(self, shape: Shape, precision: Precision) -> int:
        return 3 * precision.operand_bytes(shape["n"])  # read x and y, write y

    def make_inputs(self, shape: Shape, device: Device, seed: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(seed)
        return {k: torch.randn(shape["n"], generator=gen).to(device.torch) for k in ("x", "y")}

    def reference(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return ALPHA * inputs["x"].double() + inputs["y"].double()

    def memory_reason(self, shape: Shape, precision: Precision, device: Device) -> str | None:
        # FP32 sources, their copies in the precision, the output and the FP64 reference: 24 bytes a value at most;
        # and the outputs the output check keeps beside the call's own (CHECKED_OUTPUTS, 4 bytes a value each).
        return refusal(device, (24 + 4 * CHECKED_OUTPUTS) * shape["n"], "this axpy",
                       "inputs, output, the output check's copies and FP64 reference")

    def eager_pipeline(self, ctx: BuildContext) -> Pipeline:
        x, y = (ctx.inputs[k].to(ctx.precision.dtype) for k in ("x", "y"))

        def axpy() -> torch.Tensor:
            return torch.add(y, x, alpha=ALPHA)  # a new y each call: the inputs stay as generated

        return Pipeline(end_to_end=axpy, phases={"axpy": axpy}, output=axpy)


AXPY = WORKLOADS.add("axpy", Axpy())
