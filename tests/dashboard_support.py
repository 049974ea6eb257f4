"""A fixture store for the dashboard tests, filled by real CPU runs of the fp8bench command line.

A short ``fp8bench converge`` (BF16 and FP8 loss curves for the Numerics page), then two small runs of the same
GEMM cases (so Compare and History have two points) and a real ``fp8bench gate`` between them (so History has a
verdict to mark). Built once per test session and shared by the AppTest and browser tests.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from fp8bench.cli import main

# Tiny and fast on a 2-core CPU: one shape, the torch and emulated backends, a BF16 baseline, a row-wise FP8
# recipe torch runs natively, and MXFP8, which torch skips on the CPU (so the store holds a skipped record too).
RUN_ARGS = ["run", "--shape", "128x128x128", "--precision", "bf16", "fp8_rowwise", "mxfp8",
            "--backend", "torch", "emulated", "--budget", "20", "--max-time", "0.2", "--json"]
# A one-layer decoder on short sequences: a few seconds per curve on the CPU, still a real training loop.
CONVERGE_ARGS = ["converge", "--shape", "tiny,seq=16,batch=2,layers=1", "--steps", "8", "--window", "2",
                 "--precision", "bf16", "fp8_rowwise", "--no-control", "--stats-every", "0", "--json"]


def as_read(markdown: str) -> str:
    """Markdown source as the reader sees it: the page escapes every stored or typed string (backslash before
    each punctuation character, an invisible word joiner to stop autolinks), so tests compare against this."""
    return re.sub(r"\\(.)", r"\1", markdown).replace("\u2060", "")


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def fp8bench(*args: str | Path, check: bool = True) -> CliResult:
    """Run the real command line in this process (no second torch import), capturing its output."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    result = CliResult(code, out.getvalue(), err.getvalue())
    if check and code != 0:
        raise AssertionError(f"fp8bench {' '.join(map(str, args))} exited {code}:\n{result.stderr[-2000:]}")
    return result


def build_store(results: Path) -> dict[str, object]:
    """Fill ``results`` (run files + SQLite store) and return what was made."""
    converge = json.loads(fp8bench(*CONVERGE_ARGS, "--results-dir", results).stdout.strip().splitlines()[-1])
    run_ids = []
    for _ in range(2):
        out = fp8bench(*RUN_ARGS, "--results-dir", results).stdout.strip().splitlines()[-1]
        run_ids.append(json.loads(out)["run_id"])
    files = [results / "runs" / f"{r}.json" for r in run_ids]
    gate = fp8bench("gate", *files, "--results-dir", results, "--json", check=False)
    if gate.returncode not in (0, 1, 2):
        raise AssertionError(f"fp8bench gate failed ({gate.returncode}):\n{gate.stderr[-2000:]}")
    return {"dir": results, "run_ids": run_ids, "run_files": files, "converge_run_id": converge["run_id"],
            "gate_verdict": json.loads(gate.stdout.strip().splitlines()[-1]).get("verdict")}


def shared_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The store, built on first use in this test session and reused by every later caller."""
    results = tmp_path_factory.getbasetemp() / "dashboard_store"
    made = results / "fixture.json"
    if not made.exists():
        results.mkdir(exist_ok=True)
        info = build_store(results)
        made.write_text(json.dumps(info, default=str))
    info = json.loads(made.read_text())
    return {**info, "dir": Path(info["dir"]), "run_files": [Path(f) for f in info["run_files"]]}
