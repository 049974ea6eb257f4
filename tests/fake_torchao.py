"""A fake of torchao's MXFP8 training API as it was up to torchao 0.16 (``MXLinearConfig``).

The installed torchao (0.18) has the newer API (``MXFP8TrainingOpConfig``, since 0.17), which the tests use for
real. The older shape is installed in ``sys.modules`` under torchao's own names for one test, with the newer
modules hidden, so that fp8bench's detection, recipe choice and conversion check run against it. Modelled on the
``torchao==0.16.0`` wheel (``OLD``) and, for the recipe names, ``torchao==0.10.0`` (``OLDEST``); paths below are
inside ``torchao/prototype/mx_formats/``. Rules enforced, each as torchao enforces it:

* ``config.py`` ``MXLinearConfig.from_recipe_name``: a name outside ``MXLinearRecipeName`` is an
  ``AssertionError``; 0.10 has ``mxfp8_emulated``, ``mxfp8_cublas``, ``mxfp8_cutlass`` (no RCEIL recipe; 0.12.0
  neither), 0.13-0.16 ``mxfp8_emulated``, ``mxfp8_cublas``, ``mxfp8_cublas_rceil``; both have ``mxfp4_emulated``,
  ``mxfp4_cutlass``.
* ``MXLinearConfig`` is a dataclass: an unknown field is a ``TypeError``; ``_validate_kernel_preference``: the
  AUTO (cuBLAS) kernel takes 32-element blocks only.
* ``mx_linear.py`` ``MXLinear.from_float``: asserts the module is an ``nn.Linear``, then swaps its ``__class__``
  in place; ``quantize_`` (``torchao/quantization/quant_api.py``) applies it to every ``nn.Linear``
  (``_is_linear``), the root module included.
* ``mx_tensor.py`` ``to_mx``: the high-precision tensor is bf16 or fp32, its last dimension divisible by the block
  size, and contiguous (``AssertionError`` otherwise).
* ``mx_tensor.py`` ``_addmm_mx_dispatch`` with the AUTO kernel: ``torch._scaled_mm`` on the FP8 data with E8M0
  block scales in the blocked layout (``utils.py`` ``to_blocked``: ``round_up(rows, 128) x round_up(K/32, 4)``),
  BF16 output. The real ``torch._scaled_mm`` is called, so the device's own answer (a refusal on this CPU) is the
  one fp8bench sees. Scales are computed with the FLOOR rule only (the RCEIL recipe rounds differently).
"""

from __future__ import annotations

import enum
import sys
import types
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

OLD, OLDEST = "0.16.0", "0.10.0"
RECIPE_NAMES = {
    OLD: ("mxfp8_emulated", "mxfp8_cublas", "mxfp8_cublas_rceil", "mxfp4_emulated", "mxfp4_cutlass"),
    OLDEST: ("mxfp8_emulated", "mxfp8_cublas", "mxfp8_cutlass", "mxfp4_emulated", "mxfp4_cutlass"),
}
E4M3_MAX_EXPONENT = 8  # 448 = 1.75 * 2**8


class KernelPreference(enum.Enum):
    AUTO = "auto"
    EMULATED = "emulated"


def _round_up(x: int, to: int) -> int:
    return (x + to - 1) // to * to


