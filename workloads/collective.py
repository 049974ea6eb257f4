"""The ``collective`` workload: communication between processes in BF16 against FP8, on ``torch.distributed``.

Three operations, each the communication pattern of a distributed training step, chosen by the shape's ``op``:

* ``op=all_gather,m=..,n=..``: every rank holds ``m/n_ranks`` rows of an ``[m, n]`` weight and gathers the whole
  weight (FSDP/ZeRO-3 before a layer's forward). FP8: each rank quantizes its shard, the FP8 bytes and scales are
  gathered, every rank dequantizes the full weight.
* ``op=reduce_scatter,m=..,n=..``: every rank holds a full ``[m, n]`` gradient and receives the sum over ranks of its
  ``m/n_ranks`` rows (FSDP/ZeRO after backward). FP8: an all-to-all of FP8 chunks and a dequantize-and-sum in FP32
  (:mod:`fp8bench.numerics.fp8_comm` explains why a reduction cannot run on FP8 bytes).
* ``op=tp_linear,m=..,n=..,k=..``: a column-parallel linear layer (Megatron-style tensor parallelism): ``X [m, k]``
  on every rank, the weight ``[n, k]`` split by output features, each rank computes ``X @ W_r^T`` (``[m, n/ranks]``)
  and the output is all-gathered into ``[m, n]``. FP8: the GEMM in FP8 (the ``gemm`` workload's
  ``torch._scaled_mm`` path) and the output all-gathered in FP8.

Precisions: float precisions communicate in their own dtype (``bf16`` is the baseline); FP8 recipes with tensorwise
(current or delayed) or rowwise scales communicate FP8 (E4M3 by default; the gradient of ``reduce_scatter`` takes
the recipe's gradient format, E5M2 under ``--fp8-format hybrid``).

Phases: ``quantize`` and ``gemm`` (``tp_linear`` only: the GEMM's operands and the GEMM), ``encode`` (FP8: quantize
the communicated tensor and pack bytes and scales), ``communicate`` (the collective alone), ``decode`` (FP8:
unpack and dequantize, and sum for a reduce-scatter; ``tp_linear``: reassemble the gathered columns).

Closed forms, per call, with ``p`` ranks:

* FLOPs: 0 for ``all_gather`` and ``reduce_scatter`` (communication; the FP8 arithmetic of encode/decode is not
  counted), ``2*m*n*k`` for ``tp_linear`` (the whole layer, done by ``p`` ranks together).
* Bytes: the size ``S`` nccl-tests gives a collective (``doc/PERFORMANCE.md`` of NVIDIA/nccl-tests), in the bytes
  actually sent: the gathered tensor for an all-gather, the full buffer each rank contributes for a
  reduce-scatter; FP8 counts one byte per element plus 4 per scale
  (:func:`fp8bench.numerics.fp8_comm.chunk_wire_bytes`). Each rank sends ``S*(p-1)/p`` of them. The record's ``extra``
  carries ``comm_bytes`` (``S``), ``bus_factor`` (``(p-1)/p``) and, from the ``communicate`` phase's median ``t``,
  ``algbw_gbps = S/t`` and ``busbw_gbps = algbw * (p-1)/p``, nccl-tests' definitions for all-gather, reduce-scatter and
  all-to-all.

Numerics: each rank's result against the full-precision one computed from the same FP32 inputs in FP64 (the record
keeps rank 0's): the gathered weight, the rank's reduced rows, the layer's gathered output.

The workload needs a process group of two or more ranks (``torchrun``, :mod:`fp8bench.hardware.distributed`); outside
one, its cases are skipped with the command that launches them.
"""

from __future__ import annotations

import re
from typing import Any, cast

import torch

from fp8bench.core.devices import Device
from fp8bench.core.plugins import WORKLOADS, Workload
from fp8bench.core.precisions import Precision, ScaledRecipe
from fp8bench.core.shapes import Shape, ShapeError, parse_keyvalue
from fp8bench.hardware.distributed import LAUNCH_HINT, world
from fp8bench.numerics.fp8_comm import WIRE_GRANULARITIES, chunk_wire_bytes
from fp8bench.workloads.gemm import output_dtype
from fp8bench.workloads.memory import refusal

