"""The rules of PyTorch's FP8 grouped GEMM (``torch._scaled_grouped_mm``) that its meta function does not check.

A grouped GEMM multiplies jagged row groups of ``A`` ``[M, K]`` (row-major, FP8) by one expert weight each from
``B`` ``[G, K, N]`` (column-major: an ``[G, N, K]`` weight stack transposed), the groups delimited by int32 end
offsets. PyTorch's meta function (``torch/_meta_registrations.py``: ``_meta_grouped_mm_common``) already checks
what fake CUDA tensors can show: E4M3 operands, row-major ``A``, column-major ``B``, strides that are multiples of
16 bytes, int32 1-D offsets, FP32 scales ``[M]`` for ``A`` and ``[G, N]`` for ``B`` (rowwise) or E8M0 scales with
the blocked sizes (MXFP8), no bias, BF16 output when one is named. :mod:`fp8bench.verify.cuda_replay` replays every call
through it. The rules below are the rest, each with the source that enforces it:

* **Architecture.** ATen admits compute capability 9.0 and 10.0 only (``aten/src/ATen/native/cuda/GroupedBlas.cpp``,
  ``ScaledBlas.cpp`` in older releases: ``_scaled_grouped_mm_cuda``, ``_scaled_mm_allowed_device(sm90_only=true,
  sm100_only=true)``). Rowwise FP8 runs the CUTLASS SM90 kernel: PyTorch tests it on 9.x only
  (``torch/testing/_internal/common_cuda.py``: ``evaluate_platform_supports_fp8_grouped_gemm``, ``SM90OrLater and not
  SM100OrLater``), so fp8bench takes 9.0. MXFP8 runs the MSLK kernel on 10.0 only, CUDA 12.8+
  (``_check_mslk_grouped_inputs``; ``evaluate_platform_supports_mxfp8_grouped_gemm``: built with MSLK and ``IS_SM100``).
  Whether a build has MSLK is not visible from a :class:`~fp8bench.hardware.capabilities.CudaTarget`; a build without it
  refuses at the call, and that refusal is recorded as the reason.
* **Output dtype.** BF16 only (``_scaled_grouped_mm_cuda``: "Only bf16 high precision output types are supported
  for grouped gemm"). The meta function accepts an unnamed output dtype and leaves it unchecked.
* **Dimensions.** ``K`` and ``N`` multiples of 16 (``_scaled_grouped_mm_cuda``: "Expected mat_b shape to be
  divisible by 16"). The meta function's stride rule catches ``K`` but not ``N``.
* **Token-group alignment.** Every group must start on a multiple of 16 rows (rowwise) or 32 rows (MXFP8): 16
  bytes of FP8 per TMA load, one 32-element MX block along ``M`` for the weight-gradient GEMM. Neither the meta
  function nor ATen's forward path reads the offsets (a device-to-host copy), so an unpadded routing is not refused
  there, it is wrong or slow on the GPU; MoE frameworks pad to exactly these sizes (torchtitan
  ``torchtitan/models/moe/utils.py``: ``set_token_group_alignment_size_m``, 16 for FP8 and 32 for MXFP8; torchao's
  MoE training sets 32 for MXFP8). fp8bench checks the offsets' values, which the replay has, and refuses them.

On the CPU, torch 2.13 has no ``_scaled_grouped_mm`` kernel at all (seen: ``NotImplementedError: Could not run
'aten::_scaled_grouped_mm' with arguments from the 'CPU' backend``); ``torch._grouped_mm`` runs there in FP32, BF16
and FP16 through ATen's fallback, a loop of ``mm`` calls over the groups (``aten/src/ATen/native/GroupedMMUtils.h``:
``_grouped_mm_fallback``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from fp8bench.hardware.capabilities import CudaTarget, ScaledGemmSpec, ScaleLayout

# Rows each token group must be padded to, per scale layout of the left operand (see the module docstring).
GROUP_ALIGN_ROWS = {ScaleLayout.ROWWISE: 16, ScaleLayout.MX_1X32: 32}
# cuBLASLt's and MSLK's MXFP8 kernels need CUDA 12.8+ (``_check_mslk_grouped_inputs``).
_MX_CUDA = (12, 8)


@dataclass(frozen=True)
class GroupedGemmSpec:
    """One scaled grouped GEMM as the rules see it: the GEMM kind, each expert's ``n`` x ``k``, the group ends."""

    gemm: ScaledGemmSpec
    n: int
    k: int
    offsets: tuple[int, ...] | None  # None: values unknown

    def describe(self) -> str:
        groups = "?" if self.offsets is None else str(len(self.offsets))
        return f"grouped {self.gemm.describe()}, {groups} groups of N={self.n}, K={self.k}"


