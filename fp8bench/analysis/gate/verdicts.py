"""The statistical regression gate: does a candidate commit make any case slower than its base, for real?

Method (DESIGN, "Gate method"):

1. **Samples.** Each side is one run or several interleaved *rounds* (``fp8bench ab``). With rounds, a case's
   samples are its per-round medians: drift of the machine (clocks, neighbours, thermals) then shows up as
   round-to-round spread that both sides share, instead of hiding inside one long run. When the rounds are
   *paired* (``fp8bench ab``, or ``fp8bench gate --paired``: round ``i`` of both sides ran back to back), the
   comparison is made round by round (:func:`fp8bench.analysis.stats.compare_paired`), so drift shared within a round
   cancels. With a single run per side the raw samples are used, and the report says that they are treated as
   independent, which they are not quite.
2. **Comparability.** Cases are compared only when their :mod:`fp8bench.core.comparability` keys match; otherwise the case
   is ``incomparable`` and the differing fields are named.
3. **Per case:** the ratio of medians ``median(cand) / median(base)`` (above 1 is slower), its percentile-bootstrap
   confidence interval and one-sided Mann-Whitney U p-values (:mod:`fp8bench.analysis.stats`); for paired rounds, the
   median of the per-round ratios, its bootstrap interval over rounds and one-sided Wilcoxon signed-rank p-values.
4. **Across cases:** Benjamini-Hochberg adjusts the p-values, so that a suite of many cases does not raise a false
   alarm just because one of many noisy cases drew an unlucky sample.
5. **Verdict per case** with threshold ``T`` (default 5%, per-case overrides, never under 3x the A/A noise of the
   runner): ``slower`` when the interval's lower bound exceeds ``1 + T`` and the adjusted p < ``alpha``;
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
   separate the two, so the report points there.
6. **Exit code:** 1 on any ``slower``, ``broken`` or ``missing`` case; else 2 on any ``inconclusive``, ``noisy``
   or ``incomparable`` case (or when nothing could be compared); else 0. ``fail_on="regression"`` (``--fail-on
   regression``) lets an undecided outcome exit 0, its verdict still reported as such. Harness errors and bad
   input are 3.
   ``fp8bench ab`` reruns inconclusive cases once (:func:`merge_rerun`).

What the gate refuses to judge (a harness error, never a pass): a timing sample that is not a finite positive
number of seconds (the file and case are named), and a run that did not finish (status ``interrupted``,
``running`` or ``failed: ...``) unless ``--allow-partial``. Comparing a run with itself is allowed (it is how
an A/A check is read by hand) but the report says so: every case is then ``same`` by construction.
"""

from __future__ import annotations

import fnmatch
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from fp8bench.analysis.gate.metrics import (
    DEFAULT_SQNR_TOLERANCE_DB,
    METRICS,
    floor_for,
    metric_value,
    sqnr_verdict,
)
from fp8bench.analysis.select import timings_count
from fp8bench.analysis.stats import RatioEstimate, benjamini_hochberg, compare_batch, compare_paired
from fp8bench.core.comparability import ComparabilityKey, comparability_key, describe_differences
from fp8bench.core.escaping import md_code, md_code_block, md_text
from fp8bench.core.noise import HostLoad, is_noisy, relative_spread, run_load
from fp8bench.core.records import case_key
from fp8bench.core.repro import repro_of
from fp8bench.core.units import parse_fraction
from fp8bench.exit_codes import EXIT_HARNESS_ERROR, EXIT_INCONCLUSIVE, EXIT_PASS, EXIT_REGRESSION
from fp8bench.results.runfile import check_seconds

# Case verdicts. Only the first group changes the exit code. Time regresses "slower"; energy and accuracy "worse".
REGRESSING = ("slower", "worse", "broken", "missing")
UNDECIDED = ("inconclusive", "noisy", "incomparable")
INFORMATIONAL = ("faster", "better", "same", "new", "removed", "not measured")
VERDICT_ORDER = (*REGRESSING, *UNDECIDED, "faster", "better", "same", "new", "removed", "not measured")
COMPARED = ("slower", "worse", "faster", "better", "same", "inconclusive", "noisy")

# Statuses a side's case takes when it has nothing to compare: it ran under an interpreter (Triton on the CPU),
# whose timings are never compared, or its record lacks the gated metric (no energy meter, no SQNR).
INTERPRETED = "interpreted"
NO_VALUE = "no value"

# --fail-on: which outcomes fail the job. "inconclusive" (the default) fails on an undecided case as well.
FAIL_ON = ("inconclusive", "regression")

# A side of one run is compared on its raw samples (each case's timed calls), a side of rounds on per-round medians.
RAW = "raw samples"

