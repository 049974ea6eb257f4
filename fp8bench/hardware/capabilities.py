"""The device capability matrix: which FP8 GEMM kinds a device can run natively, and why not.

Every backend's availability check, ``fp8bench doctor`` and the CUDA conformance tests
(:mod:`fp8bench.verify.cuda_replay`) read the rules here, so they live in one place.

**Hardware and PyTorch's CUDA kernels.** A scaled GEMM ``torch._scaled_mm`` / ``torch.nn.functional.scaled_mm``
is described by a :class:`ScaledGemmSpec` (operand dtypes, how each operand is scaled, output dtype, fast
accumulation) and judged against a :class:`CudaTarget` (compute capability, CUDA version, torch version) by
:data:`SCALED_GEMM_RULES`. PyTorch's meta functions already check layouts and shapes (row-major ``a``,
column-major ``b``, dims multiple of 16, scale shapes, strides and swizzles); these rules are the ones the meta
functions do *not* check, each written down from the CUDA source that enforces it:

* FP8 GEMMs need compute capability 8.9 (Ada: L4, L40S, RTX 4090) or 9.0+ (``scaled_mm_arch_allowed``).
* E5M2 x E5M2 has no cuBLASLt kernel.
* Block-scaled FP8 with FP32 scales (1x128 activations, 128x128 weights; DeepSeek-V3's recipe) runs on compute
  capability 9.x only, with cuBLASLt 12.9+, and only on E4M3 operands.
* MXFP8 (E8M0 scales per 32 elements) runs on compute capability 10.x (B200, GB200, B300), E4M3 operands only.
* Per-row scaling through CUTLASS (compute capability 8.9 and 10.x+ always, 9.x with cuBLASLt older than 12.9)
  wrote BF16 only in PyTorch builds before mid-2026.
* 4-bit GEMMs (packed ``float4_e2m1fn_x2`` operands) run on compute capability 10.x with CUDA 12.8+, FP4 on both
  sides, full-precision accumulation only (``use_fast_accum`` is refused). Both go through ``F.scaled_mm`` (torch
  2.10+): NVFP4 (E4M3 scales per 16 values and an FP32 tensor scale) needs its list of two scale levels, and MXFP4
  (E8M0 scales per 32) has a CUDA kernel there from 2.10 on, while ``torch._scaled_mm`` takes it on ROCm only.

**Which entry point** a recipe's GEMMs take depends on what the target's torch has
(:func:`fp8bench.numerics.torch_api.gemm_entry_point`; for this process's GPU, detected; for a conformance target, the
surface recorded from its release's wheel). A recipe with no entry point on that torch is refused with the release
that adds one.

**Other devices.** AMD MI300-class GPUs (gfx942) use the ``fnuz`` FP8 variants (E4M3 max 240). PyTorch's CPU
``_scaled_mm`` runs tensorwise and rowwise scales (seen with torch 2.13) and refuses block scales and FP4.

A rule here says what the hardware and PyTorch's kernels can do; a backend may still refuse a case at build time
(its library too old, a layout it lacks), and that refusal is recorded with its own message.

Software is not here: each backend declares the libraries it needs, their oldest versions and the devices it
runs on in its own module (``kernels/*.py``; :meth:`fp8bench.core.plugins.Backend.availability`), and applies
the hardware rules above per precision.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum

import torch

from fp8bench.core.devices import Device
from fp8bench.core.libraries import parse_version
from fp8bench.core.precisions import Fp4Recipe, Fp8Recipe, Granularity, ScaledRecipe
from fp8bench.numerics import torch_api


class ScaleLayout(str, Enum):
    """How one operand of a scaled GEMM is scaled, in the terms of PyTorch's ``ScalingType``."""

    TENSORWISE = "tensorwise"  # one FP32 scale
    ROWWISE = "rowwise"  # one FP32 scale per row of the [rows, K] operand
    BLOCK_1X128 = "1x128"  # one FP32 scale per 1x128 tile along K
    BLOCK_128X128 = "128x128"  # one FP32 scale per 128x128 tile
    MX_1X32 = "mx_1x32"  # one E8M0 scale per 32 elements along K (OCP MX)
    NV_1X16 = "nv_1x16"  # one E4M3 scale per 16 FP4 elements along K, times an FP32 tensor scale (NVFP4)

    @property
    def is_fp32_block(self) -> bool:
        return self in (ScaleLayout.BLOCK_1X128, ScaleLayout.BLOCK_128X128)


