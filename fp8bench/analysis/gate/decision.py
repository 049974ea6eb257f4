"""The decision: each case's verdict from the two sides' samples, and the outcome of a set of verdicts.

Method (docs/gate.md, "The gate"):

1. **Comparability.** Cases are compared only when their :mod:`fp8bench.core.comparability` keys match; otherwise
   the case is ``incomparable`` and the differing fields are named.
2. **Per case:** the ratio of medians ``median(cand) / median(base)`` (above 1 is slower), its percentile-bootstrap
   confidence interval and one-sided Mann-Whitney U p-values (:mod:`fp8bench.analysis.stats`); for paired rounds
   (round ``i`` of both sides ran back to back: ``fp8bench ab``, or ``fp8bench gate --paired``), the median of the
   per-round ratios, its bootstrap interval over rounds and one-sided Wilcoxon signed-rank p-values
   (:func:`fp8bench.analysis.stats.compare_paired`), so drift shared within a round cancels.
3. **Across cases:** Benjamini-Hochberg adjusts the p-values, so that a suite of many cases does not raise a false
   alarm just because one of many noisy cases drew an unlucky sample.
4. **Verdict per case** (:class:`Verdict`) with threshold ``T`` (:class:`fp8bench.analysis.gate.config.GateConfig`):
   ``slower`` when the interval's lower bound exceeds ``1 + T`` and the adjusted p < ``alpha``;
   ``faster`` when its upper bound is under ``1 / (1 + T)`` and the adjusted p for "faster" < ``alpha``; ``same``
   when the upper bound is at most ``1 + T`` (a slowdown beyond T is implausible); otherwise ``inconclusive``: a
   slowdown beyond T is possible but not shown. ``broken`` when the base measured the case and the candidate
   failed, skipped or invalidated it; ``missing`` when the candidate has no record of a case the base has (a
   candidate killed part-way looks like this), unless ``--allow-missing`` makes such cases ``removed``. Power
   capping alone never breaks a case (it is how a GPU runs a large GEMM), even in run files from fp8bench versions
   that marked it invalid, unless the run used ``--strict-clocks``.
   ``noisy`` replaces ``slower`` (and ``faster``) when a side is one run (its raw samples) and the difference lies
   within a side's noise (:mod:`fp8bench.core.noise`): that side's run started with the host's load above its CPU
   count, or its samples spread (IQR / median) wider than the difference. Raw samples of one run under load can
   sit tight around a median that the load, not the code, moved; only interleaved rounds (``fp8bench ab``)
   separate the two, so the report points there. Energy says ``worse``/``better`` where time says
   ``slower``/``faster``; SQNR is compared by value (:func:`compare_values`).
5. **Outcome** (:func:`exit_code_for`): 1 on any ``slower``, ``worse``, ``broken`` or ``missing`` case; else 2 on
   any ``inconclusive``, ``noisy`` or ``incomparable`` case (or when nothing could be compared); else 0.
   ``fail_on="regression"`` (``--fail-on regression``) lets an undecided outcome exit 0, its verdict still reported
   as such. Harness errors and bad input are 3.

Comparing a run with itself is allowed (it is how an A/A check is read by hand) but the report says so: every case
is then ``same`` by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from enum import Enum
from typing import Any

import numpy as np

from fp8bench.analysis.gate.config import DEFAULT_CONFIG, GateConfig
from fp8bench.analysis.gate.metrics import METRICS, floor_for, sqnr_verdict
from fp8bench.analysis.gate.sides import INTERPRETED, NO_VALUE, RAW, Side, SideCase
from fp8bench.analysis.stats import RatioEstimate, benjamini_hochberg, compare_batch, compare_paired
from fp8bench.core.comparability import describe_differences
from fp8bench.core.noise import is_noisy, relative_spread
from fp8bench.exit_codes import EXIT_HARNESS_ERROR, EXIT_INCONCLUSIVE, EXIT_PASS, EXIT_REGRESSION


class Verdict(str, Enum):
    """A case's verdict. A ``str``: JSON reports and the store hold the value itself ("slower"), and it prints as
    that value."""

    SLOWER = "slower"  # time regressed
    WORSE = "worse"  # energy or accuracy regressed
    BROKEN = "broken"
    MISSING = "missing"
    INCONCLUSIVE = "inconclusive"
    NOISY = "noisy"
    INCOMPARABLE = "incomparable"
    FASTER = "faster"
    BETTER = "better"
    SAME = "same"
    NEW = "new"
    REMOVED = "removed"
    NOT_MEASURED = "not measured"
    UNDECIDED = "undecided"  # sequential A/B, between looks: another round is needed

    __hash__ = str.__hash__  # a verdict and its string are one dictionary key

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def regressing(self) -> bool:
        """Fails the job (exit 1)."""
        return self in REGRESSING

    @property
    def undecided(self) -> bool:
        """Fails the job (exit 2) unless ``--fail-on regression``."""
        return self in UNDECIDED

    @property
    def compared(self) -> bool:
        """The two sides were compared, whatever the outcome."""
        return self in COMPARED


# The groups of verdicts. Only REGRESSING and UNDECIDED change the exit code.
REGRESSING = frozenset({Verdict.SLOWER, Verdict.WORSE, Verdict.BROKEN, Verdict.MISSING})
UNDECIDED = frozenset({Verdict.INCONCLUSIVE, Verdict.NOISY, Verdict.INCOMPARABLE})
INFORMATIONAL = frozenset({Verdict.FASTER, Verdict.BETTER, Verdict.SAME, Verdict.NEW, Verdict.REMOVED,
                           Verdict.NOT_MEASURED})
COMPARED = frozenset({Verdict.SLOWER, Verdict.WORSE, Verdict.FASTER, Verdict.BETTER, Verdict.SAME,
                      Verdict.INCONCLUSIVE, Verdict.NOISY})
# The order of a report's counts and of its Markdown table: regressions first. A report never holds "undecided"
# (a sequential A/B ends undecided cases as inconclusive).
VERDICT_ORDER = (Verdict.SLOWER, Verdict.WORSE, Verdict.BROKEN, Verdict.MISSING, Verdict.INCONCLUSIVE,
                 Verdict.NOISY, Verdict.INCOMPARABLE, Verdict.FASTER, Verdict.BETTER, Verdict.SAME, Verdict.NEW,
                 Verdict.REMOVED, Verdict.NOT_MEASURED)


def verdict_of(value: str) -> Verdict:
    """The verdict named ``value``; a :class:`ValueError` naming it and the accepted ones otherwise."""
    try:
        return Verdict(value)
    except ValueError:
        raise ValueError(f"verdict {value!r}; accepted: {', '.join(v.value for v in Verdict)}") from None


@dataclass(frozen=True)
class ValueComparison:
    """A deterministic metric's two sides (SQNR, dB): each side's median value and the candidate's floor, if any."""

    base_value: float
    cand_value: float
    floor_db: float | None



