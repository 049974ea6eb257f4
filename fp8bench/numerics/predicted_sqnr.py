"""Predicted SQNR: what quantizing a known input distribution to an element format should cost, in dB.

A measured SQNR (:mod:`fp8bench.numerics.accuracy`) is only useful against an expectation: 28 dB is right for an E4M3
GEMM and a bug for a BF16 one. This module derives the expectation from the format's physics (mantissa bits, the
subnormal step, saturation at the largest finite value) and the scaling rule (how many values share one scale, and
how the scale is chosen), for a given input distribution. Nothing here runs a quantizer: the tests compare these
predictions with what the shared quantizers (:mod:`fp8bench.numerics.quantize`) measure.

Derivation
----------
**One value.** A binary floating-point format with ``m`` mantissa bits spaces its values evenly inside each binade
``[2**e, 2**(e+1))`` with step ``h = 2**(e - m)``; below the smallest normal ``2**e_min`` the subnormals continue
with the constant step of the smallest subnormal, ``2**(e_min - m)``, down to 0. Round-to-nearest sends every
value of a *cell* (from the midpoint below a grid value ``g`` to the midpoint above it) to ``g``; the top cell is
unbounded, because the quantizers saturate at the largest finite value ``max`` (the error above it is exactly
``|u| - max``), and the bottom cell ``[0, h_sub / 2)`` is underflow to zero. The expected squared error of the
scaled value ``u = x / s`` is therefore an exact sum over the cells,

    E[err**2] = sum_cells E[(|x| - s*g)**2 ; s*lo_g <= |x| < s*hi_g]
              = sum_cells ( M2 - 2 s g M1 + (s g)**2 M0 ),

with ``M_k`` the partial moments ``E[|x|**k]`` of the input distribution over the cell, closed-form for a normal
distribution. FP8 formats have about 130 non-negative values, so the sum is cheap. The familiar shortcut (the error
is uniform in ``[-h/2, h/2]``, mean square ``h**2 / 12`` per binade, about ``6.02 dB`` per mantissa bit) ignores
how the density slopes across a cell; it is off by up to 0.06 dB for E5M2 and more for 4-bit formats, and serves
only for formats too wide to enumerate (:data:`MAX_EXACT_CELLS`), where it is exact to about 1e-6.

**A group sharing one scale.** With current scaling, a group of ``n`` values gets ``s = amax * 2**margin / max``
(:func:`fp8bench.numerics.quantize.scale_from_amax`); with OCP MX scaling, ``s = 2**(floor(log2(amax)) - emax)`` where
``emax = floor(log2(max))`` (:func:`fp8bench.numerics.quantize.quantize_mx`). Either way the scale depends on the
group's largest magnitude ``A``. For ``n`` independent values, ``P(A <= a) = F(a)**n`` with ``F(a) = P(|x| <= a)``, and
given ``A = a`` the other ``n - 1`` values are independent draws of ``x`` conditioned on ``|x| <= a``. Hence the
expected squared error of a group is

    E_A[ (n - 1) * N(A) / F(A)  +  q(A) ],

where ``N(a)`` is the cell sum above restricted to ``|x| < a`` at the scale ``s(a)``, and ``q(a)`` is the
exact squared error of the largest value itself (zero when current scaling maps it onto ``max``; under MX it lands
in ``[2**emax, 2**(emax + 1))`` and saturates above ``max``, e.g. E4M3's 448 < 512). The outer expectation is a
midpoint rule over the quantiles of ``A``, ``a = F^-1(v**(1/n))`` for ``v`` evenly spaced in ``(0, 1)``, split at
the amax values where the scale jumps (powers of two under MX), which stays accurate for a million-element tensor
(``A`` then sits in a narrow band far in the tail). The noise-to-signal ratio
is that error divided by ``n * E[x**2]``; SQNR is ``-10 log10`` of it. Because errors are ratios of noise *sums* to
signal *sums*, this is the tensor-level SQNR :func:`fp8bench.numerics.accuracy.compare` reports, not a mean of per-group
SQNRs.

**NVFP4's two-level scale.** ``nvfp4`` (:func:`fp8bench.numerics.quantize.quantize_nvfp4`) first takes a tensor scale
``s_t = A_t / (6 * 448)`` from the tensor's amax ``A_t``, then gives each 16-value block the scale
``s = round_E4M3(a / (6 s_t)) * s_t``: the ideal ``a / 6`` rounded to the nearest E4M3 value (in units of ``s_t``).
The group formula above holds unchanged with that rule (:class:`NvFp4Scale`): ``s(a)`` is piecewise constant,
jumping where ``a / (6 s_t)`` crosses a midpoint of E4M3's grid, and a block whose scale rounded down pushes its
largest value past 6, where it saturates (``q(a) > 0``). ``A_t`` is the median amax of the whole tensor: for a
million values it varies by a few percent from draw to draw, and only moves which E4M3 values the block scales
take, not how finely they are spaced. With E4M3's 3 mantissa bits the scale's own rounding costs little next to
E2M1's single bit, but it is what separates NVFP4's prediction from an ideal per-block ``amax / 6`` scale.

Scale invariance makes the distribution's width irrelevant for current scaling (everything is relative to ``A``)
but not for power-of-two scales, where ``log2(A) mod 1`` decides how far the largest value overshoots ``max``:
``N(0, 1)`` and ``N(0, 1/2048)`` do not quantize alike under MX.

**A GEMM.** ``y = sum_k a_k b_k`` over ``K`` independent terms, with operand errors ``e_a`` and ``e_b`` that are
zero-mean and uncorrelated with the values and with each other. Then
``E[(y_q - y)**2] = K (E[e_a**2] E[b**2] + E[a**2] E[e_b**2] + E[e_a**2] E[e_b**2])`` and ``E[y**2] = K E[a**2]
E[b**2]``, so the noise-to-signal ratios add: ``NSR_y = NSR_a + NSR_b + NSR_a * NSR_b``. Each operand's NSR includes
the cast to its activation dtype before quantization (BF16 for the FP8 recipes: about -55 dB), and the output's
rounding to BF16 adds the NSR of rounding ``y`` (normal by the central limit theorem, variance ``K E[a**2]
E[b**2]``). FP32 accumulation adds about ``sqrt(K) * 2**-24`` relative error (-120 dB): ignored. Reduced-precision
accumulation (fast FP8 accumulation on Hopper) is not modelled.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from scipy import special

from fp8bench.core.formats import E2M1, E4M3
from fp8bench.core.precisions import Granularity, ScaledRecipe

# Points of the midpoint rule over the quantiles of a group's amax (split where the scale jumps), and the fewest
# points one piece gets. 1024 keeps every prediction here within 0.005 dB of a 16384-point rule (see the tests).
AMAX_QUANTILES = 1024
AMAX_MIN_POINTS = 8
# The amax quantiles below this and above 1 minus this bound where scale jumps are looked for: they carry
# negligible probability.
AMAX_TAIL = 1e-12


class ElementFormat(Protocol):
    """What the prediction needs of a format: its grid. :class:`fp8bench.core.formats.ElementFormat` is one."""

    @property
    def name(self) -> str: ...
    @property
    def mantissa_bits(self) -> int: ...
    @property
    def max(self) -> float: ...  # largest finite magnitude
    @property
    def min_normal(self) -> float: ...
    @property
    def min_subnormal(self) -> float: ...


@dataclass(frozen=True)
class FloatFormat:
    """An element format described by its grid alone (for formats that are not FP8 table entries, such as BF16)."""

    name: str
    mantissa_bits: int
    max: float
    min_normal: float
    min_subnormal: float


def format_of_dtype(dtype: torch.dtype) -> FloatFormat:
    """The grid of a standard torch floating-point dtype (BF16, FP16), from ``torch.finfo`` (``eps = 2**-m``).

    Not for FP8: torch 2.13 reports ``eps = 0.125`` for ``float8_e5m2fnuz``, which has two mantissa bits. FP8
    formats come from the table in :mod:`fp8bench.core.formats`, which the tests check against every bit pattern.
    """
    info = torch.finfo(dtype)
    mantissa = round(-math.log2(info.eps))
    return FloatFormat(str(dtype).removeprefix("torch."), mantissa, float(info.max), float(info.smallest_normal),
                       float(info.smallest_normal * info.eps))


BF16 = format_of_dtype(torch.bfloat16)


class Distribution(Protocol):
    """A zero-mean, symmetric distribution of tensor elements, described through ``|x|``."""

    def second_moment(self) -> float:
        """``E[x**2]``."""
        ...

    def abs_sf(self, a: np.ndarray) -> np.ndarray:
        """``P(|x| > a)`` (accurate in the far tail)."""
        ...

    def abs_isf(self, p: np.ndarray) -> np.ndarray:
        """The ``a`` with ``P(|x| > a) = p`` (accurate for tiny ``p``)."""
        ...

    def abs_partial_moments(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``E[|x|**k ; lo <= |x| < hi]`` for ``k = 0, 1, 2`` (``hi`` may be ``inf``)."""
        ...


