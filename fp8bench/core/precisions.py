"""Precisions and FP8 scaling recipes, as frozen, validated objects.

A *precision* says what number format a GEMM's operands take and, for FP8, how values are mapped into that format.
FP8's range is tiny (E4M3: about 2**-9 to 448), so every FP8 recipe multiplies a tensor by a **scale** before the
cast and undoes it after the GEMM. fp8bench stores the *dequantization* scale ``s`` (``x ~= fp8 * s``) because
that is what ``torch._scaled_mm`` consumes. Recipes differ in how many values share one scale and how it is chosen:

* ``fp8_tensorwise``: one scale per tensor, from the tensor's current absolute maximum (amax): ``s = amax / max``.
  Cheap, but one outlier shrinks the resolution of every other value.
* ``fp8_delayed``: one scale per tensor from the *history* of amaxes seen on earlier iterations (Transformer
  Engine's default). The amax reduction leaves the critical path, but the scale lags: a tensor whose range jumps
  overflows until the history catches up. ``amax_history_len``, ``amax_compute_algo`` (``max`` of the history, or
  its ``most_recent`` entry) and ``margin`` (extra headroom, in powers of two) tune that trade. Their defaults are
  Transformer Engine's ``DelayedScaling`` defaults (:data:`TE_DELAYED_SCALING_DEFAULTS`), and so is the format:
  ``HYBRID`` (E4M3 forward, E5M2 gradients) on workloads that train, E4M3 on forward-only ones.
* ``fp8_rowwise``: one scale per row of the activation and per output column of the weight (DeepSeek-V3,
  torchao's rowwise recipe).
* ``fp8_blockwise``: one scale per 1x128 tile of activations and per 128x128 tile of weights (DeepSeek-V3's recipe;
  Transformer Engine's ``Float8BlockScaling``).
* ``mxfp8``: OCP Microscaling: one power-of-two scale (8-bit exponent, E8M0) per 32 consecutive values along the
  reduction dimension. Power-of-two scales make rescaling exact; hardware support starts at compute capability 10.0.

Two 4-bit recipes put E2M1 elements (values 0 to 6, one mantissa bit; :mod:`fp8bench.core.formats`) under small-block
scales, and quantize every operand of every GEMM (gradients included) to 4 bits:

* ``nvfp4``: NVIDIA's format: one E4M3 scale per 16 consecutive values along the reduction dimension, times one
  FP32 scale per tensor. The tensor scale ``amax / (6 * 448)`` maps the tensor's amax onto the largest value both
  levels reach together; each block's scale ``block_amax / 6`` (relative to the tensor scale) is then *rounded to
  E4M3*, so a block's largest value lands near 6, not exactly on it (the ``nvfp4`` physics in
  :mod:`fp8bench.numerics.predicted_sqnr`). Transformer Engine's ``NVFP4BlockScaling`` (2.8+) adds two training options
  that act on the gradient GEMMs, each a field here: ``stochastic_rounding`` (gradients rounded up or down at random, in
  proportion to the distance, so the rounding is unbiased) and ``rht`` (a random Hadamard transform of 16x16 applied
  to both operands of the weight-gradient GEMM along its reduction dimension: it spreads outliers across a block
  and cancels in the product). Both are on by default, as in TE (``disable_rht=False``,
  ``disable_stochastic_rounding=False``); they change nothing in a forward-only workload.
* ``mxfp4``: OCP MXFP4: one power-of-two (E8M0) scale per 32 values, like ``mxfp8`` with E2M1 elements (its shared
  exponent puts a block's largest value in ``[4, 8)``, above 6 saturates). No stochastic rounding or Hadamard
  transform unless asked for.

4-bit recipes take no FP8 element format: their ``fp8_format`` stays ``e4m3`` (for ``nvfp4`` the format of its
block scales, TE's ``fp8_format=E4M3``), :func:`resolve_precision` leaves it alone when a run names another one for
its FP8 recipes, and records name ``e2m1`` (:attr:`Fp4Recipe.format_label`). Their GEMMs accumulate in full precision
(no fast mode for FP4 in PyTorch: ``use_fast_accum`` with ``Float4_e2m1fn_x2`` operands is refused in
``ScaledBlas.cpp``).

FP8 element format: ``e4m3`` (default), ``e5m2``, or ``hybrid`` (E4M3 in the forward pass, E5M2 for gradients, the
usual training setup).

Accumulation: Hopper's FP8 tensor cores can accumulate a GEMM's products in a reduced-precision register ("fast
accumulation", ``use_fast_accum`` in PyTorch, ``use_split_accumulator=False`` in Transformer Engine) or promote them
to full FP32 at intervals. The vendors' FP8 training recipes use fast accumulation in the forward GEMM only and
full precision in both gradient GEMMs, where small contributions add up over many tokens (torchao:
``Float8LinearConfig.gemm_config_output`` vs ``gemm_config_grad_input/grad_weight``; Transformer Engine: its
recipes' ``fp8_gemm_fprop`` vs ``fp8_gemm_dgrad/wgrad``). ``fast_accum`` on a recipe is that forward switch (on by
default, as the vendors have it); the backward GEMMs always accumulate in full precision. Block-scaled recipes
accumulate in full precision throughout, so their ``fast_accum`` is always off: Transformer Engine's
``Float8BlockScaling`` asserts split accumulation in all three GEMMs (``common/recipe/__init__.py``), DeepSeek-V3's
recipe promotes partial sums to FP32 every 128 elements, and PyTorch's MX kernel ignores the flag
(``ScaledBlas.cpp``: ``_scaled_mxfp8_mxfp8``). Kernels without the mode (the CPU, the emulated reference)
accumulate in FP32 either way; the record still carries the recipe's setting. The high-precision baselines ``fp32``,
``tf32``, ``bf16`` and ``fp16`` are precisions too, so every case in a run is addressed the same way.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum
from typing import ClassVar, TypeVar

import torch

from fp8bench.core.formats import E2M1, E4M3, E5M2, MANTISSA_BITS, ElementFormat
from fp8bench.core.registry import Registry


class Granularity(str, Enum):
    """How many values share one FP8 scale. The values are the names used in records."""

    TENSORWISE = "tensorwise"
    ROWWISE = "rowwise"
    BLOCKWISE = "blockwise"
    MX = "mx"
    NVFP4 = "nvfp4"  # 16-element E4M3 block scales times an FP32 tensor scale


class Fp8FormatChoice(str, Enum):
    """The ``--fp8-format`` flag."""

    E4M3 = "e4m3"
    E5M2 = "e5m2"
    HYBRID = "hybrid"


@dataclass(frozen=True)
class FloatPrecision:
    """A plain floating-point precision: operands cast to ``dtype_name``; ``tf32`` lets FP32 GEMMs use TF32 cores."""

    name: str
    dtype_name: str  # float32 | bfloat16 | float16
    tf32: bool = False

    is_scaled = False

    def __post_init__(self) -> None:
        if self.dtype_name not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"{self.name}: dtype must be float32, bfloat16 or float16, got {self.dtype_name!r}")
        if self.tf32 and self.dtype_name != "float32":
            raise ValueError(f"{self.name}: tf32 applies to float32 only")

    @property
    def dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype_name)

    @property
    def mantissa_bits(self) -> int:
        return MANTISSA_BITS["tf32" if self.tf32 else {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}[
            self.dtype_name]]

    @property
    def activation_dtype(self) -> torch.dtype:
        """The dtype a workload's activations arrive in before this precision's GEMM."""
        return self.dtype

    def operand_bytes(self, elements: int) -> int:
        """Bytes that ``elements`` operand values occupy in memory."""
        return elements * self.dtype.itemsize

    def describe(self) -> str:
        return f"{self.name}: {'TF32 tensor-core' if self.tf32 else self.dtype_name} GEMM"


# Transformer Engine's DelayedScaling defaults (transformer_engine/common/recipe/__init__.py, class DelayedScaling:
# margin: int = 0, fp8_format: Format = Format.HYBRID, amax_history_len: int = 1024,
# amax_compute_algo = "max"; the same in TE 1.x and 2.x). fp8_delayed follows them unless told otherwise.
TE_DELAYED_SCALING_DEFAULTS: dict[str, object] = {
    "amax_history_len": 1024, "amax_compute_algo": "max", "margin": 0, "fp8_format": "hybrid"}
# TE's own choices for amax_compute_algo (a callable is TE-only).
AMAX_COMPUTE_ALGOS = ("max", "most_recent")


_Recipe = TypeVar("_Recipe", bound="ScaledRecipe")


def check_delayed_options(owner: str, amax_history_len: int | None, amax_compute_algo: str | None,
                          margin: int | None) -> None:
    """Delayed scaling's options checked (``None``: not given); raises ``ValueError`` naming ``owner``, the bad
    value and what is accepted."""
    if amax_history_len is not None and (isinstance(amax_history_len, bool) or not isinstance(amax_history_len, int)
                                         or amax_history_len < 1):
        raise ValueError(f"{owner}: amax_history_len must be >= 1, got {amax_history_len!r}")
    if amax_compute_algo is not None and amax_compute_algo not in AMAX_COMPUTE_ALGOS:
        raise ValueError(f"{owner}: amax_compute_algo {amax_compute_algo!r}; accepted: {', '.join(AMAX_COMPUTE_ALGOS)}")
    if margin is not None and (isinstance(margin, bool) or not isinstance(margin, int) or not -8 <= margin <= 8):
        raise ValueError(f"{owner}: margin is a power-of-two headroom in [-8, 8], got {margin!r}")


@dataclass(frozen=True)
class ScaledRecipe:
    """A scaled low-precision recipe: elements in a narrow format, each group of them under a scale. Frozen: a run's
    recipe cannot change under it; use :meth:`with_options`.

    Two kinds, one class each (as Transformer Engine has one class per recipe): :class:`Fp8Recipe` (E4M3/E5M2
    elements) and :class:`Fp4Recipe` (E2M1 elements). What differs between them (element bytes, GEMM alignment,
    formats, the options a run may set) is a method of each kind; code asks the recipe, never which kind it is.
    ``stochastic_rounding`` and ``rht`` are the 4-bit kind's training options; the FP8 kind refuses them.
    """

    name: str
    granularity: Granularity
    fp8_format: Fp8FormatChoice = Fp8FormatChoice.E4M3
    delayed: bool = False
    amax_history_len: int = 1024  # iterations remembered by delayed scaling (TE's DelayedScaling default)
    amax_compute_algo: str = "max"  # "max" of the history or its "most_recent" entry (TE's default: max)
    margin: int = 0  # extra headroom for delayed scaling: scale grows by 2**margin (TE's default: 0)
    activation_block: tuple[int, int] = (1, 128)  # blockwise tile of the left operand (rows x cols)
    weight_block: tuple[int, int] = (128, 128)  # blockwise tile of the right operand
    mx_block: int = 32  # elements per E8M0 scale along the reduction dimension (OCP MX spec)
    fast_accum: bool = True  # forward GEMM in fast (reduced-precision) accumulation; backward GEMMs never
    stochastic_rounding: bool = False  # 4-bit: gradients rounded stochastically (TE NVFP4BlockScaling's default)
    rht: bool = False  # 4-bit: random Hadamard transform (16x16) on the wgrad GEMM's operands

    is_scaled = True  # a scale per group of values (FP8 and 4-bit), as opposed to a plain float precision
    element_bits: ClassVar[int]  # storage bits of one element: 8 (FP8) or 4 (E2M1)

    def __post_init__(self) -> None:
        object.__setattr__(self, "granularity", Granularity(self.granularity))
        object.__setattr__(self, "fp8_format", Fp8FormatChoice(self.fp8_format))
        if self.granularity in (Granularity.BLOCKWISE, Granularity.MX, Granularity.NVFP4):
            object.__setattr__(self, "fast_accum", False)  # block-scaled kernels accumulate in full precision
        if self.delayed and self.granularity is not Granularity.TENSORWISE:
            raise ValueError(f"{self.name}: delayed scaling is defined per tensor only")
        check_delayed_options(self.name, self.amax_history_len, self.amax_compute_algo, self.margin)
        for block in (self.activation_block, self.weight_block):
            if len(block) != 2 or min(block) < 1:
                raise ValueError(f"{self.name}: block tiles are (rows, cols) of positive ints, got {block}")
        if self.mx_block < 1:
            raise ValueError(f"{self.name}: mx_block must be positive, got {self.mx_block}")

    # Predicates in Transformer Engine's style (``recipe.nvfp4()``, ``recipe.mxfp8()``).
    def nvfp4(self) -> bool:
        return False

    def mxfp4(self) -> bool:
        return False

    def mxfp8(self) -> bool:
        return False

    @property
    def forward_format(self) -> ElementFormat:
        """Element format of activations and weights."""
        raise NotImplementedError

    @property
    def backward_format(self) -> ElementFormat:
        """Element format of gradients."""
        raise NotImplementedError

    @property
    def format_label(self) -> str:
        """The element format a record names."""
        raise NotImplementedError

    @property
    def capability_key(self) -> str:
        """The row of the hardware capability matrix this recipe's kernels are held to."""
        return self.granularity.value

    @property
    def block_elements(self) -> int:
        """Elements per scale along the reduction dimension of the block-scaled recipes (MX 32, NVFP4 16)."""
        return self.mx_block

    def operand_bytes(self, elements: int) -> int:
        """Bytes that ``elements`` quantized operand values occupy in memory, scales of the small blocks included."""
        raise NotImplementedError

    def gemm_alignment(self) -> tuple[int, int, int]:
        """Divisors (M, N, K) a GEMM shape must meet for this recipe's kernels."""
        raise NotImplementedError

    def training_options(self) -> dict[str, object]:
        """What a record keeps of the recipe's kind-specific training options (empty for the FP8 kind)."""
        return {}

    def with_run_options(self, options: RunOptions) -> ScaledRecipe:
        """This recipe with the run's options applied, those that its kind takes."""
        raise NotImplementedError

    @property
    def mantissa_bits(self) -> int:
        return self.forward_format.mantissa_bits

    @property
    def activation_dtype(self) -> torch.dtype:
        """Scaled recipes quantize BF16 activations: the dtype training keeps them in between layers."""
        return torch.bfloat16

    @property
    def accumulation(self) -> str:
        """The record's name for the accumulation mode: ``fast_forward`` (the vendors' default) or ``full``."""
        return "fast_forward" if self.fast_accum else "full"

    def with_options(self: _Recipe, **changes: object) -> _Recipe:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def describe(self) -> str:
        raise NotImplementedError

    def _scales_text(self) -> str:
        return {Granularity.TENSORWISE: "per-tensor", Granularity.ROWWISE: "per-row",
                Granularity.BLOCKWISE: f"{self.activation_block[0]}x{self.activation_block[1]} / "
                f"{self.weight_block[0]}x{self.weight_block[1]} block",
                Granularity.MX: f"{self.mx_block}-element E8M0",
                Granularity.NVFP4: f"{self.block_elements}-element E4M3 x per-tensor FP32"}[self.granularity]

    def _accumulation_text(self) -> str:
        return "fast accumulation in the forward GEMM" if self.fast_accum else "full-precision accumulation"


