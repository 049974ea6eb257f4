"""`fp8bench selfcheck`: can this device's numbers be trusted? A PASS/FAIL table and a run file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from fp8bench.commands.console import StepProgress
from fp8bench.commands.verb_interface import (
    EXIT_CASE_FAILED,
    EXIT_DISK_FULL,
    EXIT_HARNESS_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    UsageError,
    default_results_dir,
    print_json,
)
from fp8bench.core.devices import resolve_device
from fp8bench.core.plugins import BACKENDS, load_all
from fp8bench.measure.runner import new_run_id
from fp8bench.measure.selfcheck import (
    CheckResult,
    Probe,
    SelfcheckConfig,
    planned_checks,
    probe_for,
    run_selfcheck,
)
from fp8bench.results.record_stream import DiskFull
from fp8bench.results.runfile import check_writable

# The run's overall verdict (fp8bench.measure.selfcheck.exit_verdict: a str Enum, so its values key it) -> exit code.
VERDICT_EXIT = {"ERROR": EXIT_HARNESS_ERROR, "FAIL": EXIT_CASE_FAILED, None: EXIT_OK}


def execute(args: argparse.Namespace) -> int:
    try:
        load_all()
        for name in args.backend or []:
            BACKENDS.get(name)
        device = resolve_device(args.device)
        run_id = new_run_id()
        run_file = args.out or (args.results_dir or default_results_dir()) / "selfcheck" / f"{run_id}.json"
        config = SelfcheckConfig(backends=tuple(args.backend) if args.backend else None,
                                 checks=tuple(args.check) if args.check else None)
        check_writable(run_file, overwrite=args.force)
        probe = probe_for(device, args.results_dir or default_results_dir())
    except (UsageError, ValueError, RuntimeError) as exc:  # bad input, or a device that cannot be probed
        print(f"fp8bench selfcheck: error: {exc}", file=sys.stderr)
        return EXIT_HARNESS_ERROR
    return _run(args, probe, config, run_file, run_id)


def _run(args: argparse.Namespace, probe: Probe, config: SelfcheckConfig, run_file: Path, run_id: str) -> int:
    err = Console(stderr=True)
    progress = StepProgress("selfcheck", len(planned_checks(probe, config)), err, enabled=not args.json,
                            unit="checks")

    def next_check(name: str) -> None:
        if progress.label:  # the check before it has ended
            progress.advance(quiet=True)
        progress.start(name)

    with progress:
        try:
            outcome = run_selfcheck(probe, config, run_file, run_id=run_id, on_check=next_check)
        except DiskFull as exc:  # before any check: the run file could not even be started
            err.print(f"fp8bench selfcheck: error: disk full: {exc}; nothing was checked", markup=False,
                      soft_wrap=True)
            return EXIT_DISK_FULL
        progress.advance()
    summary = {**outcome.summary(), "device": str(probe.device), "device_name": probe.device_name}
    if args.json:
        print_json(summary)
    else:
        _render(outcome.results, probe, Console(width=max(Console().width, 160)))
        if outcome.interrupted:
            err.print(f"[yellow]interrupted:[/] {len(outcome.records)} cases kept in {run_file}")
        print_json({k: v for k, v in summary.items() if k != "checks"})
    if outcome.disk_full:
        err.print(f"fp8bench selfcheck: error: disk full ({outcome.disk_full}); the records written before are in "
                  f"{run_file}", markup=False, soft_wrap=True)
        return EXIT_DISK_FULL
    if outcome.interrupted:
        return EXIT_INTERRUPTED
    return VERDICT_EXIT[outcome.verdict]


_STYLE = {"PASS": "green", "FAIL": "bold red", "ERROR": "bold red", "needs a GPU": "yellow", "not run": "dim"}


def _render(results: list[CheckResult], probe: Probe, console: Console) -> None:
    table = Table(title=f"fp8bench selfcheck on {probe.device} ({probe.device_name})", header_style="bold",
                  show_lines=False)
    for col in ("check", "subject", "verdict", "s", "measured against the expectation"):
        table.add_column(col, overflow="fold", justify="right" if col == "s" else "left")
    for r in results:
        style = _STYLE.get(r.verdict.value, "")
        table.add_row(r.check, r.subject, f"[{style}]{r.verdict.value}[/]", f"{r.seconds:.1f}", r.detail)
    console.print(table)
    counts: dict[str, int] = {}
    for r in results:
        counts[r.verdict.value] = counts.get(r.verdict.value, 0) + 1
    console.print("  ".join(f"{v}: {n}" for v, n in counts.items()))