# The noise floor: T is never set under this multiple of the A/A noise measured on the same runner.
AA_NOISE_MULTIPLE = 3.0


class GateError(ValueError):
    """Bad gate input: a threshold out of range, an override that does not parse, sides without runs."""


@dataclass(frozen=True)
class GateConfig:
    """How strict the gate is. ``threshold`` and override values are fractions (0.05 is 5%)."""

    threshold: float = 0.05
    overrides: tuple[tuple[str, float], ...] = ()  # (fnmatch pattern on the case key, threshold); last match wins
    alpha: float = 0.01  # after Benjamini-Hochberg
    confidence: float = 0.95  # of the bootstrap interval
    aa_noise: float | None = None  # typical |ratio - 1| of an A/A comparison on this runner
    n_boot: int = 2000
    min_samples: int = 3  # per side; fewer cannot show anything
    seed: int = 0
    paired: bool = False  # round i of both sides ran back to back: compare round by round
    fail_on: str = "inconclusive"  # or "regression": an undecided outcome then exits 0 (see FAIL_ON)
    allow_missing: bool = False  # a base case absent from the candidate is "removed" (informational), not "missing"
    allow_partial: bool = False  # accept runs that did not finish (interrupted, running, failed)
    metric: str = "median_s"  # what is compared: a key of fp8bench.analysis.gate.metrics.METRICS
    sqnr_tolerance_db: float = DEFAULT_SQNR_TOLERANCE_DB  # sqnr_db: a larger drop is a regression
    sqnr_floors: tuple[tuple[str, float], ...] = ()  # sqnr_db: (fnmatch pattern on the precision, dB); last wins

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise GateError(f"metric {self.metric!r}; accepted: {', '.join(METRICS)}")
        if not self.sqnr_tolerance_db >= 0:
            raise GateError(f"SQNR tolerance must be >= 0 dB, got {self.sqnr_tolerance_db}")
        if self.fail_on not in FAIL_ON:
            raise GateError(f"fail_on {self.fail_on!r}; accepted: {', '.join(FAIL_ON)}")
        for name, t in (("threshold", self.threshold), *((f"override {p!r}", v) for p, v in self.overrides)):
            if not 0 <= t < 1:
                raise GateError(f"{name} must be a fraction in [0, 1) (0.05 means 5%), got {t}")
        if not 0 < self.alpha < 1:
            raise GateError(f"alpha must be in (0, 1), got {self.alpha}")
        if not 0 < self.confidence < 1:
            raise GateError(f"confidence must be in (0, 1), got {self.confidence}")
        if self.aa_noise is not None and not 0 <= self.aa_noise < 1:
            raise GateError(f"A/A noise must be a fraction in [0, 1), got {self.aa_noise}")
        if self.min_samples < 2:
            raise GateError(f"min_samples must be >= 2, got {self.min_samples}")

    def threshold_for(self, case: str) -> tuple[float, str]:
        """The effective threshold of a case and where it came from."""
        t, source = self.threshold, "default"
        for pattern, value in self.overrides:
            if fnmatch.fnmatchcase(case, pattern):
                t, source = value, f"override {pattern}"
        if self.aa_noise is not None and AA_NOISE_MULTIPLE * self.aa_noise > t:
            t, source = AA_NOISE_MULTIPLE * self.aa_noise, f"{AA_NOISE_MULTIPLE:g}x A/A noise"
        return t, source


def parse_override(text: str) -> tuple[str, float]:
    """``PATTERN=T`` (T a fraction or a percentage such as ``8%``) -> ``(pattern, fraction)``."""
    pattern, sep, value = text.rpartition("=")
    if not sep or not pattern:
        raise GateError(f"threshold override {text!r} must look like PATTERN=T, e.g. 'gemm*fp8_rowwise*=0.08'")
    try:
        return pattern, parse_fraction(value, f"threshold override {text!r}:")
    except ValueError as exc:
        raise GateError(str(exc)) from exc


# -- one side: runs -> per-case samples ---------------------------------------------------------------------------
@dataclass
class SideCase:
    """A case as one side measured it, over all of that side's runs."""

    case: str
    key: ComparabilityKey
    precision: str | None = None
    samples: list[float] = field(default_factory=list)
    by_round: dict[int, float] = field(default_factory=dict)  # run index -> that round's median
    status: str = "ok"
    reason: str | None = None
    key_conflict: dict[str, tuple[Any, Any]] | None = None  # rounds of one side disagree on the key
    repro: str | None = None  # the command that measures this case again (fp8bench.core.repro)


