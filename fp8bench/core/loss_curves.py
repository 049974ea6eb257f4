"""Smoothing of training-loss curves, shared by the convergence check and the pages that draw its curves.

A single batch's loss is noisy, so the check compares curves after a trailing moving average of ``window`` steps
(:mod:`fp8bench.measure.convergence`). The dashboard draws the same smoothed gap the check judged, so both call
:func:`smooth`; this module needs no torch, because the dashboard never imports it.
"""

from __future__ import annotations


def smooth(values: list[float], window: int) -> list[float]:
    """Trailing moving average (the first ``window - 1`` entries average what exists so far)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out
