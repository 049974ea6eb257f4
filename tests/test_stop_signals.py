"""`fp8bench ab` and `fp8bench bisect` stopped by signals, twice in a row: what they made is removed, what they
measured is kept.

Both verbs check commits out into temporary git worktrees and run one worker process per side. A CI job's
``timeout`` signals the command (and, with ``-k``, kills it a few seconds later); a person presses Ctrl-C, and again
when nothing seems to happen. The second signal must not cut the clean-up short: every worktree is removed (``git
worktree list`` shows only the repository again), the temporary folder is gone, no worker is left running, and the
round files finished before the first signal stay in ``--out``.

The command runs for real, as a subprocess, on a git repository made here. Its checkouts hold a stand-in
``fp8bench`` whose ``cli.main`` measures nothing: the first round writes its run file at once, a later one records
its process id and sleeps, so the first signal always finds the command in the middle of a round. ``git`` on the
command's ``PATH`` is a wrapper that says when a worktree's removal starts and makes it take a second (a slow
disk), so the second signal always finds the command in its clean-up.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

# The stand-in `fp8bench run`: the first round's files (r00.json of `ab`, r000.json of a bisect probe) are written
# at once; any other round records its pid (so the test can check it is gone afterwards) and sleeps until stopped.
FAKE_CLI = '''
import os, sys, time
def main(argv):
    out = argv[argv.index("--out") + 1]
    if os.path.basename(out) in ("r00.json", "r000.json"):
        open(out, "w").write("{}")
        return 0
    open(os.path.join(os.environ["STOP_TEST_PIDS"], str(os.getpid())), "w").close()
    time.sleep(600)
    return 0
'''


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def _repo(folder: Path) -> Path:
    """Three commits of a checkout holding the stand-in package."""
    (folder / "fp8bench").mkdir(parents=True)
    (folder / "pyproject.toml").write_text("[project]\nname = 'fp8bench'\n")
    (folder / "fp8bench" / "__init__.py").write_text("")
    (folder / "fp8bench" / "cli.py").write_text(FAKE_CLI)
    _git(folder, "init", "-q", "-b", "main")
    for i in range(3):
        (folder / "CHANGES.txt").write_text(f"change {i}\n")
        _git(folder, "add", "-A")
        _git(folder, "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-q", "-m", f"change {i}")
    return folder


def _slow_git(folder: Path) -> Path:
    """A folder holding a ``git`` that touches ``folder/removing`` and waits a second before removing a worktree."""
    folder.mkdir()
    shim = folder / "git"
    shim.write_text(f"""#!/bin/sh
case "$*" in *"worktree remove"*) touch {folder / 'removing'}; sleep 1;; esac
exec {shutil.which('git')} "$@"
""")
    shim.chmod(0o755)
    return folder


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by a parent) is not running.
    stat = Path(f"/proc/{pid}/stat")
    return stat.is_file() and stat.read_text().rsplit(")", 1)[-1].split()[0] != "Z"


def _wait_for(ready: Callable[[], bool], proc: subprocess.Popen, what: str, timeout_s: float = 120) -> None:
    """Until ``ready()``; fails naming ``what`` with the command's output if the command ended first."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"{what} never came (exit {proc.returncode}): {out[-2000:]} {err[-2000:]}")
        time.sleep(0.05)


def _signal(proc: subprocess.Popen, signum: int) -> None:
    """SIGINT to the whole process group (Ctrl-C on a terminal, `timeout -s INT`), SIGTERM to the command alone
    (`timeout`, a CI runner cancelling a job)."""
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)


VERBS = {
    "ab": lambda repo, out: ["ab", "--repo", str(repo), "--base", "HEAD~2", "--head", "HEAD", "--rounds", "4",
                             "--out", str(out), "--json", "--", "--shape", "8x8x8"],
    "bisect": lambda repo, out: ["bisect", "--repo", str(repo), "--good", "HEAD~2", "--bad", "HEAD",
                                 "--min-rounds", "3", "--out", str(out), "--results-dir", str(out.parent / "results"),
                                 "--json", "--", "--shape", "8x8x8"],
}
KEPT = {"ab": ("base/r00.json", "head/r00.json"), "bisect": ("*-1/base/r000.json", "*-1/head/r000.json")}


@pytest.mark.slow
@pytest.mark.parametrize("verb", sorted(VERBS))
@pytest.mark.parametrize("signals", [(signal.SIGTERM, signal.SIGTERM), (signal.SIGINT, signal.SIGINT),
                                     (signal.SIGTERM, signal.SIGINT)], ids=["term-term", "int-int", "term-int"])
def test_two_signals_in_a_row_leave_no_worktree_no_worker_and_keep_finished_rounds(tmp_path, verb, signals):
    repo = _repo(tmp_path / "repo")
    tmp, pids, out = tmp_path / "tmp", tmp_path / "pids", tmp_path / "out"
    tmp.mkdir()
    pids.mkdir()
    shim = _slow_git(tmp_path / "bin")
    env = {**os.environ, "TMPDIR": str(tmp), "STOP_TEST_PIDS": str(pids),
           "PATH": os.pathsep.join([str(shim), os.environ["PATH"]])}
    # Its own process group, as a command started by a shell or by `timeout` is.
    proc = subprocess.Popen([sys.executable, "-m", "fp8bench", *VERBS[verb](repo, out)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        first, second = signals
        _wait_for(lambda: any(pids.iterdir()), proc, "a round in flight")
        _signal(proc, first)
        _wait_for((shim / "removing").exists, proc, "the removal of a worktree")
        _signal(proc, second)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in err and "Traceback" not in err, err[-2000:]
    worktrees = _git(repo, "worktree", "list").strip().splitlines()
    assert len(worktrees) == 1, worktrees
    assert list(tmp.iterdir()) == [], list(tmp.iterdir())
    left = [int(p.name) for p in pids.iterdir() if _alive(int(p.name))]
    assert left == [], f"workers still running: {left}"
    for pattern in KEPT[verb]:
        assert [p.read_text() for p in out.glob(pattern)] == ["{}"], pattern


def test_teardown_runs_every_step_once_last_registered_first_even_after_a_failure():
    from fp8bench.measure.interrupts import cleanup_on_stop

    ran = []

    def failing():
        ran.append("failing")
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"), cleanup_on_stop() as teardown:
        teardown.add(lambda: ran.append("first"))
        teardown.add(failing)
        teardown.add(lambda: ran.append("last"))
    assert ran == ["last", "failing", "first"]
    teardown.run()  # nothing left to run twice
    assert ran == ["last", "failing", "first"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the previous handlers are back
