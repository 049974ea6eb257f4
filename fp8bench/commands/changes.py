"""`fp8bench changes`: the commits at which a case's nightly measurements stepped, newest first."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from fp8bench.commands.common import (
    BAD_INPUT,
    EXIT_OK,
    EXIT_REGRESSION,
    EXIT_USAGE,
    ExitCodes,
    UsageError,
    add_json_flag,
    add_store_flags,
    check_filter_names,
    print_json,
    store_target,
    stored_names,
)

if TYPE_CHECKING:  # each loads only when the verb runs, not for `fp8bench --help`
    from fp8bench.analysis.changes import Change, ChangeConfig
    from fp8bench.results.store import Store

DESCRIPTION = """Find the commits at which a case's measurements stepped up or down, per case and environment,
along each branch (commits in first-parent order), and list them newest first: open regressions by default.

Each series is cut with PELT (the `ruptures` library) on log(metric), then a cut is kept when the medians before
and after it differ by at least --threshold, with a bootstrap interval that excludes 1 and a one-sided
Mann-Whitney p-value under --alpha. A regression is open while the latest commits are still worse than the level
before it. Each change names the last good and the first bad commit. A change needs --min-size commits on each
side, so one slow night is never reported.

examples:
  fp8bench changes                                            # open regressions in ./results
  fp8bench changes --store postgresql://bench@db/fp8bench --branch main --all
  fp8bench changes --metric median_s energy_j --fail-on-new RUN_ID   # nightly CI: fail on a new alert

An open regression becomes an alert when it is confirmed by --alert-nights consecutive nights (the latest ones,
each worse than the level before by the threshold) or by `fp8bench bisect`, whose finding (kept in
RESULTS/bisects/) is shown as the bisected commit. --fail-on-new RUN_ID fails on an alert that was not one on the
history up to that run."""
EXIT_CODES = ExitCodes((
    (EXIT_OK, "listed (with --fail-on-new: no regression became an alert after that run)"),
    (EXIT_REGRESSION, "--fail-on-new: a regression became an alert after that run"),
    (EXIT_USAGE, BAD_INPUT + "; or the store cannot be read"),
))
DOC = "docs/history-and-changes.md"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from fp8bench.analysis.changes import DEFAULT_METRICS, METRICS, ChangeConfig
    from fp8bench.core.units import fraction_arg

    defaults = ChangeConfig()
    p.add_argument("--metric", nargs="+", default=list(DEFAULT_METRICS), choices=list(METRICS),
                   help="metrics to track (default median_s, the end-to-end time)")
    p.add_argument("--branch", nargs="+", default=[], help="only these branches (default: every branch)")
    for name in ("device", "workload", "backend", "precision"):
        p.add_argument(f"--{name}", nargs="+", default=[], help=f"only these {name}s")
    p.add_argument("--threshold", type=fraction_arg("--threshold"), default=defaults.threshold,
                   help=f"smallest change reported: 5%% or 0.05 (default {defaults.threshold * 100:g}%%)")
    p.add_argument("--threshold-db", type=float, default=defaults.threshold_db,
                   help=f"smallest SQNR change reported, dB (default {defaults.threshold_db})")
    p.add_argument("--alpha", type=float, default=defaults.alpha,
                   help=f"Mann-Whitney p-value a change must be under (default {defaults.alpha})")
    p.add_argument("--min-size", type=int, default=defaults.min_size,
                   help=f"fewest commits on each side of a change (default {defaults.min_size})")
    p.add_argument("--penalty", type=float, default=defaults.penalty,
                   help=f"PELT penalty in units of noise^2 x log(n); higher finds fewer (default {defaults.penalty})")
    p.add_argument("--all", action="store_true", help="also list closed regressions and improvements")
    p.add_argument("--fail-on-new", metavar="RUN_ID", default=None,
                   help="exit 1 if a regression became an alert after this run (see --alert-nights)")
    p.add_argument("--alert-nights", type=int, default=2, metavar="N",
                   help="an open regression alerts when its latest N nights are each worse than the level before "
                        "by the threshold, or when a bisect located it (default 2; 0: every open regression)")
    add_store_flags(p)
    add_json_flag(p)


def _config(args: argparse.Namespace) -> ChangeConfig:
    from fp8bench.analysis.changes import ChangeConfig

    return ChangeConfig(metrics=tuple(args.metric), threshold=args.threshold, threshold_db=args.threshold_db,
                        alpha=args.alpha, min_size=args.min_size, penalty=args.penalty)


def _since(store: Store, run_id: str) -> str:
    runs = store.runs_frame()
    match = runs[runs["run_id"] == run_id]
    if match.empty:
        raise UsageError(f"--fail-on-new {run_id}: no such run in store {store.url}")
    return str(match.iloc[0]["started_at"])


def evidence_dir(args: argparse.Namespace) -> Any:
    """Where stored bisects are read from: --results-dir, else the store's own results folder."""
    from fp8bench.analysis.bisect import evidence_folder

    return args.results_dir or evidence_folder(store_target(args))


