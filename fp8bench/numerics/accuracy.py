"""Numerics: how far a precision's result is from the exact one.

Every case's output is compared with an FP64 reference computed from the same FP32 source inputs:

* **SQNR** (signal-to-quantization-noise ratio), ``10*log10(sum(ref**2) / sum((out - ref)**2))`` in dB. Each
  mantissa bit is worth about 6 dB, so BF16 (7 bits) lands near 50 dB, E4M3 (3 bits) near 25 dB and E5M2 near 19 dB
  for a GEMM whose two operands are both rounded.
* **relative error**, ``||out - ref|| / ||ref||`` (Frobenius): the same information as SQNR on a linear scale.
* **max absolute error**: the single worst element.
* **overflow / underflow fractions** of each quantized operand (from :func:`fp8bench.numerics.quantize.cast_stats`).

A NaN or infinity anywhere in the output means the result is unusable whatever its timing: the record becomes
``invalid``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class Numerics:
    """Accuracy of one output against its reference. ``sqnr_db`` is ``inf`` for an exact match."""

    sqnr_db: float | None
    rel_err: float | None
    max_abs_err: float | None
    overflow_frac: float | None = None
    underflow_frac: float | None = None
    nonfinite_frac: float = 0.0

    @property
    def finite(self) -> bool:
        return self.nonfinite_frac == 0.0

    def to_dict(self) -> dict[str, float | None]:
        out = asdict(self)
        # JSON has no infinity: an exact match is stored as null SQNR with rel_err 0.
        if out["sqnr_db"] is not None and math.isinf(out["sqnr_db"]):
            out["sqnr_db"] = None
        return out


def compare(output: torch.Tensor, reference: torch.Tensor, overflow_frac: float | None = None,
            underflow_frac: float | None = None) -> Numerics:
    """Numerics of ``output`` against ``reference`` (any dtypes; compared in FP64 on the CPU)."""
    if output.shape != reference.shape:
        raise ValueError(f"output shape {tuple(output.shape)} != reference shape {tuple(reference.shape)}")
    out = output.detach().to("cpu", torch.float64).flatten()
    ref = reference.detach().to("cpu", torch.float64).flatten()
    # One pass per figure over the FP64 copies (the common case, every element finite, is checked by one
    # reduction): these run once per case, outside any timed sample, but their time is the harness's own.
    if out.numel() and not bool(torch.isfinite(out).all()):
        nonfinite = 1.0 - torch.isfinite(out).double().mean().item()
        return Numerics(None, None, None, overflow_frac, underflow_frac, nonfinite)
    err = out - ref
    signal = torch.dot(ref, ref).item()
    noise = torch.dot(err, err).item()
    sqnr = math.inf if noise == 0 else (10 * math.log10(signal / noise) if signal > 0 else -math.inf)
    rel = math.sqrt(noise / signal) if signal > 0 else (0.0 if noise == 0 else math.inf)
    return Numerics(sqnr, rel, err.abs().max().item() if err.numel() else 0.0, overflow_frac, underflow_frac, 0.0)


def worst(*fractions: float | None) -> float | None:
    """The largest of several per-tensor fractions (the report shows one number per case)."""
    known = [f for f in fractions if f is not None]
    return max(known) if known else None
