"""Sequential A/B: add interleaved rounds until every case is decided or a time budget ends.

A fixed number of rounds is wrong both ways on a shared runner: ten rounds of identical code can leave a case's
interval straddling the threshold (undecided), and ten rounds can miss a real 10% slowdown when the machine is
noisy. Adding rounds until the interval is clear fixes both, but only with a method whose error rate holds when
the number of rounds depends on the data seen so far ("optional stopping"): recomputing an ordinary 95% interval
after every round and stopping at the first clear one raises its error rate far above 5%.

Method: an **asymptotic confidence sequence** for the mean of the paired per-round log ratios
``x_i = log(cand_i / base_i)`` (Waudby-Smith, Arbour, Sinha, Kennedy and Ramdas, "Time-uniform central limit
theory and asymptotic confidence sequences", Annals of Statistics 2024, arXiv:2103.06476, the Gaussian-mixture
boundary with the variance estimated from the rounds). After ``t`` rounds with mean ``m_t`` and sample standard
deviation ``s_t`` the interval is::

    m_t +- s_t * sqrt( 2 (t rho^2 + 1) / (t^2 rho^2) * log( sqrt(t rho^2 + 1) / alpha ) )

and the probability that the true mean ever leaves it, over *all* ``t``, is at most ``alpha`` (asymptotically:
the round-to-round noise is treated as approximately normal once the variance estimate settles, which is why no
look happens before ``min_rounds``). ``rho`` sets the round count at which the interval is tightest
(``design_rounds``), by the paper's choice ``rho^2 = (-2 log alpha + log(-2 log alpha + 1)) / t*``. A round is a
pair run back to back, so drift shared within a round cancels in ``x_i`` as in the fixed-round gate.

Verdicts with threshold ``T`` (``tau = log(1 + T)``), on the bounds of the mean log ratio: ``slower`` when the
lower bound of the sequence at one-sided level ``alpha`` (the gate's 1%) exceeds ``tau``; ``faster`` when its upper
bound is under ``-tau``; ``same`` when the upper bound of the sequence at the gate's interval level (95%) is at most
``tau``, as the fixed-round gate calls a case slower at p < 1% and the same from its 95% interval; otherwise
undecided, and the case gets another round. A decided case keeps the verdict it reached (the interval is valid at
whatever round it stopped). When the budget ends, an undecided case is ``inconclusive``. Both levels are split
evenly over the compared cases (Bonferroni), which stays valid under optional stopping where Benjamini-Hochberg
on p-values would not. The reported ratio is ``exp(m_t)`` (the geometric mean of the per-round ratios) with the
95% sequence's bounds.

Every side still runs every case each round (a base checkout at an older commit cannot be told to run a subset),
so a round costs the same whatever is undecided; decided cases simply stop changing. This module is the method:
the bounds, a case's verdict after each look and the end of the budget; the rounds themselves (workers, round
files, when to stop) are :mod:`fp8bench.orchestration.sequential_ab`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fp8bench.analysis.gate.config import GateConfig
from fp8bench.analysis.gate.decision import CaseResult, Verdict, compare_sides
from fp8bench.analysis.gate.sides import Side

# What a report's sequential section names as its method.
METHOD = "asymptotic confidence sequence (Waudby-Smith et al. 2024)"
# Verdicts a case can reach early; anything else statistical waits for another round.
DECIDED = frozenset({Verdict.SLOWER, Verdict.FASTER, Verdict.SAME})
# The gate's verdicts of a case it compared on time (``noisy``: one round per side, compared on raw samples).
STATISTICAL = frozenset({Verdict.SLOWER, Verdict.FASTER, Verdict.SAME, Verdict.INCONCLUSIVE, Verdict.NOISY})


@dataclass(frozen=True)
class SequentialConfig:
    """When a sequential A/B run looks and stops. ``budget_s`` is wall-clock seconds for all rounds."""

    budget_s: float
    min_rounds: int = 8  # rounds before the first look: the variance estimate needs a few (docs/gate.md)
    max_rounds: int | None = None  # a hard cap besides the budget (None: the budget alone)
    design_rounds: int = 20  # t*: the round count at which the interval is tightest

    def __post_init__(self) -> None:
        if not self.budget_s > 0:
            raise ValueError(f"budget must be > 0 seconds, got {self.budget_s}")
        if self.min_rounds < 3:
            raise ValueError(f"min_rounds must be >= 3 (a variance needs rounds), got {self.min_rounds}")
        if self.max_rounds is not None and self.max_rounds < self.min_rounds:
            raise ValueError(f"max_rounds {self.max_rounds} is under min_rounds {self.min_rounds}")
        if self.design_rounds < 1:
            raise ValueError(f"design_rounds must be >= 1, got {self.design_rounds}")


def rho_squared(alpha: float, design_rounds: int) -> float:
    """The mixture's tuning that makes the interval tightest after ``design_rounds`` rounds (Waudby-Smith et al.)."""
    a = -2 * math.log(alpha)
    return (a + math.log(a + 1)) / design_rounds


