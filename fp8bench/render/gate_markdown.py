"""The gate report as Markdown: what a pull-request comment, a job summary and report.md show.

The verdict and exit code first, then the sides (commits, rounds, what a sample is), the counts, the regressed
cases, the method the verdicts came from and one table row per case, regressions first. The report is bounded
(:data:`MARKDOWN_BYTES`): a pull-request comment has a size limit, and past a screenful nobody reads rows, so cases
past the bound are counted and left to the JSON report, which keeps everything.

Every string that came from a run file or the command line (case keys, commits, reasons, notes) is escaped
(:mod:`fp8bench.core.escaping`): a failure reason cannot forge a heading, a verdict, an image, a link or a mention,
and a case key stays inside its cell.

The wording (:func:`headline`, :func:`sides_line`, :func:`method_sentence`, :func:`case_columns`,
:func:`case_cells`, :func:`sorted_cases`) is the report's own, so the plain table of
:mod:`fp8bench.render.gate_table` says the same things in the same order without Markdown.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from fp8bench.analysis.gate.decision import VERDICT_ORDER, CaseResult
from fp8bench.analysis.gate.metrics import METRICS, Metric
from fp8bench.analysis.gate.report import AbInfo, GateReport
from fp8bench.core.escaping import md_code, md_code_block, md_text

# First line of every Markdown report, invisible when rendered: the CI workflow finds the comment it posted on a
# pull request by this marker and updates it, instead of editing whichever bot comment came last.
REPORT_MARKER = "<!-- fp8bench-gate-report -->"
# The most a Markdown report holds, bytes: well under a pull-request comment's 65,536 characters and short enough
# to read; cases past it are counted and left to the JSON report.
MARKDOWN_BYTES = 20_000
WHY_CHARS = 300  # a case's reason in the Markdown table, characters


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def render_markdown(report: GateReport, max_rows: int = 200) -> str:
    """The report as Markdown for a pull-request comment: verdict, counts, then cases (regressions first), at
    most ``max_rows`` rows and :data:`MARKDOWN_BYTES` bytes."""
    metric = METRICS[report.config.metric]
    title, verdict = headline(report)
    word, _, rest = verdict.partition(" ")
    lines = [REPORT_MARKER, f"## {title}: **{word}** {rest}", "", sides_line(report, md_code), ""]
    lines += _unchecked_warning(report) + _ab_lines(report.ab)
    slower = report.slower_cases
    if slower:
        more = f" and {len(slower) - 20} more (slower_cases in the JSON report)" if len(slower) > 20 else ""
        lines += ["Regressed or broken: " + ", ".join(md_code(c) for c in slower[:20]) + more, ""]
    rows = sorted_cases(report)
    columns = case_columns(report, metric)
    lines += [method_sentence(report, metric), "", "| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
    tail = _note_lines(report) + _repro_lines(report)
    room = MARKDOWN_BYTES - len("\n".join([*lines, *tail]).encode()) - 200  # 200: the "more cases" row
    shown = 0
    for c in rows[:max_rows]:
        row = _case_row(c, metric)
        room -= len(row.encode()) + 1
        if room < 0:
            break
        lines.append(row)
        shown += 1
    if len(rows) > shown:
        lines.append(f"| ... {len(rows) - shown} more case(s) in the JSON report | | | | | | | |")
    lines += tail
    return "\n".join(lines) + "\n"


def headline(report: GateReport) -> tuple[str, str]:
    """The report's title and its verdict with the exit code, e.g. ``("fp8bench gate", "INCONCLUSIVE (exit 0
    under --fail-on regression)")``: one wording for the Markdown report and the terminal."""
    lenient = (" under --fail-on regression"
               if report.config.fail_on == "regression" and report.verdict in ("inconclusive", "noisy") else "")
    metric = METRICS[report.config.metric]
    named = "" if metric.name == "median_s" else f" on {metric.name}"
    return f"fp8bench gate{named}", f"{report.verdict.upper()} (exit {report.exit_code}{lenient})"


def sides_line(report: GateReport, code: Callable[[str], str] = str) -> str:
    """Base and candidate commits, their runs, the sample unit and the counts (``code``: how a commit is quoted)."""
    counts = ", ".join(f"{n} {v}" for v, n in report.counts.items() if n)
    return (f"base {code(report.base_git_commit or '?')} ({len(report.base_run_ids)} run(s)) vs candidate "
            f"{code(report.git_commit or '?')} ({len(report.cand_run_ids)} run(s)); samples: "
            f"{report.cand_sample_unit}; {counts or 'no cases'}.")


def sorted_cases(report: GateReport) -> list[CaseResult]:
    """The report's cases, regressions first, then by ratio (largest first) within a verdict."""
    order = {v: i for i, v in enumerate(VERDICT_ORDER)}
    return sorted(report.cases, key=lambda c: (order.get(c.verdict, 99), -(c.ratio or 0)))


