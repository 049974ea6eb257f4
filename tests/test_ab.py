"""`fp8bench ab`: two processes, each importing its own checkout, interleaved rounds, then the gate.

The end-to-end tests measure real (tiny, single-threaded) torch GEMMs on this CPU. The slowed side loads the
test-only backend wrapper ``tests/plugins/fp8bench_test_slowed.py`` through ``FP8BENCH_PLUGINS``; it does the bf16
GEMM five times per call. Thresholds are wide because the CPU is shared with other work (round medians of one
case were seen to jump between two levels 1.5x apart under a load of 8 on 2 cores): the statistics are tested on
constructed samples in ``test_gate.py``; here the point is the machinery and the direction of the verdicts.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fp8bench.cli import main
from fp8bench.orchestration.ab import AbError, SideSpec, Worker, round_order
from tests.ab_support import two_round_aa

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = Path(__file__).resolve().parent / "plugins"
RUN_ARGS = ["--", "--shape", "64x64x64", "--precision", "bf16", "fp32", "--backend", "torch", "--no-phases",
            "--threads", "1", "--min-samples", "10", "--max-time", "0.05", "--budget", "5"]


def copy_checkout(dest: Path) -> Path:
    """A second checkout of the project (code only), as a CI job's base worktree would be."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "results", ".venv", ".git", "*.egg-info")
    for folder in ("fp8bench", "workloads", "kernels"):
        shutil.copytree(ROOT / folder, dest / folder, ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def test_round_order_is_abba():
    assert [round_order(r) for r in range(4)] == [("base", "head"), ("head", "base")] * 2


def test_worker_needs_a_project_root(tmp_path):
    with pytest.raises(AbError, match="no pyproject.toml"):
        Worker(SideSpec("base", tmp_path))


def test_git_refs_become_temporary_worktrees_and_are_removed(tmp_path):
    import subprocess

    from fp8bench.orchestration.ab import temporary_checkouts

    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", "--no-local", str(ROOT), str(repo)], check=True, timeout=120)
    # The same commit twice (a shallow CI clone may have no parent commit): two separate detached worktrees.
    paths, cleanup = temporary_checkouts(repo, {"base": "HEAD", "head": "HEAD"})
    try:
        assert (paths["base"] / "pyproject.toml").is_file() and (paths["head"] / "fp8bench").is_dir()
        assert paths["base"] != paths["head"]
        heads = {n: subprocess.run(["git", "-C", str(p), "rev-parse", "HEAD"], capture_output=True, text=True,
                                   check=True).stdout.strip() for n, p in paths.items()}
        expected = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                                  check=True).stdout.strip()
        assert heads == {"base": expected, "head": expected}
    finally:
        cleanup()
    assert not paths["base"].exists()
    listed = subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True, text=True).stdout
    assert len(listed.strip().splitlines()) == 1
    with pytest.raises(AbError, match="cannot check out 'no-such-ref'"):
        temporary_checkouts(repo, {"base": "no-such-ref"})


def tiny_checkout(folder: Path, init: str) -> Path:
    """A checkout whose fp8bench package is ``init`` and a ``cli.main`` that measures nothing (no torch import)."""
    (folder / "fp8bench").mkdir(parents=True)
    (folder / "pyproject.toml").write_text("[project]\nname = 'fp8bench'\n")
    (folder / "fp8bench" / "__init__.py").write_text(init)
    (folder / "fp8bench" / "cli.py").write_text("def main(argv):\n    print('ran', argv)\n    return 0\n")
    return folder


def test_a_checkout_that_prints_while_importing_still_starts_its_worker(tmp_path):
    """A print at import once landed on the protocol pipe before "ready" and escaped as a JSON error."""
    worker = Worker(SideSpec("head", tiny_checkout(tmp_path / "c", "print('hello from import')\n")))
    try:
        assert worker.package == str(tmp_path / "c" / "fp8bench")
    finally:
        worker.close()


