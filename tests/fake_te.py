"""Fakes of Transformer Engine's PyTorch API, in both of its shapes, for machines without CUDA.

Transformer Engine (TE) cannot be imported without CUDA, so fp8bench's TE boundary (``kernels/te_backend.py``
``TEApi``) is tested against modules installed under TE's own names (``transformer_engine.pytorch``,
``transformer_engine.common.recipe``, ``transformer_engine.pytorch.fp8``) in ``sys.modules``. Two API shapes exist:

* **TE <= 2.8** (modelled on the ``transformer-engine==2.8.0`` wheel): the autocast is
  ``fp8_autocast(enabled, calibrating, fp8_recipe, fp8_group, _graph)`` in ``pytorch/fp8.py``, a generator context
  manager; the availability checks are ``transformer_engine.pytorch.fp8.check_*_support() -> (bool, str)``; TE
  refuses with ``AssertionError`` (``check_recipe_support`` asserts; ``utils.assert_dim_for_fp8_exec`` asserts).
* **TE >= 2.9** (modelled on the ``transformer-engine==2.20.2`` wheel): ``autocast(enabled, calibrating, recipe,
  amax_reduction_group, _graph)`` in ``pytorch/quantization.py``, a class since 2.16 that refuses to be entered
  twice at once; ``fp8_autocast`` still exists but warns (``DeprecationWarning``) and forwards; the checks are
  exported at the top level as ``is_*_available(return_reason=False)``; ``check_recipe_support`` raises
  ``RuntimeError`` and ``assert_dim_for_fp8_exec`` raises ``ValueError``.

Every rule the fakes enforce names the TE source it mirrors (paths inside the wheel, ``transformer_engine/...``).
Scale factors are modelled as TE computes them: ``scale = fp8_max / amax`` per tensor (current scaling) or per block
(``Float8BlockScaling``: 1x128 blocks of the input, 128x128 tiles of the weight), rounded down to a power of two
when the quantizer's ``force_pow_2_scales`` is set (``common/recipe/recipe_common.cuh``
``compute_scale_from_amax``: the mantissa bits are masked off). Each quantizer takes that flag from the recipe
object as TE's do, and the recipe's defaults come from the environment *when TE is imported* (:func:`make_te`).

What they do not model: kernels (the GEMM is computed by dequantizing the FP8-rounded operands and multiplying in
FP32), TE's own "needs CUDA" check (``module/base.py`` ``prepare_forward`` raises ``RuntimeError`` for a CPU input;
the CPU stands in for the GPU here), MXFP8 and NVFP4 beyond their construction rules (their forward uses per-tensor
current scaling), attention, and the backward pass (autograd through the dequantized product).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import math
import os
import sys
import types
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
from torch import nn

OLD, NEW = "2.8.0", "2.20.2"  # the two API shapes, named by the release each is modelled on


@dataclass
class FakeGpu:
    """What TE's checks read: compute capability and the CUDA version torch was built with."""

    compute_capability: tuple[int, int] = (9, 0)
    cuda: str = "12.9"


# -- transformer_engine.common.recipe -----------------------------------------------------------------------------

class _FormatHelper(NamedTuple):
    max_fwd: float
    max_bwd: float


class Format(enum.Enum):
    """``common/recipe/__init__.py`` ``Format``: largest finite value forward and backward."""

    E2M1 = _FormatHelper(6, 6)  # added in 2.8 with NVFP4BlockScaling
    E4M3 = _FormatHelper(448, 448)
    E5M2 = _FormatHelper(57344, 57344)
    HYBRID = _FormatHelper(448, 57344)


def _no_pure_e5m2(recipe: Any) -> None:
    # common/recipe/__init__.py: every recipe's __post_init__ asserts this (2.8.0 and 2.20.2 alike).
    assert recipe.fp8_format != Format.E5M2, (
        f"{type(recipe).__name__}: fp8_format E5M2 for every tensor (pure E5M2) is refused")


class Recipe:
    def delayed(self) -> bool:
        return isinstance(self, DelayedScaling)


@dataclass(frozen=True)
class MMParams:
    """``common/recipe/__init__.py`` ``MMParams``: ``use_split_accumulator`` False is cuBLASLt's fast accumulation."""

    use_split_accumulator: bool = True


def _gemm_params(fprop: bool) -> Any:
    return field(default_factory=lambda: MMParams(use_split_accumulator=fprop))


@dataclass(frozen=True)
class QParams:
    """``common/recipe/__init__.py`` ``QParams`` (2.8.0 and 2.20.2 alike): how one operand role is quantized.
    ``power_2_scale`` rounds each scale down to a power of two (``recipe_common.cuh`` ``compute_scale_from_amax``)."""

    power_2_scale: bool = False
    amax_epsilon: float = 0.0
    random_hadamard_transform: bool = False
    stochastic_rounding: bool = False
    fp4_2d_quantization: bool = False