OPS: dict[str, tuple[str, ...]] = {"all_gather": ("m", "n"), "reduce_scatter": ("m", "n"), "tp_linear": ("m", "n", "k")}
_OP = re.compile(r"(?:^|,)\s*op\s*=\s*([^,]*?)\s*(?:,|$)")

# Bytes per element of the communicated [m, n] tensor alive at a rank's peak on the CPU: the FP32 source (4), its
# working copy in BF16 (2), the packed and the received FP8 buffers (1 + 1), the FP32 decode (4), the result (4 at
# most), the FP64 reference (8) and the numerics check's FP64 temporaries (3 x 8); reduce_scatter also keeps the FP32
# chunks every rank contributes to this rank's rows (4). On a GPU the numerics temporaries stay off the device.
ELEMENT_BYTES = {"cpu": 4 + 2 + 1 + 1 + 4 + 4 + 8 + 3 * 8, "device": 4 + 2 + 1 + 1 + 4 + 4 + 8}
PEERS_BYTES = 4
# tp_linear's operands X [m, k] and W [n, k]: FP32 source, working copy (4 at most), FP8 copy, FP64 reference.
OPERAND_BYTES = 4 + 4 + 1 + 8


def op_of(shape: Shape) -> str:
    """The operation a shape names (the one text value of a ``collective`` shape)."""
    return str(shape["op"])


def result_dtype(precision: Precision, op: str) -> torch.dtype:
    """The dtype of the communicated result: the precision's own for floats; BF16 for FP8 recipes (the dtype the
    consumer of a dequantized weight, gradient or layer output works in)."""
    if op == "tp_linear":
        return output_dtype(precision)
    return precision.activation_dtype


