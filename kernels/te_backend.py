"""The ``te`` backend (vendor, CUDA only): NVIDIA Transformer Engine's modules under its FP8 autocast.

Transformer Engine (TE) runs FP8 inside its own modules (``te.Linear``, ``te.LayerNormMLP``,
``te.DotProductAttention``, ``te.TransformerLayer``) while a quantization autocast region is active; the *recipe*
object passed to the autocast picks the scaling. fp8bench runs ``te.Linear`` in place of every linear layer (the
GEMM, and each projection of the attention block and the training step, whose norms and attention stay the
workload's own, so every backend computes the same model). fp8bench precisions map to TE recipes
(:func:`te_recipe_spec`):

=================  ==========================  ===================================================================
fp8bench           TE recipe                   notes
=================  ==========================  ===================================================================
``fp8_delayed``    ``DelayedScaling``          ``amax_history_len``, ``amax_compute_algo`` and ``margin`` from the
                                               precision (TE's own defaults unless overridden)
``fp8_tensorwise`` ``Float8CurrentScaling``    per-tensor scale from the current amax (TE 2.2+)
``fp8_blockwise``  ``Float8BlockScaling``      1x128 activations, 128x128 weights (TE 2.3+, Hopper, CUDA 12.9+)
``mxfp8``          ``MXFP8BlockScaling``       32-element E8M0 blocks (TE 2.0+, compute capability 10.x-11.x)
``nvfp4``          ``NVFP4BlockScaling``       E2M1 data, 16-element E4M3 scales, FP32 tensor scale (TE 2.8+,
                                               compute capability 10.0+); ``disable_rht`` and
                                               ``disable_stochastic_rounding`` from the precision's ``rht`` and
                                               ``stochastic_rounding``; ``disable_2d_quantization=True``
``fp8_rowwise``    none                        refused: TE has no per-row recipe
``mxfp4``          none                        refused: TE's only 4-bit recipe is NVFP4BlockScaling
=================  ==========================  ===================================================================

**Scale factors.** fp8bench's per-tensor and per-block FP8 recipes scale by FP32 ``amax / fmt.max`` on every backend
(:mod:`fp8bench.numerics.quantize`). TE's ``Float8BlockScaling`` rounds its scales down to powers of two by default and
``Float8CurrentScaling`` does so when ``NVTE_FP8_CURRENT_SCALING_POWER_2_SCALES=1``: both switches are environment
variables TE reads *once, when it is imported*, into class attributes of the recipe (``fp8_quant_fwd_inp``,
``fp8_quant_fwd_weight``, ``fp8_quant_bwd_grad``, QParams that are not dataclass fields), so neither the constructor
nor a later environment change reaches them (``common/recipe/__init__.py``: 2.3 lines 344-349, 2.8 327-332,
2.20.2 429-434 for block scaling; 2.20.2 302-306 for current scaling). TE's quantizers read ``power_2_scale`` from
the recipe object (``Float8BlockScalingRecipeState.make_quantizers``: 2.8 ``pytorch/fp8.py`` lines 1066 and 1074,
2.20.2 ``pytorch/quantization.py`` line 1631; current scaling: 2.20.2 ``module/linear.py`` lines 2771 and 2778).
:meth:`TEApi.make_recipe` therefore sets the three QParams (and ``use_power_2_scales``) on each recipe object it
makes, so these recipes run with FP32 scales whatever the environment said, and the record's ``scale_format`` reads
the outcome back from the recipe (:func:`scale_format`): ``fp32``, or ``pow2`` if TE ever ignores the setting.

**Fields from the environment.** Beyond the scale switches, TE defaults more recipe fields from environment variables
read at import: ``backward_override`` (``NVTE_BACKWARD_OVERRIDE``, every recipe, 2.15+: a backward on
high-precision or dequantized operands), and NVFP4's ``row_scaled_activation`` (2.16+) and 4over6 block scaling
(2.17+). :meth:`TEApi.make_recipe` passes each field the installed release declares with TE's unset default
(:data:`PINNED_RECIPE_FIELDS`), so the environment cannot change what runs under an fp8bench precision's name.

``NVFP4BlockScaling`` quantizes weights in 16x16 blocks by default (``disable_2d_quantization=False``); fp8bench's
``nvfp4`` is 1x16 blocks on every operand, so TE runs with 2D quantization off to compute the same recipe as the
other backends. Its fields (``common/recipe/__init__.py``, TE 2.8+): ``fp4_format=Format.E2M1``,
``fp8_format=Format.E4M3`` (both asserted in ``__post_init__``), ``disable_rht``, ``disable_stochastic_rounding``,
``disable_2d_quantization`` (each ``False`` unless an ``NVTE_NVFP4_*`` environment variable says otherwise).

Element formats: ``e4m3`` -> ``Format.E4M3``, ``hybrid`` -> ``Format.HYBRID``; pure ``e5m2`` is refused (every TE
recipe rejects it). Float precisions run the same TE modules with the autocast disabled. TE runs a GEMM whose
operands and output are all FP32 with ``CUBLAS_COMPUTE_32F_FAST_TF32`` (``transformer_engine/common/gemm/
cublaslt_gemm.cu``, ``cublas_gemm``, which keeps TF32 to all-FP32 GEMMs), so FP32 parameters measure a TF32 GEMM:
that case is the ``tf32`` precision here (against the TF32 peak), and ``fp32`` is refused with that reason.

The timed forward runs with autograd's grad mode on and no parameter or input requiring a gradient. TE updates
DelayedScaling's amax history and scales only when the outermost autocast region exits with grad mode on
(TE 2.9+ ``pytorch/quantization.py`` ``FP8GlobalStateManager.autocast_exit``; 2.8 ``pytorch/fp8.py``
``fp8_autocast_exit``), so a forward under ``torch.no_grad()`` would keep the initial scale of 1.0 forever; with
nothing requiring a gradient, TE casts nothing for a backward pass (``module/linear.py``: the transposed casts are
made only for tensors whose gradient is needed).

Two API shapes are supported, detected by name: TE 2.9 and newer (``te.autocast(recipe=...)``, the
``te.is_*_available`` checks) and TE 2.0-2.8 (``te.fp8_autocast(fp8_recipe=...)``, the checks in
``transformer_engine.pytorch.fp8``). The record's ``te_api`` says which one ran.

Availability is layered: the backend's declaration (:data:`TE`) says whether TE can be used at all (CUDA, not ROCm, an
installed TE 2.0+, read from package metadata without importing it); :class:`TEApi` then imports it, and per case
TE's own ``is_*_available(return_reason=True)`` checks decide whether the recipe runs on this GPU: a refusal is a
``skipped`` case carrying TE's reason. Shapes follow TE's alignment rules (tokens % 8 and features % 16 for FP8;
32 for MXFP8; 128 for block scaling).

All TE calls go through :class:`TEApi`, the vendor boundary: tests replace it with a fake, because TE cannot be
imported on a machine without CUDA. Everything here is written against TE's documented API (2.x); none of it has
run on real TE hardware in this project's CI.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from fp8bench.core.devices import Device
from fp8bench.core.libraries import Library, parse_version
from fp8bench.core.pipeline import BuildContext, Pipeline, Unsupported, refusals
from fp8bench.core.plugins import BACKENDS, Backend
from fp8bench.core.precisions import (
    FloatPrecision,
    Fp4Recipe,
    Fp8FormatChoice,
    Granularity,
    Precision,
    ScaledRecipe,
)
from fp8bench.core.records import SCALE_FP32, SCALE_POW2
from fp8bench.workloads.attention import build_attention_pipeline
from fp8bench.workloads.transformer_step import LAYER_CONVERTERS, build_training_pipeline

# What Transformer Engine raises to refuse a recipe or a shape: RuntimeError (check_recipe_support), AssertionError
# (the autocast's is_fp8_available assertion, recipe __post_init__ checks), ValueError (assert_dim_for_fp8_exec).
TE_REFUSALS: tuple[type[BaseException], ...] = (RuntimeError, AssertionError, ValueError)

# The QParams of TE's per-tensor and per-block FP8 recipes, one per operand role (module docstring, "Scale factors").
QPARAM_ROLES = ("fp8_quant_fwd_inp", "fp8_quant_fwd_weight", "fp8_quant_bwd_grad")

# TE 2.0 is the oldest with MXFP8BlockScaling; Float8CurrentScaling (2.2), Float8BlockScaling (2.3) and
# NVFP4BlockScaling (2.8) are checked per recipe by their own versions (TERecipeSpec.min_version).
TE_LIBRARY = Library("transformer_engine", (2, 0), extra="te",
                     distributions=("transformer_engine", "transformer-engine"))


# Recipe fields whose defaults TE reads from environment variables when it is imported (``os.getenv`` in the class
# bodies of ``common/recipe/__init__.py``), each with the value fp8bench's precisions are defined with (TE's own
# default when the variable is unset). ``backward_override`` (``NVTE_BACKWARD_OVERRIDE``): every recipe, 2.15+;
# NVFP4BlockScaling's ``row_scaled_activation`` (``NVTE_NVFP4_ROW_SCALED_ACTIVATION``), 2.16+, and its 4over6
# block scaling (``NVTE_NVFP4_4OVER6``, ``..._E4M3_USE_256``, ``..._ERR_MODE``), 2.17+. Its ``disable_*`` fields
# (2.8+) come from the precision (TERecipeSpec.kwargs). Checked in every tag from 2.8 to 2.18 and release_v2.19.
PINNED_RECIPE_FIELDS: dict[str, object] = {
    "backward_override": None, "row_scaled_activation": False, "nvfp4_4over6": "none",
    "nvfp4_4over6_e4m3_use_256": "all", "nvfp4_4over6_err_mode": "MAE",
}


# Why ``fp8_blockwise`` never runs on TE on Blackwell and newer (stated by ``doctor`` as well: KNOWN_LIMITS).
BLACKWELL_BLOCKWISE = (
    "Transformer Engine 2.9+ emulates Float8BlockScaling with MXFP8 GEMMs on compute capability 10.0+ and its block "
    "quantizers then require power-of-two scales (the checks in "
    "common/transpose/quantize_transpose_square_blockwise.cu and quantize_transpose_vector_blockwise.cu); "
    "fp8bench's fp8_blockwise has FP32 scales, so te skips it there (run mxfp8 on te instead)")
# Limits of this backend that depend on the device: (precision, where, reason), listed by ``fp8bench doctor``.
KNOWN_LIMITS: tuple[tuple[str, str, str], ...] = (("fp8_blockwise", "compute capability 10.0+", BLACKWELL_BLOCKWISE),)


def te_version() -> str | None:
    """The installed Transformer Engine version (package metadata; TE is not imported)."""
    return TE_LIBRARY.installed_version()


def _not_rocm(device: Device) -> str | None:
    if getattr(torch.version, "hip", None) is not None:
        return "Transformer Engine's PyTorch build here is CUDA-only (ROCm has its own fork)"
    return None


TE = BACKENDS.add("te", Backend(
    name="te", kind="vendor",
    description="NVIDIA Transformer Engine te.Linear under te.autocast (DelayedScaling, Float8CurrentScaling, "
                "Float8BlockScaling, MXFP8BlockScaling, NVFP4BlockScaling); CUDA only",
    device_kinds=("cuda",), device_kinds_reason="Transformer Engine runs on CUDA devices only",
    requires=(TE_LIBRARY,), check=_not_rocm,
))


@dataclass(frozen=True)
class TERecipeSpec:
    """A TE recipe described without TE: class name, constructor keywords, the TE check that gates it."""

    cls: str  # DelayedScaling | Float8CurrentScaling | Float8BlockScaling | MXFP8BlockScaling
    kwargs: dict[str, Any] = field(default_factory=dict)  # fp8_format as the Format member's name, MMParams as dicts
    check: str = "is_fp8_available"  # te.<check>(return_reason=True)
    min_version: tuple[int, ...] = (2, 0)
    alignment: int = 16  # tokens and features must be multiples of this
    fp32_scales: bool = False  # the recipe has TE's power-of-two scale switch, set to FP32 scales on each object


def te_recipe_spec(precision: Precision) -> TERecipeSpec | None:
    """The TE recipe for ``precision`` (``None`` for float precisions: autocast disabled).

    Raises :class:`Unsupported` with the reason where TE has no matching recipe.
    """
    if isinstance(precision, FloatPrecision):
        return None
    assert isinstance(precision, ScaledRecipe)
    if precision.fp8_format is Fp8FormatChoice.E5M2:
        raise Unsupported("Transformer Engine rejects pure E5M2 training in every recipe; use e4m3 or hybrid")
    fmt = {"fp8_format": precision.fp8_format.value.upper()}  # E4M3 | HYBRID
    g = precision.granularity
    if isinstance(precision, Fp4Recipe):
        if not precision.nvfp4():
            raise Unsupported("Transformer Engine has no MXFP4 recipe (its 4-bit recipe is NVFP4BlockScaling)")
        # get_align_size_for_quantization (pytorch/quantization.py, 2.9+) returns 128 for NVFP4.
        return TERecipeSpec("NVFP4BlockScaling", {"fp4_format": "E2M1", "fp8_format": "E4M3",
                                                  "disable_rht": not precision.rht,
                                                  "disable_stochastic_rounding": not precision.stochastic_rounding,
                                                  "disable_2d_quantization": True},
                            check="is_nvfp4_available", min_version=(2, 8), alignment=128)
    if g is Granularity.TENSORWISE and precision.delayed:
        if not precision.fast_accum:
            raise Unsupported("Transformer Engine's DelayedScaling takes its GEMM accumulation from module constants "
                              "(pytorch/module/base.py: _2X_ACC_FPROP = False, fast accumulation in fprop); no "
                              "recipe field turns it off")
        return TERecipeSpec("DelayedScaling", {**fmt, "margin": precision.margin,
                                               "amax_history_len": precision.amax_history_len,
                                               "amax_compute_algo": precision.amax_compute_algo})
    if g is Granularity.TENSORWISE:
        # fp8_gemm_fprop's use_split_accumulator=False is TE's fast accumulation (its default in this recipe).
        accum = {} if precision.fast_accum else {"fp8_gemm_fprop": {"use_split_accumulator": True}}
        return TERecipeSpec("Float8CurrentScaling", {**fmt, **accum}, min_version=(2, 2), fp32_scales=True)
    if g is Granularity.BLOCKWISE:
        if precision.activation_block != (1, 128) or precision.weight_block != (128, 128):
            raise Unsupported(f"TE's Float8BlockScaling tiles are 1x128 and 128x128; got "
                              f"{precision.activation_block} and {precision.weight_block}")
        return TERecipeSpec("Float8BlockScaling", {**fmt, "x_block_scaling_dim": 1, "w_block_scaling_dim": 2,
                                                   "grad_block_scaling_dim": 1},
                            check="is_fp8_block_scaling_available", min_version=(2, 3), alignment=128,
                            fp32_scales=True)
    if g is Granularity.MX:
        if precision.mx_block != 32:
            raise Unsupported(f"TE's MXFP8BlockScaling uses 32-element blocks; got {precision.mx_block}")
        return TERecipeSpec("MXFP8BlockScaling", fmt, check="is_mxfp8_available", alignment=32)
    raise Unsupported("Transformer Engine has no per-row (rowwise) scaling recipe")


# Why fp32 is not a TE precision (see the module docstring).
FP32_IS_TF32 = ("Transformer Engine runs all-FP32 GEMMs with CUBLAS_COMPUTE_32F_FAST_TF32 (TF32 tensor cores), "
                "so an fp32 case would report a TF32 GEMM; use --precision tf32 on te")


def precision_support(precision: Precision, device: Device) -> str | None:
    """Why TE cannot run ``precision`` (before importing TE: mapping, version); ``None`` if it may."""
    if isinstance(precision, FloatPrecision) and precision.dtype == torch.float32 and not precision.tf32:
        return FP32_IS_TF32
    try:
        spec = te_recipe_spec(precision)
    except Unsupported as exc:
        return str(exc)
    version = te_version()
    if spec and version and parse_version(version) < spec.min_version:
        return (f"{spec.cls} needs Transformer Engine {'.'.join(map(str, spec.min_version))}+, "
                f"installed {version}")
    return None


class TEApi:
    """The vendor boundary: every Transformer Engine call fp8bench makes. Tests substitute a fake."""

    def __init__(self) -> None:
        try:  # TE's import needs CUDA libraries; any failure is the reason the backend is unusable
            import transformer_engine.pytorch as te
            from transformer_engine.common import recipe
        except Exception as exc:  # noqa: BLE001
            raise Unsupported(f"transformer_engine.pytorch import failed: {type(exc).__name__}: {exc}") from exc
        self.te, self.recipe_module = te, recipe

    def make_recipe(self, spec: TERecipeSpec) -> Any:
        kwargs = dict(spec.kwargs)
        for key in ("fp8_format", "fp4_format"):
            if key in kwargs:
                kwargs[key] = getattr(self.recipe_module.Format, kwargs[key])
        for gemm in ("fp8_gemm_fprop", "fp8_gemm_dgrad", "fp8_gemm_wgrad"):
            if gemm in kwargs:
                kwargs[gemm] = self.recipe_module.MMParams(**kwargs[gemm])
        cls = getattr(self.recipe_module, spec.cls)
        recipe = cls(**pinned_fields(cls), **kwargs)
        if spec.fp32_scales:
            use_fp32_scales(recipe)
        return recipe

    def support_reason(self, spec: TERecipeSpec) -> str | None:
        """TE's own verdict on this GPU (``None``: supported). 2.9+ exports the checks at the top level."""
        check = getattr(self.te, spec.check, None)
        if check is not None:
            ok, reason = check(return_reason=True)
            return None if ok else (reason or f"{spec.check} returned False")
        legacy = {"is_fp8_available": "check_fp8_support", "is_mxfp8_available": "check_mxfp8_support",
                  "is_fp8_block_scaling_available": "check_fp8_block_scaling_support",
                  "is_nvfp4_available": "check_nvfp4_support"}[spec.check]
        from transformer_engine.pytorch import fp8 as te_fp8  # <= 2.8 location of the checks

        ok, reason = getattr(te_fp8, legacy)()
        return None if ok else (reason or f"{legacy} returned False")

    def compute_capability(self) -> tuple[int, int]:
        """The current GPU's compute capability as TE sees it (``pytorch/utils.py``, every 2.x release)."""
        from transformer_engine.pytorch.utils import get_device_compute_capability

        return tuple(get_device_compute_capability())  # type: ignore[return-value]

    @property
    def shape(self) -> str:
        """Which of TE's two API shapes is installed (recorded as ``te_api``)."""
        if hasattr(self.te, "autocast"):
            return "autocast (Transformer Engine >= 2.9)"
        return "fp8_autocast (Transformer Engine <= 2.8)"

    def autocast(self, recipe: Any, enabled: bool = True) -> contextlib.AbstractContextManager[Any]:
        """A new region each call: since 2.16 one ``autocast`` instance cannot be entered twice at once."""
        if hasattr(self.te, "autocast"):  # 2.9+; fp8_autocast still exists there but warns
            return self.te.autocast(enabled=enabled, recipe=recipe)
        return self.te.fp8_autocast(enabled=enabled, fp8_recipe=recipe)

    def linear(self, in_features: int, out_features: int, *, bias: bool, dtype: torch.dtype,
               device: torch.device) -> nn.Module:
        # Keywords after the first two: te.Linear's third positional parameter is sequence_parallel.
        return self.te.Linear(in_features, out_features, bias=bias, params_dtype=dtype, device=device)