# The operand roles of the scaled recipes' QParams, and the quantizers that read each (2.20.2 pytorch/quantization.py
# Float8BlockScalingRecipeState.make_quantizers, line 1631 ``force_pow_2_scales=qparams.power_2_scale``; 2.8.0
# pytorch/fp8.py lines 1066 and 1074; Float8CurrentScaling: 2.20.2 module/linear.py lines 2771 and 2778,
# ``_customize_quantizers_float8_current_scaling``).
QPARAM_ROLES = {"input": "fp8_quant_fwd_inp", "weight": "fp8_quant_fwd_weight", "grad": "fp8_quant_bwd_grad"}


@dataclass(repr=False)
class DelayedScaling(Recipe):
    """Fields and defaults of ``DelayedScaling`` (``interval`` was removed in 2.2: passing it is a TypeError)."""

    margin: int = 0
    fp8_format: Format = Format.HYBRID
    amax_history_len: int = 1024
    amax_compute_algo: Any = "max"
    scaling_factor_compute_algo: Any = None
    reduce_amax: bool = True
    fp8_dpa: bool = False
    fp8_mha: bool = False

    def __post_init__(self) -> None:
        _no_pure_e5m2(self)


@dataclass(repr=False)
class Float8CurrentScaling(Recipe):
    """2.2+: fast accumulation in fprop, split (full) accumulation in dgrad and wgrad by default. The power-of-two
    switch and the ``fp8_quant_*`` class attributes (QParams, not dataclass fields) are set when TE is imported:
    see :func:`imported_scaled_recipes`."""

    use_power_2_scales: bool = False
    fp8_format: Format = Format.HYBRID
    fp8_gemm_fprop: MMParams = _gemm_params(False)
    fp8_gemm_dgrad: MMParams = _gemm_params(True)
    fp8_gemm_wgrad: MMParams = _gemm_params(True)
    fp8_dpa: bool = False
    fp8_mha: bool = False

    def __post_init__(self) -> None:
        _no_pure_e5m2(self)


@dataclass(repr=False)
class MXFP8BlockScaling(Recipe):
    margin: int = 0
    fp8_format: Format = Format.E4M3
    fp8_dpa: bool = False
    fp8_mha: bool = False

    def __post_init__(self) -> None:
        _no_pure_e5m2(self)


@dataclass(repr=False)
class Float8BlockScaling(Recipe):
    """2.3+; its scale switch and QParams are set when TE is imported (:func:`imported_scaled_recipes`)."""

    use_f32_scales: bool = False
    fp8_format: Format = Format.E4M3
    x_block_scaling_dim: int = 1
    w_block_scaling_dim: int = 2
    grad_block_scaling_dim: int = 1
    fp8_gemm_fprop: MMParams = _gemm_params(True)
    fp8_gemm_dgrad: MMParams = _gemm_params(True)
    fp8_gemm_wgrad: MMParams = _gemm_params(True)
    fp8_dpa: bool = False
    fp8_mha: bool = False

    def __post_init__(self) -> None:
        # common/recipe/__init__.py Float8BlockScaling.__post_init__
        for dim in (self.x_block_scaling_dim, self.w_block_scaling_dim, self.grad_block_scaling_dim):
            assert dim in [1, 2], f"block dimension {dim}: 1 or 2 accepted"
        for name, gemm in (("fprop", self.fp8_gemm_fprop), ("dgrad", self.fp8_gemm_dgrad),
                           ("wgrad", self.fp8_gemm_wgrad)):
            assert gemm.use_split_accumulator, f"{name} needs use_split_accumulator=True"
        dims = (self.x_block_scaling_dim, self.w_block_scaling_dim, self.grad_block_scaling_dim)
        assert sum(d == 2 for d in dims) < 2, "a GEMM of two 2D-block operands is refused"
        assert not self.fp8_dpa and not self.fp8_mha, "Float8BlockScaling takes no FP8 attention (fp8_dpa, fp8_mha)"
        _no_pure_e5m2(self)


