#!/usr/bin/env python
"""Change-point detection quality on synthetic nightly histories with known steps.

Each history is ``--commits`` nightly points of one case, log-normal around 1 ms with the given coefficient of
variation (the noise levels of the gate study, ``scripts/gate_quality.py``: CV 1% to 5%). A *step* history is
slower by ``--step`` (10% by default) from a random commit on (at least ``--min-size`` commits from either end);
a *flat* history never changes. Every history goes through the real detector
(:func:`fp8bench.analysis.changes.find_changes`: PELT from ``ruptures``, then the size, interval and Mann-Whitney
filters), as ``fp8bench changes`` runs it.

Reported per CV:

* **detected**: share of step histories where a regression is reported within ``--tolerance`` commits of the
  true step (its first bad commit);
* **exact**: share where the first bad commit is exactly the first slowed commit;
* **false positives**: share of flat histories with any reported change (with a Wilson 95% upper bound), and the
  extra changes reported in step histories away from the true step, per history.

    python scripts/change_quality.py                        # 60 commits, 10% step, 500 histories per CV
    python scripts/change_quality.py --step 0.05 --json
    python scripts/change_quality.py --alerts --histories 100 --commits 40   # the alert rule, night by night

``--alerts`` replays each history night by night, as the nightly job sees it: after each night the real alert
rule (:func:`fp8bench.analysis.alerts.find_alerts`) runs on the history so far, once with ``--alert-nights`` (default 2
consecutive nights) and once with no confirmation (every open regression alerts, the detector alone). Reported:
flat histories that ever alerted (false alarms), step histories with an alert at the step (within the tolerance),
and how many nights after the first slow one the alert came.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import pandas as pd
from gate_quality import lognormal, wilson_upper  # the gate study's noise model and interval

from fp8bench.analysis.alerts import AlertRule, confirmed
from fp8bench.analysis.changes import METRICS, ChangeConfig, find_changes


def history(values: np.ndarray, name: str) -> pd.DataFrame:
    """One case's history as the store's typed columns would return it (one run per commit)."""
    n = values.size
    return pd.DataFrame({
        "id": range(n), "run_id": [f"{name}-r{i:03d}" for i in range(n)], "seq": 0, "case_key": name,
        "comparability_key": name, "device_name": "synthetic", "device": "cpu", "device_label": "synthetic",
        "git_commit": [f"{name}-c{i:03d}" for i in range(n)], "git_branch": "main", "commit_depth": range(1, n + 1),
        "commit_time": [f"2026-01-01T00:00:{i:02d}" if i < 60 else f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}"
                        for i in range(n)],
        "run_started_at": [f"2026-{1 + i // 28:02d}-{1 + i % 28:02d}T02:00:00+00:00" for i in range(n)],
        "median_s": values})


def evaluate(cv: float, args: argparse.Namespace, config: ChangeConfig, rng: np.random.Generator) -> dict:
    detected = exact = extra = flat_hits = 0
    for _ in range(args.histories):
        at = int(rng.integers(config.min_size, args.commits - config.min_size + 1))
        values = lognormal(rng, cv, (args.commits,), 1e-3)
        values[at:] *= 1 + args.step
        found = find_changes(history(values, "step"), config)
        near = [c for c in found if c.kind == "regression" and abs(c.position - at) <= args.tolerance]
        detected += bool(near)
        exact += any(c.position == at for c in near)
        extra += len(found) - (1 if near else 0)
        flat_hits += bool(find_changes(history(lognormal(rng, cv, (args.commits,), 1e-3), "flat"), config))
    n = args.histories
    return {"cv": cv, "histories": n, "detected": detected / n, "exact": exact / n,
            "false_positive_flat": flat_hits / n, "false_positive_flat_upper95": wilson_upper(flat_hits, n),
            "extra_changes_per_step_history": extra / n}


def replay(values: np.ndarray, name: str, config: ChangeConfig,
           rules: dict[str, AlertRule]) -> dict[str, list[tuple[int, int]]]:
    """Night by night, per rule: ``(nights seen, first bad position)`` of each alert, the night it first appeared.
    The change points of a night are found once and confirmed under every rule."""
    frame = history(values, name)
    seen: dict[str, dict[tuple, tuple[int, int]]] = {key: {} for key in rules}
    for nights in range(2 * config.min_size, values.size + 1):
        found = find_changes(frame.iloc[:nights], config)
        for key, rule in rules.items():
            for alert in confirmed(found, values[:nights], METRICS["median_s"], config, rule):
                seen[key].setdefault(alert.ident, (nights, alert.change.position))
    return {key: list(alerts.values()) for key, alerts in seen.items()}


def evaluate_alerts(cv: float, args: argparse.Namespace, config: ChangeConfig, rng: np.random.Generator) -> dict:
    rules = {"confirmed": AlertRule(args.alert_nights), "unconfirmed": AlertRule(0)}
    counts = {k: {"flat": 0, "detected": 0, "delays": []} for k in rules}
    for _ in range(args.histories):
        at = int(rng.integers(config.min_size, args.commits - config.min_size + 1))
        step = lognormal(rng, cv, (args.commits,), 1e-3)
        step[at:] *= 1 + args.step
        flat = lognormal(rng, cv, (args.commits,), 1e-3)
        flat_alerts, step_alerts = replay(flat, "flat", config, rules), replay(step, "step", config, rules)
        for key in rules:
            counts[key]["flat"] += bool(flat_alerts[key])
            hits = [n for n, pos in step_alerts[key] if abs(pos - at) <= args.tolerance]
            if hits:
                counts[key]["detected"] += 1
                counts[key]["delays"].append(min(hits) - at)
    n = args.histories
    row: dict = {"cv": cv, "histories": n}
    for key, c in counts.items():
        row[f"{key}_false_alarm_flat"] = c["flat"] / n
        row[f"{key}_false_alarm_upper95"] = wilson_upper(c["flat"], n)
        row[f"{key}_detected"] = c["detected"] / n
        row[f"{key}_median_nights_to_alert"] = float(np.median(c["delays"])) if c["delays"] else None
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cv", type=float, nargs="+", default=[0.01, 0.02, 0.03, 0.04, 0.05])
    parser.add_argument("--commits", type=int, default=60, help="commits per history (default 60)")
    parser.add_argument("--step", type=float, default=0.10, help="relative slowdown of a step (default 0.10)")
    parser.add_argument("--histories", type=int, default=500, help="histories of each kind per CV (default 500)")
    parser.add_argument("--tolerance", type=int, default=1, help="commits a detection may be off by (default 1)")
    parser.add_argument("--threshold", type=float, default=ChangeConfig().threshold)
    parser.add_argument("--penalty", type=float, default=ChangeConfig().penalty)
    parser.add_argument("--alerts", action="store_true", help="replay night by night through the alert rule")
    parser.add_argument("--alert-nights", type=int, default=AlertRule().nights,
                        help="--alerts: consecutive nights that confirm a regression (default 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    config = ChangeConfig(threshold=args.threshold, penalty=args.penalty)
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    rows = [(evaluate_alerts if args.alerts else evaluate)(cv, args, config, rng) for cv in args.cv]
    elapsed = time.perf_counter() - started
    if args.alerts and not args.json:
        print(f"{args.histories} step and {args.histories} flat histories per CV, {args.commits} nights, "
              f"{args.step:.0%} step, replayed night by night; alert rule: {args.alert_nights} consecutive nights "
              f"vs none ({elapsed:.0f} s)")
        print("| CV | flat histories alerting: confirmed | upper 95% | unconfirmed | step alerted (±"
              f"{args.tolerance}): confirmed | unconfirmed | median nights from the step to the alert: confirmed | "
              "unconfirmed |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['cv']:.0%} | {r['confirmed_false_alarm_flat']:.1%} | {r['confirmed_false_alarm_upper95']:.1%} "
                  f"| {r['unconfirmed_false_alarm_flat']:.1%} | {r['confirmed_detected']:.1%} | "
                  f"{r['unconfirmed_detected']:.1%} | {r['confirmed_median_nights_to_alert']} | "
                  f"{r['unconfirmed_median_nights_to_alert']} |")
        return 0
    if args.json:
        print(json.dumps({"config": vars(args), "rows": rows, "elapsed_s": round(elapsed, 1)}))
        return 0
    print(f"{args.histories} step and {args.histories} flat histories per CV, {args.commits} commits, "
          f"{args.step:.0%} step, threshold {config.threshold:.0%}, penalty {config.penalty}, "
          f"min size {config.min_size}, alpha {config.alpha} ({elapsed:.0f} s)")
    print(f"| CV | detected (within ±{args.tolerance}) | exact commit | false positives (flat histories) | "
          "upper 95% | extra changes per step history |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['cv']:.0%} | {r['detected']:.1%} | {r['exact']:.1%} | {r['false_positive_flat']:.2%} | "
              f"{r['false_positive_flat_upper95']:.2%} | {r['extra_changes_per_step_history']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
