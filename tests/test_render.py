"""The renderers (:mod:`fp8bench.render`): every report fp8bench renders, byte for byte against the files under
tests/data/render/ (the run table full at two widths, compact, loaded and with its bandwidth table; the gate's
terminal table for each stored gate report; bisect's Markdown issue body and its plain table; the export formats),
and a renderer loads no torch.

The inputs are fixed values built here (and the stored gate reports of tests/data/gate_reports/), so a change of
wording, column or number format shows as a diff of a golden file. A deliberate change rewrites the file with the
new output, reviewed like code: ``FP8BENCH_WRITE_GOLDEN=1`` writes the files instead of comparing (and fails, so
that a run with it set never passes).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from fp8bench.analysis.bisect import SAME, SKIP, SLOWER, UNDECIDED, Commit, Probe, bisect
from fp8bench.analysis.gate.report import GateReport
from fp8bench.core.noise import HostLoad
from tests.gate_fixtures import payload, record

GOLDEN = Path(__file__).parent / "data" / "render"
GATE_REPORTS = Path(__file__).parent / "data" / "gate_reports"
WRITE = os.environ.get("FP8BENCH_WRITE_GOLDEN") == "1"


def check(name: str, text: str) -> None:
    """``text`` is the golden file ``name`` (or, with FP8BENCH_WRITE_GOLDEN=1, becomes it)."""
    path = GOLDEN / name
    if WRITE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        pytest.fail(f"wrote {path}: FP8BENCH_WRITE_GOLDEN=1 writes golden files and never passes")
    assert text == path.read_text(), f"{name} differs from its golden file"


# -- the run table ------------------------------------------------------------------------------------------------
def _measured(precision: str, median_s: float, **fields: object) -> dict:
    samples = [median_s * f for f in (0.99, 1.0, 1.0, 1.01)]
    return {**record(512, precision, samples), "iqr_s": 0.01 * median_s, "tflops": 2 * 512 ** 3 / median_s / 1e12,
            "pct_of_peak": 41.0, "phases": {"quantize": 0.2 * median_s, "gemm": 0.8 * median_s},
            "numerics": {"sqnr_db": 28.6, "rel_err": 0.037, "overflow_frac": 0.0, "underflow_frac": 1e-5},
            **fields}


def run_records() -> list[dict]:
    """One of each thing the run table shows: speedups, a noisy case, a percentage above the ceiling, variants of
    a precision, delayed scaling, launch overhead, reasons (shared, and one holding markup), every status."""
    why = "torch does not run mxfp8 on cpu: torch's CPU _scaled_mm has tensorwise and rowwise kernels only"
    return [
        _measured("bf16", 1e-3, phases={"gemm": 1e-3}, numerics={}),
        _measured("fp8_tensorwise", 0.8e-3, prequant_median_s=0.55e-3, launch_overhead_s=0.0),
        _measured("fp8_rowwise", 0.9e-3, iqr_s=0.3e-3, pct_of_peak=131.5, accumulation="full",
                  peak_source="measured 2026-11-26 at load average 7.75 on 2 CPU(s): best of 5"),
        _measured("fp8_delayed", 1.2e-3, backend="te", fp8_format="hybrid", scale_format="pow2",
                  delayed_scaling={"amax_history_len": 1024, "amax_compute_algo": "max", "margin": 0},
                  launch_overhead_s=2.5e-5),
        _measured("fp8_tensorwise", 1.1e3 * 1e-3 * 0.9),
        record(512, "mxfp8", [], status="skipped", reason=why),
        record(512, "nvfp4", [], status="skipped", reason=why),
        record(512, "fp16", [], status="failed", reason="RuntimeError: boom [bold]x[/]"),
        {**_measured("fp32", 3e-3), "status": "invalid", "reason": "timed output differs from a fresh call"},
    ]


def collective_records() -> list[dict]:
    shape = {"op": "all_reduce", "m": 4096, "n": 1024}
    out = []
    for precision, sent, seconds in (("bf16", 8_388_608, 2e-3), ("fp8_tensorwise", 4_194_816, 1.25e-3)):
        out.append({**_measured(precision, seconds), "workload": "collective", "shape": shape,
                    "phases": {"encode": 0.1 * seconds, "communicate": 0.8 * seconds, "decode": 0.1 * seconds},
                    "extra": {"comm_bytes": sent, "world_size": 2, "algbw_gbps": 4.19, "busbw_gbps": 2.1}})
    return out


def _console(width: int) -> Console:
    return Console(width=width, file=io.StringIO(), color_system=None, force_terminal=False)


def _run_table(records: list[dict], width: int, compact: bool = False, load: HostLoad | None = None) -> str:
    from fp8bench.render.run_table import render_bandwidths, render_table

    console = _console(width)
    render_table(records, "bf16", console, title="run r-golden on cpu", load=load, compact=compact)
    render_bandwidths(records, "bf16", console)
    return console.file.getvalue()


@pytest.mark.parametrize(("name", "width", "compact"), [("run_table_200.txt", 200, False),
                                                         ("run_table_100.txt", 100, False),
                                                         ("run_table_compact.txt", 80, True)])
def test_run_table(name, width, compact):
    check(name, _run_table(run_records(), width, compact))


def test_run_table_of_a_loaded_run_with_collectives():
    check("run_table_loaded_collective.txt",
          _run_table([*run_records()[:2], *collective_records()], 160, load=HostLoad(6.0, 2)))


# -- the gate's terminal table ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["gate", "gate_raw", "sqnr", "ab", "seq"])
def test_gate_terminal_table(name):
    from fp8bench.commands.verb_interface import LOG_COLUMNS
    from fp8bench.render.gate_table import print_gate_table

    console = _console(LOG_COLUMNS)  # a log's width, as CI draws it
    report = GateReport.from_json(json.loads((GATE_REPORTS / f"{name}.json").read_text()))
    print_gate_table(report, console, Path("results/gate/r-golden/report.md"))
    check(f"gate_table_{name}.txt", console.file.getvalue())


# -- bisect's Markdown --------------------------------------------------------------------------------------------
def _commits(n: int = 12) -> tuple[Commit, list[Commit]]:
    return Commit("9" * 40, "good"), [Commit(f"{i:02d}" + "c" * 38, f"change {i}: [x] `y` *z*") for i in range(n)]


def _measure(commits: list[Commit], slow_from: int, broken: tuple[int, ...] = (), never: tuple[int, ...] = ()):
    index = {c.sha: i for i, c in enumerate(commits)}

    def measure(commit: Commit, budget_s: float, attempt: int) -> Probe:
        i = index[commit.sha]
        if i in broken:
            return Probe(commit.sha, commit.subject, SKIP, reason="does not build: setup exited 1", seconds=3.0)
        if i in never:
            return Probe(commit.sha, commit.subject, UNDECIDED, 1.05, 0.9, 1.2, rounds=30, seconds=budget_s)
        slow = i >= slow_from
        return Probe(commit.sha, commit.subject, SLOWER if slow else SAME, 1.5 if slow else 1.0,
                     1.4 if slow else 0.98, 1.6 if slow else 1.02, rounds=8, seconds=41.0,
                     case="gemm[m=8,n=8,k=8] bf16 torch cpu")
    return measure


def bisect_results() -> dict[str, object]:
    """A found commit (past a broken one), a range left undecided, and a bad commit that is not slower."""
    good, commits = _commits()
    return {"found": bisect(good, commits[-1], commits, _measure(commits, 7, broken=(5,)), 60),
            "suspects": bisect(good, commits[-1], commits, _measure(commits, 7, never=(5, 6)), 60),
            "pass": bisect(good, commits[-1], commits, _measure(commits, 99), 60)}


@pytest.mark.parametrize("name", ["found", "suspects", "pass"])
def test_bisect_markdown(name):
    from fp8bench.render.bisect_markdown import render_markdown

    result = bisect_results()[name]
    result.seconds = 1234.4  # the search's own wall time: fixed, not measured
    md = render_markdown(result, ["gemm[m=8,n=8,k=8] bf16 torch cpu"], ["--shape", "8x8x8", "--note", "it's"],
                         "Test CPU")
    check(f"bisect_{name}.md", md)



@pytest.mark.parametrize("name", ["found", "suspects", "pass"])
def test_bisect_table(name):
    from fp8bench.commands.verb_interface import LOG_COLUMNS
    from fp8bench.render.bisect_table import print_bisect_table

    result = bisect_results()[name]
    result.seconds = 1234.4
    console = _console(LOG_COLUMNS)
    print_bisect_table(result, ["gemm[m=8,n=8,k=8] bf16 torch cpu"], ["--shape", "8x8x8", "--note", "it's"], console,
                       Path("results/bisect/b-golden/bisect.md"))
    check(f"bisect_table_{name}.txt", console.file.getvalue())

# -- exports ------------------------------------------------------------------------------------------------------
def export_rows():
    from fp8bench.results.export import rows_from_payloads

    first = [_measured("bf16", 1e-3, energy_j=0.02, avg_power_w=20.0),
             _measured("fp8_tensorwise", 0.8e-3, prequant_median_s=0.55e-3),
             record(512, "mxfp8", [], status="skipped", reason="=HYPERLINK(\"x\") not on cpu")]
    later = [_measured("bf16", 0.9e-3), {**_measured("fp8_rowwise", 0.7e-3), "interpreted": True}]
    return rows_from_payloads([payload("r-later", later, started_at="2026-11-22T00:00:00+00:00", commit="b" * 40),
                               payload("r-first", first, commit="a" * 40)])


@pytest.mark.parametrize(("name", "fmt", "metric"), [("export.csv", "csv", "median_s"),
                                                      ("export_gab.json", "github-action-benchmark", "median_s"),
                                                      ("export_gab_energy.json", "github-action-benchmark", "energy_j"),
                                                      ("export_bencher.json", "bencher", "median_s")])
def test_export(name, fmt, metric):
    from fp8bench.render.export import render

    check(name, render(export_rows(), fmt, metric).decode())


# -- what a renderer loads ----------------------------------------------------------------------------------------
LOAD_EVERY_RENDERER = """
import importlib, json, pkgutil, sys
import fp8bench.render as render
for module in pkgutil.iter_modules(render.__path__):
    importlib.import_module(f"fp8bench.render.{module.name}")
print(json.dumps({"torch": "torch" in sys.modules}))
"""


def test_no_renderer_imports_torch():
    """A renderer formats values that were measured elsewhere: a verb that only reports (gate, bisect's table,
    export) must not pay the second of CPU that importing torch costs. Asked in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", LOAD_EVERY_RENDERER], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"torch": False}