def imported_scaled_recipes(environ: Mapping[str, str]) -> tuple[type, type]:
    """``Float8CurrentScaling`` and ``Float8BlockScaling`` as ``common/recipe/__init__.py`` defines them on import.

    TE reads two environment variables in the class bodies, i.e. once, when the module is imported (2.20.2 lines
    302-306 and 429-434; 2.8.0 lines 230-234 and 327-332):

    * ``use_power_2_scales: bool = os.getenv("NVTE_FP8_CURRENT_SCALING_POWER_2_SCALES", "0") == "1"`` and
      ``fp8_quant_* = QParams(power_2_scale=use_power_2_scales, ...)``: current scaling uses FP32 scales unless set;
    * ``use_f32_scales: bool = os.getenv("NVTE_FP8_BLOCK_SCALING_FP32_SCALES", "0") == "1"`` and
      ``fp8_quant_* = QParams(power_2_scale=not use_f32_scales, ...)``: block scaling rounds its scales to powers of
      two unless set.

    The ``fp8_quant_*`` lines carry no annotation, so they are class attributes, not dataclass fields: passing them
    to the constructor is a ``TypeError``, and neither a later change of the environment nor ``use_f32_scales=True``
    in the constructor changes the QParams the quantizers read. Only assigning them on the recipe object does.
    """
    pow2 = environ.get("NVTE_FP8_CURRENT_SCALING_POWER_2_SCALES", "0") == "1"
    f32 = environ.get("NVTE_FP8_BLOCK_SCALING_FP32_SCALES", "0") == "1"

    @dataclass(repr=False)
    class Float8CurrentScaling(_CurrentScalingFields):
        use_power_2_scales: bool = pow2
        fp8_quant_fwd_inp = QParams(power_2_scale=pow2, amax_epsilon=0.0)
        fp8_quant_fwd_weight = QParams(power_2_scale=pow2, amax_epsilon=0.0)
        fp8_quant_bwd_grad = QParams(power_2_scale=pow2, amax_epsilon=0.0)

    @dataclass(repr=False)
    class Float8BlockScaling(_BlockScalingFields):
        use_f32_scales: bool = f32
        fp8_quant_fwd_inp = QParams(power_2_scale=not f32, amax_epsilon=0.0)
        fp8_quant_fwd_weight = QParams(power_2_scale=not f32, amax_epsilon=0.0)
        fp8_quant_bwd_grad = QParams(power_2_scale=not f32, amax_epsilon=0.0)

    return Float8CurrentScaling, Float8BlockScaling


# The module-level classes hold the fields and checks; isinstance() against them matches the imported ones.
_CurrentScalingFields, _BlockScalingFields = Float8CurrentScaling, Float8BlockScaling

# Recipe fields whose default TE reads from the environment in the class body (``os.getenv`` at import), per
# release: field -> (variable, how the string becomes the default, the release that added it, recipe classes).
# ``common/recipe/__init__.py``: ``backward_override`` on every recipe since 2.15 (2.20.2 lines 261, 312, 372, 443,
# 574); NVFP4BlockScaling's ``disable_*`` since 2.8 (2.8.0 lines 412-416), ``row_scaled_activation`` since 2.16
# (line 538), the three ``nvfp4_4over6*`` fields since 2.17 (2.17 lines 554-556, 2.20.2 lines 563-566).
_ALL = ("DelayedScaling", "Float8CurrentScaling", "MXFP8BlockScaling", "Float8BlockScaling", "NVFP4BlockScaling")
ENV_DEFAULTED_FIELDS: dict[str, tuple[str, Callable[[str | None], Any], tuple[int, int], tuple[str, ...]]] = {
    "backward_override": ("NVTE_BACKWARD_OVERRIDE", lambda v: v, (2, 15), _ALL),
    "disable_rht": ("NVTE_NVFP4_DISABLE_RHT", lambda v: (v or "0") == "1", (2, 8), ("NVFP4BlockScaling",)),
    "disable_stochastic_rounding": ("NVTE_NVFP4_DISABLE_STOCHASTIC_ROUNDING", lambda v: (v or "0") == "1", (2, 8),
                                    ("NVFP4BlockScaling",)),
    "disable_2d_quantization": ("NVTE_NVFP4_DISABLE_2D_QUANTIZATION", lambda v: (v or "0") == "1", (2, 8),
                                ("NVFP4BlockScaling",)),
    "row_scaled_activation": ("NVTE_NVFP4_ROW_SCALED_ACTIVATION", lambda v: (v or "0") == "1", (2, 16),
                              ("NVFP4BlockScaling",)),
    "nvfp4_4over6": ("NVTE_NVFP4_4OVER6", lambda v: v or "none", (2, 17), ("NVFP4BlockScaling",)),
    "nvfp4_4over6_e4m3_use_256": ("NVTE_NVFP4_4OVER6_E4M3_USE_256", lambda v: v or "all", (2, 17),
                                  ("NVFP4BlockScaling",)),
    "nvfp4_4over6_err_mode": ("NVTE_NVFP4_4OVER6_ERR_MODE", lambda v: (v or "MAE").upper(), (2, 17),
                              ("NVFP4BlockScaling",)),
}
_BACKWARD_OVERRIDES = (None, "high_precision", "dequantized")  # same file, module constants (2.15+)
_4OVER6_SCOPES, _4OVER6_ERR_MODES = ("none", "weights", "activations", "all"), ("MAE", "MSE")


