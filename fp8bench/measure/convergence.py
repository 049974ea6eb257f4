"""The convergence check: does training in an FP8 recipe follow the BF16 loss curve?

A kernel can be fast and accurate on one GEMM and still break training: gradients underflow, a delayed scale lags a
growing activation, rounding biases accumulate over steps. The check trains the same decoder (same initial weights,
same batches from :class:`~fp8bench.workloads.corpus.SyntheticCorpus`) for ``steps`` steps in BF16 and in each FP8
recipe and compares the per-step losses to BF16's:

* curves are smoothed with a trailing moving average of ``window`` steps (single-batch losses are noisy);
* **final gap**: ``(L_p - L_bf16) / L_bf16`` of the smoothed losses at the last step (positive: FP8 trains worse);
* **largest gap**: the maximum of that relative gap over all steps from ``window`` on;
* **diverged** when any loss is NaN/Inf, when the largest gap exceeds ``diverge_gap``, or when the smoothed loss
  spikes above ``spike_factor`` times its lowest value so far; **gap** when the final gap exceeds ``tolerance``;
  otherwise **ok**.

The 4-bit recipes (``nvfp4``, ``mxfp4``) train through the same layers with E2M1 operands in all three GEMMs; their
gradient options (stochastic rounding, the random Hadamard transform in wgrad; :mod:`fp8bench.numerics.fp8_linear`) are
recorded with each curve (``extra.fp4_options``).

A negative control, ``fp8_unscaled`` (E4M3 with every scale fixed at 1, i.e. scaling disabled), shows the check can
fail: gradients fall below E4M3's smallest subnormal and flush to zero, the blocks stop learning, and the curve
leaves BF16's. Every ``stats_every`` steps each FP8 layer's operands (input, weight, output gradient) are sampled for
amax and overflow/underflow fractions.

Each curve becomes one record (workload ``transformer_step``) with the per-step losses in ``extra["losses"]`` and the
verdict in ``extra["convergence"]``, so the store and the dashboard have the loss curves.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from fp8bench.core.devices import Device
from fp8bench.core.loss_curves import smooth
from fp8bench.core.plugins import load_all
from fp8bench.core.precisions import Fp8Recipe, Granularity, Precision
from fp8bench.core.record_parts import SampleFigures, Throughput
from fp8bench.core.records import Record
from fp8bench.core.shapes import Shape
from fp8bench.numerics.fp8_linear import EMULATED, NATIVE, Fp8Linear, fp8_layers, swap_linears
from fp8bench.workloads.corpus import SyntheticCorpus
from fp8bench.workloads.model import init_parameters, model_flops
from fp8bench.workloads.transformer_step import LAYER_CONVERTERS, TrainingStep, config_of

BASELINE = "bf16"
BROKEN = "fp8_unscaled"  # the negative control's precision name in records
BROKEN_RECIPE = Fp8Recipe(BROKEN, Granularity.TENSORWISE)


@dataclass(frozen=True)
class ConvergenceSettings:
    """Thresholds are relative loss gaps (0.05 = 5 %)."""

    steps: int = 200
    window: int = 10
    tolerance: float = 0.05
    diverge_gap: float = 0.25
    spike_factor: float = 2.0
    stats_every: int = 25  # 0: no cast statistics
    seed: int = 0

    def __post_init__(self) -> None:
        if self.steps < 2:
            raise ValueError(f"steps must be at least 2, got {self.steps}")
        if not 1 <= self.window <= self.steps:
            raise ValueError(f"window must be between 1 and steps ({self.steps}), got {self.window}")
        if not 0 < self.tolerance < self.diverge_gap:
            raise ValueError(f"need 0 < tolerance ({self.tolerance}) < diverge_gap ({self.diverge_gap})")
        if self.spike_factor <= 1:
            raise ValueError(f"spike_factor must be above 1, got {self.spike_factor}")
        if self.stats_every < 0:
            raise ValueError(f"stats_every must be >= 0, got {self.stats_every}")


@dataclass
class Curve:
    """One training run: per-step losses (``nan`` where non-finite), step times (s) and sampled cast stats."""

    precision: str
    backend: str
    losses: list[float]
    step_s: list[float]
    cast_stats: list[dict[str, Any]] = field(default_factory=list)
    stopped_early: str | None = None


@dataclass(frozen=True)
class Verdict:
    verdict: str  # ok | gap | diverged | baseline
    final_loss: float | None
    final_gap: float | None
    max_gap: float | None
    max_gap_step: int | None
    reasons: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "final_loss": self.final_loss, "final_gap": self.final_gap,
                "max_gap": self.max_gap, "max_gap_step": self.max_gap_step, "reasons": list(self.reasons)}


def unscaled_convert(backend: str, device: Device) -> Callable[[nn.Module], nn.Module]:
    """The negative control's layers: FP8 tensorwise with scaling disabled.

    Native GEMMs on the ``torch`` backend on CUDA; emulated elsewhere (same numbers): PyTorch's per-tensor CPU
    ``_scaled_mm`` would make the control take seconds per step.
    """
    gemm = NATIVE if backend == "torch" and device.is_cuda else EMULATED
    return lambda m: swap_linears(m, lambda lin: Fp8Linear.from_linear(lin, BROKEN_RECIPE, gemm=gemm,
                                                                         disable_scaling=True))


def train_curve(shape: Shape, precision: Precision | str, backend: str, device: Device,
                settings: ConvergenceSettings, on_step: Callable[[int, float], None] | None = None) -> Curve:
    """Train ``settings.steps`` steps from the seeded initial weights; ``precision`` may be :data:`BROKEN`."""
    load_all()
    cfg = config_of(shape)
    broken = precision == BROKEN
    if backend not in LAYER_CONVERTERS:
        raise ValueError(f"backend {backend!r} has no layer conversion for training; accepted: "
                         f"{', '.join(LAYER_CONVERTERS)}")
    run_precision = BROKEN_RECIPE if broken else precision
    assert not isinstance(run_precision, str)
    convert = unscaled_convert(backend, device) if broken else LAYER_CONVERTERS[backend](run_precision, device)
    params = {k: v.to(device.torch) for k, v in init_parameters(cfg, settings.seed).items()}
    # Stochastic rounding of gradients draws from torch's global generator: seeding it here makes each curve
    # depend on the seed alone, not on which precisions trained before it in the same process.
    torch.manual_seed(settings.seed)
    trainer = TrainingStep(cfg, params, run_precision, device, convert)
    corpus = SyntheticCorpus(cfg.vocab, settings.seed)
    layers = fp8_layers(trainer.model)
    curve = Curve(run_precision.name, backend, [], [])
    for step in range(settings.steps):
        tokens = corpus.batch(step, cfg.batch, cfg.seq).to(device.torch)
        sampled = bool(settings.stats_every) and step % settings.stats_every == 0 and bool(layers)
        for _, layer in layers:
            layer.sample_stats = sampled
        started = time.perf_counter()
        loss = float(trainer.step(tokens))  # the curve needs the value: this waits for the step
        curve.step_s.append(time.perf_counter() - started)
        curve.losses.append(loss if math.isfinite(loss) else math.nan)
        if sampled:
            curve.cast_stats.append({"step": step, "layers": {name: dict(layer.stats) for name, layer in layers}})
        if on_step:
            on_step(step, loss)
        if not math.isfinite(loss):
            curve.stopped_early = f"loss became {loss} at step {step}; training stopped"
            break
    return curve


def assess(curve: Curve, baseline: Curve, settings: ConvergenceSettings) -> Verdict:
    """Compare ``curve`` with the BF16 ``baseline`` (see the module docstring for the rules)."""
    reasons: list[str] = []
    if any(not math.isfinite(v) for v in curve.losses) or len(curve.losses) < len(baseline.losses):
        first_bad = next((i for i, v in enumerate(curve.losses) if not math.isfinite(v)), len(curve.losses))
        return Verdict("diverged", None, None, None, first_bad, (f"non-finite loss at step {first_bad}",))
    ours, base = smooth(curve.losses, settings.window), smooth(baseline.losses, settings.window)
    gaps = [(o - b) / b for o, b in zip(ours, base, strict=True)]
    start = min(settings.window, len(gaps) - 1)
    max_step = max(range(start, len(gaps)), key=lambda i: gaps[i])
    final_gap, max_gap = gaps[-1], gaps[max_step]
    if max_gap > settings.diverge_gap:
        reasons.append(f"loss {max_gap:.1%} above {BASELINE} at step {max_step} (limit {settings.diverge_gap:.0%})")
    low = math.inf
    for i in range(start, len(ours)):
        low = min(low, ours[i])
        if ours[i] > settings.spike_factor * low:
            reasons.append(f"loss spiked to {ours[i]:.3g} at step {i}, {settings.spike_factor:g}x its low of {low:.3g}")
            break
    if reasons:
        verdict = "diverged"
    elif final_gap > settings.tolerance:
        verdict = "gap"
        reasons.append(f"final loss {final_gap:.1%} above {BASELINE} (tolerance {settings.tolerance:.0%})")
    else:
        verdict = "ok"
    return Verdict(verdict, ours[-1], final_gap, max_gap, max_step, tuple(reasons))


def baseline_verdict(curve: Curve, settings: ConvergenceSettings) -> Verdict:
    if any(not math.isfinite(v) for v in curve.losses):
        return Verdict("diverged", None, None, None, None, (f"the {BASELINE} baseline itself went non-finite",))
    return Verdict("baseline", smooth(curve.losses, settings.window)[-1], 0.0, 0.0, None)


def curve_record(curve: Curve, verdict: Verdict, shape: Shape, device: Device, settings: ConvergenceSettings,
                 seq: int, fp8_format: str | None, options: dict[str, Any] | None = None) -> Record:
    """The record of one curve, in the run file's record layout (see :mod:`fp8bench.core.records`); ``options`` are a
    4-bit recipe's gradient options (:func:`fp8bench.core.precisions.fp4_settings`), kept in ``extra.fp4_options``."""
    from statistics import median

    cfg = config_of(shape)
    flops = model_flops(cfg)
    # The first steps include one-time costs (allocator growth, oneDNN primitive creation): excluded from timing.
    timed = curve.step_s[min(settings.window, len(curve.step_s) - 1):] or curve.step_s
    med = median(timed)
    status, reason = "ok", None
    if verdict.verdict == "diverged":
        status, reason = "invalid", "diverged: " + "; ".join(verdict.reasons)
    notes = ["convergence check: per-step losses in extra.losses, verdict in extra.convergence"]
    if curve.precision == BROKEN:
        notes.append("negative control: FP8 E4M3 tensorwise with every scale fixed at 1 (scaling disabled); "
                     "emulated GEMMs except on the torch backend on CUDA")
    if curve.stopped_early:
        notes.append(curve.stopped_early)
    losses = [v if math.isfinite(v) else None for v in curve.losses]
    return Record(
        workload="transformer_step", shape=dict(shape), precision=curve.precision, backend=curve.backend,
        device=str(device), status=status, reason=reason, fp8_format=fp8_format,
        samples=SampleFigures(samples_s=timed, median_s=med, n=len(timed)),
        throughput=Throughput(flops=flops, tflops=flops / med / 1e12 if med else None),
        timing_mode="cpu",  # host wall clock of whole steps (each reads its loss back, so the device has finished)
        valid=status == "ok", notes=notes,
        extra={"mode": "convergence", "steps": len(curve.losses), "seed": settings.seed, "losses": losses,
               "convergence": {**verdict.to_dict(), "baseline": BASELINE, "window": settings.window,
                               "tolerance": settings.tolerance, "diverge_gap": settings.diverge_gap},
               "cast_stats": curve.cast_stats, "tokens_per_step": cfg.tokens,
               "tokens_per_s": cfg.tokens / med if med else None, **({"fp4_options": options} if options else {})},
        seq=seq,
    )


def failed_curve_record(precision: str, backend: str, reason: str, shape: Shape, device: Device,
                        settings: ConvergenceSettings, seq: int, fp8_format: str | None,
                        options: dict[str, Any] | None = None) -> Record:
    """The record of a curve that could not be trained (its recipe raised): status ``failed`` with the error as
    its reason, in the layout of :func:`curve_record` but with no losses, timings or verdict."""
    return Record(
        workload="transformer_step", shape=dict(shape), precision=precision, backend=backend, device=str(device),
        status="failed", reason=reason, fp8_format=fp8_format,
        throughput=Throughput(flops=model_flops(config_of(shape))), valid=False,
        notes=["convergence check: the recipe failed to train, so it has no loss curve"],
        extra={"mode": "convergence", "seed": settings.seed, **({"fp4_options": options} if options else {})},
        seq=seq,
    )