def operand_layout(granularity: Granularity, block: tuple[int, int] = (1, 1)) -> ScaleLayout:
    """The scale layout of an operand quantized with ``granularity`` (and, for blockwise, its ``block`` tile)."""
    if granularity is Granularity.TENSORWISE:
        return ScaleLayout.TENSORWISE
    if granularity is Granularity.ROWWISE:
        return ScaleLayout.ROWWISE
    if granularity is Granularity.MX:
        return ScaleLayout.MX_1X32
    if granularity is Granularity.NVFP4:
        return ScaleLayout.NV_1X16
    if block == (1, 128):
        return ScaleLayout.BLOCK_1X128
    if block == (128, 128):
        return ScaleLayout.BLOCK_128X128
    raise ValueError(f"no CUDA kernel takes {block[0]}x{block[1]} FP32 block scales; accepted: 1x128, 128x128")


@dataclass(frozen=True)
class ScaledGemmSpec:
    """One scaled GEMM ``out = (a * scale_a) @ (b * scale_b)`` as the CUDA rules see it (shapes aside)."""

    a_dtype: torch.dtype
    b_dtype: torch.dtype
    scale_a: ScaleLayout
    scale_b: ScaleLayout
    out_dtype: torch.dtype
    fast_accum: bool = False
    api: str = "any"  # the entry point: "_scaled_mm" (torch._scaled_mm), "_scaled_mm_v2" (F.scaled_mm) or "any"

    def describe(self) -> str:
        def name(dtype: torch.dtype) -> str:
            return str(dtype).removeprefix("torch.")
        return (f"{name(self.a_dtype)} ({self.scale_a.value}) x {name(self.b_dtype)} ({self.scale_b.value}) -> "
                f"{name(self.out_dtype)}")


@dataclass(frozen=True)
class CudaTarget:
    """What the scaled-GEMM rules depend on: the GPU's compute capability and the CUDA and torch builds.

    ``cuda`` is the CUDA version torch was built with (``torch.version.cuda``); it stands in for the cuBLASLt
    version, which pip wheels ship alongside and which only moves forward with it.
    """

    name: str
    cc: tuple[int, int]
    cuda: tuple[int, ...]
    torch: tuple[int, ...]
    live: bool = False  # this process's own GPU: its torch is asked what it has, not looked up

    @classmethod
    def of(cls, device: Device, name: str | None = None, cc: tuple[int, int] | None = None) -> CudaTarget:
        """The target a CUDA ``device`` of this process is (overrides for tests)."""
        return cls(name or device.name(), cc or device.capability() or (0, 0),
                   parse_version(torch.version.cuda or "0"), parse_version(torch.__version__), live=True)

    def surface(self) -> torch_api.TorchSurface:
        """The scaled-GEMM API of the target's torch: detected for this process's GPU, else the recorded surface
        of its release (:mod:`fp8bench.numerics.torch_api`)."""
        return torch_api.detect() if self.live else torch_api.release_surface(self.torch)

    def describe(self) -> str:
        def dotted(v: tuple[int, ...]) -> str:
            return ".".join(map(str, v))
        return (f"{self.name} (compute capability {self.cc[0]}.{self.cc[1]}, CUDA {dotted(self.cuda)}, "
                f"torch {dotted(self.torch)})")


@dataclass(frozen=True)
class ScaledGemmRule:
    """A CUDA rule the meta functions do not check: ``check`` returns why a spec is refused, or ``None``."""

    name: str
    source: str  # where CUDA enforces it (file and function)
    check: Callable[[ScaledGemmSpec, CudaTarget], str | None]


_E4M3 = torch.float8_e4m3fn
_E5M2 = torch.float8_e5m2
_FP4 = torch.float4_e2m1fn_x2
# cuBLASLt 12.9 added per-row (outer-vector) and 1x128/128x128 FP32 block scales.
_CUBLASLT_BLOCK_SCALES = (12, 9)
# cuBLASLt's E8M0 (VEC32_UE8M0) block-scale mode arrived with CUDA 12.8.
_CUBLASLT_MX_SCALES = (12, 8)
# First torch release whose CUTLASS rowwise kernel writes FP16/FP32 besides BF16. ScaledBlas.cpp relaxed the check
# ("Only bf16 high precision output types are supported for row-wise scaling." became "Only bf16, fp16, and fp32
# ...") in mid-2026; the exact first release is not confirmed, so builds before 2.13 are taken as BF16-only.
_TORCH_ROWWISE_WIDE_OUTPUT = (2, 13)