def _check_env_fields(recipe: Any) -> None:
    """The ``__post_init__`` asserts on the environment-defaulted fields (2.20.2 ``common/recipe/__init__.py``)."""
    if hasattr(recipe, "backward_override"):
        assert recipe.backward_override in _BACKWARD_OVERRIDES, (
            "NVTE_BACKWARD_OVERRIDE must be unset or one of: 'high_precision', 'dequantized'.")
        if isinstance(recipe, DelayedScaling):
            assert recipe.backward_override is None, (
                f"DelayedScaling takes backward_override=None only, got {recipe.backward_override!r}")
    if hasattr(recipe, "nvfp4_4over6"):
        assert recipe.nvfp4_4over6 in _4OVER6_SCOPES and recipe.nvfp4_4over6_e4m3_use_256 in _4OVER6_SCOPES
        assert recipe.nvfp4_4over6_err_mode in _4OVER6_ERR_MODES


def env_defaulted_recipes(environ: Mapping[str, str], version: str, classes: dict[str, type]) -> dict[str, type]:
    """``classes`` with the fields ``version`` reads from ``environ`` added, defaulted as TE's import does."""
    release = tuple(int(p) for p in version.split(".")[:2])
    out = {}
    for name, cls in classes.items():
        fields = [(f, Any, dataclasses.field(default=convert(environ.get(var))))
                  for f, (var, convert, since, owners) in ENV_DEFAULTED_FIELDS.items()
                  if name in owners and release >= since]
        base_post_init = cls.__post_init__

        def post_init(self: Any, _base: Any = base_post_init) -> None:
            _base(self)
            _check_env_fields(self)

        out[name] = dataclasses.make_dataclass(name, fields, bases=(cls,), repr=False,
                                               namespace={"__post_init__": post_init})
    return out


@dataclass(repr=False)
class NVFP4BlockScaling(Recipe):
    """``common/recipe/__init__.py`` ``NVFP4BlockScaling`` (2.8+); its environment-defaulted fields are added per
    release by :func:`env_defaulted_recipes`. Its forward in this fake is per-tensor E4M3, not NVFP4."""

    fp4_format: Format = Format.E2M1
    fp8_format: Format = Format.E4M3
    fp8_dpa: bool = False
    fp8_mha: bool = False

    def __post_init__(self) -> None:
        assert self.fp4_format == Format.E2M1, f"NVFP4BlockScaling: fp4_format must be E2M1, got {self.fp4_format}"
        assert self.fp8_format == Format.E4M3, f"NVFP4BlockScaling: fp8_format must be E4M3, got {self.fp8_format}"


# -- the checks (pytorch/fp8.py in <= 2.8, pytorch/quantization.py since 2.9) ------------------------------------

class _Checks:
    """``check_*_support() -> (bool, reason)`` as TE computes them from the device (the conditions are TE's, the
    reasons the fake's own words)."""

    def __init__(self, gpu: FakeGpu, version: str) -> None:
        self.gpu, self.version = gpu, version

    def check_fp8_support(self) -> tuple[bool, str]:
        cc = self.gpu.compute_capability
        if cc >= (9, 0):
            return True, ""
        if cc < (8, 9):
            return False, "FP8 needs compute capability 8.9 or newer"
        return True, ""

    def check_mxfp8_support(self) -> tuple[bool, str]:
        cc = self.gpu.compute_capability
        if cc >= (12, 0):
            return False, "MXFP8 is refused on compute capability 12.0+ (every GEMM layout)"
        if cc >= (10, 0):
            return True, ""
        return False, "MXFP8 needs compute capability 10.0 or newer"

    def check_fp8_block_scaling_support(self) -> tuple[bool, str]:
        cc, cuda = self.gpu.compute_capability, float(self.gpu.cuda)
        if self.version == OLD:  # 2.8.0 pytorch/fp8.py: Hopper only
            ok = (9, 0) <= cc < (10, 0) and cuda >= 12.9
            return (True, "") if ok else (False, "FP8 block-scaled GEMMs need Hopper (9.x) and CUDA 12.9+")
        ok = cc >= (9, 0) and cuda >= 12.9  # 2.20.2 pytorch/quantization.py _compute_fp8_block_scaling_support
        return (True, "") if ok else (
            False, "FP8 block-scaled GEMMs need compute capability 9.0+ and CUDA 12.9+")

    def check_nvfp4_support(self) -> tuple[bool, str]:
        # pytorch/quantization.py _compute_nvfp4_support (2.8.0: pytorch/fp8.py check_nvfp4_support).
        if self.gpu.compute_capability >= (10, 0):
            return True, ""
        return False, "NVFP4 needs compute capability 10.0 or newer"

    def check_recipe_support(self, recipe: Any) -> None:
        """2.8.0 ``fp8.py``: ``assert recipe_supported, reason``; 2.20.2 ``quantization.py``: ``RuntimeError``."""
        ok, why = True, ""
        if isinstance(recipe, (DelayedScaling, Float8CurrentScaling)):
            ok, why = self.check_fp8_support()
        elif isinstance(recipe, Float8BlockScaling):
            ok, why = self.check_fp8_block_scaling_support()
        elif isinstance(recipe, MXFP8BlockScaling):
            ok, why = self.check_mxfp8_support()
        if not ok:
            if self.version == OLD:
                raise AssertionError(why)
            raise RuntimeError(why)

    def autocast_enter_asserts(self, recipe: Any) -> None:
        """``FP8GlobalStateManager.(fp8_)autocast_enter``: asserts FP8 itself for every recipe (``None`` too),
        then the recipe's own check."""
        ok, why = self.check_fp8_support()
        assert ok, why
        if isinstance(recipe, MXFP8BlockScaling):
            ok, why = self.check_mxfp8_support()
            assert ok, why
        if isinstance(recipe, Float8BlockScaling):
            ok, why = self.check_fp8_block_scaling_support()
            assert ok, why
        if isinstance(recipe, NVFP4BlockScaling):  # NVFP4 is checked only here, not in check_recipe_support
            ok, why = self.check_nvfp4_support()
            assert ok, why


