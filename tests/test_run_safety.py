"""A run's output survives hostile or unlucky surroundings: an --out that names something other than a new file,
a disk that fills mid-run, SIGTERM or SIGHUP from a scheduler, a dashboard killed under its Streamlit server."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from subprocess_support import sigint_at_its_default

from fp8bench.cli import main
from fp8bench.commands.verb_interface import EXIT_DISK_FULL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from fp8bench.results.runfile import read_run_file
from fp8bench.results.store import open_store

ROOT = Path(__file__).resolve().parents[1]
# A run whose fp8_tensorwise cases never finish building (tests/plugins/fp8bench_test_hang.py): the cases before them
# are recorded, and the run is still running when a test stops it, however fast or loaded the machine is.
HANGING_RUN_ENV = {**os.environ, "FP8BENCH_PLUGINS": "fp8bench_test_hang",
                   "FP8BENCH_TEST_HANG_PRECISIONS": "fp8_tensorwise", "FP8BENCH_TEST_HANG_ANSWERS_SIGNALS": "1",
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "tests" / "plugins"),
                                                               os.environ.get("PYTHONPATH")]))}
# Fast cases: a tiny GEMM, short sampling, no energy window.
QUICK = ["--shape", "64x64x64", "--backend", "torch", "--budget", "0.5", "--max-time", "0.02", "--no-energy"]


def run_cli(capsys, *args: object) -> tuple[int, str, str]:
    code = main(["run", *QUICK, *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


# -- --out never clobbers -----------------------------------------------------------------------------------------
def _char_device(path: Path) -> Path:
    """A character device node like /dev/full (major 1, minor 7), made where a failed test can do no harm."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    except PermissionError:
        pytest.skip("making a device node needs root")
    return path


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory", "char_device"])
def test_out_that_is_not_a_regular_file_is_refused_and_left_alone(tmp_path, capsys, kind):
    target = tmp_path / "out"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "symlink":
        target.symlink_to(victim)
    elif kind == "directory":
        target.mkdir()
    else:
        _char_device(target)
    before = os.lstat(target)
    code, _, err = run_cli(capsys, "--precision", "bf16", "--out", target, "--no-store", "--force")
    assert code == EXIT_USAGE
    assert "refusing to write the run file over" in err and str(target) in err
    after = os.lstat(target)
    assert (after.st_mode, after.st_ino, after.st_rdev) == (before.st_mode, before.st_ino, before.st_rdev)
    assert victim.read_text() == "keep me"


def test_existing_run_file_is_kept_unless_forced_and_written_with_normal_permissions(tmp_path, capsys):
    out = tmp_path / "run.json"
    code, _, _ = run_cli(capsys, "--precision", "bf16", "--out", out, "--no-store")
    assert code == EXIT_OK
    first = read_run_file(out)["run"]["run_id"]
    old_umask = os.umask(0o022)
    try:
        code, _, err = run_cli(capsys, "--precision", "bf16", "--out", out, "--no-store")
        assert code == EXIT_USAGE and "exists" in err and "--force" in err
        assert read_run_file(out)["run"]["run_id"] == first  # the earlier run is not lost
        code, _, _ = run_cli(capsys, "--precision", "bf16", "--out", out, "--no-store", "--force")
        assert code == EXIT_OK and read_run_file(out)["run"]["run_id"] != first
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644  # 0666 less the umask, like any new file


