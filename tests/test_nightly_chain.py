"""The nightly workflow's chain, end to end on a generated git history: nightly runs into a store, ``changes
--fail-on-new --json``, then one ``bisect`` per new alert with the argument vector ``changes`` gave, and the issue.

The history is this project's code in 13 commits (``scripts/bisect_history.py``); commit 7 makes the torch GEMM do
its work five times. Nine nights measure commits 0-3 and 5 (fast) and 9-12 (slow), each with that commit's own code
(a worker that imports the checkout, as ``ab`` does) and the record ingested into a SQLite store. Each night's run
also holds one hostile record: a backend name and a stored ``repro`` full of shell syntax (backticks, ``$(...)``,
``;``, an unbalanced quote), each of which would create a file if a shell ever ran it.

Then the workflow's own two steps run, their ``run:`` scripts taken from ``.github/workflows/fp8bench.yml`` and run
by bash as the runner would, with ``gh`` replaced by a script that keeps the issue it is asked to create. The
regression became an alert on the last night, so ``changes`` exits 1 and lists it with its bisect range (last good
night, commit 5, to first bad night, commit 9); the hostile record's alert is named and gets no bisect. The bisect
step runs ``fp8bench bisect`` from the argument vector, with no shell parsing, and must name commit 7.

Two things differ from the nightly job: each night's run is stored with a quiet machine's load average (this
machine is shared; a night measured under load is never alerted on), and ``fp8bench`` on the steps' ``PATH`` adds
``--threshold 0.5 --min-rounds 3`` to ``bisect``, so that a probe on this shared 2-core CPU decides ``same`` within a
few rounds (the slowdown is 5x, far outside either threshold). The job's GPU steps (doctor, selfcheck, the suites)
are replaced by the nights above.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fp8bench.cli import main
from fp8bench.orchestration.ab import SideSpec, Worker
from fp8bench.results.runfile import read_run_file

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "fp8bench.yml"
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
# Commit indices measured, one night each; commit 7 is the slow one. `changes` keeps a step whose Mann-Whitney
# p-value over per-commit medians is under 0.01: five nights before and four after (p = 1/126) are the fewest that
# show it, and with three after (p = 1/56) it does not, so the alert is new on the last night.
NIGHTS = (0, 1, 2, 3, 5, 9, 10, 11, 12)
RUN_ARGS = ["--shape", "64x64x64", "--precision", "bf16", "--backend", "torch", "--device", "cpu", "--no-phases",
            "--threads", "1", "--min-samples", "10", "--max-time", "0.05", "--budget", "5"]
# Each would create a PWN* file in the working directory if any shell ran it (a store keeps 40 characters of a
# backend name).
HOSTILE_BACKEND = "t`touch PWN1`$(touch PWN2);touch PWN3"
HOSTILE_REPRO = "fp8bench run --shape '64x64x64; touch PWN4; echo $(touch PWN5)"


def _history(folder: Path) -> dict:
    spec = importlib.util.spec_from_file_location("bisect_history", ROOT / "scripts" / "bisect_history.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_history(folder, commits=13, slow_at=7, factor=5)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def _night(repo: Path, sha: str, folder: Path, store: Path) -> dict:
    """Measure ``sha`` with its own code (run file in ``folder``), add the hostile record, ingest both; the run."""
    _git(repo, "checkout", "-q", sha)
    worker = Worker(SideSpec("head", repo, {"FP8BENCH_GIT_BRANCH": "main", "OMP_WAIT_POLICY": "PASSIVE"}))
    try:
        worker.run(RUN_ARGS, folder / f"{sha[:12]}.json", timeout_s=600, what=f"night of {sha[:12]}")
    finally:
        worker.close()
    night = read_run_file(folder / f"{sha[:12]}.json")
    # The nights stand for a GPU runner's, which runs alone: the load average this shared machine had during the
    # run (the other test worker's included) is replaced by a quiet one. A night measured under load is never
    # alerted on (test_changes.py checks that rule), so a busy machine would otherwise leave the chain nothing to do.
    night["run"]["host"]["load"] = {"load_avg_1m": 0.5, "logical_cpus": 2, "overloaded": False}
    (real,) = night["records"]
    hostile = {**real, "backend": HOSTILE_BACKEND, "repro": HOSTILE_REPRO, "seq": real["seq"] + 1}
    path = folder / f"{sha[:12]}-with-hostile.json"
    path.write_text(json.dumps({"schema_version": 1, "run": night["run"], "records": [real, hostile]}))
    assert main(["ingest", str(path), "--store", str(store)]) == 0  # in process: a night's ingest is no subject here
    return night["run"]


def _step(name: str) -> dict:
    workflow = yaml.safe_load(WORKFLOW.read_text())
    (step,) = [s for s in workflow["jobs"]["nightly"]["steps"] if s["name"] == name]
    return step


def _tools(folder: Path) -> Path:
    """``gh`` that keeps each issue it is asked to create, and ``fp8bench`` with bisect's test thresholds."""
    folder.mkdir()
    gh = folder / "gh"
    gh.write_text(f"""#!/bin/bash
printf '%s\\0' "$@" >> {shlex.quote(str(folder / 'gh.calls'))}
printf '\\0\\n' >> {shlex.quote(str(folder / 'gh.calls'))}
if [ "$1 $2" = "issue create" ]; then
  while [ $# -gt 0 ]; do [ "$1" = --body-file ] && cp "$2" {shlex.quote(str(folder / 'issue.md'))}; shift; done
fi
""")
    real = Path(sys.executable).parent / "fp8bench"
    tool = folder / "fp8bench"
    tool.write_text(f"""#!/bin/bash
if [ "$1" = bisect ]; then shift; exec {shlex.quote(str(real))} bisect --threshold 0.5 --min-rounds 3 "$@"; fi
exec {shlex.quote(str(real))} "$@"
""")
    for script in (gh, tool):
        script.chmod(0o755)
    return folder