@dataclass(frozen=True)
class Normal:
    """``N(0, sigma**2)``: what ``torch.randn`` times ``sigma`` draws."""

    sigma: float

    def __post_init__(self) -> None:
        if not self.sigma > 0:
            raise ValueError(f"a normal distribution needs sigma > 0, got {self.sigma}")

    def second_moment(self) -> float:
        return self.sigma**2

    def abs_sf(self, a: np.ndarray) -> np.ndarray:
        return 2.0 * special.ndtr(-np.asarray(a, dtype=float) / self.sigma)

    def abs_isf(self, p: np.ndarray) -> np.ndarray:
        return -self.sigma * special.ndtri(np.asarray(p, dtype=float) / 2)

    def abs_partial_moments(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        tl = np.asarray(lo, dtype=float) / self.sigma
        th = np.asarray(hi, dtype=float) / self.sigma
        # Both sides of the origin: twice the one-sided integrals of the standard normal density phi.
        # Survival differences (ndtr(-t)) keep precision in the far tail, where a tensor's amax lives.
        m0 = 2.0 * (special.ndtr(-tl) - special.ndtr(-th))
        phi_l, phi_h = _phi(tl), _phi(th)
        m1 = 2.0 * self.sigma * (phi_l - phi_h)
        t_phi_l = tl * phi_l
        t_phi_h = np.where(np.isinf(th), 0.0, th) * phi_h  # t*phi(t) -> 0 as t -> inf
        m2 = self.sigma**2 * (m0 + 2.0 * (t_phi_l - t_phi_h))
        return m0, m1, m2


def _phi(t: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * np.square(t)) / math.sqrt(2 * math.pi)


# --- scale rules: how a group's amax becomes its dequantization scale --------------------------------------------


class ScaleRule(Protocol):
    def __call__(self, amax: np.ndarray, fmt: ElementFormat) -> np.ndarray:
        """The dequantization scale ``s`` (``x ~= q * s``) of groups whose largest magnitude is ``amax``."""
        ...

    def breakpoints(self, lo: float, hi: float) -> list[float]:
        """The amax values in ``(lo, hi)`` where the scale jumps (the expectation over amax is split there)."""
        ...


@dataclass(frozen=True)
class CurrentScale:
    """``s = amax * 2**margin / max``: the largest value lands on ``max / 2**margin`` (tensorwise, rowwise,
    blockwise and delayed scaling of a stationary input)."""

    margin: int = 0

    def __call__(self, amax: np.ndarray, fmt: ElementFormat) -> np.ndarray:
        return amax * 2.0**self.margin / fmt.max

    def breakpoints(self, lo: float, hi: float) -> list[float]:
        return []  # continuous in amax


@dataclass(frozen=True)
class PowerOfTwoScale:
    """OCP MX (v1.0, section 6.3): ``s = 2**(floor(log2(amax)) - emax)``, ``emax = floor(log2(max))``."""

    def __call__(self, amax: np.ndarray, fmt: ElementFormat) -> np.ndarray:
        return np.exp2(np.floor(np.log2(amax)) - emax_of(fmt))

    def breakpoints(self, lo: float, hi: float) -> list[float]:
        return [2.0**j for j in range(math.floor(math.log2(lo)) + 1, math.ceil(math.log2(hi)))]


@dataclass(frozen=True)
class NvFp4Scale:
    """NVFP4: ``s = round_E4M3(amax / (6 s_t)) * s_t`` with the tensor scale ``s_t = tensor_amax / (6 * 448)``
    (:func:`fp8bench.numerics.quantize.quantize_nvfp4`; the element format's max stands for 6)."""

    tensor_amax: float

    def __post_init__(self) -> None:
        if not self.tensor_amax > 0:
            raise ValueError(f"the NVFP4 scale needs a positive tensor amax, got {self.tensor_amax}")

    def tensor_scale(self) -> float:
        return self.tensor_amax / (E2M1.max * E4M3.max)

    def __call__(self, amax: np.ndarray, fmt: ElementFormat) -> np.ndarray:
        ideal = np.minimum(np.asarray(amax, dtype=float) / fmt.max / self.tensor_scale(), E4M3.max)
        return round_to_format(ideal, E4M3) * self.tensor_scale()

    def breakpoints(self, lo: float, hi: float) -> list[float]:
        g = grid(E4M3)
        # Block amaxes where round_E4M3 moves to the next value: E4M3's cell midpoints, in amax units.
        edges = (g[:-1] + g[1:]) / 2 * E2M1.max * self.tensor_scale()
        return [float(e) for e in edges if lo < e < hi]


def emax_of(fmt: ElementFormat) -> int:
    """Exponent of the largest power of two not above the format's max (8 for E4M3, 15 for E5M2)."""
    return math.floor(math.log2(fmt.max))


@dataclass(frozen=True)
class Grouping:
    """How values share scales: ``size`` values per scale, chosen by ``rule``."""

    size: int
    rule: ScaleRule

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"a scale group holds at least one value, got {self.size}")


