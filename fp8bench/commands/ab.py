"""`fp8bench ab`: base and head interleaved in rounds on this machine, each in its own process, then the gate."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fp8bench.commands.common import (
    EXIT_HARNESS_ERROR,
    GATE_EXIT_CODES,
    STOPPED_ROW,
    ExitCodes,
    StepProgress,
    UsageError,
    add_json_flag,
    add_store_flags,
    default_results_dir,
    harness_error,
)
from fp8bench.core.units import positive_seconds

if TYPE_CHECKING:
    from rich.console import Console

    from fp8bench.analysis.gate.report import GateReport
    from fp8bench.measure.interrupts import Teardown

# A round of a CI suite takes minutes; one that has not answered in an hour is hung (a deadlocked kernel, a
# driver wait), and ends the A/B run instead of the CI job's own, much later, timeout.
DEFAULT_ROUND_TIMEOUT_S = 3600.0

DESCRIPTION = """Measure a base and a head version of the project on this machine, in interleaved rounds, then gate.

BASE and HEAD are each a folder holding a checkout of the project, or a git ref of --repo (checked out into a
temporary worktree that is removed afterwards). Each side runs in its own long-lived process that imports its
own checkout's fp8bench; rounds alternate which side goes first. Everything after `--` is passed to
`fp8bench run` (choose a suite or cases there). Inconclusive cases are rerun once. With --budget SECONDS the
run is sequential instead: rounds are added until every case is decided (slower, faster or same, by a confidence
sequence that stays valid however many rounds are looked at) or the budget is spent.

examples:
  fp8bench ab --base origin/main --head . --rounds 10 -- --suite ci
  fp8bench ab --base ../main-checkout --head . -- --shape 256x256x256 --precision bf16 fp8_rowwise --backend torch
  fp8bench ab --base origin/main --head . --budget 600 -- --suite ci     (sequential: decide each case in 10 min)
  fp8bench ab --base . --head . --head-env FP8BENCH_PLUGINS=my_slow_backend -- --suite smoke   (A/B of a plugin)