def pinned_fields(recipe_cls: type) -> dict[str, object]:
    """The :data:`PINNED_RECIPE_FIELDS` this release's ``recipe_cls`` declares, so that no environment variable
    read at TE's import changes what runs under a precision's name (older releases lack the fields: none passed)."""
    declared = {f.name for f in dataclasses.fields(recipe_cls)} if dataclasses.is_dataclass(recipe_cls) else set()
    return {name: value for name, value in PINNED_RECIPE_FIELDS.items() if name in declared}


def use_fp32_scales(recipe: Any) -> None:
    """Make ``recipe`` (a ``Float8CurrentScaling`` or ``Float8BlockScaling``) quantize with FP32 scales: each role's
    QParams with ``power_2_scale=False`` (its other fields kept) and the recipe's own switch off, on this object
    (module docstring, "Scale factors"). Raises :class:`Unsupported` if TE no longer lets them be set."""
    try:
        for role in QPARAM_ROLES:
            setattr(recipe, role, dataclasses.replace(getattr(recipe, role), power_2_scale=False))
        if hasattr(recipe, "use_power_2_scales"):  # Float8CurrentScaling, 2.8+; its quantizer state reads it
            recipe.use_power_2_scales = False
        if hasattr(recipe, "use_f32_scales"):  # Float8BlockScaling: read by nothing but its repr; kept truthful
            recipe.use_f32_scales = True
    except (AttributeError, TypeError, dataclasses.FrozenInstanceError) as exc:
        raise Unsupported(f"cannot give TE's {type(recipe).__name__} FP32 scales ({type(exc).__name__}: {exc}); "
                          f"fp8bench's {type(recipe).__name__} precision is defined with FP32 amax/max scales") from exc


