"""`fp8bench selfcheck`: can this device's numbers be trusted? A PASS/FAIL table and a run file."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from fp8bench.commands.common import (
    BAD_INPUT,
    EXIT_CASE_FAILED,
    EXIT_DISK_FULL,
    EXIT_HARNESS_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    INTERRUPTED,
    ExitCodes,
    StepProgress,
    UsageError,
    add_json_flag,
    default_results_dir,
    print_json,
)

if TYPE_CHECKING:  # the checks and rich load only when the verb runs, not for `fp8bench --help`
    from rich.console import Console

    from fp8bench.measure.selfcheck import CheckResult, Probe, SelfcheckConfig

DESCRIPTION = """Check that fp8bench measures this device correctly. Run it first on a new GPU runner (and after a
driver, CUDA or torch upgrade); CI runs it before gating. Under 5 minutes; ends in a PASS/FAIL table and a run file.

checks:
  gemm_peak      BF16 and FP8 GEMM at 8192^3 (or the largest that fits) reach 50% of the device table's dense peak
  timer_vs_wall  the device timer (CUDA events) agrees with the wall clock over a 1 s loop within 5%
  sqnr           every FP8 recipe (E4M3, E5M2) and 4-bit recipe (E2M1) within 2 dB of the SQNR predicted from the format
  energy         NVML's energy counter advances, and J/iteration agrees with power x time within 20%
  backend        every available backend's smallest case runs, or is refused with a reason
  claims         each statement about GPUs that was checked only against fakes, probed in seconds (held/failed with
                 the figure; on the CPU, listed as the probes it would run): docs/gpu-claims.md
On the CPU, gemm_peak and energy are listed as "needs a GPU" (never as PASS), and cpu_ceiling checks the runner
against the CPU's measured matmul ceiling. What each check does, what a FAIL means and what to send in a bug
report: docs/selfcheck.md.

examples:
  fp8bench selfcheck
  fp8bench selfcheck --device cuda:1 --out results/selfcheck-cuda1.json
  fp8bench selfcheck --backend torch emulated --json
  fp8bench selfcheck --check gemm_peak timer_vs_wall      # rerun what failed
  fp8bench selfcheck --device cpu --check claims          # the GPU claims and the probe of each
"""
# CI gates on this verb, so its bad input takes 3, like gate's and ab's: never the number of a verdict.
EXIT_CODES = ExitCodes((
    (EXIT_OK, "every check that ran passed (checks that need a GPU are listed as such, never as passed)"),
    (EXIT_CASE_FAILED, "a check failed"),
    (EXIT_HARNESS_ERROR, "harness error (a check broke; the other checks still ran) or " + BAD_INPUT),
    (EXIT_DISK_FULL, "the disk filled: the run stopped, status 'failed: disk full'; the run file keeps every record "
                     "written before"),
    (EXIT_INTERRUPTED, INTERRUPTED + " in the run file"),
), bad_input=EXIT_HARNESS_ERROR)
DOC = "docs/selfcheck.md"
# The run's overall verdict (fp8bench.measure.selfcheck.exit_verdict: a str Enum, so its values key it) -> exit code.
VERDICT_EXIT = {"ERROR": EXIT_HARNESS_ERROR, "FAIL": EXIT_CASE_FAILED, None: EXIT_OK}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", help="auto (default: cuda:0 if present, else cpu), cpu, cuda, cuda:N")
    p.add_argument("--backend", nargs="+", default=None,
                   help="backends whose smallest case is checked (default: every registered backend)")
    p.add_argument("--check", nargs="+", default=None, metavar="CHECK",
                   help="run only these checks (default: all): gemm_peak, cpu_ceiling, timer_vs_wall, sqnr, energy, "
                        "backend, claims")
    p.add_argument("--out", type=Path, default=None,
                   help="run file path (default RESULTS/selfcheck/RUN_ID.json)")
    p.add_argument("--force", action="store_true", help="let --out replace an existing run file")
    p.add_argument("--results-dir", type=Path, default=None,
                   help="results folder (default ./results or $FP8BENCH_RESULTS_DIR)")
    add_json_flag(p)


def execute(args: argparse.Namespace) -> int:
    from fp8bench.core.devices import resolve_device
    from fp8bench.core.plugins import BACKENDS, load_all
    from fp8bench.measure.runner import new_run_id
    from fp8bench.measure.selfcheck import SelfcheckConfig, probe_for
    from fp8bench.results.runfile import check_writable

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
    from rich.console import Console

    from fp8bench.measure.selfcheck import planned_checks, run_selfcheck
    from fp8bench.results.record_stream import DiskFull

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
    from rich.table import Table

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
