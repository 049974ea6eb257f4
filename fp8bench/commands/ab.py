"""`fp8bench ab`: base and head interleaved in rounds on this machine, each in its own process, then the gate."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console

from fp8bench.analysis.gate.report import GateReport
from fp8bench.analysis.gate.sequential import SequentialConfig
from fp8bench.commands.console import StepProgress
from fp8bench.commands.gating import check_report_dir, gate_config, publish_report, write_report
from fp8bench.commands.verb_interface import (
    EXIT_HARNESS_ERROR,
    UsageError,
    default_results_dir,
    harness_error,
)
from fp8bench.core.commits import user_ref
from fp8bench.measure.interrupts import Teardown, cleanup_on_stop
from fp8bench.orchestration import ab as ab_rounds
from fp8bench.orchestration.ab import AbError, SideSpec, round_files, round_order
from fp8bench.orchestration.sequential_ab import run_sequential_ab
from fp8bench.results.runfile import check_writable


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
    check_report_dir(folder, force, "--out")
    for place in (folder, folder / "rerun"):
        for path in (p for paths in round_files(place, rounds).values() for p in paths):
            check_writable(path, force, what="a round's run file", flag="--out")


def sequential_config(args: argparse.Namespace) -> Any:
    """The sequential design of ``--budget`` (None without it); bad values raise :class:`UsageError`."""
    if args.budget is None:
        return None
    try:
        return SequentialConfig(args.budget, args.min_rounds, args.max_rounds)
    except ValueError as exc:
        raise UsageError(f"--budget/--min-rounds/--max-rounds: {exc}") from exc


def _sequential(args: argparse.Namespace, seq: Any, roots: dict[str, Path], envs: dict[str, dict[str, str]],
                run_args: list[str], folder: Path, config: Any, err: Any) -> GateReport:
    """``--budget``: rounds until every case is decided, with one progress line per look."""
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
    if not 2 <= args.rounds <= MAX_ROUNDS:
        raise UsageError(f"--rounds must be between 2 and {MAX_ROUNDS} (10 or more to gate reliably), got "
                         f"{args.rounds}")
    for flag, side in (("--base", args.base), ("--head", args.head)):
        if not _is_checkout(side):
            user_ref(side, flag)


def execute(args: argparse.Namespace) -> int:
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
    try:
        roots = {n: Path(v).resolve() for n, v in (("base", args.base), ("head", args.head)) if n not in refs}
        if refs:
            paths, _ = ab_rounds.temporary_checkouts(args.repo.resolve(), refs, teardown.add)
            roots.update(paths)
        err = Console(stderr=True)
        progress = StepProgress("ab", 2 * args.rounds, err, enabled=not args.json, unit="runs")
        on_round, on_rerun = _round_progress(progress, args.rounds, err, quiet=args.json)
        if seq is not None:
            report = _sequential(args, seq, roots, envs, run_args, folder, config, err)
        else:
            with progress:
                report = ab_rounds.run_ab(SideSpec("base", roots["base"], envs["base"]),
                                          SideSpec("head", roots["head"], envs["head"]), run_args, folder,
                                          args.rounds, config, not args.no_rerun, on_round=on_round,
                                          on_rerun=on_rerun, round_timeout_s=args.round_timeout,
                                          force=args.force).report
    except (AbError, OSError, ValueError) as exc:
        return harness_error("ab", exc, expected=True)
    except Exception as exc:  # noqa: BLE001 - no verdict without a measurement
        return harness_error("ab", exc, expected=False)
    return report