@dataclass(frozen=True)
class GroupedRule:
    name: str
    source: str
    check: Callable[[GroupedGemmSpec, CudaTarget], str | None]


def _arch(spec: GroupedGemmSpec, t: CudaTarget) -> str | None:
    cc = f"{t.cc[0]}.{t.cc[1]}"
    if spec.gemm.scale_a is ScaleLayout.MX_1X32:
        if t.cc != (10, 0):
            return f"MXFP8 grouped GEMMs run on compute capability 10.0 (MSLK kernel); this device is {cc}"
        if t.cuda < _MX_CUDA:
            return f"MXFP8 grouped GEMMs need CUDA 12.8+; torch here is built with CUDA {'.'.join(map(str, t.cuda))}"
        return None
    if spec.gemm.scale_a is ScaleLayout.ROWWISE and spec.gemm.scale_b is ScaleLayout.ROWWISE:
        if t.cc != (9, 0):
            return f"rowwise FP8 grouped GEMMs run on compute capability 9.0 (CUTLASS SM90 kernel); this device is {cc}"
        return None
    return (f"torch._scaled_grouped_mm has rowwise and MXFP8 kernels only; got "
            f"{spec.gemm.scale_a.value} x {spec.gemm.scale_b.value} scales")


def _output(spec: GroupedGemmSpec, t: CudaTarget) -> str | None:
    if spec.gemm.out_dtype != torch.bfloat16:
        return f"grouped FP8 GEMMs write BF16 only; asked for {str(spec.gemm.out_dtype).removeprefix('torch.')}"
    return None


def _dims(spec: GroupedGemmSpec, t: CudaTarget) -> str | None:
    bad = [f"{name} = {v}" for name, v in (("K", spec.k), ("N", spec.n)) if v % 16]
    return f"grouped FP8 GEMMs need K and N multiples of 16; got {', '.join(bad)}" if bad else None


def _group_alignment(spec: GroupedGemmSpec, t: CudaTarget) -> str | None:
    align = GROUP_ALIGN_ROWS.get(spec.gemm.scale_a)
    if align is None or spec.offsets is None:
        return None
    start = 0
    for e, end in enumerate(spec.offsets):
        if start % align:
            return (f"token group {e} starts at row {start}, not a multiple of {align}: pad each expert's rows to "
                    f"a multiple of {align} (shape key align)")
        start = end
    return None


GROUPED_RULES: tuple[GroupedRule, ...] = (
    GroupedRule("grouped architecture", "aten/src/ATen/native/cuda/GroupedBlas.cpp: _scaled_grouped_mm_cuda "
                "(compute capability 9.0 or 10.0), _check_mslk_grouped_inputs (MXFP8: SM10.x, CUDA 12.8+); "
                "torch/testing/_internal/common_cuda.py: evaluate_platform_supports_fp8_grouped_gemm (SM90), "
                "evaluate_platform_supports_mxfp8_grouped_gemm (MSLK and SM100)", _arch),
    GroupedRule("grouped output dtype", "aten/src/ATen/native/cuda/GroupedBlas.cpp: _scaled_grouped_mm_cuda "
                "(\"Only bf16 high precision output types are supported for grouped gemm\")", _output),
    GroupedRule("grouped dimensions", "aten/src/ATen/native/cuda/GroupedBlas.cpp: _scaled_grouped_mm_cuda "
                "(\"Expected mat_b shape to be divisible by 16\")", _dims),
    GroupedRule("token-group alignment", "torchtitan/models/moe/utils.py: set_token_group_alignment_size_m "
                "(16 for FP8: 16-byte TMA loads; 32 for MXFP8: one scale block)", _group_alignment),
)

ARCH_RULES = ("grouped architecture",)


def grouped_gemm_reason(spec: GroupedGemmSpec, target: CudaTarget) -> tuple[str, str] | None:
    """``(rule name, why)`` of the first rule that refuses ``spec`` on ``target``, or ``None``."""
    for rule in GROUPED_RULES:
        why = rule.check(spec, target)
        if why:
            return rule.name, why
    return None