def test_no_store_with_out_leaves_the_results_folder_alone(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FP8BENCH_RESULTS_DIR", raising=False)
    code, _, _ = run_cli(capsys, "--precision", "bf16", "--out", tmp_path / "elsewhere" / "run.json", "--no-store")
    assert code == EXIT_OK and not (tmp_path / "results").exists()


# -- a full disk ---------------------------------------------------------------------------------------------------
@pytest.fixture
def tiny_filesystem(tmp_path):
    """A 24 KiB tmpfs (six pages). The run file's first line takes about 2 KiB and each record one line: about
    1.4 KiB when the case is skipped (over budget on a loaded machine) and up to about 20 KiB when it ran, so the
    first record always fits and the whole run of 22 cases (at least 30 KiB even when every case is skipped) never
    does. Needs root and permission to mount."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24k", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_full_disk_stops_the_run_with_its_exit_code_and_keeps_every_written_record(tiny_filesystem, tmp_path,
                                                                                    capsys):
    out = tiny_filesystem / "run.json"
    store = tmp_path / "store"  # on another file system: the record that did not fit goes there
    code, stdout, err = run_cli(capsys, "--precision", "all", "--backend", "torch", "emulated", "--out", out,
                                "--store", store, "--json")
    assert code == EXIT_DISK_FULL
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert "No space left on device" in summary["disk_full"]
    assert err.count("disk full") == 1 and "Traceback" not in err
    measured = summary["records"]
    kept = read_run_file(out)  # still a complete, readable run file
    assert 1 <= len(kept["records"]) < summary["n_cases"]
    assert [r["seq"] for r in kept["records"]] == [r["seq"] for r in measured[:len(kept["records"])]]
    assert len(measured) >= len(kept["records"])
    stored = open_store(store)
    assert stored.count_records(summary["run_id"]) == len(measured)  # the record being written went to the store
    assert stored.runs_frame().set_index("run_id").loc[summary["run_id"], "status"] == "failed: disk full"


def test_disk_full_once_is_retried_so_the_file_gets_every_record_and_the_status(tmp_path, capsys, monkeypatch):
    """The run file's disk fills on the third record, and has room again at the final write (a neighbour freed
    space): the retry puts every measured record and the status into the file. The failure is injected at the
    operating-system boundary (``os.fsync`` raising ENOSPC once), since a disk cannot be filled on cue."""
    import fp8bench.results.runfile as runfile

    real_fsync, calls = os.fsync, []

    def fsync(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 4:  # header, record 0, record 1, then record 2 fails
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(runfile.os, "fsync", fsync)
    out = tmp_path / "run.json"
    code, stdout, _ = run_cli(capsys, "--precision", "bf16", "fp32", "fp8_rowwise", "fp8_tensorwise", "--out", out,
                              "--no-store", "--json")
    assert code == EXIT_DISK_FULL
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["run_file_complete"] is True and len(summary["records"]) == 3
    kept = read_run_file(out)
    assert kept["run"]["status"] == "failed: disk full" and len(kept["records"]) == 3
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


# -- SIGTERM and SIGHUP --------------------------------------------------------------------------------------------
def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _records_in(path: Path) -> int:
    try:
        return len(read_run_file(path)["records"])
    except ValueError:  # RunFileError: not written yet
        return 0


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_end_a_run_like_ctrl_c(tmp_path, signum):
    out = tmp_path / "run.json"
    proc = subprocess.Popen([sys.executable, "-m", "fp8bench.cli", "run", "--shape", "128x128x128", "--precision",
                             "all", "--backend", "torch", "emulated", "--budget", "2", "--no-energy", "--out",
                             str(out), "--no-store"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=HANGING_RUN_ENV)
    try:
        _wait_for(lambda: _records_in(out) >= 1 or proc.poll() is not None, 240, "the first record")
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    name = signal.Signals(signum).name
    assert proc.returncode == EXIT_INTERRUPTED, stderr[-2000:]
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["interrupted"] is True and summary["interrupted_by"] == name
    assert f"interrupted ({name})" in stderr
    kept = read_run_file(out)
    assert kept["run"]["status"] == "interrupted"
    assert 1 <= len(kept["records"]) == sum(summary["counts"].values()) < summary["n_cases"]


@pytest.mark.slow
@pytest.mark.parametrize("signum, to_group", [(signal.SIGTERM, False), (signal.SIGINT, True)],
                         ids=["sigterm-to-the-run", "ctrl-c-to-the-terminal-group"])
def test_a_sharded_run_stopped_keeps_every_finished_record_and_leaves_no_worker(tmp_path, signum, to_group):
    """--devices cpu,cpu: SIGTERM to the run, or Ctrl-C (SIGINT to the whole process group, workers included)."""
    out = tmp_path / "run.json"
    proc = subprocess.Popen([sys.executable, "-m", "fp8bench.cli", "run", "--devices", "cpu,cpu", "--shape",
                             "64x64x64", "128x128x128", "--precision", "all", "--backend", "torch", "emulated",
                             "--budget", "2", "--no-energy", "--out", str(out), "--no-store"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env=HANGING_RUN_ENV, preexec_fn=sigint_at_its_default)
    try:
        _wait_for(lambda: _records_in(out) >= 1 or proc.poll() is not None, 240, "the first record")
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        if to_group:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    name = signal.Signals(signum).name
    assert proc.returncode == EXIT_INTERRUPTED, stderr[-2000:]
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["interrupted"] is True and summary["interrupted_by"] == name
    kept = read_run_file(out)
    assert kept["run"]["status"] == "interrupted"
    seqs = [r["seq"] for r in kept["records"]]
    assert 1 <= len(seqs) == sum(summary["counts"].values()) < summary["n_cases"] and seqs == sorted(seqs)
    assert all(r["status"] in ("ok", "skipped") for r in kept["records"])  # no case blamed on the stop
    pids = [pid for w in kept["run"]["workers"] for pid in w["pids"]]
    assert not any(w["deaths"] for w in kept["run"]["workers"])
    _wait_for(lambda: not any(_alive(pid) for pid in pids), 30, f"the workers {pids} to be gone")


# -- the dashboard's Streamlit child -------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_dashboard_takes_its_streamlit_child_with_it(tmp_path, signum):
    pytest.importorskip("streamlit")
    if not Path("/proc/self/task").exists():
        pytest.skip("needs Linux /proc to find the child process")
    parent = subprocess.Popen([sys.executable, "-m", "fp8bench.cli", "dashboard", "--results-dir", str(tmp_path),
                               "--port", str(_free_port())], cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    child = None
    try:
        _wait_for(lambda: bool(_children(parent.pid)), 60, "the streamlit child process")
        child = _children(parent.pid)[0]
        os.kill(parent.pid, signum)
        parent.wait(timeout=30)
        _wait_for(lambda: not _alive(child), 30, f"streamlit (pid {child}) to exit after the dashboard got "
                  f"{signal.Signals(signum).name}")
        assert parent.returncode is not None and not _alive(child)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)


# -- settings that would hang or oversubscribe a run ---------------------------------------------------------------
@pytest.mark.parametrize("flag, value, message", [
    ("--threads", "99999", f"between 1 and this machine's {os.cpu_count()} CPUs, got 99999"),
    ("--threads", "0", "got 0"),
    ("--budget", "inf", "budget must be positive, finite seconds, got inf"),
    ("--budget", "nan", "got nan"),
    ("--cooldown", "inf", "cooldown_s must be finite seconds >= 0, got inf"),
    ("--max-time", "inf", "max_time_s must be finite seconds >= 0, got inf"),
    ("--energy-window", "inf", "energy window must be positive, finite seconds, got inf"),
])
def test_settings_that_would_hang_or_oversubscribe_are_refused(tmp_path, capsys, flag, value, message):
    code, _, err = run_cli(capsys, "--precision", "bf16", flag, value, "--results-dir", tmp_path)
    assert code == EXIT_USAGE and message in err
    assert not (tmp_path / "runs").exists()  # refused before anything ran


def test_converge_refuses_more_threads_than_cpus(capsys):
    assert main(["converge", "--threads", "99999", "--steps", "2"]) == EXIT_USAGE
    assert "this machine's" in capsys.readouterr().err