# --- the physics -----------------------------------------------------------------------------------------------


# A format with more representable magnitudes than this is modelled binade by binade (uniform rounding error): with
# 10 or more mantissa bits that model is exact to about 1e-6 relative, and the cell-by-cell sum would need
# millions of cells (FP32 has 2**31).
MAX_EXACT_CELLS = 2**16


def grid(fmt: ElementFormat) -> np.ndarray:
    """Every non-negative value of ``fmt`` in ascending order: 0, the subnormals, then each binade up to max."""
    e_min = round(math.log2(fmt.min_normal))
    subnormals = np.arange(round(fmt.min_normal / fmt.min_subnormal)) * fmt.min_subnormal
    binades = [2.0**e * (1 + np.arange(2**fmt.mantissa_bits) / 2**fmt.mantissa_bits)
               for e in range(e_min, math.floor(math.log2(fmt.max)) + 1)]
    values = np.concatenate([subnormals, *binades])
    return values[values <= fmt.max]


def _grid_size(fmt: ElementFormat) -> int:
    binades = math.floor(math.log2(fmt.max)) - round(math.log2(fmt.min_normal)) + 1
    return binades * 2**fmt.mantissa_bits + round(fmt.min_normal / fmt.min_subnormal)


def _partial(dist: Distribution, lo: np.ndarray, hi: np.ndarray, upper: np.ndarray) -> tuple[np.ndarray, ...]:
    return dist.abs_partial_moments(np.minimum(lo, upper), np.minimum(hi, upper))


