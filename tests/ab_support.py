"""A real two-round A/A run of this checkout, made once per test session and read by several tests.

``fp8bench ab`` starts a worker process per side (each imports torch and this checkout's fp8bench) and runs
``fp8bench run`` in each, round after round: seconds of fixed cost before the first round. The tests that read what
one short A/B run says and writes (its progress lines, the rerun of inconclusive cases, the masked side
environments, each side's dirty flag, the stored report) share this one run instead of starting their own, in
whichever test worker process they run.

Two rounds give each case two samples a side, under the gate's minimum of three: every case is inconclusive, so the
cases are rerun once in two more rounds and the run ends with exit 2. Each side is given an environment variable
holding :data:`SECRET`, which must appear in no report, output or store.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import pytest
from conftest import built_once

from fp8bench.cli import main

ROOT = Path(__file__).resolve().parents[1]
# Two tiny single-threaded CPU GEMM cases per round.
RUN_ARGS = ["--shape", "64x64x64", "--precision", "bf16", "fp32", "--backend", "torch", "--no-phases",
            "--threads", "1", "--min-samples", "10", "--max-time", "0.05", "--budget", "5"]
SECRET = "tok-PROBE-5ecret"
SIDE_ENV = {"head": ("FP8BENCH_TEST_TOKEN", SECRET), "base": ("DATABASE_URL", f"postgresql://u:{SECRET}@db/x")}


def _run(folder: Path) -> dict[str, Any]:
    out, results = folder / "ab", folder / "results"
    argv = ["ab", "--base", str(ROOT), "--head", str(ROOT), "--rounds", "2",
            "--head-env", "=".join(SIDE_ENV["head"]), "--base-env", "=".join(SIDE_ENV["base"]),
            "--out", str(out), "--results-dir", str(results), "--", *RUN_ARGS]
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(argv)
    return {"code": code, "out": str(out), "results": str(results), "stdout": stdout.getvalue(),
            "stderr": stderr.getvalue()}


def two_round_aa(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The run's exit code, its ``out`` and ``results`` folders, and what it printed (``stdout``, ``stderr``);
    made on first use in the test run, whichever worker process asks first."""
    info = built_once(tmp_path_factory, "two_round_aa", _run)
    return {**info, "out": Path(info["out"]), "results": Path(info["results"])}