# -- global autocast state and delayed scaling --------------------------------------------------------------------

@dataclass
class _State:
    depth: int = 0
    recipe: Any = None
    enabled: bool = False
    delayed_modules: list[Any] = field(default_factory=list)  # modules registered in this region (global buffer)
    regions: list[tuple[str, Any, bool]] = field(default_factory=list)  # (entry point, recipe, enabled) per entry
    scale_updates: int = 0
    linears: list[Any] = field(default_factory=list)  # every te.Linear made, in order
    quantizers: list[dict[str, Any]] = field(default_factory=list)  # per forward cast: recipe, role, pow-2 flag


def _update_delayed_scales(state: _State) -> None:
    """``reduce_and_update_fp8_tensors(forward=True)``: amax from the history ("max" or "most_recent"), then
    ``scale = (fp8_max / amax) / 2**margin`` (``quantization.py`` ``_default_sf_compute``), per tensor."""
    for module in state.delayed_modules:
        meta = module.fp8_meta["scaling_fwd"]
        recipe = module.fp8_meta["recipe"]
        amax = meta.amax_history.max(dim=0).values if recipe.amax_compute_algo == "max" else meta.amax_history[0]
        fp8_max = recipe.fp8_format.value.max_fwd
        new = torch.where(amax > 0, (fp8_max / amax) / 2 ** recipe.margin, meta.scale)
        meta.scale.copy_(torch.where(torch.isfinite(new), new, meta.scale))
        meta.amax_history.copy_(torch.roll(meta.amax_history, -1, 0))
        meta.amax_history[0].zero_()
        state.scale_updates += 1
    state.delayed_modules.clear()


def _make_region(state: _State, checks: _Checks, version: str) -> Callable[..., contextlib.AbstractContextManager[Any]]:
    @contextlib.contextmanager
    def region(entry: str, enabled: bool, recipe: Any, _graph: bool) -> Iterator[None]:
        if enabled:
            checks.check_recipe_support(recipe)
            checks.autocast_enter_asserts(recipe)
        saved = (state.recipe, state.enabled)
        state.regions.append((entry, recipe, enabled))
        state.depth += 1
        state.recipe, state.enabled = (recipe if recipe is not None else DelayedScaling()), enabled
        try:
            yield
        finally:
            state.depth -= 1
            state.recipe, state.enabled = saved
            # 2.20.2 quantization.py FP8GlobalStateManager.autocast_exit / 2.8.0 fp8.py fp8_autocast_exit: the
            # delayed-scaling amax reduction and scale update run only here, and only with grad enabled.
            if enabled and state.depth == 0 and not _graph and torch.is_grad_enabled():
                _update_delayed_scales(state)

    return region


# -- te.Linear ------------------------------------------------------------------------------------------------------

def _assert_dim_for_fp8_exec(version: str, *tensors: torch.Tensor) -> None:
    """``pytorch/utils.py`` ``assert_dim_for_fp8_exec`` (called by ``module/linear.py`` in FP8): the product of all
    dims but the last divisible by 8, the last by 16. An ``assert`` in 2.8.0, a ``ValueError`` in 2.20.2."""
    for t in tensors:
        lead = math.prod(t.shape[:-1])
        if lead % 8 != 0 or t.shape[-1] % 16 != 0:
            message = (f"FP8 operand dims {list(t.shape)}: the product of all but the last must be a multiple of 8 "
                       "and the last a multiple of 16")
            if version == OLD:
                raise AssertionError(message)
            raise ValueError(message)