@dataclass(frozen=True)
class FirstLook:
    """What the first rounds said of a case that was rerun (``fp8bench ab`` reruns inconclusive cases once)."""

    verdict: Verdict
    reason: str | None
    ratio: float | None
    ci_low: float | None
    ci_high: float | None


@dataclass(frozen=True)
class CaseResult:
    """One case's verdict and the figures behind it, built once. ``ratio`` is candidate / base (above 1: slower),
    with its interval ``ci_low``..``ci_high``; ``p_*`` are one-sided p-values, ``*_adj`` after Benjamini-Hochberg;
    ``threshold`` is a fraction (0.05 is 5%), or the SQNR tolerance in dB; ``n_*`` are samples per side;
    ``differences`` names the comparability-key fields that differ (field -> [base, candidate]). A verdict given
    as its string becomes a :class:`Verdict` (an unknown one is refused)."""

    case: str
    verdict: Verdict
    reason: str | None = None
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_slower: float | None = None
    p_faster: float | None = None
    p_slower_adj: float | None = None
    p_faster_adj: float | None = None
    threshold: float | None = None
    threshold_source: str | None = None
    n_base: int = 0
    n_cand: int = 0
    differences: dict[str, list[Any]] | None = None
    paired_rounds: int | None = None  # compared round by round: how many rounds both sides have
    decided_at_round: int | None = None  # sequential A/B: the look at which the verdict was reached
    cs_alpha: float | None = None  # sequential A/B: the case's share of alpha in its confidence sequence
    values: ValueComparison | None = None  # a deterministic metric's values (compare_values)
    rerun: bool = False  # the verdict is the rerun's (fp8bench.analysis.gate.report.merge_rerun)
    first: FirstLook | None = None  # with rerun: what the first rounds said

    def __post_init__(self) -> None:
        object.__setattr__(self, "verdict", verdict_of(self.verdict))

    def to_json(self) -> dict[str, Any]:
        """The case as the JSON report and the store hold it (optional parts only where they apply)."""
        out = {name: getattr(self, name) for name in _REPORTED}
        out["verdict"] = self.verdict.value
        for optional in ("paired_rounds", "decided_at_round", "cs_alpha"):
            if getattr(self, optional) is not None:
                out[optional] = getattr(self, optional)
        if self.values is not None:
            out.update(asdict(self.values))
        if self.rerun:
            out["rerun"] = True
            out["first"] = {**asdict(self.first), "verdict": self.first.verdict.value} if self.first else None
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CaseResult:
        """A case of a stored report, old or new: a field the report predates takes its default."""
        known = {f.name: data[f.name] for f in fields(cls)
                 if f.name in data and f.name not in ("values", "first")}
        if data.get("base_value") is not None and data.get("cand_value") is not None:
            known["values"] = ValueComparison(data["base_value"], data["cand_value"], data.get("floor_db"))
        first = data.get("first")
        if first:
            known["first"] = FirstLook(verdict_of(first["verdict"]), *(first.get(k) for k in (
                "reason", "ratio", "ci_low", "ci_high")))
        return cls(**known)