def scale_format(recipe: Any) -> str:
    """What TE's quantizers will read from ``recipe``: ``pow2`` when any role rounds its scales to powers of two,
    else ``fp32`` (:data:`fp8bench.core.records.SCALE_FORMATS`)."""
    pow2 = any(getattr(recipe, role).power_2_scale for role in QPARAM_ROLES if hasattr(recipe, role))
    return SCALE_POW2 if pow2 or getattr(recipe, "use_power_2_scales", False) else SCALE_FP32


def te_api() -> TEApi:
    """The TE boundary (tests install fakes of TE's modules under TE's own names, so this is the real class)."""
    return TEApi()


@dataclass
class TEPlan:
    """What a case runs with: the boundary, the recipe object (``None``: autocast off) and its spec."""

    api: TEApi
    recipe: Any
    spec: TERecipeSpec | None

    @contextlib.contextmanager
    def region(self) -> Iterator[None]:
        with self.api.autocast(self.recipe, enabled=self.spec is not None):
            yield

    @property
    def scale_format(self) -> str | None:
        """The recipe's scale factors as TE will read them, for recipes that have TE's power-of-two switch."""
        return scale_format(self.recipe) if self.spec is not None and self.spec.fp32_scales else None


def plan_for(precision: Precision, dims: dict[str, int]) -> TEPlan:
    """Import TE, map the precision, ask TE whether this GPU runs the recipe, check alignment of ``dims``."""
    spec = te_recipe_spec(precision)
    api = te_api()
    if spec is None:
        return TEPlan(api, None, None)
    reason = api.support_reason(spec)
    if reason:
        raise Unsupported(f"Transformer Engine cannot run {spec.cls} on this GPU: {reason}")
    if spec.cls == "Float8BlockScaling" and api.compute_capability() >= (10, 0):
        raise Unsupported(BLACKWELL_BLOCKWISE)
    bad = {k: v for k, v in dims.items() if v % spec.alignment}
    if bad:
        raise Unsupported(f"TE {spec.cls} needs {', '.join(dims)} multiples of {spec.alignment}; got "
                          + ", ".join(f"{k}={v}" for k, v in bad.items()))
    return TEPlan(api, api.make_recipe(spec), spec)