@dataclass
class Side:
    run_ids: list[str]
    git_commit: str | None
    cases: dict[str, SideCase]
    sample_unit: str  # "round medians" | "raw samples"
    loaded: dict[str, HostLoad] = field(default_factory=dict)  # run id -> its load, for runs started overloaded


def origin_of(payload: dict[str, Any]) -> str:
    """Where a run payload came from, for messages: its file (set by :func:`fp8bench.results.ingest.load_side`) or run id."""
    return str(payload.get("origin") or f"run {payload['run'].get('run_id')}")


FINISHED_STATUSES = ("complete",)


def check_finished(payloads: Sequence[dict[str, Any]], side: str) -> None:
    """Refuse runs that did not finish: their absent cases would read as removed and pass."""
    for payload in payloads:
        run = payload["run"]
        status = run.get("status")
        if status is None or status in FINISHED_STATUSES:
            continue  # a file from before statuses were written cannot say; its cases speak for themselves
        done = (f" after {run['n_records']} of {run['n_cases']} cases"
                if run.get("n_records") is not None and run.get("n_cases") else "")
        raise GateError(f"the {side} {origin_of(payload)} did not finish (status {status!r}{done}); the cases it "
                        "lacks cannot be judged. Rerun it, or pass --allow-partial to gate the cases it has")


def collect_side(payloads: Sequence[dict[str, Any]], metric: str = "median_s") -> Side:
    """Per-case samples of one side: per-round medians with >= 2 runs, else the single run's raw samples.
    Raises :class:`fp8bench.results.runfile.RunFileError` on a timing value that is not finite positive seconds (payloads
    read from files were checked on reading; a store's were not).

    For another ``metric`` than time each record holds one value (energy per iteration, SQNR), so the samples are
    one value per run.
    """
    if not payloads:
        raise GateError("a side of the comparison has no runs")
    rounds = len(payloads) >= 2
    cases: dict[str, SideCase] = {}
    for index, payload in enumerate(payloads):
        run = payload["run"]
        origin = origin_of(payload)
        for record in payload["records"]:
            name = case_key(record)
            key = comparability_key(record, run)
            entry = cases.setdefault(name, SideCase(name, key, record.get("precision"), repro=repro_of(record, run)))
            if key != entry.key and entry.key_conflict is None:
                entry.key_conflict = entry.key.differences(key)
            if record.get("interpreted"):  # an interpreter's timings (if any were kept) are never compared
                if entry.status == "ok":
                    entry.status, entry.reason = INTERPRETED, "interpreted: not timed"
                continue
            if not timings_count(record, run):
                if entry.status == "ok":
                    entry.status, entry.reason = record.get("status", "failed"), record.get("reason")
                continue
            if metric != "median_s":
                value = metric_value(record, metric)
                if value is None:
                    if entry.status == "ok":
                        entry.status, entry.reason = NO_VALUE, f"no {metric} in the record"
                    continue
                entry.samples.append(value)
                entry.by_round[index] = value
            elif rounds:
                if record.get("median_s") is not None:
                    median = check_seconds(record["median_s"], f"{origin}: case {name}: median_s")
                    entry.samples.append(median)
                    entry.by_round[index] = median
            else:
                samples = record.get("samples_s") or []
                if not isinstance(samples, list):
                    raise GateError(f"{origin}: case {name}: samples_s must be a list of seconds, got "
                                    f"{type(samples).__name__}")
                entry.samples.extend(check_seconds(v, f"{origin}: case {name}: sample {i}")
                                     for i, v in enumerate(samples))
    commits = {(p["run"].get("git") or {}).get("commit") for p in payloads}
    unit = ("round medians" if rounds else RAW) if metric == "median_s" else "one value per run"
    loads = {p["run"]["run_id"]: run_load(p["run"]) for p in payloads}
    return Side([p["run"]["run_id"] for p in payloads], commits.pop() if len(commits) == 1 else None, cases, unit,
                {run_id: load for run_id, load in loads.items() if load is not None and load.overloaded})


# -- the comparison -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ValueComparison:
    """A deterministic metric's two sides (SQNR, dB): each side's median value and the candidate's floor, if any."""

    base_value: float
    cand_value: float
    floor_db: float | None


@dataclass(frozen=True)
class CaseResult:
    """One case's verdict and the figures behind it, built once. ``ratio`` is candidate / base (above 1: slower),
    with its interval ``ci_low``..``ci_high``; ``p_*`` are one-sided p-values, ``*_adj`` after Benjamini-Hochberg;
    ``threshold`` is a fraction (0.05 is 5%), or the SQNR tolerance in dB; ``n_*`` are samples per side;
    ``differences`` names the comparability-key fields that differ (field -> [base, candidate])."""

    case: str
    verdict: str
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

    def to_dict(self) -> dict[str, Any]:
        """The case as the JSON report and the store hold it (optional parts only where they apply)."""
        out = {name: getattr(self, name) for name in _REPORTED}
        for optional in ("paired_rounds", "decided_at_round", "cs_alpha"):
            if getattr(self, optional) is not None:
                out[optional] = getattr(self, optional)
        if self.values is not None:
            out.update(asdict(self.values))
        return out