def test_a_checkout_that_hangs_while_importing_is_stopped_within_the_start_limit(tmp_path):
    checkout = tiny_checkout(tmp_path / "c", "import time\ntime.sleep(600)\n")
    with pytest.raises(AbError, match="worker's start .* did not finish within 2 s; its worker .* was stopped"):
        Worker(SideSpec("head", checkout), start_timeout_s=2)


def test_a_worker_dies_with_its_parent(tmp_path):
    """A parent killed without cleaning up (SIGKILL, a CI timeout) while its worker hangs importing leaves no worker
    behind with parent 1."""
    import os
    import subprocess
    import sys
    import time

    pid_file = tmp_path / "worker.pid"
    checkout = tiny_checkout(tmp_path / "c", f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))"
                                             "\ntime.sleep(600)\n")
    script = ("import os, threading, time; from pathlib import Path; "
              "from fp8bench.orchestration.ab import SideSpec, Worker; "
              f"threading.Thread(target=Worker, args=(SideSpec('head', Path({str(checkout)!r})),), "
              "daemon=True).start(); "
              f"[time.sleep(0.05) for _ in range(1200) if not os.path.exists({str(pid_file)!r})]; os._exit(0)")
    subprocess.run([sys.executable, "-c", script], timeout=120, check=True)
    pid = int(pid_file.read_text())
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    raise AssertionError(f"worker {pid} outlived its parent")


def test_missing_plugin_module_is_named(monkeypatch):
    from fp8bench.core.plugins import load_all

    monkeypatch.setenv("FP8BENCH_PLUGINS", "fp8bench_no_such_plugin")
    with pytest.raises(ModuleNotFoundError, match="FP8BENCH_PLUGINS names 'fp8bench_no_such_plugin'"):
        load_all()


def test_bad_invocations_are_harness_errors_not_inconclusive(tmp_path, capsys):
    # Exit 2 means "inconclusive" for ab and gate; bad input must never be mistaken for it.
    assert main(["ab", "--base", str(ROOT), "--out", str(tmp_path)]) == 3
    assert "give the cases after `--`" in capsys.readouterr().err
    assert main(["ab", "--base", str(ROOT), "--rounds", "1", *RUN_ARGS]) == 3
    assert main(["ab", "--base", str(ROOT), "--base-env", "NOEQUALS", *RUN_ARGS]) == 3
    assert "NOEQUALS" in capsys.readouterr().err
    assert main(["ab", "--base", str(ROOT), "--rounds", "ten", *RUN_ARGS]) == 3
    assert main(["gate", "only-one-argument"]) == 3


def test_a_ref_that_git_would_read_as_an_option_and_a_huge_round_count_are_refused_up_front(tmp_path, capsys,
                                                                                             monkeypatch):
    import fp8bench.orchestration.ab as ab

    def no_checkout(*args, **kwargs):  # nothing may reach git or allocate rounds before the refusal
        raise AssertionError("reached git")

    monkeypatch.setattr(ab, "temporary_checkouts", no_checkout)
    assert main(["ab", "--base=--lock", "--out", str(tmp_path / "o"), *RUN_ARGS]) == 3
    assert "--base '--lock' is no git ref or checkout" in capsys.readouterr().err
    assert main(["ab", "--base", str(ROOT), "--rounds", "100000000", *RUN_ARGS]) == 3
    assert "--rounds must be between 2 and 1000" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_a_git_ref_side_gets_an_absolute_out_folder_from_any_working_directory(tmp_path, monkeypatch):
    """The worker of a git-ref side runs inside a temporary worktree: a relative --out would land there."""
    import fp8bench.orchestration.ab as ab

    seen = {}

    def checkouts(repo, refs, register=None):
        return {name: ROOT for name in refs}, lambda: None

    def run_ab(base, head, run_args, folder, *args, **kwargs):
        seen["folder"] = folder
        raise ab.AbError("stop after the folder is known")

    monkeypatch.setattr(ab, "temporary_checkouts", checkouts)
    monkeypatch.setattr(ab, "run_ab", run_ab)
    monkeypatch.chdir(tmp_path)
    assert main(["ab", "--base", "HEAD", "--head", ".", "--out", "rel/out", *RUN_ARGS]) == 3
    assert seen["folder"] == tmp_path / "rel" / "out" and seen["folder"].is_absolute()