def _run_step(name: str, repo: Path, env: dict[str, str], context: dict[str, str]) -> subprocess.CompletedProcess:
    """The step's ``run:`` script as GitHub Actions runs it (``shell: bash``), its ``env:`` expressions taken from
    ``context`` (``steps.before.outputs.run_id`` -> value); an expression not in it fails the test."""
    step = _step(name)
    own = {k: EXPR.sub(lambda m: context[m[1]], str(v)) for k, v in step.get("env", {}).items()}
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=repo,
                          env={**env, **own}, capture_output=True, text=True, timeout=1800)


def _gh_calls(tools: Path) -> list[list[str]]:
    raw = (tools / "gh.calls").read_text() if (tools / "gh.calls").exists() else ""
    return [call.strip("\0").split("\0") for call in raw.split("\0\n") if call.strip("\0\n")]


@pytest.mark.slow
def test_the_nightly_chain_bisects_the_slow_commit_and_runs_nothing_from_a_hostile_record(tmp_path):
    truth = _history(tmp_path / "history")
    repo, commits = Path(truth["repo"]), truth["commits"]
    store, nights = tmp_path / "store", tmp_path / "nights"
    nights.mkdir()
    runs = [_night(repo, commits[i], nights, store) for i in NIGHTS]
    _git(repo, "checkout", "-q", "main")  # the job checks main out
    tools = _tools(tmp_path / "tools")
    runner = tmp_path / "runner"
    runner.mkdir()
    path = os.pathsep.join([str(tools), str(Path(sys.executable).parent), os.environ["PATH"]])
    env = {**os.environ, "PATH": path, "RUNNER_TEMP": str(runner),
           "GITHUB_OUTPUT": str(runner / "output"), "FP8BENCH_STORE": str(store), "OMP_WAIT_POLICY": "PASSIVE"}
    # What the job's earlier steps give: the latest run of this device before tonight's, and the device's name.
    context = {"steps.before.outputs.run_id": runs[-2]["run_id"],
               "steps.before.outputs.device_name": runs[-1]["device"]["name"], "github.token": "unused"}

    changes = _run_step("New regressions since last night", repo, env, context)
    assert changes.returncode == 0, changes.stderr
    assert "exit_code=1" in (runner / "output").read_text(), changes.stderr
    new = json.loads((runner / "changes.json").read_text())["new"]
    real = [a for a in new if a["bisect_argv"]]
    assert len(new) == 2 and len(real) == 1, new
    argv = real[0]["bisect_argv"]
    assert argv[:6] == ["fp8bench", "bisect", "--good", commits[5], "--bad", commits[9]]
    assert "no bisect for" in changes.stderr  # the hostile record is named, its alert gets no bisect

    bisect = _run_step("Bisect each new regression within the time budget, one issue per regression", repo, env,
                       context)
    assert bisect.returncode == 1, bisect.stderr[-3000:]  # the step fails the job after filing the issue
    calls = _gh_calls(tools)
    creates = [c for c in calls if c[:2] == ["issue", "create"]]
    assert len(creates) == 1, (calls, bisect.stderr[-3000:])
    assert creates[0][creates[0].index("--title") + 1] == f"fp8bench: regression {truth['first_slow'][:12]}"
    body = (tools / "issue.md").read_text()
    assert body.startswith("<!-- fp8bench-bisect: ")
    assert f"First slower commit: `{truth['first_slow']}`" in body

    pwned = list(tmp_path.rglob("PWN*"))
    assert pwned == [], pwned
    assert len(_git(repo, "worktree", "list").strip().splitlines()) == 1