def _fp8_round(x: torch.Tensor, scale: torch.Tensor, fmt: torch.dtype, fp8_max: float) -> torch.Tensor:
    """``x`` scaled, saturated to the format, rounded to FP8 and scaled back (what the FP8 GEMM multiplies)."""
    return ((x.float() * scale).clamp(-fp8_max, fp8_max).to(fmt).float()) / scale


def _scale_from_amax(amax: torch.Tensor, fp8_max: float, force_pow_2_scales: bool) -> torch.Tensor:
    """``common/recipe/recipe_common.cuh`` ``compute_scale_from_amax``: ``fp8_max / amax`` (1 where the amax is 0
    or not finite), its mantissa masked off (rounded down to a power of two) when ``force_pow_2_scales``."""
    amax = amax.float()
    scale = torch.where((amax > 0) & torch.isfinite(amax), fp8_max / amax, torch.ones_like(amax))
    if force_pow_2_scales:
        scale = (scale.view(torch.int32) & 0xFF800000 - 2**32).view(torch.float32)
    return scale


def _block_amax(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """amax of each ``rows x cols`` tile of a 2-D ``x`` (dims multiples of the tile), broadcast back over ``x``."""
    r, c = x.shape
    tiles = x.detach().abs().float().reshape(r // rows, rows, c // cols, cols).amax(dim=(1, 3), keepdim=True)
    return tiles.expand(r // rows, rows, c // cols, cols).reshape(r, c)


def _check_block_scales(version: str, gpu: FakeGpu, force_pow_2_scales: bool) -> None:
    """The block quantizers' device rule: on compute capability 10.0 and newer (``cuda::sm_arch() >= 100``) TE
    runs the recipe on MXFP8 GEMMs, whose E8M0 scales cannot hold an FP32 scale, so an ``NVTE_CHECK`` on the
    quantizer's power-of-two flag refuses FP32 scales (a ``RuntimeError`` in Python). Sources:
    ``common/transpose/quantize_transpose_square_blockwise.cu`` lines 489-492 and
    ``quantize_transpose_vector_blockwise.cu`` lines 533-536 at tag v2.9 (present in both files at every tag up to
    v2.18). Absent in v2.8, whose support check refuses every device but Hopper already."""
    if version != OLD and gpu.compute_capability >= (10, 0) and not force_pow_2_scales:
        raise RuntimeError("block quantizer on compute capability 10.0+: FP8 block scaling runs as MXFP8 "
                           "there and takes power-of-two scales only")


def _make_linear(state: _State, version: str, gpu: FakeGpu) -> type[nn.Module]:
    class Linear(nn.Module):
        """``module/linear.py`` ``Linear``: the parameters up to ``device`` in TE's order (the third positional one
        is ``sequence_parallel``, not ``bias``), the rest keyword arguments TE also takes."""

        def __init__(self, in_features: int, out_features: int, sequence_parallel: bool = False,
                     fuse_wgrad_accumulation: bool = False, tp_group: Any = None, tp_size: int = 1,
                     get_rng_state_tracker: Any = None, rng_tracker_name: Any = None, init_method: Any = None,
                     bias: bool = True, return_bias: bool = False, params_dtype: torch.dtype | None = None,
                     parallel_mode: Any = None, parameters_split: Any = None,
                     device: torch.device | str = "cuda", ub_overlap_ag: bool = False, ub_overlap_rs: bool = False,
                     ub_overlap_rs_dgrad: bool = False, ub_bulk_dgrad: bool = False, ub_bulk_wgrad: bool = False,
                     ub_name: str | None = None, delay_wgrad_compute: bool = False, symmetric_ar_type: Any = None,
                     name: str | None = None) -> None:
            super().__init__()
            dtype = params_dtype if params_dtype is not None else torch.get_default_dtype()
            self.in_features, self.out_features = in_features, out_features
            self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=dtype, device=device))
            nn.init.normal_(self.weight, 0.0, 0.023)
            self.bias = nn.Parameter(torch.zeros(out_features, dtype=dtype, device=device)) if bias else None
            self.fp8_meta: dict[str, Any] = {}
            state.linears.append(self)

        def _delayed_meta(self, recipe: DelayedScaling) -> Any:
            meta = self.fp8_meta.get("scaling_fwd")
            if meta is None or self.fp8_meta.get("recipe") is not recipe:
                # One scale and one amax history per forward tensor (input, weight); scales start at 1.
                meta = types.SimpleNamespace(scale=torch.ones(2),
                                             amax_history=torch.zeros(recipe.amax_history_len, 2))
                self.fp8_meta.update(scaling_fwd=meta, recipe=recipe)
            return meta

        def forward(self, inp: torch.Tensor, is_first_microbatch: bool | None = None, fp8_output: bool = False,
                    fp8_grad: bool = False) -> torch.Tensor:
            if not (state.enabled and state.depth > 0):
                out = inp @ self.weight.t()
                return out + self.bias if self.bias is not None else out
            x2d = inp.reshape(-1, inp.shape[-1])
            _assert_dim_for_fp8_exec(version, x2d, self.weight)
            recipe = state.recipe
            fmt = torch.float8_e4m3fn
            fp8_max = recipe.fp8_format.value.max_fwd
            w = self.weight
            if recipe.delayed():
                # module/base.py prepare_forward: add_fp8_tensors_to_global_buffer (every forward, any grad mode);
                # the amax is recorded now, the scale used is the one the last update left.
                meta = self._delayed_meta(recipe)
                if self not in state.delayed_modules:
                    state.delayed_modules.append(self)
                meta.amax_history[0] = torch.stack([x2d.detach().abs().max().float(),
                                                    w.detach().abs().max().float()])
                sx, sw = meta.scale[0].clone(), meta.scale[1].clone()  # the update happens in place later
            elif isinstance(recipe, (Float8CurrentScaling, Float8BlockScaling)):
                # Each quantizer takes its power-of-two flag from the recipe object's QParams (QPARAM_ROLES).
                pow2 = {role: getattr(recipe, QPARAM_ROLES[role]).power_2_scale for role in ("input", "weight")}
                for role in pow2:
                    state.quantizers.append({"recipe": type(recipe).__name__, "role": role,
                                             "force_pow_2_scales": pow2[role]})
                if isinstance(recipe, Float8BlockScaling):  # x_block_scaling_dim=1, w_block_scaling_dim=2
                    for role in pow2:
                        _check_block_scales(version, gpu, pow2[role])
                    amax_x, amax_w = _block_amax(x2d, 1, 128), _block_amax(w, 128, 128)
                else:
                    amax_x, amax_w = x2d.detach().abs().max(), w.detach().abs().max()
                sx = _scale_from_amax(amax_x, fp8_max, pow2["input"])
                sw = _scale_from_amax(amax_w, fp8_max, pow2["weight"])
            else:  # current scaling stand-in for MXFP8 and NVFP4
                sx = fp8_max / x2d.detach().abs().max().float().clamp_min(1e-12)
                sw = fp8_max / w.detach().abs().max().float().clamp_min(1e-12)
            out = _fp8_round(x2d, sx, fmt, fp8_max) @ _fp8_round(w, sw, fmt, fp8_max).t()
            out = out.to(inp.dtype).reshape(*inp.shape[:-1], self.out_features)
            return out + self.bias if self.bias is not None else out

    return Linear


# -- assembling the modules -----------------------------------------------------------------------------------------

@dataclass
class FakeTE:
    """The installed fake: its modules, shared state and GPU (tests read ``state`` and may change ``gpu``)."""

    version: str
    gpu: FakeGpu
    state: _State
    modules: dict[str, types.ModuleType]

    @property
    def te(self) -> types.ModuleType:
        return self.modules["transformer_engine.pytorch"]


def make_te(version: str = NEW, gpu: FakeGpu | None = None, environ: Mapping[str, str] | None = None) -> FakeTE:
    """The modules of TE ``version`` (:data:`OLD` or :data:`NEW` shape) on ``gpu``, keyed by import name, as an
    import under ``environ`` (default: this process's environment now) defines them."""
    assert version in (OLD, NEW), f"modelled API shapes: {OLD}, {NEW}"
    gpu = gpu or FakeGpu()
    state, checks = _State(), _Checks(gpu, version)
    region = _make_region(state, checks, version)

    recipe_mod = types.ModuleType("transformer_engine.common.recipe")
    env = os.environ if environ is None else environ
    current, block = imported_scaled_recipes(env)
    recipes = env_defaulted_recipes(env, version, {c.__name__: c for c in (
        DelayedScaling, current, MXFP8BlockScaling, block, NVFP4BlockScaling)})
    for obj in (Format, MMParams, QParams, Recipe, *recipes.values()):
        setattr(recipe_mod, obj.__name__, obj)
    common = types.ModuleType("transformer_engine.common")
    common.recipe = recipe_mod  # type: ignore[attr-defined]

    te = types.ModuleType("transformer_engine.pytorch")
    te.Linear = _make_linear(state, version, gpu)  # type: ignore[attr-defined]
    utils = types.ModuleType("transformer_engine.pytorch.utils")  # pytorch/utils.py, 2.0 to 2.20.2
    utils.get_device_compute_capability = lambda: gpu.compute_capability  # type: ignore[attr-defined]
    te.utils = utils  # type: ignore[attr-defined]
    fp8 = types.ModuleType("transformer_engine.pytorch.fp8")
    for name in ("check_fp8_support", "check_mxfp8_support", "check_fp8_block_scaling_support",
                 "check_nvfp4_support", "check_recipe_support"):
        setattr(fp8, name, getattr(checks, name))

    if version == OLD:
        def fp8_autocast(enabled: bool = True, calibrating: bool = False, fp8_recipe: Any = None,
                         fp8_group: Any = None, _graph: bool = False) -> contextlib.AbstractContextManager[Any]:
            return region("fp8_autocast", enabled, fp8_recipe, _graph)

        te.fp8_autocast = fp8_autocast  # type: ignore[attr-defined]
        fp8.fp8_autocast = fp8_autocast  # type: ignore[attr-defined]
        te.fp8 = fp8  # type: ignore[attr-defined]
    else:
        class autocast:  # noqa: N801 - TE's name
            """2.16+ ``quantization.py`` ``autocast``: one instance cannot be entered twice at the same time."""

            def __init__(self, enabled: bool = True, calibrating: bool = False, recipe: Any = None,
                         amax_reduction_group: Any = None, _graph: bool = False) -> None:
                self._args = (enabled, recipe, _graph)
                self._active: contextlib.AbstractContextManager[Any] | None = None

            def __enter__(self) -> autocast:
                if self._active is not None:
                    raise RuntimeError("this autocast object is already entered; TE refuses entering it again "
                                       "while it is active")
                enabled, recipe, graph = self._args
                self._active = region("autocast", enabled, recipe, graph)
                self._active.__enter__()
                return self

            def __exit__(self, *exc: Any) -> None:
                active, self._active = self._active, None
                assert active is not None
                active.__exit__(*exc)

        def fp8_autocast(enabled: bool = True, calibrating: bool = False, fp8_recipe: Any = None,
                         fp8_group: Any = None, _graph: bool = False) -> autocast:
            warnings.warn("fake TE: fp8_autocast is a deprecated alias, forwarded to autocast",
                          category=DeprecationWarning, stacklevel=2)
            return autocast(enabled=enabled, calibrating=calibrating, recipe=fp8_recipe,
                            amax_reduction_group=fp8_group, _graph=_graph)

        def available(check: Callable[[], tuple[bool, str]]) -> Callable[..., Any]:
            def is_available(return_reason: bool = False) -> Any:
                return check() if return_reason else check()[0]
            return is_available

        te.autocast = autocast  # type: ignore[attr-defined]
        te.fp8_autocast = fp8_autocast  # type: ignore[attr-defined]
        te.is_fp8_available = available(checks.check_fp8_support)  # type: ignore[attr-defined]
        te.is_mxfp8_available = available(checks.check_mxfp8_support)  # type: ignore[attr-defined]
        te.is_fp8_block_scaling_available = available(  # type: ignore[attr-defined]
            checks.check_fp8_block_scaling_support)
        te.is_nvfp4_available = available(checks.check_nvfp4_support)  # type: ignore[attr-defined]

        def fp8_getattr(name: str) -> Any:
            # Since 2.9 pytorch/fp8.py is a shim that warns on import; fp8bench must not need it.
            if name.startswith("__"):
                raise AttributeError(name)
            raise AssertionError(f"transformer_engine.pytorch.fp8.{name} used with TE {version}")

        fp8 = types.ModuleType("transformer_engine.pytorch.fp8")
        fp8.__getattr__ = fp8_getattr  # type: ignore[attr-defined]

    package = types.ModuleType("transformer_engine")
    package.pytorch, package.common = te, common  # type: ignore[attr-defined]
    package.__version__ = version  # type: ignore[attr-defined]
    modules = {"transformer_engine": package, "transformer_engine.pytorch": te,
               "transformer_engine.pytorch.fp8": fp8, "transformer_engine.pytorch.utils": utils,
               "transformer_engine.common": common,
               "transformer_engine.common.recipe": recipe_mod}
    return FakeTE(version, gpu, state, modules)


def install(monkeypatch: Any, version: str = NEW, gpu: FakeGpu | None = None,
            environ: Mapping[str, str] | None = None) -> FakeTE:
    """Put a fake TE in ``sys.modules`` (undone after the test) and report its version as installed; ``environ``
    is the environment TE is imported under (:func:`make_te`)."""
    fake = make_te(version, gpu, environ)
    for name, module in fake.modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    from fp8bench.kernels import te_backend

    monkeypatch.setattr(te_backend, "te_version", lambda: version)
    return fake