# The fields every reported case has, in the report's order.
_REPORTED = ("case", "verdict", "reason", "ratio", "ci_low", "ci_high", "p_slower", "p_faster", "p_slower_adj",
             "p_faster_adj", "threshold", "threshold_source", "n_base", "n_cand", "differences")


def _pre_verdict(case: str, base: SideCase | None, cand: SideCase | None,
                 allow_missing: bool = False) -> CaseResult | None:
    """A verdict that needs no statistics (missing, unmeasured, broken, incomparable), or ``None``."""
    if cand is None:
        if allow_missing:
            return CaseResult(case, Verdict.REMOVED, "not in the candidate (allowed by --allow-missing)")
        return CaseResult(case, Verdict.MISSING, "in the base but not in the candidate; pass --allow-missing if it "
                          "was dropped on purpose")
    if base is None:
        return CaseResult(case, Verdict.NEW, "not in the base")
    interpreted = [side for side, entry in (("base", base), ("candidate", cand)) if entry.status == INTERPRETED]
    if len(interpreted) == 2:
        return CaseResult(case, Verdict.NOT_MEASURED,
                          "interpreted on both sides: interpreter timings are never compared")
    if interpreted:
        return CaseResult(case, Verdict.INCOMPARABLE,
                          f"interpreted on the {interpreted[0]} side only: an interpreter's run is checked for "
                          "correctness, never compared on time")
    valueless = [side for side, entry in (("base", base), ("candidate", cand)) if entry.status == NO_VALUE]
    if len(valueless) == 2:
        return CaseResult(case, Verdict.NOT_MEASURED, f"{base.reason} on either side")
    if valueless:
        return CaseResult(case, Verdict.INCOMPARABLE, f"{(base if base.status == NO_VALUE else cand).reason} of the "
                          f"{valueless[0]} only")
    return _unmeasured_or_incomparable(case, base, cand)


def _unmeasured_or_incomparable(case: str, base: SideCase, cand: SideCase) -> CaseResult | None:
    """The rest of :func:`_pre_verdict`: rounds or sides that disagree on the key, and sides that measured nothing."""
    for side, entry in (("base", base), ("candidate", cand)):
        if entry.key_conflict:
            return CaseResult(case, Verdict.INCOMPARABLE, f"the {side}'s rounds disagree on "
                              f"{describe_differences(entry.key_conflict)}", differences=_jsonable(entry.key_conflict))
    if base.status != "ok" and cand.status != "ok":
        return CaseResult(case, Verdict.NOT_MEASURED, f"base {base.status}: {base.reason}; "
                          f"candidate {cand.status}: {cand.reason}")
    if base.status != "ok":
        return CaseResult(case, Verdict.NEW, f"base {base.status}: {base.reason}")
    if cand.status != "ok":
        return CaseResult(case, Verdict.BROKEN, f"candidate {cand.status}: {cand.reason}")
    diff = base.key.differences(cand.key)
    if diff:
        return CaseResult(case, Verdict.INCOMPARABLE, "comparability key differs in " + describe_differences(diff),
                          differences=_jsonable(diff))
    return None


def _jsonable(diff: dict[str, tuple[Any, Any]]) -> dict[str, list[Any]]:
    return {k: [a, b] for k, (a, b) in diff.items()}


