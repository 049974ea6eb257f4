"""A fake of torchao's MXFP8 training API as it was up to torchao 0.16 (``MXLinearConfig``).

The installed torchao (0.18) has the newer API (``MXFP8TrainingOpConfig``, since 0.17), which the tests use for
real. The older shape is installed in ``sys.modules`` under torchao's own names for one test, with the newer
modules hidden, so that fp8bench's detection, recipe choice and conversion check run against it. Modelled on the
``torchao==0.16.0`` wheel (``OLD``) and, for the recipe names, ``torchao==0.10.0`` (``OLDEST``); paths below are
inside ``torchao/prototype/mx_formats/``. Rules enforced, each as torchao enforces it:

* ``config.py`` ``MXLinearConfig.from_recipe_name``: a name outside ``MXLinearRecipeName`` is an
  ``AssertionError``; 0.10 has ``mxfp8_emulated``, ``mxfp8_cublas``, ``mxfp8_cutlass`` (no RCEIL recipe; 0.12.0 neither), 0.13-0.16
  ``mxfp8_emulated``, ``mxfp8_cublas``, ``mxfp8_cublas_rceil``; both have ``mxfp4_emulated``, ``mxfp4_cutlass``.
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
    assert x.dtype in (torch.bfloat16, torch.float), f"{x.dtype} is not supported yet"
    assert x.shape[-1] % block == 0, (f"the last dimension of shape {x.shape} must be divisible by block_size "
                                      f"{block}")
    assert x.is_contiguous(), "unsupported"
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
                assert self.block_size == 32, f"block_size must be 32, got {self.block_size}"

        @staticmethod
        def from_recipe_name(recipe_name: Any) -> MXLinearConfig:
            if isinstance(recipe_name, str):
                valid = [n.value for n in MXLinearRecipeName]
                assert recipe_name in valid, f"recipe_name {recipe_name} not in valid names {valid}"
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