# The fields every reported case has, in the report's order.
_REPORTED = ("case", "verdict", "reason", "ratio", "ci_low", "ci_high", "p_slower", "p_faster", "p_slower_adj",
             "p_faster_adj", "threshold", "threshold_source", "n_base", "n_cand", "differences")


def _pre_verdict(case: str, base: SideCase | None, cand: SideCase | None,
                 allow_missing: bool = False) -> CaseResult | None:
    """A verdict that needs no statistics (missing, unmeasured, broken, incomparable), or ``None``."""
    if cand is None:
        if allow_missing:
            return CaseResult(case, "removed", "not in the candidate (allowed by --allow-missing)")
        return CaseResult(case, "missing", "in the base but not in the candidate; pass --allow-missing if it "
                          "was dropped on purpose")
    if base is None:
        return CaseResult(case, "new", "not in the base")
    interpreted = [side for side, entry in (("base", base), ("candidate", cand)) if entry.status == INTERPRETED]
    if len(interpreted) == 2:
        return CaseResult(case, "not measured", "interpreted on both sides: interpreter timings are never compared")
    if interpreted:
        return CaseResult(case, "incomparable", f"interpreted on the {interpreted[0]} side only: an interpreter's "
                          "run is checked for correctness, never compared on time")
    valueless = [side for side, entry in (("base", base), ("candidate", cand)) if entry.status == NO_VALUE]
    if len(valueless) == 2:
        return CaseResult(case, "not measured", f"{base.reason} on either side")
    if valueless:
        return CaseResult(case, "incomparable", f"{(base if base.status == NO_VALUE else cand).reason} of the "
                          f"{valueless[0]} only")
    return _unmeasured_or_incomparable(case, base, cand)


def _unmeasured_or_incomparable(case: str, base: SideCase, cand: SideCase) -> CaseResult | None:
    """The rest of :func:`_pre_verdict`: rounds or sides that disagree on the key, and sides that measured nothing."""
    for side, entry in (("base", base), ("candidate", cand)):
        if entry.key_conflict:
            return CaseResult(case, "incomparable", f"the {side}'s rounds disagree on "
                              f"{describe_differences(entry.key_conflict)}", differences=_jsonable(entry.key_conflict))
    if base.status != "ok" and cand.status != "ok":
        return CaseResult(case, "not measured", f"base {base.status}: {base.reason}; "
                          f"candidate {cand.status}: {cand.reason}")
    if base.status != "ok":
        return CaseResult(case, "new", f"base {base.status}: {base.reason}")
    if cand.status != "ok":
        return CaseResult(case, "broken", f"candidate {cand.status}: {cand.reason}")
    diff = base.key.differences(cand.key)
    if diff:
        return CaseResult(case, "incomparable", "comparability key differs in " + describe_differences(diff),
                          differences=_jsonable(diff))
    return None


def _jsonable(diff: dict[str, tuple[Any, Any]]) -> dict[str, list[Any]]:
    return {k: [a, b] for k, (a, b) in diff.items()}