def in_region(layer: nn.Module, plan: TEPlan) -> nn.Module:
    """Make ``layer``'s forward run inside the plan's autocast region (its backward then runs outside, as TE
    documents). The layer keeps its type and attributes, so workloads that call its parts directly still work."""
    inner = layer.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        with plan.region():
            return inner(*args, **kwargs)

    layer.forward = forward  # type: ignore[method-assign]
    return layer


def swap_linears(module: nn.Module, plan: TEPlan) -> nn.Module:
    """Replace every ``nn.Linear`` in ``module`` with a ``te.Linear`` holding the same weights (in place), each
    called inside the recipe's autocast region."""
    for name, child in list(module.named_children()):
        if isinstance(child, nn.Linear):
            replacement = plan.api.linear(child.in_features, child.out_features, bias=child.bias is not None,
                                          dtype=child.weight.dtype, device=child.weight.device)
            with torch.no_grad():
                replacement.weight.copy_(child.weight)
                if child.bias is not None:
                    replacement.bias.copy_(child.bias)
            replacement.weight.requires_grad_(child.weight.requires_grad)
            setattr(module, name, in_region(replacement, plan))
        else:
            swap_linears(child, plan)
    return module


def converter(plan: TEPlan) -> Callable[[nn.Module], nn.Module]:
    """A ``convert(nn.Module) -> nn.Module`` that swaps in TE linears running under ``plan``."""
    return lambda module: swap_linears(module, plan)