Reports are written first; with $GITHUB_STEP_SUMMARY set, the Markdown report is appended to the job summary."""

EXIT_CODES = ExitCodes((*GATE_EXIT_CODES.rows, STOPPED_ROW), bad_input=GATE_EXIT_CODES.bad_input)
DOC = "docs/gate.md"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from fp8bench.commands.gating import add_gate_flags, add_verdict_flags

    p.add_argument("--base", required=True, help="base checkout folder or git ref")
    p.add_argument("--head", default=".", help="head checkout folder or git ref (default: this folder)")
    p.add_argument("--repo", type=Path, default=Path("."), help="git repository the refs belong to (default .)")
    p.add_argument("--rounds", type=int, default=10, help="interleaved rounds per side (default 10; >= 10 to gate)")
    p.add_argument("--no-rerun", action="store_true", help="do not rerun inconclusive cases")
    p.add_argument("--budget", type=positive_seconds("--budget"), default=None, metavar="SECONDS",
                   help="sequential A/B: add rounds until every case is decided or SECONDS of rounds are spent "
                        "(an always-valid confidence sequence; --rounds is then ignored; docs/gate.md)")
    p.add_argument("--min-rounds", type=int, default=8,
                   help="with --budget: rounds before the first decision (default 8, at least 3)")
    p.add_argument("--max-rounds", type=int, default=None, help="with --budget: stop after this many rounds too")
    p.add_argument("--base-env", action="append", default=[], metavar="KEY=VALUE",
                   help="environment of the base (the reports name the variables; their values are masked)")
    p.add_argument("--head-env", action="append", default=[], metavar="KEY=VALUE",
                   help="environment of the head (the reports name the variables; their values are masked)")
    p.add_argument("--out", type=Path, default=None,
                   help="folder of round files and reports (default RESULTS/ab/TIME); files of an earlier A/B run "
                        "there are kept unless --force")
    p.add_argument("--force", action="store_true", help="let this run replace the round files and reports in --out")
    p.add_argument("--round-timeout", type=positive_seconds("--round-timeout"), default=DEFAULT_ROUND_TIMEOUT_S,
                   metavar="SECONDS",
                   help=f"a side's round that takes longer fails the A/B run, naming the side and the round "
                        f"(default {DEFAULT_ROUND_TIMEOUT_S:g})")
    add_gate_flags(p)
    add_verdict_flags(p)
    p.add_argument("--no-store-report", action="store_true", help="do not add the gate report to the store")
    add_store_flags(p)
    add_json_flag(p)
    p.add_argument("run_args", nargs=argparse.REMAINDER, help="-- then arguments for `fp8bench run`")


def _env(pairs: list[str], flag: str) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} {pair!r}: expected KEY=VALUE")
        env[key] = value
    return env


def check_outputs(folder: Path, rounds: int, force: bool) -> None:
    """Refuse, before any round runs, round files and reports in ``folder`` that must not be replaced (an earlier
    A/B run's, unless ``force``; a device, FIFO or link, ever), the rerun's included."""
    from fp8bench.commands.gating import check_report_dir
    from fp8bench.orchestration.ab import round_files
    from fp8bench.results.runfile import check_writable

    check_report_dir(folder, force, "--out")
    for place in (folder, folder / "rerun"):
        for path in (p for paths in round_files(place, rounds).values() for p in paths):
            check_writable(path, force, what="a round's run file", flag="--out")


def sequential_config(args: argparse.Namespace) -> Any:
    """The sequential design of ``--budget`` (None without it); bad values raise :class:`UsageError`."""
    from fp8bench.analysis.gate.sequential import SequentialConfig

    if args.budget is None:
        return None
    try:
        return SequentialConfig(args.budget, args.min_rounds, args.max_rounds)
    except ValueError as exc:
        raise UsageError(f"--budget/--min-rounds/--max-rounds: {exc}") from exc


def _sequential(args: argparse.Namespace, seq: Any, roots: dict[str, Path], envs: dict[str, dict[str, str]],
                run_args: list[str], folder: Path, config: Any, err: Any) -> GateReport:
    """``--budget``: rounds until every case is decided, with one progress line per look."""
    import time

    from fp8bench.orchestration.ab import SideSpec, round_order
    from fp8bench.orchestration.sequential_ab import run_sequential_ab

    started = time.monotonic()

    def on_round(r: int, side: str) -> None:
        if side == round_order(r)[1] and not args.json:  # both sides of round r have run
            err.print(f"ab: round {r + 1} done, {time.monotonic() - started:.0f} s of the {seq.budget_s:g} s budget",
                      markup=False, highlight=False)

    def on_look(rounds: int, open_cases: list[str]) -> None:
        if not args.json:
            err.print(f"ab: after {rounds} rounds: {len(open_cases)} case(s) undecided"
                      + (f" ({', '.join(open_cases[:3])}{', ...' if len(open_cases) > 3 else ''})"
                         if open_cases else ""), markup=False, highlight=False)

    return run_sequential_ab(SideSpec("base", roots["base"], envs["base"]),
                             SideSpec("head", roots["head"], envs["head"]), run_args, folder, seq, config,
                             force=args.force, on_round=on_round, on_look=on_look,
                             round_timeout_s=args.round_timeout)


# Each round runs both sides once: a thousand rounds of even a one-second suite is over half an hour, and a count far
# above it is a typo (it would allocate per-round bookkeeping before measuring anything).
MAX_ROUNDS = 1000


def _is_checkout(text: str) -> bool:
    return (Path(text) / "pyproject.toml").is_file()


def _round_progress(progress: StepProgress, rounds: int, err: Console,
                    quiet: bool) -> tuple[Callable[[int, str], None], Callable[[list[str]], None]]:
    """The callbacks that advance ``progress`` per run of a round and say on ``err`` (unless ``quiet``) which cases
    are rerun."""
    from fp8bench.orchestration.ab import round_order

    rerun = {"phase": ""}

    def on_round(r: int, side: str) -> None:
        if side == round_order(r)[0]:
            progress.start(f"{rerun['phase']}round {r + 1} of {rounds}, {side} first", announce=False)
        progress.advance()

    def on_rerun(cases: list[str]) -> None:
        rerun["phase"] = "rerun "
        progress.extend(2 * rounds)
        if not quiet:
            err.print(f"ab: {len(cases)} case(s) inconclusive after {rounds} rounds; rerunning them once in "
                      f"{rounds} more rounds: {', '.join(cases)}", markup=False, highlight=False)

    return on_round, on_rerun


def _check_rounds_and_sides(args: argparse.Namespace) -> None:
    """Refuse, before anything starts, a round count out of range and a side git would read as an option."""
    from fp8bench.core.commits import user_ref

    if not 2 <= args.rounds <= MAX_ROUNDS:
        raise UsageError(f"--rounds must be between 2 and {MAX_ROUNDS} (10 or more to gate reliably), got "
                         f"{args.rounds}")
    for flag, side in (("--base", args.base), ("--head", args.head)):
        if not _is_checkout(side):
            user_ref(side, flag)


def execute(args: argparse.Namespace) -> int:
    from fp8bench.commands.gating import gate_config, publish_report, write_report
    from fp8bench.measure.interrupts import cleanup_on_stop

    run_args = args.run_args[1:] if args.run_args[:1] == ["--"] else args.run_args
    try:  # bad input is a harness error (3) here: 2 would read as "inconclusive"
        if not run_args:
            raise UsageError("give the cases after `--`, e.g. `fp8bench ab --base origin/main -- --suite ci`")
        seq = sequential_config(args)
        _check_rounds_and_sides(args)
        config = gate_config(args)
        envs = {"base": _env(args.base_env, "--base-env"), "head": _env(args.head_env, "--head-env")}
        results = args.results_dir or default_results_dir()
        # Absolute: each side's worker runs in its own checkout (a temporary worktree for a git ref), and must write
        # its rounds where this process reads them.
        folder = (args.out or results / "ab" / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")).absolute()
        if seq is None:
            check_outputs(folder, args.rounds, args.force)
        else:
            from fp8bench.commands.gating import check_report_dir

            check_report_dir(folder, args.force, "--out")
    except (UsageError, ValueError) as exc:
        print(f"fp8bench ab: error: {exc}", file=sys.stderr)
        return EXIT_HARNESS_ERROR
    refs = {n: v for n, v in (("base", args.base), ("head", args.head)) if not _is_checkout(v)}
    # A second stop signal must not cut the removal of the worktrees short (measure.interrupts).
    with cleanup_on_stop() as teardown:
        report = _measure(args, seq, refs, envs, run_args, folder, config, teardown)
    if isinstance(report, int):
        return report
    assert report.ab is not None
    report = replace(report, ab=replace(report.ab, refs=refs))
    md, js = write_report(report, folder, overwrite=args.force, flag="--out")
    return publish_report(report, md, js, args, "ab", args.store or results, folder=str(folder))


def _measure(args: argparse.Namespace, seq: Any, refs: dict[str, str], envs: dict[str, dict[str, str]],
             run_args: list[str], folder: Path, config: Any, teardown: Teardown) -> GateReport | int:
    """Check the git-ref sides out (removed by ``teardown``) and run the rounds: the gate report, or the exit code
    of a harness error."""
    from rich.console import Console

    from fp8bench.orchestration.ab import AbError, SideSpec, run_ab, temporary_checkouts

    try:
        roots = {n: Path(v).resolve() for n, v in (("base", args.base), ("head", args.head)) if n not in refs}
        if refs:
            paths, _ = temporary_checkouts(args.repo.resolve(), refs, teardown.add)
            roots.update(paths)
        err = Console(stderr=True)
        progress = StepProgress("ab", 2 * args.rounds, err, enabled=not args.json, unit="runs")
        on_round, on_rerun = _round_progress(progress, args.rounds, err, quiet=args.json)
        if seq is not None:
            report = _sequential(args, seq, roots, envs, run_args, folder, config, err)
        else:
            with progress:
                report = run_ab(SideSpec("base", roots["base"], envs["base"]),
                                SideSpec("head", roots["head"], envs["head"]), run_args, folder, args.rounds, config,
                                not args.no_rerun, on_round=on_round, on_rerun=on_rerun,
                                round_timeout_s=args.round_timeout, force=args.force).report
    except (AbError, OSError, ValueError) as exc:
        return harness_error("ab", exc, expected=True)
    except Exception as exc:  # noqa: BLE001 - no verdict without a measurement
        return harness_error("ab", exc, expected=False)
    return report