def compare_sides(base: Side, cand: Side, config: GateConfig = DEFAULT_CONFIG) -> list[CaseResult]:
    """Per-case results in a stable order: base's cases, then new ones."""
    if not METRICS[config.metric].ratio:
        return compare_values(base, cand, config)
    names = list(base.cases) + [c for c in cand.cases if c not in base.cases]
    results: dict[str, CaseResult] = {}
    tested: list[str] = []
    for name in names:
        b, c = base.cases.get(name), cand.cases.get(name)
        pre = _pre_verdict(name, b, c, config.allow_missing)
        if pre is not None:
            results[name] = pre
            continue
        assert b is not None and c is not None
        if len(b.samples) < config.min_samples or len(c.samples) < config.min_samples:
            t, source = config.threshold_for(name)
            results[name] = CaseResult(name, Verdict.INCONCLUSIVE, f"too few samples (base {len(b.samples)}, "
                                       f"candidate {len(c.samples)}; need {config.min_samples} per side)",
                                       threshold=t, threshold_source=source, n_base=len(b.samples),
                                       n_cand=len(c.samples))
            continue
        tested.append(name)
    results.update(_decide(base, cand, _estimates(base, cand, tested, config), config))
    return [results[n] for n in names]


def _estimates(base: Side, cand: Side, tested: Sequence[str],
               config: GateConfig) -> dict[str, tuple[RatioEstimate, int | None]]:
    """Each tested case's ratio estimate, with the number of rounds compared pairwise (``None``: unpaired)."""
    out: dict[str, tuple[RatioEstimate, int | None]] = {}
    unpaired = []
    for name in tested:
        b, c = base.cases[name], cand.cases[name]
        common = sorted(set(b.by_round) & set(c.by_round))
        if not (config.paired and len(common) >= config.min_samples):
            unpaired.append(name)
            continue
        out[name] = (compare_paired([b.by_round[i] for i in common], [c.by_round[i] for i in common],
                                    config.confidence, config.n_boot, config.seed), len(common))
    # Cases with equal sample counts are estimated in one vectorized batch (see stats.compare_batch).
    groups: dict[tuple[int, int], list[str]] = {}
    for name in unpaired:
        groups.setdefault((len(base.cases[name].samples), len(cand.cases[name].samples)), []).append(name)
    for group in groups.values():
        estimates = compare_batch(np.array([base.cases[n].samples for n in group]),
                                  np.array([cand.cases[n].samples for n in group]),
                                  config.confidence, config.n_boot, config.seed)
        out.update((name, (est, None)) for name, est in zip(group, estimates, strict=True))
    return {name: out[name] for name in tested}


def _decide(base: Side, cand: Side, estimates: dict[str, tuple[RatioEstimate, int | None]],
            config: GateConfig) -> dict[str, CaseResult]:
    """The verdict of each estimated case, its p-values adjusted across all of them (Benjamini-Hochberg)."""
    names = list(estimates)
    slower_adj = benjamini_hochberg([estimates[n][0].p_slower for n in names])
    faster_adj = benjamini_hochberg([estimates[n][0].p_faster for n in names])
    out = {}
    for name, ps, pf in zip(names, slower_adj, faster_adj, strict=True):
        est, rounds = estimates[name]
        t, source = config.threshold_for(name)
        verdict, reason = classify(est.ci_low, est.ci_high, ps, pf, t, config.alpha)
        if verdict in ("slower", "faster") and RAW in (base.sample_unit, cand.sample_unit):
            within = noise_reason(base, cand, name, est.ratio)
            if within:
                verdict, reason = Verdict.NOISY, f"{within}; {reason} if the samples were trusted"
        if config.metric != "median_s":  # more joules is "worse", not "slower"
            verdict = {Verdict.SLOWER: Verdict.WORSE, Verdict.FASTER: Verdict.BETTER}.get(verdict, verdict)
        out[name] = CaseResult(name, verdict, reason, ratio=est.ratio, ci_low=est.ci_low, ci_high=est.ci_high,
                               p_slower=est.p_slower, p_faster=est.p_faster, p_slower_adj=ps, p_faster_adj=pf,
                               threshold=t, threshold_source=source, n_base=est.n_base, n_cand=est.n_cand,
                               paired_rounds=rounds)
    return out


NOISY_ADVICE = ("interleave the two versions in rounds on one machine, `fp8bench ab --base BASE --head HEAD -- "
                "RUN ARGS`, so that the noise is shared and cancels")


