"""A real two-round A/A run of this checkout, made once per test session and read by several tests.

``fp8bench ab`` starts a worker process per side (each imports torch and this checkout's fp8bench) and runs
``fp8bench run`` in each, round after round: seconds of fixed cost before the first round. The tests that read what
one short A/B run says and writes (its progress lines, the rerun of inconclusive cases, the masked side
environments, each side's dirty flag, the stored report) share this one run instead of starting their own, in
whichever test worker process they run.

Each side measures a copy of this checkout's code committed into a repository of its own, the head's with one
tracked file changed after the commit: so each side's dirty flag is known (base clean, head dirty) whatever other
tests, running beside these in the same test run, do to this checkout meanwhile.

Two rounds give each case two samples a side, under the gate's minimum of three: every case is inconclusive, so the
cases are rerun once in two more rounds and the run ends with exit 2. Each side is given an environment variable
holding :data:`SECRET`, which must appear in no report, output or store.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import subprocess
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


# Each side's dirty flag, as its checkout is made by :func:`committed_copy`.
DIRTY = {"base": False, "head": True}


def committed_copy(dest: Path, dirty: bool) -> Path:
    """This checkout's code (fp8bench, workloads, kernels, pyproject.toml) committed into a new repository at
    ``dest``; with ``dirty``, a comment appended to a tracked file after the commit."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "results", ".venv", ".git", "*.egg-info")
    for folder in ("fp8bench", "workloads", "kernels"):
        shutil.copytree(ROOT / folder, dest / folder, ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")
    git = ["git", "-C", str(dest), "-c", "user.name=fp8bench tests", "-c", "user.email=tests@fp8bench.invalid"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "checkout"]):
        subprocess.run([*git, *args], check=True, capture_output=True, timeout=120)
    if dirty:
        with (dest / "pyproject.toml").open("a") as f:
            f.write("# changed after the commit\n")
    return dest


def _run(folder: Path) -> dict[str, Any]:
    out, results = folder / "ab", folder / "results"
    sides = {name: committed_copy(folder / name, dirty) for name, dirty in DIRTY.items()}
    argv = ["ab", "--base", str(sides["base"]), "--head", str(sides["head"]), "--rounds", "2",
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