def method_sentence(report: GateReport, metric: Metric) -> str:
    """The sentence naming the metric, the threshold and the method the verdicts came from."""
    cfg = report.config
    if not metric.ratio:
        floors = ", ".join(f"{p}: {db:g} dB" for p, db in cfg.sqnr_floors) or "none"
        return (f"Metric: {metric.description} ({metric.unit}, higher is better). A drop of more than "
                f"{cfg.sqnr_tolerance_db:g} dB, or a value under its precision's floor ({floors}), is a "
                "regression.")
    sequential = report.sequential
    if sequential:
        method = (f"{sequential.method} over {sequential.rounds} "
                  f"round(s), one-sided alpha {cfg.alpha:g} and a {cfg.confidence:.0%} sequence split over "
                  "the compared cases (Bonferroni); ratio: geometric mean of the per-round ratios.")
    else:
        method = (f"alpha {cfg.alpha:g} after Benjamini-Hochberg, {cfg.confidence:.0%} bootstrap interval of "
                  "median(cand)/median(base).")
    aa = f" A/A noise {cfg.aa_noise:.2%}." if cfg.aa_noise is not None else ""
    return (f"Metric: {metric.description} ({metric.unit}, lower is better). Threshold {cfg.threshold:.1%} "
            f"(per-case below), {method}{aa}")


def case_columns(report: GateReport, metric: Metric) -> list[str]:
    """The case table's column names (those of :func:`case_cells`)."""
    if not metric.ratio:
        return ["case", "verdict", "base dB", "candidate dB", "change dB", "floor dB", "n base/cand", "why"]
    p_column = "p worse" if report.sequential else "p worse (BH)"
    return ["case", "verdict", "ratio", "interval", p_column, "T", "n base/cand", "why"]


def case_cells(c: CaseResult, metric: Metric) -> list[str]:
    """One case's cells as plain text, its reason whole (each renderer escapes and cuts them for where they go)."""
    why = c.reason or ""
    verdict = f"{c.verdict}{' (rerun)' if c.rerun else ''}"
    n = f"{c.n_base}/{c.n_cand}"
    if metric.ratio:
        interval = "-" if c.ci_low is None else f"[{c.ci_low:.3f}, {c.ci_high:.3f}]"
        return [c.case, verdict, _fmt(c.ratio, ".3f"), interval, _fmt(c.p_slower_adj, ".2g"),
                _fmt(c.threshold, ".1%"), n, why]
    base, cand = (c.values.base_value, c.values.cand_value) if c.values else (None, None)
    change = None if base is None or cand is None else cand - base
    floor = c.values.floor_db if c.values else None
    return [c.case, verdict, _fmt(base, ".2f"), _fmt(cand, ".2f"), _fmt(change, "+.2f"), _fmt(floor, "g"), n, why]


def _case_row(c: CaseResult, metric: Metric) -> str:
    """One case's table row; its reason cut to :data:`WHY_CHARS` (the JSON report keeps it whole)."""
    case, *middle, why = case_cells(c, metric)
    why = md_text(why if len(why) <= WHY_CHARS else why[:WHY_CHARS - 3] + "...")
    return "| " + " | ".join([md_code(case), *middle, why]) + " |"


def _note_lines(report: GateReport) -> list[str]:
    """Each distinct note once, with how many times it was given when more than once."""
    counted = Counter(report.notes)
    return ["", *[f"- {md_text(n)}" + (f" ({k} times)" if k > 1 else "") for n, k in counted.items()]] \
        if counted else []


def _repro_lines(report: GateReport) -> list[str]:
    """Each regressed case's command, to measure it again on its own (a fenced block: nothing in it renders)."""
    commands = [(case, cmd) for case, cmd in report.repro.items() if cmd]
    if not commands:
        return []
    lines = ["", "Reproduce a regressed case:", ""]
    for case, cmd in commands:
        lines += [f"- {md_code(case)}", "", *md_code_block(cmd, indent="  ")]
    return lines


def _unchecked_warning(report: GateReport) -> list[str]:
    """A loud block when the gate passes a job without having compared anything."""
    if not report.unchecked_pass:
        return []
    return [f"> **Warning: nothing was compared.** Every one of the {len(report.cases)} case(s) is "
            "incomparable, missing or unmeasured, so this report checked no change; it exits 0 only because of "
            "--fail-on regression. Check that base and candidate ran on the same device, driver, CUDA, torch and "
            "cases.", ""]


def _ab_lines(ab: AbInfo | None) -> list[str]:
    """What an A/B report adds: each side's checkout state and the environment names given to it."""
    if ab is None:
        return []
    state = {True: "uncommitted changes (dirty)", False: "clean", None: "unknown"}
    line = (f"A/B: base checkout {state[ab.dirty.get('base')]}, head checkout {state[ab.dirty.get('head')]}; "
            f"{ab.rounds} interleaved round(s).")
    envs = [f"{side} {', '.join(md_code(name) for name in env)}"
            for side, env in (("base", ab.base_env), ("head", ab.head_env)) if env]
    return [line + (f" Extra environment (values masked): {'; '.join(envs)}." if envs else ""), ""]