# cuBLASLt's FP4 block-scaled matmul (CUDA_R_4F_E2M1 with VEC16_UE4M3 / VEC32_UE8M0 scales) arrived with CUDA 12.8.
_CUBLASLT_FP4 = (12, 8)
# First torch release whose CUDA build has an MXFP4 kernel: _scaled_mxfp4_mxfp4 behind F.scaled_mm, FBGEMM's f4f4bf16
# (MSLK's from 2.11). The libtorch_cuda.so of the 2.10.0 CUDA wheel carries its check "MXFP4 scaling only supported in
# CUDA for B200/B300"; 2.9.1's has neither that kernel nor F.scaled_mm, and no release's torch._scaled_mm takes MXFP4
# on CUDA (is_blockwise_1x32_scaling accepts packed FP4 under USE_ROCM only, 2.8 through 2.14).
_TORCH_MXFP4_CUDA = (2, 10)


def _is_fp4(spec: ScaledGemmSpec) -> bool:
    return _FP4 in (spec.a_dtype, spec.b_dtype)


def _arch(spec: ScaledGemmSpec, t: CudaTarget) -> str | None:
    if _is_fp4(spec):
        return None  # the FP4 rule names the architecture FP4 needs
    if t.cc >= (9, 0) or t.cc == (8, 9):
        return None
    return (f"FP8 GEMMs need compute capability 8.9 or 9.0+; this device is {t.cc[0]}.{t.cc[1]} "
            "(no FP8 tensor cores)")


def _e5m2_pair(spec: ScaledGemmSpec, t: CudaTarget) -> str | None:
    if spec.a_dtype == _E5M2 and spec.b_dtype == _E5M2:
        return "cuBLASLt has no E5M2 x E5M2 GEMM (use e4m3, or hybrid: E4M3 forward, E5M2 gradients)"
    return None


def _fp32_blocks(spec: ScaledGemmSpec, t: CudaTarget) -> str | None:
    if not (spec.scale_a.is_fp32_block or spec.scale_b.is_fp32_block):
        return None
    if t.cc[0] != 9:
        return (f"1x128/128x128 block-scaled FP8 GEMMs run on compute capability 9.x only (Hopper); this device "
                f"is {t.cc[0]}.{t.cc[1]}")
    if t.cuda < _CUBLASLT_BLOCK_SCALES:
        return f"1x128/128x128 block-scaled FP8 GEMMs need cuBLASLt 12.9+; torch here is built with CUDA " \
               f"{'.'.join(map(str, t.cuda))}"
    if spec.a_dtype != _E4M3 or spec.b_dtype != _E4M3:
        return "1x128/128x128 block-scaled FP8 GEMMs take E4M3 operands only (no E5M2 gradients)"
    return None


def _fp4_arch(spec: ScaledGemmSpec, t: CudaTarget) -> str | None:
    if not _is_fp4(spec):
        return None
    if t.cc[0] != 10:
        return (f"FP4 GEMMs (NVFP4, MXFP4) run on compute capability 10.x (B200, GB200, B300); this device is "
                f"{t.cc[0]}.{t.cc[1]}")
    if t.cuda < _CUBLASLT_FP4:
        return f"FP4 GEMMs need CUDA 12.8+; torch here is built with CUDA {'.'.join(map(str, t.cuda))}"
    return None


def _mxfp4_entry_point(spec: ScaledGemmSpec, t: CudaTarget) -> str | None:
    if not (_is_fp4(spec) and ScaleLayout.MX_1X32 in (spec.scale_a, spec.scale_b)):
        return None
    if spec.api == "_scaled_mm":
        return ("torch._scaled_mm takes packed FP4 with E8M0 scales on ROCm only (is_blockwise_1x32_scaling); "
                "MXFP4 on CUDA runs through torch.nn.functional.scaled_mm")
    if t.torch < _TORCH_MXFP4_CUDA:
        return (f"MXFP4 on CUDA needs torch {'.'.join(map(str, _TORCH_MXFP4_CUDA))}+ (_scaled_mxfp4_mxfp4); the "
                f"target runs torch {'.'.join(map(str, t.torch))}")
    return None


