"""`fp8bench bisect`: find the first commit between a good and a bad one that makes the cases slower."""

from __future__ import annotations

import argparse
import json
import secrets
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console

from fp8bench.analysis.bisect import BisectError, Probe, bisect, case_keys, device_of, save_evidence
from fp8bench.commands.console import table_console
from fp8bench.commands.gating import append_step_summary, gate_config
from fp8bench.commands.verb_interface import (
    EXIT_HARNESS_ERROR,
    UsageError,
    default_results_dir,
    harness_error,
    print_json,
)
from fp8bench.measure.interrupts import cleanup_on_stop
from fp8bench.orchestration.bisect_probes import ProbeRunner, commits_between
from fp8bench.render.bisect_markdown import render_markdown
from fp8bench.render.bisect_table import print_bisect_table
from fp8bench.results.runfile import check_writable, write_user_file


def check_outputs(folder: Path, markdown: Path | None, force: bool) -> None:
    """Refuse, before any probe, an --out that holds anything (every round file in it would be read as this
    bisect's own) and a --markdown the safe-write rules refuse (a link, a device, an existing file without --force)."""
    if folder.is_symlink() or (folder.exists() and (not folder.is_dir() or any(folder.iterdir()))):
        raise UsageError(f"--out {folder} is not a new or empty folder: bisect reads every round file in its folder "
                         "as its own; give a new --out")
    if markdown is not None:
        check_writable(markdown, force, "the Markdown body", "--markdown")


def execute(args: argparse.Namespace) -> int:
    run_args = args.run_args[1:] if args.run_args[:1] == ["--"] else args.run_args
    err = Console(stderr=True)
    try:
        if not run_args:
            raise UsageError("give the cases after `--`, e.g. `fp8bench bisect --good A --bad B -- --suite ci`")
        if args.min_rounds < 3:
            raise UsageError(f"--min-rounds must be >= 3, got {args.min_rounds}")
        config = gate_config(args)
        results = args.results_dir or default_results_dir()
        # Absolute: each probed commit's worker runs in its own worktree and must write where this process reads.
        folder = (args.out or results / "bisect" /
                  f"{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}").absolute()
        check_outputs(folder, args.markdown, args.force)
        repo = args.repo.resolve()
        good, bad, commits = commits_between(repo, args.good, args.bad)
    except (UsageError, ValueError, BisectError) as exc:  # RunFileError is a ValueError
        print(f"fp8bench bisect: error: {exc}", file=sys.stderr)
        return EXIT_HARNESS_ERROR
    steps = max(1, (len(commits)).bit_length())
    if not args.json:
        err.print(f"bisect: {len(commits)} commit(s) after good {good.sha[:12]} up to bad {bad.sha[:12]}; about "
                  f"{steps + 1} probe(s) of up to {args.step_budget:g} s each", markup=False, highlight=False)

    def on_probe(p: Probe) -> None:
        if args.json:
            return
        ratio = "" if p.ratio is None else f" x{p.ratio:.3f} [{p.ci_low:.3f}, {p.ci_high:.3f}]"
        err.print(f"bisect: {p.commit[:12]} {p.subject[:50]!r}: {p.outcome}{ratio}, {p.rounds} round(s), "
                  f"{p.seconds:.0f} s" + (f" ({p.reason})" if p.outcome == "skip" else ""),
                  markup=False, highlight=False)

    runner = ProbeRunner(repo, good, run_args, folder, config, args.setup, args.plugin, args.min_rounds,
                         args.round_timeout)
    # A second stop signal must not cut the removal of the worktrees short (measure.interrupts).
    with cleanup_on_stop() as teardown:
        teardown.add(runner.close)
        try:
            runner.start()
            result = bisect(good, bad, commits, runner, args.step_budget, on_probe)
        except (BisectError, OSError, ValueError) as exc:
            return harness_error("bisect", exc, expected=True)
        except Exception as exc:  # noqa: BLE001 - no verdict without a measurement
            return harness_error("bisect", exc, expected=False)
    return report(result, case_keys(result), run_args, folder, results, args)


def report(result: Any, cases: list[str], run_args: list[str], folder: Path, results: Path,
           args: argparse.Namespace) -> int:
    """Write bisect.json and bisect.md (and --markdown), keep the evidence, add the Markdown to the job summary,
    print the finding as a plain table (the JSON summary alone under --json); returns the exit code."""
    folder.mkdir(parents=True, exist_ok=True)
    md = render_markdown(result, cases, run_args, device_of(result))
    write_user_file(folder / "bisect.md", md.encode(), False, "the bisect report")
    payload = {"cases": cases, "run_args": run_args, **result.to_dict()}
    write_user_file(folder / "bisect.json", json.dumps(payload, indent=1, default=str).encode(), False,
                    "the bisect report")
    if args.markdown:
        write_user_file(args.markdown, md.encode(), args.force, "the Markdown body", "--markdown")
    evidence = save_evidence(result, cases, run_args, results)
    summary_error = append_step_summary(folder / "bisect.md")
    if summary_error:
        print(f"fp8bench bisect: {summary_error}", file=sys.stderr)
    if not args.json:
        console, _ = table_console("full")
        print_bisect_table(result, cases, run_args, console, folder / "bisect.md")
    print_json(json_summary(result, folder, evidence))
    return int(result.exit_code)


def json_summary(result: Any, folder: Path, evidence: Path) -> dict[str, Any]:
    """The one-line JSON summary printed last: the verdict, the first bad commit with its ratio, the cost, and
    where bisect.json and the kept evidence are."""
    ev = result.evidence()
    return {"verdict": result.verdict, "exit_code": result.exit_code, "reason": result.reason,
            "first_bad": result.first_bad.sha if result.first_bad else None,
            "subject": result.first_bad.subject if result.first_bad else None,
            "ratio": ev.ratio if ev else None, "ci_low": ev.ci_low if ev else None,
            "ci_high": ev.ci_high if ev else None, "rounds": result.rounds, "probes": len(result.probes),
            "seconds": round(result.seconds, 1), "suspects": [c.sha for c in result.suspects],
            "bisect_json": str(folder / "bisect.json"), "evidence": str(evidence)}
