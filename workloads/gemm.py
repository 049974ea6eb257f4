"""The ``gemm`` workload: ``Y[M, N] = A[M, K] @ B[N, K]^T``, a linear layer's forward product.

``A`` plays the activations (``M`` = tokens), ``B`` the weight stored ``[out_features, in_features]`` as in
``torch.nn.Linear``, so the FP8 layout ``torch._scaled_mm`` wants (row-major A, column-major B) is B's natural one.

Closed forms, per call:

* FLOPs ``= 2*M*N*K`` (one multiply and one add per term).
* Minimum bytes ``= (M*K + N*K) * in_bytes + M*N * out_bytes``: each operand read once in the GEMM's input
  element size and the output written once (FP8 recipes: 1-byte inputs, BF16 output; scales are negligible).
* Memory held at once (:func:`memory_bytes`), refused before anything is allocated when it does not fit: see
  :data:`OPERAND_BYTES` and :data:`OUTPUT_BYTES`.

Phases: ``quantize`` (amax, scale and cast of both operands), ``gemm`` (the kernel on operands already in its input
format), ``epilogue`` (turning the accumulator into the output dtype where the kernel does not do it itself).
"""

from __future__ import annotations

import re

import torch

from fp8bench.core.devices import Device
from fp8bench.core.plugins import WORKLOADS, Workload
from fp8bench.core.precisions import FloatPrecision, Precision, ScaledRecipe
from fp8bench.core.shapes import Shape, ShapeError, parse_keyvalue, parse_positive
from fp8bench.workloads.memory import CHECKED_OUTPUTS, refusal

_MNK = re.compile(r"^\s*([^x]+)x([^x]+)x([^x]+)\s*$", re.IGNORECASE)

# Bytes per operand element (A and B) alive at the peak, when the FP64 reference is computed while the measured
# pipeline and its output still exist: the FP32 sources (4), the backend's working copies, counted at FP32 (4:
# an emulated recipe dequantizes to FP32), and the reference's FP64 copies of A and B (8).
OPERAND_BYTES = 4 + 4 + 8
# Bytes per output element on the device: the output (4 at most), the outputs the output check keeps beside it
# (CHECKED_OUTPUTS x 4) and the FP64 reference (8); on the CPU also the numerics check's FP64 temporaries (output
# as FP64, the error and its square: 3 x 8).
OUTPUT_BYTES = {"device": 4 * (1 + CHECKED_OUTPUTS) + 8, "cpu": 4 * (1 + CHECKED_OUTPUTS) + 8 + 3 * 8}


def output_dtype(precision: Precision) -> torch.dtype:
    """FP8 GEMMs write BF16; the float precisions write their own dtype."""
    return torch.bfloat16 if isinstance(precision, ScaledRecipe) else precision.dtype


class Gemm(Workload):
    name = "gemm"
    phases = ("quantize", "gemm", "epilogue")
    description = "Y = A @ B^T with A [M,K] activations and B [N,K] weights"
    default_shape = "1024x1024x1024"

    def parse_shape(self, text: str) -> Shape:
        m = _MNK.match(text)
        if m:
            dims = [parse_positive(v, f"gemm shape {text!r}: {key}") for key, v in zip("MNK", m.groups(), strict=True)]
            return dict(zip(("m", "n", "k"), dims, strict=True))
        if "=" in text:
            return parse_keyvalue(text, ("m", "n", "k"))
        raise ShapeError(f"gemm shape {text!r}: expected MxNxK (for example 4096x4096x4096) or m=..,n=..,k=..")

    def flops(self, shape: Shape) -> int:
        return 2 * shape["m"] * shape["n"] * shape["k"]

    def min_bytes(self, shape: Shape, precision: Precision) -> int:
        m, n, k = shape["m"], shape["n"], shape["k"]
        return precision.operand_bytes(m * k + n * k) + m * n * output_dtype(precision).itemsize

    def make_inputs(self, shape: Shape, device: Device, seed: int) -> dict[str, torch.Tensor]:
        gen = torch.Generator().manual_seed(seed)
        a = torch.randn(shape["m"], shape["k"], generator=gen)
        # Weights with the 1/sqrt(K) fan-in scale of a trained linear layer keep outputs O(1).
        b = torch.randn(shape["n"], shape["k"], generator=gen) / shape["k"] ** 0.5
        return {"a": a.to(device.torch), "b": b.to(device.torch)}

    def reference(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return inputs["a"].double() @ inputs["b"].double().t()

    def memory_bytes(self, shape: Shape, device: Device) -> int:
        """Bytes one case holds at its peak on ``device`` (see :data:`OPERAND_BYTES`)."""
        m, n, k = shape["m"], shape["n"], shape["k"]
        per_output = OUTPUT_BYTES["device" if device.is_cuda else "cpu"]
        return OPERAND_BYTES * (m * k + n * k) + per_output * m * n

    def memory_reason(self, shape: Shape, precision: Precision, device: Device) -> str | None:
        return refusal(device, self.memory_bytes(shape, device), "this GEMM",
                       "FP32 A and B, the kernel's working copies, the output, the copies the output check keeps "
                       "and the FP64 reference")

    def shape_reason(self, shape: Shape, precision: Precision) -> str | None:
        if isinstance(precision, FloatPrecision):
            return None
        need = precision.gemm_alignment()
        got = (shape["m"], shape["n"], shape["k"])
        if any(g % d for g, d in zip(got, need, strict=True)):
            return (f"{precision.name} GEMM needs M, N, K multiples of {need[0]}, {need[1]}, {need[2]}; "
                    f"got {got[0]}x{got[1]}x{got[2]}")
        return None

    def probe_shape(self, shape: Shape, max_flops: float) -> Shape | None:
        flops = self.flops(shape)
        if flops <= max_flops:
            return None
        factor = (max_flops / flops) ** (1 / 3)
        # Multiples of 128 keep every recipe's alignment rule satisfied.
        return {key: max(128, int(v * factor) // 128 * 128) for key, v in shape.items()}


GEMM = WORKLOADS.add("gemm", Gemm())