def _fp4_operands(spec: ScaledGemmSpec, t: CudaTarget) -> str | None:
    if not _is_fp4(spec):
        if ScaleLayout.NV_1X16 in (spec.scale_a, spec.scale_b):
            return "NVFP4 (1x16 E4M3) block scales take FP4 (float4_e2m1fn_x2) operands only"
        return None
    if spec.a_dtype != _FP4 or spec.b_dtype != _FP4:
        return "FP4 GEMMs take FP4 (float4_e2m1fn_x2) operands on both sides"
    if not {spec.scale_a, spec.scale_b} <= {ScaleLayout.NV_1X16, ScaleLayout.MX_1X32} or spec.scale_a != spec.scale_b:
        return "FP4 GEMMs take NVFP4 (1x16 E4M3) or MXFP4 (1x32 E8M0) block scales on both operands"
    if spec.fast_accum:
        return "use_fast_accum is not supported with Float4_e2m1fn_x2 operands (FP4 accumulates in full precision)"
    return None


def _mx(spec: ScaledGemmSpec, t: CudaTarget) -> str | None:
    if ScaleLayout.MX_1X32 not in (spec.scale_a, spec.scale_b) or _is_fp4(spec):
        return None
    if t.cc[0] != 10:
        return f"MXFP8 GEMMs (E8M0 block scales) run on compute capability 10.x; this device is {t.cc[0]}.{t.cc[1]}"
    if t.cuda < _CUBLASLT_MX_SCALES:
        return f"MXFP8 GEMMs need CUDA 12.8+; torch here is built with CUDA {'.'.join(map(str, t.cuda))}"
    if spec.a_dtype != _E4M3 or spec.b_dtype != _E4M3:
        return "MXFP8 GEMMs take E4M3 operands only"
    return None


def _rowwise_output(spec: ScaledGemmSpec, t: CudaTarget) -> str | None:
    if not (spec.scale_a is ScaleLayout.ROWWISE and spec.scale_b is ScaleLayout.ROWWISE):
        return None
    cutlass = t.cc[0] < 9 or t.cuda < _CUBLASLT_BLOCK_SCALES or t.cc[0] >= 10
    if cutlass and t.torch < _TORCH_ROWWISE_WIDE_OUTPUT and spec.out_dtype != torch.bfloat16:
        return (f"per-row scaled GEMMs on this device go through CUTLASS, which writes BF16 only in torch "
                f"{'.'.join(map(str, t.torch))}; asked for {str(spec.out_dtype).removeprefix('torch.')}")
    return None