def compare_sides(base: Side, cand: Side, config: GateConfig = GateConfig()) -> list[CaseResult]:
    """Per-case results in a stable order: base's cases, then new ones."""
    if not METRICS[config.metric].statistical:
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
            results[name] = CaseResult(name, "inconclusive", f"too few samples (base {len(b.samples)}, "
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
                verdict, reason = "noisy", f"{within}; {reason} if the samples were trusted"
        if config.metric != "median_s":  # more joules is "worse", not "slower"
            verdict = {"slower": "worse", "faster": "better"}.get(verdict, verdict)
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
            results.append(CaseResult(name, "not measured", f"no {config.metric} on either side"))
            continue
        base_value, cand_value = float(np.median(b.samples)), float(np.median(c.samples))
        floor = floor_for(c.precision, config.sqnr_floors)
        verdict, reason = sqnr_verdict(base_value, cand_value, config.sqnr_tolerance_db, floor)
        results.append(CaseResult(name, verdict, reason, threshold=config.sqnr_tolerance_db,
                                  threshold_source="SQNR tolerance (dB)", n_base=len(b.samples),
                                  n_cand=len(c.samples),
                                  values=ValueComparison(base_value, cand_value, floor[0] if floor else None)))
    return results


def classify(ci_low: float, ci_high: float, p_slower_adj: float, p_faster_adj: float, threshold: float,
             alpha: float) -> tuple[str, str]:
    """A case's verdict from its ratio interval and adjusted p-values (see the module docstring)."""
    up, down = 1 + threshold, 1 / (1 + threshold)
    if ci_low > up and p_slower_adj < alpha:
        return "slower", f"interval lower bound {ci_low:.3f} > {up:.3f} and p = {p_slower_adj:.2g} < {alpha:g}"
    if ci_high < down and p_faster_adj < alpha:
        return "faster", f"interval upper bound {ci_high:.3f} < {down:.3f} and p = {p_faster_adj:.2g} < {alpha:g}"
    if ci_high <= up:
        return "same", f"a slowdown beyond {threshold:.1%} is outside the interval"
    if ci_low > up:
        return "inconclusive", f"interval above {up:.3f} but p = {p_slower_adj:.2g} is not under {alpha:g}"
    return "inconclusive", f"interval [{ci_low:.3f}, {ci_high:.3f}] straddles {up:.3f}"


def overall_code(cases: Sequence[dict[str, Any]]) -> int:
    """The outcome of a set of case verdicts: regression, else undecided (inconclusive), else pass."""
    verdicts = {c["verdict"] for c in cases}
    if verdicts & set(REGRESSING):
        return EXIT_REGRESSION
    compared = verdicts & set(COMPARED)
    if verdicts & set(UNDECIDED) or not compared:
        return EXIT_INCONCLUSIVE
    return EXIT_PASS


def exit_code_for(cases: Sequence[dict[str, Any]], fail_on: str = "inconclusive") -> int:
    """The process exit code: the outcome, except that ``fail_on="regression"`` lets an undecided one pass."""
    code = overall_code(cases)
    return EXIT_PASS if code == EXIT_INCONCLUSIVE and fail_on == "regression" else code


OVERALL = {EXIT_PASS: "pass", EXIT_REGRESSION: "regression", EXIT_INCONCLUSIVE: "inconclusive",
           EXIT_HARNESS_ERROR: "error"}


def overall_verdict(cases: Sequence[dict[str, Any]]) -> str:
    """The report's verdict word: :data:`OVERALL`'s, except ``noisy`` for an undecided outcome with a noisy case
    (the answer is then to measure again, interleaved, not to look at the code)."""
    outcome = overall_code(cases)
    if outcome == EXIT_INCONCLUSIVE and any(c["verdict"] == "noisy" for c in cases):
        return "noisy"
    return OVERALL[outcome]


def _load_note(side_name: str, side: Side) -> str:
    """One note for all the runs of a side that started under load: one run by its id, many by their count and
    the range of their load (each run's id and load stay in the JSON report)."""
    loads = list(side.loaded.values())
    if len(loads) == 1:
        [(run_id, load)] = side.loaded.items()
        return f"the {side_name} run {run_id} started at {load.describe()}: its timings are noisy"
    averages = sorted(load.load_1m for load in loads)
    cpus = sorted({load.cpus for load in loads})
    where = (f"load average {averages[0]:.2f}" if averages[0] == averages[-1]
             else f"load average {averages[0]:.2f} to {averages[-1]:.2f}")
    return (f"{len(loads)} of {len(side.run_ids)} {side_name} runs started at {where} on "
            f"{'/'.join(map(str, cpus))} CPU(s): their timings are noisy (loaded_runs in the JSON report)")


def build_report(base: Side, cand: Side, config: GateConfig = GateConfig(),
                 results: Sequence[CaseResult] | None = None, notes: Sequence[str] = ()) -> dict[str, Any]:
    """The whole gate outcome as one JSON-able dict (what the store keeps and the JSON report holds)."""
    cases = [r.to_dict() for r in (compare_sides(base, cand, config) if results is None else results)]
    counts = {v: sum(c["verdict"] == v for c in cases) for v in VERDICT_ORDER}
    all_notes = list(notes)
    if RAW in (base.sample_unit, cand.sample_unit):
        all_notes.append("one run per side: raw samples of one run are treated as independent, which overstates "
                         "confidence; interleaved rounds (`fp8bench ab`) are the reliable method")
    if not any(c["verdict"] in COMPARED for c in cases):
        all_notes.append("no case could be compared")
    for side_name, side in (("base", base), ("candidate", cand)):
        if side.loaded:
            all_notes.append(_load_note(side_name, side))
    if any(c["verdict"] == "noisy" for c in cases):
        all_notes.append(f"noisy: a difference within the noise of one side is not called a regression; "
                         f"{NOISY_ADVICE}")
    shared = same_runs(base, cand)
    if shared:
        all_notes.append(SAME_RUN_NOTE.format(runs=", ".join(shared)))
    return {
        "report_id": uuid.uuid4().hex[:16],
        "created_at": datetime.now(timezone.utc).isoformat(),
        "base_run_id": ",".join(base.run_ids), "cand_run_id": ",".join(cand.run_ids),
        "git_commit": cand.git_commit, "base_git_commit": base.git_commit,
        "verdict": overall_verdict(cases), "exit_code": exit_code_for(cases, config.fail_on),
        "rounds": {"base": len(base.run_ids), "cand": len(cand.run_ids)},
        "sample_unit": {"base": base.sample_unit, "cand": cand.sample_unit},
        "config": {"threshold": config.threshold, "overrides": [list(o) for o in config.overrides],
                   "alpha": config.alpha, "confidence": config.confidence, "aa_noise": config.aa_noise,
                   "n_boot": config.n_boot, "min_samples": config.min_samples, "paired": config.paired,
                   "fail_on": config.fail_on, "allow_missing": config.allow_missing,
                   "allow_partial": config.allow_partial, "metric": config.metric,
                   "sqnr_tolerance_db": config.sqnr_tolerance_db,
                   "sqnr_floors": [list(f) for f in config.sqnr_floors]},
        "counts": counts, "cases": cases, "notes": all_notes,
        # Which runs started under load: a note says how many, this says which (a long A/B has hundreds).
        "loaded_runs": {"base": sorted(base.loaded), "candidate": sorted(cand.loaded)},
        "slower_cases": [c["case"] for c in cases if c["verdict"] in REGRESSING],
        # How to measure each regressed case again, on its own: the candidate's command for it.
        "repro": {c["case"]: cand.cases[c["case"]].repro for c in cases
                  if c["verdict"] in REGRESSING and c["case"] in cand.cases},
    }


SAME_RUN_NOTE = ("base and candidate share run(s) {runs}: those cases are compared with themselves, so the verdict "
                 "says nothing about a change (for an A/A noise check, measure the same code twice)")


def same_runs(base: Side, cand: Side) -> list[str]:
    """Run ids on both sides of a comparison (``gate A A``)."""
    return [r for r in base.run_ids if r in set(cand.run_ids)]


def gate(base_payloads: Sequence[dict[str, Any]], cand_payloads: Sequence[dict[str, Any]],
         config: GateConfig = GateConfig()) -> dict[str, Any]:
    """Compare run payloads of the base and the candidate; returns the report. Raises :class:`GateError` on
    input it cannot judge (see the module docstring)."""
    if not config.allow_partial:
        check_finished(base_payloads, "base")
        check_finished(cand_payloads, "candidate")
    return build_report(collect_side(base_payloads, config.metric), collect_side(cand_payloads, config.metric), config)


def merge_rerun(first: dict[str, Any], rerun: dict[str, Any]) -> dict[str, Any]:
    """Take the rerun's verdicts for the cases the first report left inconclusive (each is rerun once only)."""
    again = {c["case"]: c for c in rerun["cases"]}
    cases = []
    for c in first["cases"]:
        if c["verdict"] == "inconclusive" and c["case"] in again:
            cases.append({**again[c["case"]], "rerun": True, "first": {k: c[k] for k in (
                "verdict", "reason", "ratio", "ci_low", "ci_high")}})
        else:
            cases.append(c)
    fail_on = first["config"].get("fail_on", "inconclusive")
    merged = {**first, "cases": cases, "exit_code": exit_code_for(cases, fail_on),
              "verdict": overall_verdict(cases),
              "counts": {v: sum(c["verdict"] == v for c in cases) for v in VERDICT_ORDER},
              "slower_cases": [c["case"] for c in cases if c["verdict"] in REGRESSING],
              "rerun": {"base_run_id": rerun["base_run_id"], "cand_run_id": rerun["cand_run_id"],
                        "cases": [c["case"] for c in cases if c.get("rerun")]}}
    return merged


def aa_noise_of(report: dict[str, Any]) -> float:
    """The A/A noise of a runner from an A/A gate report: the median over compared cases of ``|ratio - 1|``."""
    deviations = [abs(c["ratio"] - 1) for c in report["cases"] if c.get("ratio") is not None]
    if not deviations:
        raise GateError("the A/A report has no compared case to estimate noise from")
    return float(np.median(deviations))


# -- Markdown -----------------------------------------------------------------------------------------------------
# First line of every Markdown report, invisible when rendered: the CI workflow finds the comment it posted on a
# pull request by this marker and updates it, instead of editing whichever bot comment came last.
REPORT_MARKER = "<!-- fp8bench-gate-report -->"
# The most a Markdown report holds, bytes: well under a pull-request comment's 65,536 characters and short enough
# to read; cases past it are counted and left to the JSON report.
MARKDOWN_BYTES = 20_000
WHY_CHARS = 300  # a case's reason in the Markdown table, characters

def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def headline(report: dict[str, Any]) -> tuple[str, str]:
    """The report's title and its verdict with the exit code, e.g. ``("fp8bench gate", "INCONCLUSIVE (exit 0
    under --fail-on regression)")``: one wording for the Markdown report and the terminal."""
    fail_on = report["config"].get("fail_on", "inconclusive")
    lenient = (" under --fail-on regression" if fail_on == "regression" and report["verdict"] in ("inconclusive", "noisy")
               else "")
    metric = METRICS[report["config"].get("metric", "median_s")]
    named = "" if metric.name == "median_s" else f" on {metric.name}"
    return f"fp8bench gate{named}", f"{report['verdict'].upper()} (exit {report['exit_code']}{lenient})"


def sides_line(report: dict[str, Any], code: Any = str) -> str:
    """Base and candidate commits, their runs, the sample unit and the counts (``code``: how a commit is quoted)."""
    counts = ", ".join(f"{n} {v}" for v, n in report["counts"].items() if n)
    return (f"base {code(report.get('base_git_commit') or '?')} ({report['rounds']['base']} run(s)) vs candidate "
            f"{code(report.get('git_commit') or '?')} ({report['rounds']['cand']} run(s)); samples: "
            f"{report['sample_unit']['cand']}; {counts or 'no cases'}.")


def sorted_cases(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's cases, regressions first, then by ratio (largest first) within a verdict."""
    order = {v: i for i, v in enumerate(VERDICT_ORDER)}
    return sorted(report["cases"], key=lambda c: (order.get(c["verdict"], 99), -(c["ratio"] or 0)))


def render_markdown(report: dict[str, Any], max_rows: int = 200) -> str:
    """The report as Markdown for a pull-request comment: verdict, counts, then cases (regressions first).

    Every string that came from a run file or the command line (case keys, commits, reasons, notes) is escaped
    (:mod:`fp8bench.core.escaping`): a failure reason cannot forge a heading, a verdict, an image, a link or a mention,
    and a case key stays inside its cell."""
    metric = METRICS[report["config"].get("metric", "median_s")]
    title, verdict = headline(report)
    word, _, rest = verdict.partition(" ")
    lines = [REPORT_MARKER, f"## {title}: **{word}** {rest}", "", sides_line(report, md_code), ""]
    lines += _unchecked_warning(report)
    lines += _ab_lines(report)
    if report.get("slower_cases"):
        slower = report["slower_cases"]
        more = f" and {len(slower) - 20} more (slower_cases in the JSON report)" if len(slower) > 20 else ""
        lines += ["Regressed or broken: " + ", ".join(md_code(c) for c in slower[:20]) + more, ""]
    rows = sorted_cases(report)
    columns = case_columns(report, metric)
    lines += [method_sentence(report, metric), "", "| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
    tail = _note_lines(report) + _repro_lines(report)
    room = MARKDOWN_BYTES - len("\n".join([*lines, *tail]).encode()) - 200  # 200: the "more cases" row
    shown = 0
    for c in rows[:max_rows]:
        row = _case_row(c, metric)
        room -= len(row.encode()) + 1
        if room < 0:
            break
        lines.append(row)
        shown += 1
    if len(rows) > shown:
        lines.append(f"| ... {len(rows) - shown} more case(s) in the JSON report | | | | | | | |")
    lines += tail
    return "\n".join(lines) + "\n"


def method_sentence(report: dict[str, Any], metric: Any) -> str:
    """The sentence naming the metric, the threshold and the method the verdicts came from."""
    cfg = report["config"]
    if not metric.statistical:
        floors = ", ".join(f"{p}: {db:g} dB" for p, db in cfg.get("sqnr_floors") or []) or "none"
        return (f"Metric: {metric.description} ({metric.unit}, higher is better). A drop of more than "
                f"{cfg['sqnr_tolerance_db']:g} dB, or a value under its precision's floor ({floors}), is a "
                "regression.")
    sequential = report.get("sequential")
    if sequential:
        method = (f"{sequential.get('method', 'confidence sequence')} over {sequential.get('rounds', '?')} "
                  f"round(s), one-sided alpha {cfg['alpha']:g} and a {cfg['confidence']:.0%} sequence split over "
                  "the compared cases (Bonferroni); ratio: geometric mean of the per-round ratios.")
    else:
        method = (f"alpha {cfg['alpha']:g} after Benjamini-Hochberg, {cfg['confidence']:.0%} bootstrap interval of "
                  "median(cand)/median(base).")
    aa = f" A/A noise {cfg['aa_noise']:.2%}." if cfg.get("aa_noise") is not None else ""
    return (f"Metric: {metric.description} ({metric.unit}, lower is better). Threshold {cfg['threshold']:.1%} "
            f"(per-case below), {method}{aa}")


def case_columns(report: dict[str, Any], metric: Any) -> list[str]:
    """The case table's column names (those of :func:`case_cells`)."""
    if not metric.statistical:
        return ["case", "verdict", "base dB", "candidate dB", "change dB", "floor dB", "n base/cand", "why"]
    p_column = "p worse" if report.get("sequential") else "p worse (BH)"
    return ["case", "verdict", "ratio", "interval", p_column, "T", "n base/cand", "why"]


def case_cells(c: dict[str, Any], metric: Any) -> list[str]:
    """One case's cells as plain text, its reason whole (each renderer escapes and cuts them for where they go)."""
    why = c.get("reason") or ""
    verdict = f"{c['verdict']}{' (rerun)' if c.get('rerun') else ''}"
    n = f"{c['n_base']}/{c['n_cand']}"
    if metric.statistical:
        interval = "-" if c["ci_low"] is None else f"[{c['ci_low']:.3f}, {c['ci_high']:.3f}]"
        return [c["case"], verdict, _fmt(c["ratio"], ".3f"), interval, _fmt(c["p_slower_adj"], ".2g"),
                _fmt(c["threshold"], ".1%"), n, why]
    base, cand = c.get("base_value"), c.get("cand_value")
    change = None if base is None or cand is None else cand - base
    return [c["case"], verdict, _fmt(base, ".2f"), _fmt(cand, ".2f"), _fmt(change, "+.2f"),
            _fmt(c.get("floor_db"), "g"), n, why]


def _case_row(c: dict[str, Any], metric: Any) -> str:
    """One case's table row; its reason cut to :data:`WHY_CHARS` (the JSON report keeps it whole)."""
    case, *middle, why = case_cells(c, metric)
    why = md_text(why if len(why) <= WHY_CHARS else why[:WHY_CHARS - 3] + "...")
    return "| " + " | ".join([md_code(case), *middle, why]) + " |"


def _note_lines(report: dict[str, Any]) -> list[str]:
    """Each distinct note once, with how many times it was given when more than once."""
    counted = Counter(report.get("notes") or [])
    return ["", *[f"- {md_text(n)}" + (f" ({k} times)" if k > 1 else "") for n, k in counted.items()]] \
        if counted else []


def _repro_lines(report: dict[str, Any]) -> list[str]:
    """Each regressed case's command, to measure it again on its own (a fenced block: nothing in it renders)."""
    commands = [(case, cmd) for case, cmd in (report.get("repro") or {}).items() if cmd]
    if not commands:
        return []
    lines = ["", "Reproduce a regressed case:", ""]
    for case, cmd in commands:
        lines += [f"- {md_code(case)}", "", *md_code_block(cmd, indent="  ")]
    return lines


def nothing_compared_under_lenient_fail_on(report: dict[str, Any]) -> bool:
    """``--fail-on regression`` and no case compared: the job passes although the gate checked nothing."""
    return (report["config"].get("fail_on") == "regression"
            and not any(c["verdict"] in COMPARED for c in report["cases"]))


def _unchecked_warning(report: dict[str, Any]) -> list[str]:
    """A loud block when the gate passes a job without having compared anything."""
    if not nothing_compared_under_lenient_fail_on(report):
        return []
    return [f"> **Warning: nothing was compared.** Every one of the {len(report['cases'])} case(s) is "
            "incomparable, missing or unmeasured, so this report checked no change; it exits 0 only because of "
            "--fail-on regression. Check that base and candidate ran on the same device, driver, CUDA, torch and "
            "cases.", ""]


def _ab_lines(report: dict[str, Any]) -> list[str]:
    """What an A/B report adds: each side's checkout state and the environment names given to it."""
    ab = report.get("ab")
    if not ab:
        return []
    state = {True: "uncommitted changes (dirty)", False: "clean", None: "unknown"}
    dirty = ab.get("dirty") or {}
    line = (f"A/B: base checkout {state[dirty.get('base')]}, head checkout {state[dirty.get('head')]}; "
            f"{ab.get('rounds')} interleaved round(s).")
    envs = [f"{side} {', '.join(md_code(name) for name in ab.get(f'{side}_env') or {})}"
            for side in ("base", "head") if ab.get(f"{side}_env")]
    return [line + (f" Extra environment (values masked): {'; '.join(envs)}." if envs else ""), ""]