def make_converter(precision: Precision, dims: dict[str, int]) -> Callable[[nn.Module], nn.Module]:
    """A ``convert(nn.Module) -> nn.Module`` for the model workloads: TE linears under the recipe's autocast."""
    return converter(plan_for(precision, dims))


def model_dims(workload: str, shape: dict[str, int]) -> dict[str, int]:
    """The GEMM dimensions TE's alignment rules apply to, per model workload."""
    if workload == "attention":
        return {"tokens": shape["b"] * shape["s"], "width": shape["h"] * shape["d"]}
    return {"tokens": shape["batch"] * shape["seq"], "width": shape["width"], "ffn": shape["ffn"]}


def te_convert(precision: Precision, device: Device) -> Callable[[nn.Module], nn.Module]:
    """:data:`LAYER_CONVERTERS` entry: alignment is left to TE's own check at run time (no shape known here)."""
    return make_converter(precision, {})


def _model_builder(build: Callable[[BuildContext, Callable[[nn.Module], nn.Module]], Pipeline]
                   ) -> Callable[[BuildContext], Pipeline]:
    def builder(ctx: BuildContext) -> Pipeline:
        plan = plan_for(ctx.precision, model_dims(ctx.workload, ctx.shape))
        convert = converter(plan)
        with refusals(f"Transformer Engine refused {ctx.precision.name}", TE_REFUSALS):
            pipeline = build(ctx, convert)
        spec = te_recipe_spec(ctx.precision)
        recipe = spec.cls if spec else "none (autocast disabled)"
        pipeline.notes.append(f"te.Linear for every projection, recipe {recipe}")
        pipeline.extra.update(te_recipe=recipe, te_api=te_api().shape)
        pipeline.scale_format = plan.scale_format
        return pipeline

    return builder