@dataclass(frozen=True)
class RunOptions:
    """The scaling options a run passes to every recipe it measures (``None``: the recipe's own setting; an
    ``fp8_format`` of ``None``: :func:`default_fp8_format`). ``trains``: whether the workload runs a backward pass (it
    picks the default FP8 format). Each recipe kind takes those it has (:meth:`ScaledRecipe.with_run_options`); the
    values are checked here, whichever recipes the run measures."""

    fp8_format: str | None = "e4m3"
    amax_history_len: int | None = None  # iterations
    margin: int | None = None  # powers of two
    fast_accum: bool | None = None
    amax_compute_algo: str | None = None
    trains: bool = False
    stochastic_rounding: bool | None = None
    rht: bool | None = None

    def __post_init__(self) -> None:
        if self.fp8_format is not None and self.fp8_format not in {c.value for c in Fp8FormatChoice}:
            raise ValueError(f"unknown FP8 format {self.fp8_format!r}; accepted: "
                             f"{', '.join(c.value for c in Fp8FormatChoice)}")
        check_delayed_options("FP8 options", self.amax_history_len, self.amax_compute_algo, self.margin)
        for option in ("fast_accum", "stochastic_rounding", "rht"):
            if getattr(self, option) not in (None, True, False):
                raise ValueError(f"{option} is on (True), off (False) or the recipe's own (None), got "
                                 f"{getattr(self, option)!r}")