@pytest.mark.slow
def test_ab_of_the_same_code_passes(tmp_path, results_dir, capsys, worker_ceilings_dir):
    base = copy_checkout(tmp_path / "base-checkout")
    out = tmp_path / "ab"
    rc = main(["ab", "--base", str(base), "--head", str(ROOT), "--rounds", "10", "--threshold", "0.9",
               "--out", str(out), "--results-dir", str(results_dir), "--json", *RUN_ARGS,
               "--results-dir", str(worker_ceilings_dir)])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0, [(c["case"], c["verdict"], c["reason"]) for c in report["cases"]]
    assert report["verdict"] == "pass" and report["rounds"] == {"base": 10, "cand": 10}
    assert {c["verdict"] for c in report["cases"]} <= {"same", "faster"} and len(report["cases"]) == 2
    # Each side imported its own checkout, not the installed package.
    assert report["ab"]["worker_packages"]["base"] == str(base / "fp8bench")
    assert report["ab"]["worker_packages"]["head"] == str(ROOT / "fp8bench")
    assert len(list((out / "base").glob("r*.json"))) == 10 and (out / "report.md").is_file()


@pytest.mark.slow
def test_ab_with_a_slowed_kernel_fails_and_names_the_case(tmp_path, results_dir, capsys):
    out = tmp_path / "ab"
    rc = main(["ab", "--base", str(ROOT), "--head", str(ROOT), "--rounds", "10", "--threshold", "0.5",
               "--head-env", "FP8BENCH_PLUGINS=fp8bench_test_slowed", "--head-env", f"PYTHONPATH={PLUGINS}",
               "--head-env", "FP8BENCH_TEST_SLOW_FACTOR=5", "--out", str(out), "--results-dir", str(results_dir),
               "--json", *RUN_ARGS])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 1, [(c["case"], c["verdict"], c["reason"]) for c in report["cases"]]
    assert report["slower_cases"] == ["gemm[m=64,n=64,k=64] bf16 torch cpu"]
    verdicts = {c["case"]: c for c in report["cases"]}
    assert verdicts["gemm[m=64,n=64,k=64] fp32 torch cpu"]["verdict"] in ("same", "faster")
    assert verdicts["gemm[m=64,n=64,k=64] bf16 torch cpu"]["ratio"] > 2
    assert report.get("store_error") is None, report.get("store_error")
    stored = __import__("fp8bench.results.store", fromlist=["open_store"]).open_store(results_dir).gate_reports_frame()
    assert list(stored["verdict"]) == ["regression"]
    assert "bf16" in (out / "report.md").read_text()


@pytest.fixture(scope="session")
def two_rounds(tmp_path_factory):
    return two_round_aa(tmp_path_factory)


@pytest.mark.slow  # a real A/B run: two worker processes (shared with test_ab_reports.py)
def test_ab_says_which_round_of_how_many_and_announces_the_rerun(two_rounds):
    """Two rounds give each case 2 samples a side, under the gate's minimum of 3: every case is inconclusive, so
    the rerun happens, and is said before its rounds start."""
    rc, err = two_rounds["code"], two_rounds["stderr"]
    assert rc == 2, err
    lines = [line for line in err.splitlines() if line.startswith("ab: ")]
    assert lines[0].startswith("ab: round 1 of 2, base first: 1/4 runs,") and "s left" in lines[0]
    assert any(line.startswith("ab: round 2 of 2, head first: 4/4 runs") for line in lines)
    rerun = next(i for i, line in enumerate(lines) if "rerunning them once in 2 more rounds" in line)
    assert "2 case(s) inconclusive after 2 rounds" in lines[rerun]
    assert lines[rerun + 1].startswith("ab: rerun round 1 of 2, base first: 5/8 runs")
    assert lines[-1].startswith("ab: rerun round 2 of 2, head first: 8/8 runs")
