"""Figures the docs state about what a command prints or holds (counts and sizes, not timings) are the command's.

Each check reads the figure from the document's own words (so a doc that changes its figure is checked again) and
compares it with what the code gives: the constants the output is cut by, the documented-command test's own count
of blocks, the suites' case counts, and ``fp8bench doctor``'s line counts on a CPU. Timings are not checked here:
they are measurements, stated with their load average. Outputs of documented command blocks are checked by their
``doc-test: output:`` lines (tests/test_doc_commands.py); exit codes by tests/test_doc_exit_codes.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_doc_commands import ALL_BLOCKS

ROOT = Path(__file__).resolve().parents[1]


def stated(document: str, pattern: str) -> str:
    """The first group of ``pattern`` in ``document``'s text (whitespace collapsed: sentences wrap)."""
    text = " ".join((ROOT / document).read_text().split())
    match = re.search(pattern, text)
    assert match, f"{document} no longer states {pattern!r}: update this check with the doc"
    return match.group(1)


def number(text: str) -> int:
    return int(text.replace(",", ""))


def test_the_readme_counts_the_documented_blocks_that_run():
    ran, total = stated("README.md", r"\((\d+ of \d+) blocks run;").split(" of ")
    assert (int(ran), int(total)) == (sum(b.skip is None for b in ALL_BLOCKS), len(ALL_BLOCKS))


def test_the_report_size_and_reason_width_are_the_renderers():
    from fp8bench.render.gate_markdown import MARKDOWN_BYTES
    from fp8bench.render.gate_table import WHY_COLUMNS

    assert number(stated("docs/gate.md", r"`report.md` stays under ([\d,]+) bytes")) == MARKDOWN_BYTES
    assert number(stated("docs/gate.md", r"each reason cut to (\d+) characters")) == WHY_COLUMNS


def test_the_smoke_suites_case_counts(tmp_path, capsys):
    """``run --plan`` lists the suite's cases and which the backends' rules refuse on this device (the CPU's)."""
    from fp8bench.cli import main

    assert main(["run", "--suite", "smoke", "--plan", "--json", "--device", "cpu",
                 "--results-dir", str(tmp_path)]) == 0
    plan = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    measurable = sum(c["expect"] == "measured" for c in plan["cases"])
    assert plan["n_cases"] == number(stated("docs/method.md", r"\| `smoke` \((\d+) cases\)"))
    assert measurable == number(stated("docs/method.md", r"skipped \d+ of its (\d+) measurable cases"))


@pytest.mark.slow
@pytest.mark.parametrize(("flags", "pattern"), [
    ((), r"on one screen \((\d+) lines on this CPU at 100 columns\)"),
    (("--verbose",), r"`fp8bench doctor --verbose` \((\d+) lines\)"),
])
def test_doctor_prints_as_many_lines_as_backends_md_says(flags, pattern):
    """On a machine without CUDA, as the doc's figure was taken (a GPU adds its own rows)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("the documented count is the CPU's")
    out = subprocess.run([sys.executable, "-m", "fp8bench.cli", "doctor", *flags], capture_output=True, text=True,
                         env={**os.environ, "COLUMNS": "100"}, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = len((out.stdout + out.stderr).splitlines())
    assert lines == number(stated("docs/backends.md", pattern)), out.stdout