def bisect_command(store: Any, alert: Any) -> list[str] | None:
    """The argument vector of ``fp8bench bisect`` over an alert's range (last good .. first bad) for its case, with
    the case's ``fp8bench run`` arguments derived from the first bad run's record (:mod:`fp8bench.core.repro`,
    never its stored text); None when the run or the record is not found, or a field of the record cannot be part
    of a command (the record is named on stderr and the other alerts proceed)."""
    from fp8bench.core.escaping import one_line
    from fp8bench.core.records import case_key
    from fp8bench.core.repro import UnsafeField, repro_argv, world_size_of
    from fp8bench.results.store import StoreError

    c = alert.change
    if not (c.last_good_commit and c.first_bad_commit):
        return None
    try:
        payload = store.run_payload(c.first_bad_run)
    except StoreError:
        return None
    record = next((r for r in payload["records"] if case_key(r) == c.case_key), None)
    if record is None:
        return None
    try:
        argv = repro_argv(record, payload["run"].get("settings"), world_size_of(record, payload["run"]))
    except UnsafeField as exc:
        print(f"fp8bench changes: no bisect for {one_line(c.case_key)} in run {one_line(c.first_bad_run)}: {exc}",
              file=sys.stderr)
        return None
    return ["fp8bench", "bisect", "--good", c.last_good_commit, "--bad", c.first_bad_commit, "--",
            *argv[argv.index("run") + 1:]]


def _with_bisect(store: Any, alert: Any) -> dict[str, Any]:
    """An alert for ``--json``: its bisect as an argument vector (run it without a shell: ``bisect_argv`` up to and
    excluding ``--``, then the case's run arguments) and as one quoted line for people."""
    from fp8bench.core.repro import shell_line

    argv = bisect_command(store, alert)
    return {**alert.to_dict(), "bisect_argv": argv, "bisect_command": shell_line(argv) if argv else None}


def render(changes: list[Change], title: str, bisected: dict[int, str] | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    from fp8bench.core.escaping import term_text

    table = Table(title=title)
    for name in ("first bad", "last good", "bisected", "case", "device", "metric", "change", "interval", "p",
                 "state"):
        table.add_column(name, overflow="fold")
    for c in changes:
        state = "open regression" if c.open else ("regression, fixed since" if c.kind == "regression"
                                                   else "improvement")
        unit = "dB" if c.metric == "sqnr_db" else ""
        size = f"{c.size:+.2f} {unit}" if unit else f"{c.size:+.1%}"
        found = (bisected or {}).get(id(c))
        table.add_row(term_text((c.first_bad_commit or "-")[:10]), term_text((c.last_good_commit or "-")[:10]),
                      term_text((found or "-")[:10]), term_text(c.case_key), term_text(c.device), c.metric, size, f"[{c.ci_low:.3f}, {c.ci_high:.3f}]", f"{c.p_value:.2g}", state)
    Console(width=200).print(table)


def execute(args: argparse.Namespace) -> int:
    from fp8bench.analysis.alerts import AlertRule, find_changes_and_alerts, new_alerts, rule_text
    from fp8bench.analysis.bisect import bisected_commit, load_evidence
    from fp8bench.analysis.changes import history_records
    from fp8bench.results.store import open_store
    from fp8bench.results.store.queries import RecordFilter

    config = _config(args)
    store = open_store(store_target(args), read_only=True)
    check_filter_names({"workload": args.workload, "backend": args.backend, "precision": args.precision},
                       stored_names(store))
    since = _since(store, args.fail_on_new) if args.fail_on_new else None
    flt = RecordFilter(device=tuple(args.device), workload=tuple(args.workload), backend=tuple(args.backend),
                       precision=tuple(args.precision), branch=tuple(args.branch))
    if args.alert_nights < 0:
        raise UsageError(f"--alert-nights must be >= 0, got {args.alert_nights}")
    rule = AlertRule(args.alert_nights)
    records = history_records(store, flt, config.metrics)
    bisects = load_evidence(evidence_dir(args))
    findings = find_changes_and_alerts(records, config, rule, bisects)
    found, alerts, depth = findings.changes, findings.alerts, findings.depth
    shown = found if args.all else [c for c in found if c.kind == "regression" and c.open]
    bisected = {id(c): hit["first_bad"]["sha"] for c in shown
                if (hit := bisected_commit(bisects, c.case_key, c.last_good_commit, c.first_bad_commit))}
    new = new_alerts(records, since, config, rule, bisects, alerts) if since is not None else []
    summary = {"store": store.url, "changes": len(found), "open_regressions": sum(
        c.kind == "regression" and c.open for c in found), "shown": len(shown), "alert_rule": rule_text(rule),
        "alerts": len(alerts), "new_since": args.fail_on_new, "new_alerts": len(new),
        "judged_histories": depth.judged}
    if args.json:
        print_json({**summary, "list": [{**c.to_dict(), "bisected_commit": bisected.get(id(c))} for c in shown],
                    "alert_list": [a.to_dict() for a in alerts],
                    "new": [_with_bisect(store, a) for a in new]})
    else:
        if shown:
            render(shown, "Changes, newest first" if args.all else "Open regressions, newest first", bisected)
        elif not depth.enough:
            # "No regression" would reassure where nothing could be judged: too few commits to find a step in.
            print(f"Not enough history to look for changes: the longest case history has {depth.longest} "
                  f"commit(s), and a change needs {depth.needed} ({config.min_size} on each side). Nothing can be "
                  "said yet, either way.")
        else:
            print("No " + ("change" if args.all else "open regression") + " found in the "
                  f"{depth.judged} case history(ies) long enough to judge.")
        for a in alerts:
            print(f"alert ({a.rule}): {a.change.case_key} at {(a.change.first_bad_commit or '-')[:10]}: {a.detail}")
        print_json(summary)
    return EXIT_REGRESSION if new else EXIT_OK