def _to_mx(x: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """E4M3 data and E8M0 exponents (biased, uint8) per ``block`` elements of the last dim (FLOOR scale rule)."""
    assert x.dtype in (torch.bfloat16, torch.float), f"to_mx takes bf16 or fp32, not {x.dtype}"
    assert x.shape[-1] % block == 0, f"last dim of {tuple(x.shape)} is not a multiple of block_size {block}"
    assert x.is_contiguous(), "to_mx: unsupported non-contiguous input"
    blocks = x.float().reshape(*x.shape[:-1], x.shape[-1] // block, block)
    amax = blocks.abs().amax(dim=-1, keepdim=True).clamp_min(2.0 ** -126)
    exponent = torch.floor(torch.log2(amax)) - E4M3_MAX_EXPONENT
    data = (blocks / torch.exp2(exponent)).clamp(-448, 448).to(torch.float8_e4m3fn).reshape(x.shape)
    return data, (exponent.squeeze(-1) + 127).to(torch.uint8)


def _blocked(scales: torch.Tensor) -> torch.Tensor:
    """Scales padded to the blocked layout's size (``utils.py`` ``to_blocked``), flattened, as E8M0."""
    rows, cols = scales.shape
    padded = torch.full((_round_up(rows, 128), _round_up(cols, 4)), 127, dtype=torch.uint8)
    padded[:rows, :cols] = scales
    return padded.flatten().view(torch.float8_e8m0fnu)


def make_modules(version: str = OLD) -> dict[str, types.ModuleType | None]:
    """``sys.modules`` entries: the old API under torchao's names; ``None`` hides the newer API (import fails)."""
    names = RECIPE_NAMES[version]
    MXLinearRecipeName = enum.Enum("MXLinearRecipeName", {n.upper(): n for n in names})  # noqa: N806

    @dataclass
    class MXLinearConfig:
        block_size: int = 32
        elem_dtype: Any = torch.float8_e4m3fn
        elem_dtype_weight_override: Any = None
        elem_dtype_grad_output_override: Any = None
        kernel_preference: KernelPreference = KernelPreference.EMULATED

        def __post_init__(self) -> None:
            if self.kernel_preference is KernelPreference.AUTO:
                assert self.block_size == 32, (f"fake MX config: AUTO kernels take block_size 32 only, "
                                               f"not {self.block_size}")

        @staticmethod
        def from_recipe_name(recipe_name: Any) -> MXLinearConfig:
            if isinstance(recipe_name, str):
                valid = [n.value for n in MXLinearRecipeName]
                assert recipe_name in valid, (f"fake MX config: unknown recipe {recipe_name!r} "
                                              f"(this release has {valid})")
                recipe_name = MXLinearRecipeName(recipe_name)
            if recipe_name.value == "mxfp8_emulated":
                return MXLinearConfig()
            if recipe_name.value.startswith("mxfp8_"):
                return MXLinearConfig(kernel_preference=KernelPreference.AUTO)
            return MXLinearConfig(elem_dtype=torch.float4_e2m1fn_x2,
                                  kernel_preference=(KernelPreference.AUTO if "cutlass" in recipe_name.value
                                                     else KernelPreference.EMULATED))

    class MXLinear(nn.Linear):
        config: MXLinearConfig

        @classmethod
        def from_float(cls, mod: nn.Module, config: MXLinearConfig) -> nn.Module:
            assert isinstance(mod, torch.nn.Linear), f"unsupported type(mod) {type(mod)}"
            assert isinstance(config, MXLinearConfig)
            mod.__class__ = MXLinear
            mod.config = config  # type: ignore[assignment]
            return mod

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            block = self.config.block_size
            x2d = x.reshape(-1, x.shape[-1])
            a, a_exp = _to_mx(x2d, block)
            b, b_exp = _to_mx(self.weight.detach(), block)
            if self.config.kernel_preference is KernelPreference.AUTO:
                out = torch._scaled_mm(a, b.t(), _blocked(a_exp), _blocked(b_exp), bias=None,
                                       out_dtype=torch.bfloat16)
            else:
                def dequantized(d: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
                    scale = torch.exp2(e.float() - 127).repeat_interleave(block, dim=-1)
                    return d.float() * scale
                out = (dequantized(a, a_exp) @ dequantized(b, b_exp).t()).to(x.dtype)
            return out.reshape(*x.shape[:-1], self.out_features)

    def quantize_(model: nn.Module, config: Any, filter_fn: Any = None, device: Any = None) -> None:
        assert isinstance(config, MXLinearConfig), f"no handler for {type(config).__name__} in this fake"
        matches = filter_fn or (lambda mod, fqn: isinstance(mod, nn.Linear))
        for fqn, mod in list(model.named_modules()):
            if matches(mod, fqn):
                MXLinear.from_float(mod, config)

    mx_formats = types.ModuleType("torchao.prototype.mx_formats")
    mx_formats.MXLinearConfig, mx_formats.MXLinearRecipeName = MXLinearConfig, MXLinearRecipeName  # type: ignore
    mx_linear = types.ModuleType("torchao.prototype.mx_formats.mx_linear")
    mx_linear.MXLinear = MXLinear  # type: ignore[attr-defined]
    quantization = types.ModuleType("torchao.quantization")
    quantization.quantize_ = quantize_  # type: ignore[attr-defined]
    return {"torchao.prototype.mx_formats": mx_formats, "torchao.prototype.mx_formats.mx_linear": mx_linear,
            "torchao.quantization": quantization, "torchao.prototype.moe_training.config": None,
            "torchao.prototype.moe_training.tensor": None}


def install(monkeypatch: Any, version: str = OLD) -> dict[str, types.ModuleType | None]:
    """Put the old-shape fake in ``sys.modules`` for one test (undone after it)."""
    modules = make_modules(version)
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    return modules


# -- torchao's 4-bit inference configs (torchao 0.18, torchao/prototype/mx_formats/) ----------------------------------
#
# Sources, at tag v0.18.0 of pytorch/ao unless a line says otherwise (``inference_workflow.py`` is
# ``torchao/prototype/mx_formats/inference_workflow.py``). fp8bench reaches these configs by their 0.15+ names; where
# v0.15.0-v0.16.0 (the first releases with those names, alike in these rules) differ, the rule says so.

SM100 = (10, 0)
FP4 = torch.float4_e2m1fn_x2
MX_BLOCK = 32  # the one MX block size fp8bench passes


@dataclass
class Fp4Counts:
    """How often the fake quantized a weight (``quantize_``) and an activation (a linear call)."""

    weight_quantizations: int = 0
    activation_quantizations: int = 0


def _fp4_tensor(name: str, quantize: Any, counts: Fp4Counts, packed: bool) -> type:
    """A weight subclass standing for torchao's ``NVFP4Tensor`` / ``MXTensor``. Rules it keeps:

    * it reports the dtype of the tensor it was quantized from, BF16 (``mx_tensor.py`` lines 543-549 and
      ``nvfp4_tensor.py`` lines 101-104: ``_make_wrapper_subclass(..., dtype=orig_dtype)``);
    * an op missing from the subclass's table is a ``NotImplementedError`` (``torchao/utils.py`` lines 686-696);
      the fake refuses the arithmetic the quantizers start with (``abs``, ``max``, ``amax``), which the tables lack;
    * a packed FP4 ``MXTensor`` keeps the strides of its packed data (two elements a byte), so ``is_contiguous()``
      is False for its logical shape (``mx_tensor.py`` lines 543-549; observed on torchao 0.18.0);
    * ``F.linear`` quantizes the activation per call (the tensor's ``act_quant_kwargs``) and multiplies.
    """

    class Fp4Weight(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func: Any, types_: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            if func is torch.nn.functional.linear:
                x, w = args[0], args[1]
                counts.activation_quantizations += 1
                with torch._C.DisableTorchFunctionSubclass():
                    xq = quantize(x.reshape(-1, x.shape[-1])).dequantize()
                    out = xq @ w.float().t()
                return out.to(x.dtype).reshape(*x.shape[:-1], w.shape[0])
            op = getattr(func, "__name__", "")
            if op in ("abs", "max", "amax"):
                raise NotImplementedError(f"{name} has no handler for aten.{op} (the fake's stand-in for "
                                          "torchao's missing-op refusal)")
            if packed and op == "is_contiguous":
                return False
            return super().__torch_function__(func, types_, args, kwargs)

    Fp4Weight.__name__ = Fp4Weight.__qualname__ = name
    return Fp4Weight


class QuantizationStep(str, enum.Enum):
    """torchao's observer-flow steps (``quantization/quantize_/common/quantization_step.py``, new in v0.16.0), kept
    here so that the fake needs no torchao newer than the project's floor (0.10). The fake keeps only the two steps
    it models: torchao 0.16-0.18 also has ``prepare_for_loading``, and 0.18 two SmoothQuant steps; those names are
    refused here as unmodelled (a ``ValueError`` from the string Enum), not as torchao would treat them."""

    PREPARE = "prepare"
    CONVERT = "convert"


def _fp4_configs() -> tuple[type, type]:
    """The two configs as dataclasses with torchao 0.18's fields and ``__post_init__`` checks."""
    mx_elem_dtypes = (torch.float8_e4m3fn, torch.float8_e5m2, "fp6_e2m3", "fp6_e3m2", torch.float4_e2m1fn_x2)

    @dataclass
    class NVFP4DynamicActivationNVFP4WeightConfig:
        use_triton_kernel: bool = True
        use_dynamic_per_tensor_scale: bool = True
        step: Any = None

        def __post_init__(self) -> None:
            # inference_workflow.py lines 225-231: a step string becomes a QuantizationStep (ValueError when it
            # names none), and a step turns the dynamic per-tensor scale off. v0.15.0-v0.16.0 have no step field
            # (v0.17.0 adds it); v0.15.0 (lines 127-132) to v0.17.0 (lines 232-234) refuse torch older than 2.8
            # with a RuntimeError, which v0.18.0 dropped.
            if isinstance(self.step, str):
                self.step = QuantizationStep(self.step)
            if self.step is not None:
                self.use_dynamic_per_tensor_scale = False

    @dataclass
    class MXDynamicActivationMXWeightConfig:
        block_size: int = 32
        activation_dtype: Any = torch.float8_e4m3fn
        weight_dtype: Any = torch.float8_e4m3fn
        kernel_preference: KernelPreference = KernelPreference.AUTO
        scaling_mode: str = "rceil"  # torchao: ScaleCalculationMode.RCEIL; the fake quantizes with OCP's floor

        def __post_init__(self) -> None:
            # inference_workflow.py lines 114-119 and config.py lines 77-81: matching dtypes, each an MX element
            # dtype (AssertionError). Not modelled: v0.15.0-v0.16.0 (__post_init__ lines 59-67 and 62-72) also
            # run config.py's _validate_kernel_preference (v0.15.0 lines 75-86), which refuses the AUTO kernel for
            # block sizes other than 32, for e5m2 and for the fp6 dtypes (AssertionError).
            assert self.activation_dtype == self.weight_dtype, (
                f"activation_dtype {self.activation_dtype} and weight_dtype {self.weight_dtype} must match")
            for dtype in (self.activation_dtype, self.weight_dtype):
                assert dtype in mx_elem_dtypes, f"{dtype} is not an MX element dtype; accepted: {list(mx_elem_dtypes)}"

    return NVFP4DynamicActivationNVFP4WeightConfig, MXDynamicActivationMXWeightConfig


def make_fp4_modules(counts: Fp4Counts, capability: tuple[int, int] | None = SM100) -> dict[str, types.ModuleType]:
    """``sys.modules`` entries for torchao 0.18's ``NVFP4DynamicActivationNVFP4WeightConfig`` and
    ``MXDynamicActivationMXWeightConfig`` with ``quantize_``, on a device of compute ``capability`` (``None``: no
    CUDA device). Rules of ``quantize_`` and the handlers it calls, as torchao 0.18 has them:

    * ``quantization/quant_api.py`` ``_is_linear`` (lines 168-182), ``quantize_``'s default filter: every
      ``nn.Linear`` but ``NonDynamicallyQuantizableLinear``; it never looks at the weight's dtype, and the weight
      types it excludes (``_AffineFakeQuantizedTensor``: line 180; v0.15.0 line 242) are neither of these
      two, so nothing keeps an already quantized 4-bit weight from being quantized again.
    * ``inference_workflow.py`` ``_nvfp4_inference_linear_transform``: weight dims not multiples of 16 are a
      ``RuntimeError`` (lines 248-251); with no ``step``, ``assert is_sm_at_least_100()`` (lines 301-303;
      ``torchao/utils.py`` lines 1157-1162: CUDA present and capability >= 10.0; in v0.15.0 it is the transform's
      first line, 140-142, in v0.16.0 line 143); then, only with ``use_dynamic_per_tensor_scale``,
      ``torch.max(torch.abs(weight))`` (line 310), and the weight is quantized.
    * ``_mx_inference_linear_transform`` (lines 127-170): ``assert weight.dtype == torch.bfloat16`` (lines
      135-137); then ``MXTensor.to_mx`` (``mx_tensor.py``
      ``to_mx`` lines 225-234: BF16 or FP32, last dim a multiple of the block, contiguous, else
      ``AssertionError``; line 247 ``torch.abs``). The BF16 it reports is what gets a quantized weight past that
      dtype assert. No device check: MX's GEMM is the device's to refuse.
    * Either way the weight is quantized **once, at transform time**, and replaced by the quantized tensor as a
      ``Parameter`` without gradient; only the activation is quantized per call.

    Numerics: fp8bench's NVFP4 and MXFP4 quantizers (bit-exact with the formats), the product in FP32. Only what
    fp8bench passes is modelled, and the fake refuses (``AssertionError`` naming the field) the rest: NVFP4 with a
    ``step`` (observer flow) or without the per-tensor scale, MX with any element dtype but FP4 or any block
    size but 32.
    """
    from fp8bench.core.formats import E2M1
    from fp8bench.numerics import quantize as ref

    nvfp4 = _fp4_tensor("NVFP4Tensor", ref.quantize_nvfp4, counts, packed=False)
    # packed: FP4 data, two elements a byte; the only MX elements the fake accepts (quantize_mx below)
    mx = _fp4_tensor("MXTensor", lambda x: ref.quantize_mx(x, E2M1, MX_BLOCK), counts, packed=True)
    nvfp4_config, mx_config = _fp4_configs()

    def is_linear(mod: nn.Module, fqn: str = "") -> bool:
        return (isinstance(mod, nn.Linear) and hasattr(mod, "weight")
                and not isinstance(mod, nn.modules.linear.NonDynamicallyQuantizableLinear))

    def quantize_nvfp4(w: torch.Tensor, config: Any) -> torch.Tensor:
        if w.shape[-2] % 16 or w.shape[-1] % 16:
            raise RuntimeError(f"NVFP4 weight {tuple(w.shape)}: its last two dims must be multiples of 16")
        assert config.step is None, "the fake models torchao's dynamic NVFP4 flow only (step=None)"
        assert capability is not None and capability >= SM100, (
            f"dynamic NVFP4 needs compute capability sm100 or newer, this device has {capability}")
        # torchao takes the weight's amax only with use_dynamic_per_tensor_scale; without it the numerics differ
        # (no tensor scale), which the fake does not model, so it refuses before touching the weight
        assert config.use_dynamic_per_tensor_scale, (
            "the fake models NVFP4 with its per-tensor scale only (use_dynamic_per_tensor_scale=True)")
        torch.max(torch.abs(w))  # the per-tensor amax, the quantizer's first op on the weight
        return ref.quantize_nvfp4(w.detach()).dequantize(torch.bfloat16)

    def quantize_mx(w: torch.Tensor, config: Any) -> torch.Tensor:
        assert (config.weight_dtype, config.block_size) == (FP4, MX_BLOCK), (
            f"the fake models MXFP4 with 32-element blocks only, got weight_dtype {config.weight_dtype}, "
            f"block_size {config.block_size}")
        assert w.dtype == torch.bfloat16, f"the MX transform takes a bf16 weight, not {w.dtype}"
        assert w.shape[-1] % config.block_size == 0, (
            f"last dim of {tuple(w.shape)} is not a multiple of block_size {config.block_size}")
        assert w.is_contiguous(), "to_mx: unsupported non-contiguous input"
        torch.abs(w)  # to_mx's block amax starts here
        return ref.quantize_mx(w.detach(), E2M1, MX_BLOCK).dequantize(torch.bfloat16)

    def quantize_(model: nn.Module, config: Any, filter_fn: Any = is_linear, device: Any = None) -> None:
        for fqn, mod in list(model.named_modules()):
            if not filter_fn(mod, fqn):
                continue
            nv = isinstance(config, nvfp4_config)
            dequantized = (quantize_nvfp4 if nv else quantize_mx)(mod.weight, config)
            counts.weight_quantizations += 1
            weight = torch.Tensor._make_subclass(nvfp4 if nv else mx, dequantized, False)
            mod.weight = nn.Parameter(weight, requires_grad=False)

    mx_formats = types.ModuleType("torchao.prototype.mx_formats")
    mx_formats.NVFP4DynamicActivationNVFP4WeightConfig = nvfp4_config  # type: ignore[attr-defined]
    mx_formats.MXDynamicActivationMXWeightConfig = mx_config  # type: ignore[attr-defined]
    nvfp4_tensor = types.ModuleType("torchao.prototype.mx_formats.nvfp4_tensor")
    nvfp4_tensor.NVFP4Tensor = nvfp4  # type: ignore[attr-defined]
    mx_tensor = types.ModuleType("torchao.prototype.mx_formats.mx_tensor")
    mx_tensor.MXTensor = mx  # type: ignore[attr-defined]
    quantization = types.ModuleType("torchao.quantization")
    quantization.quantize_ = quantize_  # type: ignore[attr-defined]
    return {"torchao.prototype.mx_formats": mx_formats, "torchao.prototype.mx_formats.nvfp4_tensor": nvfp4_tensor,
            "torchao.prototype.mx_formats.mx_tensor": mx_tensor, "torchao.quantization": quantization}


def install_fp4(monkeypatch: Any, capability: tuple[int, int] | None = SM100) -> Fp4Counts:
    """Put the 4-bit inference fake in ``sys.modules`` for one test, on a device of compute ``capability``
    (default: a compute capability 10.0 device, where torchao runs both configs); returns its counters."""
    counts = Fp4Counts()
    for name, module in make_fp4_modules(counts, capability).items():
        monkeypatch.setitem(sys.modules, name, module)
    return counts
