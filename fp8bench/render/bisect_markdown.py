"""Bisect's finding as Markdown: the issue body the nightly workflow files, ``OUT/bisect.md`` and the job summary.

A hidden marker first (:func:`marker`: the workflow finds the issue of one regression by it and updates it), the
verdict with the exit code, then the finding: the first slower commit and its ratio to good, or why there is none
(and the commits that could not be told apart). Then the cases, the range and its cost, the ``fp8bench ab``
command that measures the step again (a fenced block: nothing in it renders) and one table row per probe.

The sentences and cells are shared with the plain table of :mod:`fp8bench.render.bisect_table`, each taking how a
commit and a text are quoted (``code``, ``text``): Markdown here, plain text there. Every string that came from git
or a run (subjects, reasons, case keys) is escaped (:mod:`fp8bench.core.escaping`), so a commit subject cannot
forge a heading, a link or a mention.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from fp8bench.analysis.bisect import BisectResult, Probe
from fp8bench.core.escaping import md_code, md_code_block, md_text
from fp8bench.core.repro import UnsafeField, no_command, shell_line

# First line of the Markdown issue body: the nightly workflow finds the issue of one regression by it.
MARKER_PREFIX = "<!-- fp8bench-bisect: "
PROBE_COLUMNS = ("commit", "subject", "outcome", "ratio [interval]", "rounds", "s", "why")

Quote = Callable[[str], str]


def marker(cases: Sequence[str], good: str, bad: str, device: str = "") -> str:
    """The hidden first line of a bisect's issue body: one issue per regressed case set, device and commit range (so
    a bisect that measured no case still has a marker of its own, and two GPU models that regressed on the same
    cases, whose case keys both say ``cuda:0``, get an issue each). ``device``: the device's name."""
    digest = hashlib.sha256("\n".join([good, bad, device, *sorted(cases)]).encode()).hexdigest()[:16]
    return f"{MARKER_PREFIX}{digest} -->"


def headline(result: BisectResult) -> tuple[str, str]:
    """The report's title and its verdict with the exit code: ``("fp8bench bisect", "REGRESSION (exit 1)")``."""
    return "fp8bench bisect", f"{result.verdict.upper()} (exit {result.exit_code})"


def ratio_text(p: Probe | None) -> str:
    """A probe's ratio to good with its always-valid interval (``1.500 [1.400, 1.600]``), or ``-``."""
    if p is None or p.ratio is None:
        return "-"
    interval = f" [{p.ci_low:.3f}, {p.ci_high:.3f}]" if p.ci_low is not None and p.ci_high is not None else ""
    return f"{p.ratio:.3f}{interval}"


def finding(result: BisectResult, code: Quote = str, text: Quote = str) -> list[str]:
    """The finding, a sentence each: the first slower commit and its ratio to good; or, without one, why, and the
    suspects when the range could not be narrowed to one commit."""
    if result.first_bad is None:
        suspects = ["Suspects: " + ", ".join(code(c.sha[:12]) for c in result.suspects)] if result.suspects else []
        return [text(result.reason), *suspects]
    ev = result.evidence()
    return [f"First slower commit: {code(result.first_bad.sha)} {text(result.first_bad.subject)}",
            f"Ratio to good {code(result.good.sha[:12])}: {ratio_text(ev)} (geometric mean of per-round "
            f"ratios, {ev.rounds if ev else 0} rounds, always-valid interval)"]


def cases_line(cases: Sequence[str], code: Quote = str) -> str:
    return f"Cases: {', '.join(code(c) for c in cases) or '-'}"


def range_line(result: BisectResult, code: Quote = str) -> str:
    """The searched range and what the search cost: probes, rounds, seconds."""
    return (f"Range: {code(result.good.sha[:12])} (good) .. {code(result.bad.sha[:12])} (bad), "
            f"{len(result.commits)} commit(s); {len(result.probes)} probe(s), {result.rounds} round(s), "
            f"{result.seconds:.0f} s.")


def again_command(result: BisectResult, run_args: Sequence[str]) -> str:
    """The ``fp8bench ab`` that measures the step again (good against the first bad commit, else against bad), as
    one shell line; a sentence saying why there is none when an argument cannot be put on a command line."""
    try:
        return shell_line(["fp8bench", "ab", "--base", result.good.sha[:12], "--head",
                           (result.first_bad or result.bad).sha[:12], "--budget", "600", "--", *run_args])
    except UnsafeField as exc:
        return no_command(str(exc))


def probe_cells(p: Probe) -> list[str]:
    """One probe's cells (:data:`PROBE_COLUMNS`) as plain text, its reason whole."""
    return [p.commit[:12], p.subject, p.outcome, ratio_text(p), str(p.rounds), f"{p.seconds:.0f}", p.reason or ""]


def render_markdown(result: BisectResult, cases: Sequence[str], run_args: Sequence[str], device: str = "") -> str:
    """An issue body: the finding, the command that reproduces the measurement, then every probe; ``device`` (its
    name) goes into the hidden marker."""
    title, verdict = headline(result)
    word, _, rest = verdict.partition(" ")
    lines = [marker(cases, result.good.sha, result.bad.sha, device), f"## {title}: **{word}** {rest}", ""]
    for sentence in finding(result, md_code, md_text):
        lines += [sentence, ""]
    lines += [cases_line(cases, md_code), "", range_line(result, md_code), "",
              "Measure it again:", "", *md_code_block(again_command(result, run_args)), "",
              "| " + " | ".join(PROBE_COLUMNS) + " |", "|---" * len(PROBE_COLUMNS) + "|"]
    for p in result.probes:
        commit, subject, *middle, why = probe_cells(p)
        lines.append("| " + " | ".join([md_code(commit), md_text(subject), *middle, md_text(why)]) + " |")
    return "\n".join(lines) + "\n"