@dataclass(frozen=True)
class Fp8Recipe(ScaledRecipe):
    """An FP8 scaling recipe: E4M3/E5M2 elements (one byte each) under tensor, row, block or MX scales."""

    element_bits: ClassVar[int] = 8

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.granularity is Granularity.NVFP4:
            raise ValueError(f"{self.name}: nvfp4 scaling is defined for 4-bit (E2M1) elements only")
        if self.stochastic_rounding or self.rht:
            raise ValueError(f"{self.name}: stochastic rounding and the Hadamard transform are options of the "
                             "4-bit recipes (nvfp4, mxfp4)")

    def mxfp8(self) -> bool:
        return self.granularity is Granularity.MX

    @property
    def forward_format(self) -> ElementFormat:
        return E5M2 if self.fp8_format is Fp8FormatChoice.E5M2 else E4M3

    @property
    def backward_format(self) -> ElementFormat:
        """E5M2 under ``hybrid`` and ``e5m2``; E4M3 otherwise."""
        return E4M3 if self.fp8_format is Fp8FormatChoice.E4M3 else E5M2

    @property
    def format_label(self) -> str:
        return self.fp8_format.value

    def operand_bytes(self, elements: int) -> int:
        return elements  # one byte per element; the per-tensor, per-row or 128-element scales are negligible

    def gemm_alignment(self) -> tuple[int, int, int]:
        """FP8 tensor-core GEMMs need N and K in multiples of 16 (cuBLASLt, ``torch._scaled_mm``); fp8bench asks the
        same of M so that transposed (backward) GEMMs stay aligned. Block recipes need whole blocks along K (and
        along N for 128x128 weight tiles)."""
        if self.granularity is Granularity.BLOCKWISE:
            return (16, self.weight_block[0], max(self.activation_block[1], self.weight_block[1]))
        if self.granularity is Granularity.MX:
            return (16, 16, max(16, self.mx_block))
        return (16, 16, 16)

    def with_run_options(self, options: RunOptions) -> Fp8Recipe:
        fp8_format = options.fp8_format or default_fp8_format(self, options.trains)
        changes: dict[str, object] = {"fp8_format": Fp8FormatChoice(fp8_format)}  # RunOptions checked the name
        for option in ("amax_history_len", "margin", "fast_accum", "amax_compute_algo"):
            if getattr(options, option) is not None:
                changes[option] = getattr(options, option)
        for option in ("stochastic_rounding", "rht"):
            if getattr(options, option):  # off is every FP8 recipe's only setting: asking for it changes nothing
                changes[option] = True  # on is refused by __post_init__, with the reason
        return self.with_options(**changes)

    def describe(self) -> str:
        scaling = (f"delayed (history {self.amax_history_len}, amax {self.amax_compute_algo}, margin {self.margin})"
                   if self.delayed else "current")
        return (f"{self.name}: {self.fp8_format.value}, {self._scales_text()} scales, {scaling} scaling, "
                f"{self._accumulation_text()}")