def noise_reason(base: Side, cand: Side, case: str, ratio: float) -> str | None:
    """Why a difference read from one run per side is within the noise of a side (:func:`fp8bench.core.noise.is_noisy`
    with the difference ``|ratio - 1|`` as the band), or ``None``: a side's run started with the host overloaded,
    or the relative spread of a side's samples of ``case`` is wider than the difference.

    Rounds need no such rule: their per-round medians are independent measurements, and the interval over them
    already carries the noise between rounds; the raw samples of one run share that run's conditions, so their
    interval is narrower than the truth."""
    band = abs(ratio - 1)
    reasons = []
    for label, side in (("base", base), ("candidate", cand)):
        spread = relative_spread(side.cases[case].samples)
        loads = list(side.loaded.values())
        if not is_noisy(spread, bool(loads), band):
            continue
        if loads:
            reasons.append(f"the {label} was measured at {loads[0].describe()}")
        else:
            assert spread is not None
            reasons.append(f"the {label}'s {side.sample_unit} spread {spread:.1%} (IQR / median), more than the "
                           f"{band:.1%} difference")
    return "; ".join(reasons) or None


def compare_values(base: Side, cand: Side, config: GateConfig) -> list[CaseResult]:
    """Per-case results for a deterministic metric (SQNR): the median of each side's values, compared against
    the tolerance and the candidate's floor (:func:`fp8bench.analysis.gate.metrics.sqnr_verdict`)."""
    names = list(base.cases) + [c for c in cand.cases if c not in base.cases]
    results = []
    for name in names:
        b, c = base.cases.get(name), cand.cases.get(name)
        pre = _pre_verdict(name, b, c, config.allow_missing)
        if pre is not None:
            results.append(pre)
            continue
        assert b is not None and c is not None
        if not b.samples or not c.samples:
            results.append(CaseResult(name, Verdict.NOT_MEASURED, f"no {config.metric} on either side"))
            continue
        base_value, cand_value = float(np.median(b.samples)), float(np.median(c.samples))
        floor = floor_for(c.precision, config.sqnr_floors)
        verdict, reason = sqnr_verdict(base_value, cand_value, config.sqnr_tolerance_db, floor)
        results.append(CaseResult(name, verdict_of(verdict), reason, threshold=config.sqnr_tolerance_db,
                                  threshold_source="SQNR tolerance (dB)", n_base=len(b.samples),
                                  n_cand=len(c.samples),
                                  values=ValueComparison(base_value, cand_value, floor[0] if floor else None)))
    return results


def classify(ci_low: float, ci_high: float, p_slower_adj: float, p_faster_adj: float, threshold: float,
             alpha: float) -> tuple[Verdict, str]:
    """A case's verdict from its ratio interval and adjusted p-values (see the module docstring)."""
    up, down = 1 + threshold, 1 / (1 + threshold)
    if ci_low > up and p_slower_adj < alpha:
        return Verdict.SLOWER, f"interval lower bound {ci_low:.3f} > {up:.3f} and p = {p_slower_adj:.2g} < {alpha:g}"
    if ci_high < down and p_faster_adj < alpha:
        return Verdict.FASTER, f"interval upper bound {ci_high:.3f} < {down:.3f} and p = {p_faster_adj:.2g} < {alpha:g}"
    if ci_high <= up:
        return Verdict.SAME, f"a slowdown beyond {threshold:.1%} is outside the interval"
    if ci_low > up:
        return Verdict.INCONCLUSIVE, f"interval above {up:.3f} but p = {p_slower_adj:.2g} is not under {alpha:g}"
    return Verdict.INCONCLUSIVE, f"interval [{ci_low:.3f}, {ci_high:.3f}] straddles {up:.3f}"


def overall_code(cases: Sequence[CaseResult]) -> int:
    """The outcome of a set of case verdicts: regression, else undecided (inconclusive), else pass."""
    verdicts = {c.verdict for c in cases}
    if verdicts & REGRESSING:
        return EXIT_REGRESSION
    if verdicts & UNDECIDED or not verdicts & COMPARED:
        return EXIT_INCONCLUSIVE
    return EXIT_PASS


def exit_code_for(cases: Sequence[CaseResult], fail_on: str = "inconclusive") -> int:
    """The process exit code: the outcome, except that ``fail_on="regression"`` lets an undecided one pass."""
    code = overall_code(cases)
    return EXIT_PASS if code == EXIT_INCONCLUSIVE and fail_on == "regression" else code


OVERALL = {EXIT_PASS: "pass", EXIT_REGRESSION: "regression", EXIT_INCONCLUSIVE: "inconclusive",
           EXIT_HARNESS_ERROR: "error"}


def overall_verdict(cases: Sequence[CaseResult]) -> str:
    """The report's verdict word: :data:`OVERALL`'s, except ``noisy`` for an undecided outcome with a noisy case
    (the answer is then to measure again, interleaved, not to look at the code)."""
    outcome = overall_code(cases)
    if outcome == EXIT_INCONCLUSIVE and any(c.verdict is Verdict.NOISY for c in cases):
        return "noisy"
    return OVERALL[outcome]
