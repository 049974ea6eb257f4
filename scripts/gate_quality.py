#!/usr/bin/env python
"""Gate quality on synthetic samples: false alarms on A/A pairs and detection of a real slowdown.

Each trial is one gate decision over a suite of ``--cases`` cases measured in ``--rounds`` interleaved rounds.
A case's per-round medians are drawn from a log-normal distribution with the given coefficient of variation (the
shape timing noise has: positive, right-skewed). In an A/A trial both sides share the distribution; in an A/B
trial every candidate sample is ``1 + slowdown`` times slower. The samples go through the gate's real code path
(:func:`fp8bench.analysis.gate.decision.compare_sides`: bootstrap interval, Mann-Whitney U, Benjamini-Hochberg,
verdicts), and inconclusive cases are rerun once with fresh samples, as ``fp8bench ab`` does.

Reported per CV: the false-alarm rate (share of A/A cases judged ``slower``) with its Wilson 95% upper bound, the
share of A/A trials that pass outright (exit 0), and the detection rate of the slowdown (share of A/B cases
judged ``slower``). With ``--aa-floor`` the threshold is also raised to 3x an A/A noise estimate drawn on the same
simulated runner, as the gate does when given ``--aa-noise``. ``--paired`` gates round by round, as ``fp8bench ab``
does; ``--drift CV`` multiplies round ``r`` of *both* sides by one shared log-normal factor (a machine whose speed
moves between rounds), the noise pairing is meant to cancel.

    python scripts/gate_quality.py                      # CV 1..5%, 10 rounds, 1,000 trials, 10% slowdown
    python scripts/gate_quality.py --trials 200 --json  # quicker, machine-readable
    python scripts/gate_quality.py --paired --drift 0.2 # the fp8bench ab method on a drifting runner
    python scripts/gate_quality.py --sequential --max-rounds 60   # fp8bench ab --budget: rounds until decided
    python scripts/gate_quality.py --coverage --trials 1000 --max-rounds 200   # the sequence's error over all looks

``--sequential`` runs the sequential design of ``fp8bench ab --budget`` instead
(:mod:`fp8bench.analysis.gate.sequential`: a look after every round from ``--min-rounds`` on, each case stopping at its
first decision, the run at ``--max-rounds`` standing in for the time budget), through its real verdict function, and
also reports the rounds a decision took (the run's length: until its last case is decided) beside the fixed design's 10
rounds (20 when the rerun happens).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import replace

import numpy as np

from fp8bench.analysis.gate.config import GateConfig
from fp8bench.analysis.gate.decision import compare_sides
from fp8bench.analysis.gate.report import aa_noise_of, build_report
from fp8bench.analysis.gate.sequential import confidence_sequence, sequential_verdict
from fp8bench.analysis.gate.sides import Side, SideCase
from fp8bench.core.comparability import ComparabilityKey


def lognormal(rng: np.random.Generator, cv: float, size: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    """Log-normal samples with mean ``scale`` and coefficient of variation ``cv``."""
    sigma = math.sqrt(math.log1p(cv * cv))
    return scale * np.exp(rng.normal(-sigma * sigma / 2, sigma, size))


def _key(i: int) -> ComparabilityKey:
    return ComparabilityKey("synthetic", None, None, None, "x", None, None, f"case{i}", "synthetic", f"h{i}")


def _side(samples: np.ndarray, names: list[str]) -> Side:
    cases = {n: SideCase(n, _key(i), samples=list(map(float, samples[i])),
                         by_round=dict(enumerate(map(float, samples[i]))))
             for i, n in enumerate(names)}
    return Side(["synthetic"], None, cases, "round medians")


def one_trial(rng: np.random.Generator, cv: float, slowdown: float, n_cases: int, rounds: int,
              config: GateConfig, drift: float = 0.0) -> list[str]:
    """Verdicts of one gate decision (with the once-only rerun of inconclusive cases)."""
    names = [f"case{i}" for i in range(n_cases)]

    def draw(subset: list[str]) -> tuple[Side, Side]:
        shared = lognormal(rng, drift, (len(subset), rounds)) if drift else 1.0
        base = shared * lognormal(rng, cv, (len(subset), rounds))
        cand = shared * lognormal(rng, cv, (len(subset), rounds), 1 + slowdown)
        return _side(base, subset), _side(cand, subset)

    results = compare_sides(*draw(names), config)
    verdicts = {r.case: r.verdict for r in results}
    again = [n for n, v in verdicts.items() if v == "inconclusive"]
    if again:
        for r in compare_sides(*draw(again), config):
            verdicts[r.case] = r.verdict
    return [verdicts[n] for n in names]


def sequential_trial(rng: np.random.Generator, cv: float, slowdown: float, n_cases: int, min_rounds: int,
                     max_rounds: int, threshold: float, alpha: float, drift: float = 0.0) -> tuple[list[str], int]:
    """Verdicts of one sequential A/B run (``fp8bench ab --budget``) and the rounds it ran: rounds are added
    until every case is decided or ``max_rounds``; a decided case keeps its verdict."""
    shared = lognormal(rng, drift, (n_cases, max_rounds)) if drift else 1.0
    base = shared * lognormal(rng, cv, (n_cases, max_rounds))
    cand = shared * lognormal(rng, cv, (n_cases, max_rounds), 1 + slowdown)
    logs = np.log(cand / base)
    verdicts: list[str | None] = [None] * n_cases
    per_case_alpha = alpha / n_cases  # Bonferroni over the compared cases, as fp8bench.analysis.gate.sequential.judge
    per_case_same = 0.05 / n_cases  # the 95% level of the "same" bound
    rounds = min_rounds
    for rounds in range(min_rounds, max_rounds + 1):
        for i in range(n_cases):
            if verdicts[i] is None:
                v = sequential_verdict(logs[i, :rounds], threshold, per_case_alpha, same_alpha=per_case_same)["verdict"]
                verdicts[i] = v if v != "undecided" else None
        if all(v is not None for v in verdicts):
            break
    return [v or "inconclusive" for v in verdicts], rounds


def measure_sequential(cv: float, args: argparse.Namespace, rng: np.random.Generator) -> dict[str, float]:
    aa_slower = aa_cases = aa_pass = ab_slower = ab_cases = aa_inconclusive = 0
    aa_rounds: list[int] = []
    ab_rounds: list[int] = []
    for _ in range(args.trials):
        aa_v, n = sequential_trial(rng, cv, 0.0, args.cases, args.min_rounds, args.max_rounds, args.threshold,
                                   args.alpha, args.drift)
        aa_rounds.append(n)
        aa_slower += sum(v == "slower" for v in aa_v)
        aa_inconclusive += sum(v == "inconclusive" for v in aa_v)
        aa_cases += len(aa_v)
        aa_pass += all(v in ("same", "faster") for v in aa_v)
        ab_v, n = sequential_trial(rng, cv, args.slowdown, args.cases, args.min_rounds, args.max_rounds,
                                   args.threshold, args.alpha, args.drift)
        ab_rounds.append(n)
        ab_slower += sum(v == "slower" for v in ab_v)
        ab_cases += len(ab_v)
    return {"cv": cv, "false_alarm_rate": aa_slower / aa_cases,
            "false_alarm_upper95": wilson_upper(aa_slower, aa_cases),
            "aa_inconclusive_rate": aa_inconclusive / aa_cases, "aa_trials_passing": aa_pass / args.trials,
            "detection_rate": ab_slower / ab_cases, "aa_cases": aa_cases, "ab_cases": ab_cases,
            "aa_rounds_mean": float(np.mean(aa_rounds)), "aa_rounds_p90": float(np.percentile(aa_rounds, 90)),
            "ab_rounds_mean": float(np.mean(ab_rounds)), "ab_rounds_p90": float(np.percentile(ab_rounds, 90))}


def coverage(args: argparse.Namespace, rng: np.random.Generator) -> list[dict[str, float]]:
    """Time-uniform error of the confidence sequence: the share of paths of normal noise (true mean 0) on which the
    sequence excludes 0 at some look from ``first`` rounds to ``--max-rounds``; beside it, an ordinary normal
    interval at the same level looked at after every round, which optional stopping breaks."""
    from statistics import NormalDist

    rows = []
    for alpha in (0.05, 0.01):
        z = NormalDist().inv_cdf(1 - alpha / 2)
        for first in (5, 8, 10):
            ever = peeked = 0
            for _ in range(args.trials):
                x = rng.normal(0, 1, args.max_rounds)
                hit = naive = False
                for t in range(first, args.max_rounds + 1):
                    mean, lo, hi = confidence_sequence(x[:t], alpha)
                    hit = hit or lo > 0 or hi < 0
                    naive = naive or abs(mean) > z * x[:t].std(ddof=1) / math.sqrt(t)
                ever += hit
                peeked += naive
            rows.append({"alpha": alpha, "first_look": first, "sequence_ever_missed": ever / args.trials,
                         "ordinary_interval_ever_missed": peeked / args.trials})
    return rows


def wilson_upper(k: int, n: int, z: float = 1.96) -> float:
    """Upper end of the Wilson score interval of a proportion k/n."""
    if n == 0:
        return float("nan")
    p = k / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (centre + spread) / (1 + z * z / n)


def measure(cv: float, args: argparse.Namespace, rng: np.random.Generator) -> dict[str, float]:
    base_config = GateConfig(threshold=args.threshold, n_boot=args.n_boot, paired=args.paired)
    aa_slower = aa_cases = aa_pass = ab_slower = ab_cases = 0
    aa_inconclusive = 0
    for _ in range(args.trials):
        config = base_config
        if args.aa_floor:  # an A/A run on the same runner, as a CI job would do once, sets the noise floor
            names = [f"case{i}" for i in range(args.cases)]
            aa = build_report(_side(lognormal(rng, cv, (args.cases, args.rounds)), names),
                              _side(lognormal(rng, cv, (args.cases, args.rounds)), names), base_config)
            config = replace(base_config, aa_noise=aa_noise_of(aa))
        aa_v = one_trial(rng, cv, 0.0, args.cases, args.rounds, config, args.drift)
        aa_slower += sum(v == "slower" for v in aa_v)
        aa_inconclusive += sum(v == "inconclusive" for v in aa_v)
        aa_cases += len(aa_v)
        aa_pass += all(v in ("same", "faster") for v in aa_v)
        ab_v = one_trial(rng, cv, args.slowdown, args.cases, args.rounds, config, args.drift)
        ab_slower += sum(v == "slower" for v in ab_v)
        ab_cases += len(ab_v)
    return {"cv": cv, "false_alarm_rate": aa_slower / aa_cases,
            "false_alarm_upper95": wilson_upper(aa_slower, aa_cases),
            "aa_inconclusive_rate": aa_inconclusive / aa_cases, "aa_trials_passing": aa_pass / args.trials,
            "detection_rate": ab_slower / ab_cases, "aa_cases": aa_cases, "ab_cases": ab_cases}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cv", type=float, nargs="+", default=[0.01, 0.02, 0.03, 0.04, 0.05])
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--trials", type=int, default=1000)
    p.add_argument("--cases", type=int, default=8, help="cases per gate decision (Benjamini-Hochberg spans them)")
    p.add_argument("--slowdown", type=float, default=0.10)
    p.add_argument("--threshold", type=float, default=0.05)
    p.add_argument("--n-boot", type=int, default=2000)
    p.add_argument("--aa-floor", action="store_true", help="raise T to 3x a simulated A/A noise estimate")
    p.add_argument("--paired", action="store_true", help="gate round by round, as `fp8bench ab` does")
    p.add_argument("--drift", type=float, default=0.0,
                   help="CV of a per-round speed factor shared by both sides (a drifting runner)")
    p.add_argument("--sequential", action="store_true", help="the sequential design of `fp8bench ab --budget`")
    p.add_argument("--min-rounds", type=int, default=8, help="--sequential: rounds before the first look")
    p.add_argument("--max-rounds", type=int, default=60, help="--sequential: rounds the budget allows")
    p.add_argument("--alpha", type=float, default=0.01, help="--sequential: error level over the cases")
    p.add_argument("--coverage", action="store_true",
                   help="the confidence sequence's error over all looks up to --max-rounds, on --trials paths")
    p.add_argument("--seed", type=int, default=20261121)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    started = time.monotonic()
    if args.coverage:
        print(f"looks after every round up to {args.max_rounds}, {args.trials} paths of normal noise, seed {args.seed}")
        print("| level | first look | sequence: paths ever missing the mean | ordinary interval looked at each round |")
        print("|---|---|---|---|")
        for r in coverage(args, rng):
            print(f"| {1 - r['alpha']:.0%} | {r['first_look']} | {r['sequence_ever_missed']:.1%} | "
                  f"{r['ordinary_interval_ever_missed']:.1%} |")
        return 0
    rows = [(measure_sequential if args.sequential else measure)(cv, args, rng) for cv in args.cv]
    if args.json:
        print(json.dumps({"settings": vars(args), "rows": rows}))
        return 0
    if args.sequential:
        print(f"sequential gate quality: {args.trials} trials x {args.cases} cases, a look after every round from "
              f"{args.min_rounds} to {args.max_rounds}, log-normal noise, T={args.threshold:.0%}, slowdown "
              f"{args.slowdown:.0%}, alpha {args.alpha:g} (Bonferroni), seed {args.seed}")
        print()
        print("| CV | A/A false alarms (cases) | upper 95% | A/A inconclusive | A/A trials passing | A/A rounds mean "
              f"(p90) | {args.slowdown:.0%} slowdown detected | A/B rounds mean (p90) |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['cv']:.0%} | {r['false_alarm_rate']:.2%} | {r['false_alarm_upper95']:.2%} | "
                  f"{r['aa_inconclusive_rate']:.2%} | {r['aa_trials_passing']:.1%} | {r['aa_rounds_mean']:.1f} "
                  f"({r['aa_rounds_p90']:.0f}) | {r['detection_rate']:.1%} | {r['ab_rounds_mean']:.1f} "
                  f"({r['ab_rounds_p90']:.0f}) |")
        print(f"\n({time.monotonic() - started:.0f} s)")
        return 0
    print(f"gate quality: {args.trials} trials x {args.cases} cases, {args.rounds} rounds, log-normal noise, "
          f"T={args.threshold:.0%}, slowdown {args.slowdown:.0%}, alpha 0.01 (BH), "
          f"{'A/A noise floor on' if args.aa_floor else 'no A/A noise floor'}, "
          f"{'paired rounds' if args.paired else 'unpaired'}, shared drift CV {args.drift:.0%}, seed {args.seed}")
    print()
    print("| CV | A/A false alarms (cases) | upper 95% | A/A inconclusive after rerun | A/A trials passing "
          f"| {args.slowdown:.0%} slowdown detected |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['cv']:.0%} | {r['false_alarm_rate']:.2%} | {r['false_alarm_upper95']:.2%} | "
              f"{r['aa_inconclusive_rate']:.2%} | {r['aa_trials_passing']:.1%} | {r['detection_rate']:.1%} |")
    print(f"\n({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