def comm_rows_cols(shape: Shape, ranks: int) -> tuple[int, int]:
    """Rows and columns of one rank's communicated chunk: a weight shard or gradient chunk ``[m/p, n]``, or a
    tensor-parallel output shard ``[m, n/p]``."""
    m, n = shape["m"], shape["n"]
    return (m, n // ranks) if op_of(shape) == "tp_linear" else (m // ranks, n)


class Collective(Workload):
    name = "collective"
    phases = ("quantize", "gemm", "encode", "communicate", "decode")
    description = ("all-gather, reduce-scatter or a tensor-parallel linear across torchrun ranks, BF16 vs FP8 "
                   "communication")
    default_shape = "op=all_gather,m=4096,n=1024"

    def parse_shape(self, text: str) -> Shape:
        found = _OP.search(text)
        if not found:
            raise ShapeError(f"collective shape {text!r}: missing op; expected op={'|'.join(OPS)} then m=..,n=.. "
                             "(and k=.. for tp_linear), e.g. op=all_gather,m=4096,n=1024")
        op = found.group(1)
        if op not in OPS:
            raise ShapeError(f"collective shape {text!r}: unknown op {op!r}; accepted: {', '.join(OPS)}")
        rest = ",".join(p for p in text.split(",") if p.split("=", 1)[0].strip() != "op")
        dims = parse_keyvalue(rest, OPS[op])
        # Shapes are integer dicts everywhere else; the op is kept by name so that tables and the store say it.
        return cast(Shape, {"op": op, **dims})

    def trains(self, shape: Shape) -> bool:
        return op_of(shape) == "reduce_scatter"  # a gradient: FP8 recipes use their gradient format

    def flops(self, shape: Shape) -> int:
        return 2 * shape["m"] * shape["n"] * shape["k"] if op_of(shape) == "tp_linear" else 0

    def min_bytes(self, shape: Shape, precision: Precision) -> int:
        """nccl-tests' size ``S`` of the collective, in the bytes sent (module docstring)."""
        ranks = world()[1]
        rows, cols = comm_rows_cols(shape, ranks)
        if isinstance(precision, ScaledRecipe):
            if precision.granularity in WIRE_GRANULARITIES:
                return ranks * chunk_wire_bytes(rows, cols, precision.granularity)
            return shape["m"] * shape["n"]  # a recipe the collective refuses: its FP8 bytes, scales unknown
        return shape["m"] * shape["n"] * precision.dtype.itemsize

    def shape_reason(self, shape: Shape, precision: Precision) -> str | None:
        ranks = world()[1]
        if ranks < 2:
            why = "a world of 1 process communicates nothing" if _launched() else "no process group"
            return f"collective measures communication between processes ({why}): {LAUNCH_HINT}"
        op = op_of(shape)
        split, size = ("n", shape["n"]) if op == "tp_linear" else ("m", shape["m"])
        if size % ranks:
            return f"{op} splits {split}={size} across {ranks} ranks: {split} must be a multiple of {ranks}"
        if op == "tp_linear" and isinstance(precision, ScaledRecipe):
            need = precision.gemm_alignment()
            got = (shape["m"], shape["n"] // ranks, shape["k"])
            if any(g % d for g, d in zip(got, need, strict=True)):
                return (f"{precision.name} GEMM needs M, N, K multiples of {need[0]}, {need[1]}, {need[2]}; each "
                        f"rank's GEMM is {got[0]}x{got[1]}x{got[2]}")
        return None

    def make_inputs(self, shape: Shape, device: Device, seed: int) -> dict[str, torch.Tensor]:
        """Deterministic FP32 inputs of this rank, the same on every rank where the tensor is shared.

        ``reduce_scatter``: rank ``i``'s gradient is made of ``p`` row chunks, chunk ``j`` drawn from its own seed
        ``(seed, i, j)``, so this rank can draw its own gradient and the chunk ``rank`` of every other rank's (the
        ``peers`` its reduced rows sum) without drawing every rank's whole gradient.
        """
        rank, ranks = world()
        op, m, n = op_of(shape), shape["m"], shape["n"]
        gen = torch.Generator().manual_seed(seed)
        if op == "all_gather":
            inputs = {"w": torch.randn(m, n, generator=gen)}
        elif op == "tp_linear":
            k = shape["k"]
            # The 1/sqrt(K) fan-in scale of a trained linear layer keeps outputs O(1), as in the gemm workload.
            inputs = {"x": torch.randn(m, k, generator=gen), "w": torch.randn(n, k, generator=gen) / k**0.5}
        else:
            rows = m // max(ranks, 1)

            def chunk(owner: int, index: int) -> torch.Tensor:
                g = torch.Generator().manual_seed(seed * 2**40 + owner * 2**20 + index)
                return torch.randn(rows, n, generator=g)

            inputs = {"grad": torch.cat([chunk(rank, j) for j in range(ranks)]),
                      "peers": torch.stack([chunk(i, rank) for i in range(ranks)])}
        return {name: t.to(device.torch) for name, t in inputs.items()}

    def reference(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        if "peers" in inputs:
            return inputs["peers"].double().sum(dim=0)
        if "x" in inputs:
            return inputs["x"].double() @ inputs["w"].double().t()
        return inputs["w"].double()

    def memory_bytes(self, shape: Shape, device: Device) -> int:
        """Bytes one rank holds at its peak (see :data:`ELEMENT_BYTES`)."""
        per_element = ELEMENT_BYTES["device" if device.is_cuda else "cpu"]
        m, n = shape["m"], shape["n"]
        if op_of(shape) == "reduce_scatter":
            per_element += PEERS_BYTES
        total = per_element * m * n
        if op_of(shape) == "tp_linear":
            total += OPERAND_BYTES * (m + n) * shape["k"]
        return total

    def memory_reason(self, shape: Shape, precision: Precision, device: Device) -> str | None:
        return refusal(device, self.memory_bytes(shape, device), f"this {op_of(shape)}",
                       "the rank's FP32 inputs, working and wire copies, the result and the FP64 reference")


def _launched() -> bool:
    """Whether torch.distributed holds a process group (of one rank, if the world is 1)."""
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def collective_extra(shape: Shape, ranks: int, backend: str, nbytes: int) -> dict[str, Any]:
    """The record extras of a collective case (module docstring: ``comm_bytes``, ``bus_factor``, ...)."""
    return {"op": op_of(shape), "world_size": ranks, "process_group_backend": backend, "comm_bytes": nbytes,
            "bus_factor": (ranks - 1) / ranks, "bytes_sent_per_rank": nbytes * (ranks - 1) // ranks}


COLLECTIVE = WORKLOADS.add("collective", Collective())