@dataclass(frozen=True)
class Fp4Recipe(ScaledRecipe):
    """A 4-bit recipe: E2M1 elements (two per byte) under small-block scales (``nvfp4``: 16-element E4M3 times an
    FP32 tensor scale; ``mxfp4``: 32-element E8M0). Every operand of every GEMM is quantized, gradients included."""

    nv_block: int = 16  # elements per E4M3 scale along the reduction dimension (nvfp4)

    element_bits: ClassVar[int] = 4

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.granularity not in (Granularity.MX, Granularity.NVFP4):
            raise ValueError(f"{self.name}: 4-bit elements need block scales (mx or nvfp4), "
                             f"not {self.granularity.value}")
        if self.fp8_format is not Fp8FormatChoice.E4M3:
            raise ValueError(f"{self.name}: 4-bit recipes have E2M1 elements; --fp8-format "
                             f"{self.fp8_format.value} does not apply (accepted: e4m3, the default)")
        if self.nv_block != 16:
            raise ValueError(f"{self.name}: NVFP4 blocks hold 16 elements (E4M3 scales), got {self.nv_block}")

    def nvfp4(self) -> bool:
        return self.granularity is Granularity.NVFP4

    def mxfp4(self) -> bool:
        return self.granularity is Granularity.MX

    @property
    def forward_format(self) -> ElementFormat:
        return E2M1

    @property
    def backward_format(self) -> ElementFormat:
        return E2M1

    @property
    def format_label(self) -> str:
        return "e2m1"

    @property
    def capability_key(self) -> str:
        return "nvfp4" if self.nvfp4() else "mxfp4"  # mxfp4 shares MX scales with mxfp8, not its kernels

    @property
    def block_elements(self) -> int:
        return self.nv_block if self.nvfp4() else self.mx_block

    def operand_bytes(self, elements: int) -> int:
        return elements // 2 + elements // self.block_elements  # two E2M1 per byte, one 1-byte scale per block

    def gemm_alignment(self) -> tuple[int, int, int]:
        """Two E2M1 values per byte: the packed K/2 must be a multiple of 16 (the kernels' rule), and whole blocks
        along K."""
        return (16, 16, max(32, self.block_elements))

    def training_options(self) -> dict[str, object]:
        return {"stochastic_rounding": self.stochastic_rounding, "rht": self.rht}

    def with_run_options(self, options: RunOptions) -> Fp4Recipe:
        # E2M1 elements: the FP8 format, history and margin options are the FP8 recipes' (a run over several
        # precisions passes them to every one); only the 4-bit options apply.
        changes = {option: getattr(options, option) for option in ("stochastic_rounding", "rht")
                   if getattr(options, option) is not None}
        return self.with_options(**changes)

    def describe(self) -> str:
        options = [o for o, on in (("stochastic rounding of gradients", self.stochastic_rounding),
                                   ("16x16 random Hadamard transform in wgrad", self.rht)) if on]
        extra = f", {', '.join(options)}" if options else ""
        return f"{self.name}: e2m1, {self._scales_text()} scales, current scaling, {self._accumulation_text()}{extra}"


