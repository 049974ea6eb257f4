"""`fp8bench changes`: the commits at which a case's nightly measurements stepped, newest first."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from fp8bench.analysis.alerts import AlertRule, find_changes_and_alerts, new_alerts, rule_text
from fp8bench.analysis.bisect import bisected_commit, evidence_folder, load_evidence
from fp8bench.analysis.change_config import ChangeConfig
from fp8bench.analysis.changes import Change, history_records
from fp8bench.commands.store_access import check_filter_names, stored_names
from fp8bench.commands.verb_interface import (
    EXIT_OK,
    EXIT_REGRESSION,
    UsageError,
    print_json,
    store_target,
)
from fp8bench.core.escaping import one_line, term_text
from fp8bench.core.records import case_key
from fp8bench.core.repro import NoCommand, ranks_of, repro_argv, shell_line
from fp8bench.results.store import Store, StoreError, open_store
from fp8bench.results.store.queries import RecordFilter


def _config(args: argparse.Namespace) -> ChangeConfig:
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
    return args.results_dir or evidence_folder(store_target(args))


def bisect_command(store: Any, alert: Any) -> list[str] | None:
    """The argument vector of ``fp8bench bisect`` over an alert's range (last good .. first bad) for its case, with
    the case's ``fp8bench run`` arguments derived from the first bad run's record (:mod:`fp8bench.core.repro`,
    never its stored text); None when the run or the record is not found, when a field of the record cannot be part
    of a command, or when several ranks measured it (the record is named on stderr and the other alerts proceed)."""
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
        ranks = ranks_of(record, payload["run"])
        if ranks[0] > 1:  # bisect's probe runs are one process each
            raise NoCommand(f"measured by {ranks[0]} ranks under torchrun; bisect runs one process")
        argv = repro_argv(record, payload["run"].get("settings"), *ranks)
    except NoCommand as exc:
        print(f"fp8bench changes: no bisect for {one_line(c.case_key)} in run {one_line(c.first_bad_run)}: {exc}",
              file=sys.stderr)
        return None
    return ["fp8bench", "bisect", "--good", c.last_good_commit, "--bad", c.first_bad_commit, "--",
            *argv[argv.index("run") + 1:]]


def _with_bisect(store: Any, alert: Any) -> dict[str, Any]:
    """An alert for ``--json``: its bisect as an argument vector (run it without a shell: ``bisect_argv`` up to and
    excluding ``--``, then the case's run arguments) and as one quoted line for people."""
    argv = bisect_command(store, alert)
    return {**alert.to_dict(), "bisect_argv": argv, "bisect_command": shell_line(argv) if argv else None}


def render(changes: list[Change], title: str, bisected: dict[int, str] | None = None) -> None:
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
                      term_text((found or "-")[:10]), term_text(c.case_key), term_text(c.device), c.metric, size,
                      f"[{c.ci_low:.3f}, {c.ci_high:.3f}]", f"{c.p_value:.2g}", state)
    Console(width=200).print(table)


def execute(args: argparse.Namespace) -> int:
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
