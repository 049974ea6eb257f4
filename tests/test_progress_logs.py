"""Long verbs say how far they are in a log (stderr not a terminal): a line with the count and the time left, as
the work goes, and a bounded number of them."""

from __future__ import annotations

import re

from rich.console import Console

from fp8bench.cli import main
from fp8bench.commands.console import StepProgress

# "<verb>: <label>: 3/7 cases, 12 s spent, about 16 s left"
PROGRESS = re.compile(r"^(\w+): .*\b(\d+)/(\d+) \w+, \d+ s spent, about \d+ s left\)?$")


def progress_lines(err: str, verb: str) -> list[tuple[int, int]]:
    """(done, total) of each progress line of ``verb`` in ``err``."""
    found = (PROGRESS.match(line) for line in err.splitlines())
    return [(int(m[2]), int(m[3])) for m in found if m and m[1] == verb]


def test_a_slow_stretch_still_prints_every_ten_seconds_and_the_lines_stay_bounded():
    """200 steps of 1 s each (a fake clock): a tenth of the work is 20 s, so a line per tenth alone would leave
    the log silent for 20 s; a line also comes once 10 s have passed since the last one, and no more often."""
    console = Console(width=160, record=True, color_system=None, force_terminal=False)
    now = [0.0]
    stamps = []
    with StepProgress("run", 200, console, unit="cases", clock=lambda: now[0]) as progress:
        progress.start("gemm 64x64x64 bf16", announce=False)
        for _ in range(200):
            now[0] += 1.0
            before = len(console.export_text(clear=False).splitlines())
            progress.advance()
            if len(console.export_text(clear=False).splitlines()) > before:
                stamps.append(now[0])
    gaps = [b - a for a, b in zip([0.0, *stamps], stamps, strict=False)]
    assert max(gaps) <= 10.0, gaps
    assert len(stamps) <= 200 // 10 + 10  # one per 10 s plus one per tenth, at most


def test_run_piped_prints_a_line_per_case_with_count_and_time_left(tmp_path, capsys):
    rc = main(["run", "--shape", "16x16x16", "32x32x32", "--precision", "bf16", "fp32", "--no-store", "--no-phases",
               "--min-samples", "3", "--max-time", "0.02", "--out", str(tmp_path / "run.json"),
               "--results-dir", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert rc == 0, err
    lines = progress_lines(err, "run")
    assert lines and lines[-1] == (4, 4), err
    assert len(lines) <= 4 and [d for d, _ in lines] == sorted(d for d, _ in lines)
    # the case it finished is named
    assert re.search(r"^run: gemm\[m=16,n=16,k=16\] bf16 torch: 1/4 cases, ", err, re.M), err


def test_selfcheck_piped_prints_each_check_with_count_and_time_left(tmp_path, capsys):
    rc = main(["selfcheck", "--device", "cpu", "--check", "energy", "backend", "--backend", "emulated",
               "--out", str(tmp_path / "sc.json"), "--results-dir", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert rc == 0, err
    lines = progress_lines(err, "selfcheck")
    assert lines[-1] == (2, 2), err
    assert "selfcheck: backend (1/2 checks, " in err, err