Precision = FloatPrecision | ScaledRecipe

PRECISIONS: Registry[Precision] = Registry("precision")
for _p in (
    FloatPrecision("fp32", "float32"),
    FloatPrecision("tf32", "float32", tf32=True),
    FloatPrecision("bf16", "bfloat16"),
    FloatPrecision("fp16", "float16"),
    Fp8Recipe("fp8_tensorwise", Granularity.TENSORWISE),
    Fp8Recipe("fp8_delayed", Granularity.TENSORWISE, delayed=True),
    Fp8Recipe("fp8_rowwise", Granularity.ROWWISE),
    Fp8Recipe("fp8_blockwise", Granularity.BLOCKWISE),
    Fp8Recipe("mxfp8", Granularity.MX),
    Fp4Recipe("nvfp4", Granularity.NVFP4, stochastic_rounding=True, rht=True),
    Fp4Recipe("mxfp4", Granularity.MX),
):
    PRECISIONS.add(_p.name, _p)


def default_fp8_format(recipe: ScaledRecipe, trains: bool) -> str:
    """The FP8 format a recipe takes when the user names none: Transformer Engine's ``DelayedScaling`` default,
    ``hybrid``, for delayed scaling on a workload with a backward pass (elsewhere hybrid and E4M3 are the same
    forward format, and E4M3 is what is recorded); E4M3 for every other recipe, as before."""
    return str(TE_DELAYED_SCALING_DEFAULTS["fp8_format"]) if recipe.delayed and trains else "e4m3"


def resolve_precision(name: str, options: RunOptions | None = None) -> Precision:
    """The registered precision ``name`` with the run's ``options`` applied (default :class:`RunOptions`: E4M3 and
    each recipe's own settings). Options do not touch non-scaled precisions, and the 4-bit recipes take only
    ``stochastic_rounding`` and ``rht``."""
    precision = PRECISIONS.get(name)
    if not isinstance(precision, ScaledRecipe):
        return precision
    return precision.with_run_options(options or RunOptions())


def fp4_settings(precision: Precision) -> dict[str, object]:
    """What a record keeps of a 4-bit recipe's training options (empty for every other precision)."""
    return precision.training_options() if isinstance(precision, ScaledRecipe) else {}


def delayed_scaling_settings(precision: Precision) -> dict[str, object]:
    """What a record keeps of a delayed-scaling recipe: history length (iterations), amax algorithm, margin
    (powers of two). Empty for every other precision."""
    if not isinstance(precision, ScaledRecipe) or not precision.delayed:
        return {}
    return {"amax_history_len": precision.amax_history_len, "amax_compute_algo": precision.amax_compute_algo,
            "margin": precision.margin}