TE.builder("attention", supports=precision_support)(_model_builder(build_attention_pipeline))
TE.builder("transformer_step", supports=precision_support)(_model_builder(build_training_pipeline))
LAYER_CONVERTERS["te"] = te_convert


@TE.builder("gemm", supports=precision_support)
def build_gemm(ctx: BuildContext) -> Pipeline:
    precision = ctx.precision
    a_src, b_src = ctx.inputs["a"], ctx.inputs["b"]
    (m, k), n = a_src.shape, b_src.shape[0]
    plan = plan_for(precision, {"M": m, "N": n, "K": k})
    dtype = precision.dtype if isinstance(precision, FloatPrecision) else torch.bfloat16
    layer = plan.api.linear(k, n, bias=False, dtype=dtype, device=ctx.device.torch)
    with torch.no_grad():
        layer.weight.copy_(b_src.to(dtype))
    layer.weight.requires_grad_(False)  # nothing needs a gradient: TE makes no backward-only casts
    a = a_src.to(dtype)

    @torch.enable_grad()  # TE updates DelayedScaling's scales at the autocast's exit only with grad mode on
    def forward() -> torch.Tensor:
        with plan.region():
            return layer(a)

    with refusals(f"Transformer Engine refused {precision.name}", TE_REFUSALS):
        forward()
    recipe = plan.spec.cls if plan.spec else "none (autocast disabled)"
    notes = [f"te.Linear forward, recipe {recipe}; TE quantizes inside the module, so only the end-to-end time "
             "exists"]
    if plan.spec is not None and plan.spec.cls == "DelayedScaling":
        notes.append("DelayedScaling: amax and scale update at each autocast exit (grad mode on, no gradient "
                     "needed), timed with the forward as in training")
    if isinstance(precision, FloatPrecision) and precision.tf32:
        notes.append("tf32: FP32 parameters, which TE's cuBLASLt GEMM runs as TF32 (CUBLAS_COMPUTE_32F_FAST_TF32)")
    return Pipeline(end_to_end=forward, phases={}, output=forward, prequantized_phases=(), notes=notes,
                    extra={"te_recipe": recipe, "te_api": plan.api.shape}, scale_format=plan.scale_format)