def confidence_sequence(x: Sequence[float] | np.ndarray, alpha: float,
                        design_rounds: int = 20) -> tuple[float, float, float]:
    """``(mean, low, high)`` of the two-sided ``1 - alpha`` asymptotic confidence sequence for the mean of ``x``
    after ``len(x)`` observations (see the module docstring); infinite bounds with fewer than 2. The boundary is
    the unit-variance one scaled by the sample standard deviation, so ``rho`` is in units of the noise and the
    interval does not depend on the scale of ``x``."""
    values = np.asarray(x, float)
    t = values.size
    if t == 0:
        return float("nan"), -math.inf, math.inf
    mean = float(values.mean())
    if t < 2:
        return mean, -math.inf, math.inf
    sd = float(values.std(ddof=1))
    r2 = rho_squared(alpha, design_rounds)
    half = sd * math.sqrt(2 * (t * r2 + 1) / (t * t * r2) * math.log(math.sqrt(t * r2 + 1) / alpha))
    return mean, mean - half, mean + half


def sequential_verdict(log_ratios: Sequence[float] | np.ndarray, threshold: float, alpha: float,
                       design_rounds: int = 20, same_alpha: float | None = None) -> dict[str, Any]:
    """The verdict of one case from its per-round log ratios: ``slower``, ``faster``, ``same`` or ``undecided``,
    with the ratio ``exp(mean)`` and its interval.

    ``alpha`` is the one-sided error of calling a case slower (or faster) than the threshold when it is not: the
    bounds that decide those come from the two-sided ``1 - 2 alpha`` sequence. ``same_alpha`` (default ``alpha``)
    is the two-sided level of the sequence whose upper bound decides ``same``, and of the interval reported: the
    fixed-round gate likewise calls a case slower at p < 1% but the same from its 95% interval."""
    same_alpha = alpha if same_alpha is None else same_alpha
    mean, lo, hi = confidence_sequence(log_ratios, min(2 * alpha, 0.999), design_rounds)
    _, shown_lo, shown_hi = confidence_sequence(log_ratios, same_alpha, design_rounds)
    tau = math.log1p(threshold)
    ratio, low, high = math.exp(mean), math.exp(shown_lo), math.exp(shown_hi)
    up = 1 + threshold
    if lo > tau:
        verdict, reason = "slower", f"confidence sequence lower bound {math.exp(lo):.3f} > {up:.3f}"
    elif hi < -tau:
        verdict, reason = "faster", f"confidence sequence upper bound {math.exp(hi):.3f} < {1 / up:.3f}"
    elif shown_hi <= tau:
        verdict, reason = "same", f"a slowdown beyond {threshold:.1%} is outside the confidence sequence"
    else:
        verdict, reason = "undecided", f"confidence sequence [{low:.3f}, {high:.3f}] straddles {up:.3f}"
    return {"verdict": verdict, "reason": reason, "ratio": ratio, "ci_low": low, "ci_high": high}


def judge(base: Side, cand: Side, config: GateConfig, seq: SequentialConfig, rounds: int,
          frozen: dict[str, CaseResult]) -> list[CaseResult]:
    """Case results after ``rounds`` rounds. Verdicts that need no statistics (broken, missing, incomparable)
    come from the gate (:func:`fp8bench.analysis.gate.decision.compare_sides`); paired cases get the confidence
    sequence's verdict, at ``config.alpha`` split over them. ``frozen`` holds cases decided at an earlier look
    (updated in place)."""
    results = compare_sides(base, cand, config)
    # Cases the gate compared on time; broken, missing or incomparable ones are not changed by more rounds.
    n_paired = sum(r.verdict in STATISTICAL for r in results)
    # Bonferroni over the compared cases: alpha for "slower" (one-sided), 1 - confidence for the interval.
    alpha = config.alpha / max(n_paired, 1)
    same_alpha = (1 - config.confidence) / max(n_paired, 1)
    return [_judged(r, base, cand, config, seq, rounds, frozen, alpha, same_alpha)
            if r.verdict in STATISTICAL else r for r in results]


def _judged(r: CaseResult, base: Side, cand: Side, config: GateConfig, seq: SequentialConfig, rounds: int,
            frozen: dict[str, CaseResult], alpha: float, same_alpha: float) -> CaseResult:
    """One paired case's verdict from its per-round log ratios (the frozen one, once decided)."""
    if r.case in frozen:
        return frozen[r.case]
    b, c = base.cases[r.case], cand.cases[r.case]
    common = sorted(set(b.by_round) & set(c.by_round))
    threshold = r.threshold if r.threshold is not None else config.threshold_for(r.case)[0]
    r = replace(r, p_slower=None, p_faster=None, p_slower_adj=None, p_faster_adj=None, n_base=len(common),
                n_cand=len(common), paired_rounds=len(common), decided_at_round=None, cs_alpha=alpha,
                threshold=threshold)
    if rounds < seq.min_rounds or len(common) < 2:
        return replace(r, verdict=Verdict.UNDECIDED, ratio=None, ci_low=None, ci_high=None,
                       reason=f"{len(common)} paired round(s); a decision needs {seq.min_rounds}")
    logs = np.log([c.by_round[i] / b.by_round[i] for i in common])
    r = replace(r, **sequential_verdict(logs, threshold, alpha, seq.design_rounds, same_alpha))
    if r.verdict in DECIDED:
        r = frozen[r.case] = replace(r, decided_at_round=rounds)
    return r


def undecided(results: Sequence[CaseResult]) -> list[str]:
    return [r.case for r in results if r.verdict is Verdict.UNDECIDED]


def finish(results: list[CaseResult]) -> list[CaseResult]:
    """Undecided cases at the end become ``inconclusive`` (the gate's word), their reason kept."""
    return [replace(r, verdict=Verdict.INCONCLUSIVE, reason=f"{r.reason} when the budget ended")
            if r.verdict is Verdict.UNDECIDED else r for r in results]