SCALED_GEMM_RULES: tuple[ScaledGemmRule, ...] = (
    ScaledGemmRule("architecture", "aten/src/ATen/native/cuda/ScaledBlasDeviceUtils.cpp: scaled_mm_arch_allowed "
                   "(checked by _scaled_mm_out_cuda and _scaled_mm_cuda_v2_out)", _arch),
    ScaledGemmRule("no E5M2 x E5M2", "aten/src/ATen/native/cuda/ScaledBlas.cpp: _scaled_mm_out_cuda, "
                   "_scaled_mm_cuda_v2_out (\"Multiplication of two Float8_e5m2 matrices is not supported\")",
                   _e5m2_pair),
    ScaledGemmRule("1x128/128x128 blocks", "aten/src/ATen/native/cuda/ScaledBlas.cpp: _check_deepseek_support "
                   "(SM90 only, cublasLt >= 12.9); aten/src/ATen/native/ScaledBlasUtils.cpp: check_deepseek_recipe "
                   "(Float8_e4m3fn operands)", _fp32_blocks),
    ScaledGemmRule("MXFP8", "cuBLASLt VEC32_UE8M0 scale mode (CUDA 12.8+); PyTorch's MX GEMM tests run on SM100 "
                   "(torch/testing/_internal/common_cuda.py: evaluate_platform_supports_mx_gemm) and Transformer "
                   "Engine refuses MXFP8 on 12.x; aten/src/ATen/native/ScaledBlasUtils.cpp: check_mxfp8_recipe "
                   "(Float8_e4m3fn operands)", _mx),
    ScaledGemmRule("FP4", "cuBLASLt FP4 scale modes VEC16_UE4M3 / VEC32_UE8M0 (CUDA 12.8+); PyTorch's FP4 GEMM tests "
                   "run on SM100 (torch/testing/_internal/common_cuda.py: PLATFORM_SUPPORTS_FP4, "
                   "PLATFORM_SUPPORTS_MX_GEMM); aten/src/ATen/native/cuda/ScaledBlas.cpp: _check_mxfp4_support "
                   "(dprops->major == 10, \"MXFP4 scaling only supported in CUDA for B200/B300\")", _fp4_arch),
    ScaledGemmRule("MXFP4 entry point", "aten/src/ATen/native/cuda/Blas.cpp (2.9) and ScaledBlas.cpp (2.10+): "
                   "is_blockwise_1x32_scaling (is_packed_fp4_path under #ifdef USE_ROCM: torch._scaled_mm refuses "
                   "FP4 x FP4 with E8M0 scales on CUDA, \"Invalid scaling configuration\"); ScaledBlas.cpp: "
                   "_scaled_mxfp4_mxfp4 (the CUDA MXFP4 kernel behind F.scaled_mm, first in the 2.10.0 CUDA wheel's "
                   "libtorch_cuda.so; CUDA builds without FBGEMM GenAI/MSLK, Windows included, refuse it)",
                   _mxfp4_entry_point),
    ScaledGemmRule("FP4 operands", "aten/src/ATen/native/cuda/ScaledBlas.cpp: _scaled_mm_out_cuda and "
                   "_scaled_mm_cuda_v2_out (\"`use_fast_accum` is not supported when ... Float4_e2m1fn_x2\"); "
                   "aten/src/ATen/native/ScaledBlasUtils.cpp: check_nvfp4_recipe, check_mxfp4_recipe (FP4 x FP4 "
                   "with E4M3 / E8M0 scales)", _fp4_operands),
    ScaledGemmRule("rowwise output dtype", "aten/src/ATen/native/cuda/ScaledBlas.cpp: _scaled_rowwise_rowwise "
                   "(CUTLASS f8f8bf16_rowwise when major < 9, cuBLASLt < 12.9 or major >= 10)", _rowwise_output),
)


def scaled_gemm_reason(spec: ScaledGemmSpec, target: CudaTarget) -> str | None:
    """Why PyTorch's CUDA kernels refuse ``spec`` on ``target`` (``None``: a rule-abiding call runs)."""
    for rule in SCALED_GEMM_RULES:
        why = rule.check(spec, target)
        if why:
            return why
    return None


# --- the GEMMs each FP8 path runs ------------------------------------------------------------------------------

def scaled_mm_api(recipe: ScaledRecipe, surface: torch_api.TorchSurface) -> str | None:
    """Which PyTorch entry point :mod:`fp8bench.numerics.scaled_gemm` calls for ``recipe``'s GEMMs on a torch with
    ``surface`` (``None``: that torch has none; :func:`fp8bench.numerics.torch_api.gemm_entry_point`)."""
    return torch_api.gemm_entry_point(recipe.granularity, recipe.element_bits == 4, surface)


def forward_gemm_spec(recipe: ScaledRecipe, api: str = "any") -> ScaledGemmSpec:
    """The ``gemm`` workload's product and an FP8 layer's forward GEMM: activations x weights, BF16 out, through
    the entry point ``api``."""
    fwd = recipe.forward_format.dtype
    return ScaledGemmSpec(fwd, fwd, operand_layout(recipe.granularity, recipe.activation_block),
                          operand_layout(recipe.granularity, recipe.weight_block), torch.bfloat16,
                          recipe.fast_accum, api)


