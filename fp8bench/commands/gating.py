"""What the verbs that gate share when they run (``gate``, ``compare``, ``ab``, ``bisect``): the
:class:`~fp8bench.analysis.gate.config.GateConfig` their flags make (the flags themselves are in
:mod:`fp8bench.commands.gating_flags`), and how a report is written (report.md and report.json), stored, added to the CI
job summary and printed as a plain table. One module, so that no verb imports another.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from fp8bench.analysis.gate.config import GateConfig, parse_override
from fp8bench.analysis.gate.metrics import parse_sqnr_floor
from fp8bench.analysis.gate.report import GateReport, aa_noise_of
from fp8bench.commands.console import table_console
from fp8bench.commands.verb_interface import print_json
from fp8bench.core.redact import error_line
from fp8bench.render.gate_markdown import render_markdown
from fp8bench.render.gate_table import print_gate_table
from fp8bench.results.runfile import check_writable, json_safe, write_user_file
from fp8bench.results.store import StoreError, open_store

# GitHub Actions sets this to a file whose Markdown is shown on the run's summary page.
STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"

def gate_config(args: argparse.Namespace) -> GateConfig:
    aa = args.aa_noise
    if args.aa_report is not None:
        try:
            aa = max(aa or 0.0, aa_noise_of(GateReport.from_json(json.loads(args.aa_report.read_text()))))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"cannot read the A/A report {args.aa_report}: {exc}") from exc
    return GateConfig(threshold=args.threshold, overrides=tuple(parse_override(o) for o in args.override),
                      alpha=args.alpha, confidence=args.confidence, aa_noise=aa,
                      paired=getattr(args, "paired", False), fail_on=getattr(args, "fail_on", "inconclusive"),
                      allow_missing=args.allow_missing, allow_partial=args.allow_partial,
                      metric=args.metric, sqnr_tolerance_db=args.sqnr_tolerance,
                      sqnr_floors=tuple(parse_sqnr_floor(f) for f in args.sqnr_floor))

REPORT_FILES = ("report.md", "report.json")

def check_report_dir(folder: Path, overwrite: bool, flag: str) -> None:
    """Refuse, before anything is measured or compared, report files that must not be replaced (see
    :func:`fp8bench.results.runfile.check_writable`)."""
    for name in REPORT_FILES:
        check_writable(folder / name, overwrite, what="the report", flag=flag)

def write_report(report: GateReport, folder: Path, overwrite: bool = False,
                 flag: str = "--report-dir") -> tuple[Path, Path]:
    """Write report.md and report.json into ``folder``; returns their paths."""
    md, js = (folder / name for name in REPORT_FILES)
    write_user_file(md, render_markdown(report).encode(), overwrite, what="the report", flag=flag)
    write_user_file(js, json.dumps(json_safe(report.to_json()), indent=1, allow_nan=False).encode(), overwrite,
                    what="the report", flag=flag)
    return md, js

def store_report(report: GateReport, target: Any) -> str | None:
    """Add the report to the store; returns an error text instead of raising (the files are already written)."""
    try:
        open_store(target).add_gate_report(report.to_json())
    except Exception as exc:  # the verdict stands even if the database is down
        # One line: a driver's message, never SQLAlchemy's statement and parameter dump (the whole report).
        return str(exc) if isinstance(exc, StoreError) else error_line(exc)
    return None

def publish_report(report: GateReport, md: Path, js: Path, args: argparse.Namespace, verb: str,
                   store: Any, **summary: Any) -> int:
    """Store the written report (unless ``--no-store-report``), print it, and return its exit code.

    ``summary`` adds fields to the one-line JSON summary printed after the plain table.
    """
    if report.unchecked_pass:
        print(f"fp8bench {verb}: warning: nothing was compared (every case is incomparable, missing or unmeasured); "
              "this exits 0 only because of --fail-on regression", file=sys.stderr)
    store_error = None
    if not args.no_store_report:
        store_error = store_report(report, store)
        if store_error:
            print(f"fp8bench {verb}: report not stored ({store_error}); it is in {js}", file=sys.stderr)
    summary_error = append_step_summary(md)
    if summary_error:
        print(f"fp8bench {verb}: {summary_error}", file=sys.stderr)
    if args.json:
        print_json({**report.to_json(), "report_md": str(md), "report_json": str(js), "store_error": store_error})
    else:
        print_report(report, md)
        print_json({"verdict": report.verdict, "exit_code": report.exit_code,
                    "slower_cases": report.slower_cases, "report_md": str(md), **summary})
    return report.exit_code

def print_report(report: GateReport, md: Path | None = None) -> None:
    """The report on stdout as a plain table (:mod:`fp8bench.render.gate_table`) at a terminal's width or a log's;
    ``md``: where the Markdown report (for the pull request and the job summary) was written, if it was."""
    console, _ = table_console("full")
    print_gate_table(report, console, md)

def append_step_summary(report_md: Path) -> str | None:
    """Append the Markdown report to ``$GITHUB_STEP_SUMMARY`` when it is set; returns an error text, never raises
    (the verdict stands, and the report is on disk)."""
    target = os.environ.get(STEP_SUMMARY_ENV)
    if not target:
        return None
    try:
        with open(target, "a", encoding="utf-8") as summary:
            summary.write(report_md.read_text(encoding="utf-8") + "\n")
    except OSError as exc:
        return f"cannot append the report to ${STEP_SUMMARY_ENV} ({target}): {exc}"
    return None