def rounding_error_sq(dist: Distribution, fmt: ElementFormat, scale: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """``E[(Q(x) - x)**2 ; |x| < upper]`` when ``x / scale`` is rounded to ``fmt``, saturating at its max.

    ``scale`` and ``upper`` broadcast together; the result is an expectation over the whole distribution (not
    conditioned on ``|x| < upper``). Each grid value ``g`` collects the values of its rounding cell (from the
    midpoint below it to the midpoint above; the top cell is unbounded, which is saturation), and the cell's error
    is exactly ``E[(|x| - s*g)**2]`` over it, from the distribution's partial moments.
    """
    scale, upper = np.broadcast_arrays(np.asarray(scale, dtype=float), np.asarray(upper, dtype=float))
    if _grid_size(fmt) > MAX_EXACT_CELLS:
        return _binade_model(dist, fmt, scale, upper)
    g = grid(fmt)
    mid = (g[:-1] + g[1:]) / 2
    lo, hi = np.concatenate([[0.0], mid]), np.concatenate([mid, [np.inf]])
    s, top = scale[..., None], upper[..., None]
    m0, m1, m2 = _partial(dist, lo * s, hi * s, top)
    sg = s * g
    return np.sum(m2 - 2.0 * sg * m1 + sg**2 * m0, axis=-1)


def _binade_model(dist: Distribution, fmt: ElementFormat, scale: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """Wide formats: the uniform-error model, ``step**2 / 12`` per binade, plus exact saturation above max."""
    e_min = round(math.log2(fmt.min_normal))
    regions = [(0.0, fmt.min_normal, fmt.min_subnormal)]
    regions += [(2.0**e, min(2.0 ** (e + 1), fmt.max), 2.0 ** (e - fmt.mantissa_bits))
                for e in range(e_min, math.floor(math.log2(fmt.max)) + 1)]
    total = np.zeros(scale.shape)
    for lo, hi, step in regions:
        m0, _, _ = _partial(dist, lo * scale, hi * scale, upper)
        total += (step * scale) ** 2 / 12.0 * m0
    edge = fmt.max * scale
    m0, m1, m2 = _partial(dist, edge, np.full(scale.shape, np.inf), upper)
    return total + (m2 - 2.0 * edge * m1 + edge**2 * m0)


def round_to_format(u: np.ndarray, fmt: ElementFormat) -> np.ndarray:
    """``|u|`` rounded to the nearest value of ``fmt`` (saturating): the exact fate of a single value."""
    u = np.abs(np.asarray(u, dtype=float))
    e = np.floor(np.log2(np.maximum(u, fmt.min_normal)))
    step = np.where(u < fmt.min_normal, fmt.min_subnormal, np.exp2(e - fmt.mantissa_bits))
    return np.minimum(np.round(u / step) * step, fmt.max)


def cast_nsr(dist: Distribution, fmt: ElementFormat) -> float:
    """Noise-to-signal ratio of a plain cast (no scale) of ``dist`` to ``fmt`` (BF16 activations, BF16 output)."""
    err = rounding_error_sq(dist, fmt, np.asarray(1.0), np.asarray(np.inf))
    return float(err) / dist.second_moment()


def group_nsr(dist: Distribution, fmt: ElementFormat, grouping: Grouping) -> float:
    """Noise-to-signal ratio of quantizing ``dist`` to ``fmt`` in groups sharing one scale (see the derivation)."""
    n = grouping.size
    # Quantiles v of the amax A, P(A <= a) = F(a)**n, split where the scale jumps so that the midpoint rule only
    # ever integrates a continuous function; each piece gets points in proportion to its probability.
    lo, hi = (float(_amax_at(dist, n, np.asarray(v))) for v in (AMAX_TAIL, 1 - AMAX_TAIL))
    cuts = [0.0, *(float(np.exp(n * np.log1p(-dist.abs_sf(np.asarray(b))))) for b in grouping.rule.breakpoints(lo, hi)),
            1.0]
    total = 0.0
    for v0, v1 in itertools.pairwise(cuts):
        if v1 <= v0:
            continue
        k = max(AMAX_MIN_POINTS, math.ceil(AMAX_QUANTILES * (v1 - v0)))
        amax = _amax_at(dist, n, v0 + (np.arange(k) + 0.5) / k * (v1 - v0))
        scale = grouping.rule(amax, fmt)
        others = rounding_error_sq(dist, fmt, scale, amax) / (1.0 - dist.abs_sf(amax))
        largest = ((amax / scale - round_to_format(amax / scale, fmt)) * scale) ** 2
        total += float(np.mean((n - 1) * others + largest)) * (v1 - v0)
    return total / (n * dist.second_moment())


def _amax_at(dist: Distribution, n: int, v: np.ndarray) -> np.ndarray:
    """The amax of ``n`` values at its quantile ``v``: ``P(|x| > a) = 1 - v**(1/n)``, without cancellation."""
    return dist.abs_isf(-np.expm1(np.log(v) / n))


def nsr_to_db(nsr: float) -> float:
    """SQNR in dB of a noise-to-signal power ratio."""
    return math.inf if nsr <= 0 else -10.0 * math.log10(nsr)


# --- recipes and the gemm workload -----------------------------------------------------------------------------


def median_amax(dist: Distribution, n: int) -> float:
    """The median of the largest ``|x|`` among ``n`` independent values."""
    return float(_amax_at(dist, n, np.asarray(0.5)))


def operand_grouping(recipe: ScaledRecipe, role: str, rows: int, cols: int,
                     dist: Distribution | None = None) -> Grouping:
    """The scale groups :func:`fp8bench.numerics.quantize.quantizer_for` uses for one ``[rows, cols]`` GEMM operand.

    ``role`` is ``"lhs"`` (activations, ``[M, K]``) or ``"rhs"`` (weights, ``[N, K]``); both share scales along K.
    ``dist`` (the operand's distribution) is needed by ``nvfp4``, whose block scales depend on the tensor's amax.
    """
    if role not in ("lhs", "rhs"):
        raise ValueError(f"operand role must be 'lhs' or 'rhs', got {role!r}")
    g = recipe.granularity
    if g is Granularity.TENSORWISE:
        return Grouping(rows * cols, CurrentScale(recipe.margin if recipe.delayed else 0))
    if g is Granularity.ROWWISE:
        return Grouping(cols, CurrentScale())
    if g is Granularity.BLOCKWISE:
        br, bc = recipe.activation_block if role == "lhs" else recipe.weight_block
        return Grouping(min(br, rows) * min(bc, cols), CurrentScale())
    if g is Granularity.MX:
        return Grouping(recipe.mx_block, PowerOfTwoScale())
    if g is Granularity.NVFP4:
        if dist is None:
            raise ValueError("the nvfp4 prediction needs the operand's distribution (its tensor amax sets the scales)")
        return Grouping(recipe.block_elements, NvFp4Scale(median_amax(dist, rows * cols)))
    raise ValueError(f"no SQNR prediction for granularity {g.value!r}")


def gemm_input_distributions(shape: dict[str, int]) -> tuple[Normal, Normal]:
    """The ``gemm`` workload's operands (:meth:`fp8bench.workloads.gemm.Gemm.make_inputs`): ``A ~ N(0, 1)`` and
    ``B ~ N(0, 1/K)`` (the fan-in scaling of a linear layer's weights)."""
    return Normal(1.0), Normal(1.0 / math.sqrt(shape["k"]))


def combine_product_nsr(nsr_a: float, nsr_b: float) -> float:
    """NSR of a sum of products whose two factors carry independent relative noise ``nsr_a`` and ``nsr_b``."""
    return nsr_a + nsr_b + nsr_a * nsr_b


@dataclass(frozen=True)
class GemmPrediction:
    """The predicted SQNR of a scaled GEMM and its parts (dB); ``sqnr_db`` is the headline."""

    sqnr_db: float
    lhs_db: float  # activations: the BF16 cast, then the FP8 quantization
    rhs_db: float  # weights, likewise
    output_db: float  # rounding the FP32 accumulator to BF16

    def to_dict(self) -> dict[str, float]:
        return {"sqnr_db": self.sqnr_db, "lhs_db": self.lhs_db, "rhs_db": self.rhs_db, "output_db": self.output_db}


def predict_gemm_sqnr(recipe: ScaledRecipe, shape: dict[str, int], fmt: ElementFormat | None = None,
                      activation: ElementFormat | None = BF16, output: ElementFormat | None = BF16,
                      inputs: tuple[Distribution, Distribution] | None = None) -> GemmPrediction:
    """Predicted SQNR of the ``gemm`` workload ``Y = A @ B^T`` under an FP8 or 4-bit recipe, against the exact
    product.

    ``fmt`` defaults to the recipe's forward format; ``activation`` is the dtype both operands are cast to before
    quantization and ``output`` the GEMM's output dtype (``None``: no such rounding); ``inputs`` defaults to the
    workload's own distributions.
    """
    m, n, k = shape["m"], shape["n"], shape["k"]
    fmt = fmt or recipe.forward_format
    dist_a, dist_b = inputs or gemm_input_distributions(shape)
    nsr_a = group_nsr(dist_a, fmt, operand_grouping(recipe, "lhs", m, k, dist_a))
    nsr_b = group_nsr(dist_b, fmt, operand_grouping(recipe, "rhs", n, k, dist_b))
    if activation is not None:
        nsr_a += cast_nsr(dist_a, activation)
        nsr_b += cast_nsr(dist_b, activation)
    nsr_y = combine_product_nsr(nsr_a, nsr_b)
    nsr_out = 0.0
    if output is not None:
        sigma_y = math.sqrt(k * dist_a.second_moment() * dist_b.second_moment())
        nsr_out = cast_nsr(Normal(sigma_y), output)
    return GemmPrediction(nsr_to_db(nsr_y + nsr_out), nsr_to_db(nsr_a), nsr_to_db(nsr_b), nsr_to_db(nsr_out))