def layer_gemm_specs(recipe: ScaledRecipe, backward: bool = True, api: str = "any") -> dict[str, ScaledGemmSpec]:
    """The GEMMs of one FP8 linear layer (:mod:`fp8bench.numerics.fp8_linear`): forward, and dgrad and wgrad in
    training.

    Gradients take the recipe's backward format (E5M2 under ``hybrid``). Block recipes tile the weight 128x128 in
    the forward and dgrad GEMMs and every activation or gradient 1x128 (the wgrad GEMM's right operand, the input
    transposed, is an activation). Both backward GEMMs write BF16 and accumulate in full precision.
    """
    specs = {"forward": forward_gemm_spec(recipe, api)}
    if not backward:
        return specs
    fwd, bwd = recipe.forward_format.dtype, recipe.backward_format.dtype
    act = operand_layout(recipe.granularity, recipe.activation_block)
    weight = operand_layout(recipe.granularity, recipe.weight_block)
    specs["dgrad"] = ScaledGemmSpec(bwd, fwd, act, weight, torch.bfloat16, api=api)
    specs["wgrad"] = ScaledGemmSpec(bwd, fwd, act, act, torch.bfloat16, api=api)
    return specs


def target_recipe_reason(recipe: ScaledRecipe, target: CudaTarget, backward: bool = False) -> str | None:
    """Why ``recipe``'s GEMMs cannot run on ``target``: its torch has no entry point for them, or a GEMM breaks a
    CUDA rule through the entry point it has (``backward``: an FP8 layer's three GEMMs)."""
    surface = target.surface()
    api = scaled_mm_api(recipe, surface)
    why = gemms_reason(layer_gemm_specs(recipe, backward, api or "any"), target)
    if why or api is not None:
        return why
    return torch_api.entry_point_reason(capability_key(recipe), recipe.granularity, recipe.element_bits == 4,
                                         surface)


def gemms_reason(specs: dict[str, ScaledGemmSpec], target: CudaTarget) -> str | None:
    """The first refusal among named GEMMs, prefixed by the GEMM's name when there are several."""
    for name, spec in specs.items():
        why = scaled_gemm_reason(spec, target)
        if why:
            return why if len(specs) == 1 else f"{name} GEMM ({spec.describe()}): {why}"
    return None


# The rows of the capability matrix: each FP8 granularity, then the two 4-bit recipes (``nvfp4`` is also a
# granularity; ``mxfp4`` shares MX scales with ``mxfp8`` but not its kernels).
MATRIX_KEYS: tuple[str, ...] = (*(g.value for g in Granularity if g is not Granularity.NVFP4), "nvfp4", "mxfp4")


def capability_key(recipe: ScaledRecipe) -> str:
    """The matrix row a recipe's hardware rule is read from."""
    return recipe.capability_key


def probe_recipe(key: str) -> ScaledRecipe:
    """A recipe standing for one matrix row (E4M3 for the FP8 rows)."""
    if key == "mxfp4":
        return Fp4Recipe("probe_mxfp4", Granularity.MX)
    if key == "nvfp4":
        return Fp4Recipe("probe_nvfp4", Granularity.NVFP4)
    return Fp8Recipe(f"probe_{key}", Granularity(key))


@dataclass(frozen=True)
class DeviceCapabilities:
    device: str
    name: str
    compute_capability: tuple[int, int] | None
    fp8_variant: str  # ocp | fnuz
    fp8_reasons: dict[str, str | None]  # matrix row (MATRIX_KEYS) -> why a native GEMM cannot run (None: it can)
    target: CudaTarget | None = None  # the CUDA target the rules were judged against (None off CUDA)

    def fp8_reason(self, granularity: Granularity) -> str | None:
        """The hardware rule of an FP8 granularity (``nvfp4``: the 4-bit NVFP4 row)."""
        return self.fp8_reasons[granularity.value]

    def recipe_reason(self, recipe: ScaledRecipe, backward: bool = False) -> str | None:
        """Why ``recipe``'s native GEMMs cannot run here: its matrix row's hardware rule, then (on CUDA) each
        GEMM the recipe runs with its formats, accumulation and output (``backward``: an FP8 layer's three)."""
        why = self.fp8_reasons[capability_key(recipe)]
        if why or self.target is None:
            return why
        return target_recipe_reason(recipe, self.target, backward)

    def as_rows(self) -> list[tuple[str, str]]:
        return [(g, "yes" if r is None else f"no: {r}") for g, r in self.fp8_reasons.items()]


def _is_rocm() -> bool:
    return getattr(torch.version, "hip", None) is not None


def _cuda_reasons(target: CudaTarget) -> dict[str, str | None]:
    """Per matrix row: its forward GEMM through the entry point the target's torch has (E4M3 for FP8 rows; format
    rules come per recipe)."""
    return {key: target_recipe_reason(probe_recipe(key), target) for key in MATRIX_KEYS}


# A CUDA target that stands in for the live GPU while the conformance layer replays calls
# (:func:`fp8bench.verify.cuda_replay.emulating`); ``None`` in normal runs.
_SIMULATED_TARGET: CudaTarget | None = None


@contextlib.contextmanager
def simulated_cuda_target(target: CudaTarget) -> Iterator[CudaTarget]:
    """Within the block, :func:`capabilities_for` answers for ``target`` when asked about a CUDA device."""
    global _SIMULATED_TARGET
    previous, _SIMULATED_TARGET = _SIMULATED_TARGET, target
    try:
        yield target
    finally:
        _SIMULATED_TARGET = previous


def capabilities_for(device: Device, name: str | None = None, cc: tuple[int, int] | None = None,
                     rocm: bool | None = None, target: CudaTarget | None = None) -> DeviceCapabilities:
    """Capabilities of ``device``; ``name``, ``cc``, ``rocm`` and ``target`` override the live queries (tests)."""
    if device.is_cuda and target is None and _SIMULATED_TARGET is not None:
        target, rocm = _SIMULATED_TARGET, False
    if not device.is_cuda:
        cpu_reason = "torch's CPU _scaled_mm has tensorwise and rowwise kernels only"
        fp4_reason = "torch's CPU _scaled_mm has no FP4 kernel (tensorwise and rowwise FP8 only)"
        reasons: dict[str, str | None] = {Granularity.TENSORWISE.value: None, Granularity.ROWWISE.value: None,
                                          Granularity.BLOCKWISE.value: cpu_reason, Granularity.MX.value: cpu_reason,
                                          "nvfp4": fp4_reason, "mxfp4": fp4_reason}
        return DeviceCapabilities(str(device), name or device.name(), None, "ocp", reasons)
    rocm = _is_rocm() if rocm is None else rocm
    if target is None and not rocm:
        target = CudaTarget.of(device, name, cc)
    cc = target.cc if target else (cc or device.capability())
    name = target.name if target else (name or device.name())
    assert cc is not None
    if rocm:
        # gfx942 (MI300X/MI325X) reports 9.4 through HIP; its FP8 is the fnuz variant and it has no MX units.
        fnuz = "MI300" in name or "MI325" in name or cc == (9, 4)
        reasons = {Granularity.TENSORWISE.value: None, Granularity.ROWWISE.value: None,
                   Granularity.BLOCKWISE.value: "no block-scaled FP8 GEMM in hipBLASLt through PyTorch",
                   Granularity.MX.value: "MXFP8 needs MX hardware (CDNA4+)" if fnuz else None,
                   # ScaledBlas.cpp: _scaled_nvfp4_nvfp4 ("NVFP4 scaling not supported on ROCM"); MXFP4 on gfx950.
                   "nvfp4": "NVFP4 scaling is not supported on ROCm (ScaledBlas.cpp: _scaled_nvfp4_nvfp4)",
                   "mxfp4": "MXFP4 needs MX hardware (CDNA4+)" if fnuz else None}
        return DeviceCapabilities(str(device), name, cc, "fnuz" if fnuz else "ocp", reasons)
    assert target is not None
    return DeviceCapabilities(str(device), name, cc, "ocp", _cuda_reasons(target), target)


def fp8_gemm_reason(device: Device, granularity: Granularity) -> str | None:
    """Shorthand for the hardware rule of one FP8 scaling granularity on ``device``."""
    return capabilities_for(device).fp8_reason(granularity)


def recipe_hardware_reason(device: Device, recipe: ScaledRecipe) -> str | None:
    """The hardware rule of ``recipe``'s matrix row on ``device`` (4-bit recipes get their own rows)."""
    return capabilities_for(device).fp8_reasons[capability_key(recipe)]


def recipe_gemm_reason(device: Device, recipe: ScaledRecipe, backward: bool = False) -> str | None:
    """Shorthand for :meth:`DeviceCapabilities.recipe_reason` on ``device``."""
    return capabilities_for(device).recipe_reason(recipe, backward)
