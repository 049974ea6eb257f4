"""A store that can only be read: on a read-only file system, or owned by another user. The verbs that read open it
without the schema lock and without writing; a verb that must write says so in one line. The schema lock is keyed
by the store's resolved path, and a process waiting on it says what it waits for and gives up after a timeout.

The read-only mount and the other user are real: a read-only bind mount (``mount -o remount,ro,bind``) and a
child process that drops to the ``nobody`` user; both need root, and skip without it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from dashboard_support import CliResult
from dashboard_support import fp8bench as run_cli

import fp8bench.results.store.engine as store_engine
from fp8bench.results.store import StoreError, open_store
from tests.gate_fixtures import payload, record

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534
READ_VERBS = {"export": ["export", "--format", "csv"], "payoff": ["payoff", "--json"],
              "changes": ["changes", "--json"], "compare": ["compare", "r1", "r1", "--json"],
              "gate": ["gate", "r1", "r1", "--no-store-report", "--json"]}


def fill(folder: Path) -> Path:
    """A store with one run, ``r1``, of two cases in ``folder``."""
    samples = [1e-3 * (1 + i / 100) for i in range(10)]
    run = payload("r1", [record(64, "bf16", samples), record(64, "fp8_rowwise", [0.8 * s for s in samples])])
    run_file = folder.parent / f"{folder.name}-ro.json"
    run_file.write_text(json.dumps(run))
    store = open_store(folder)
    store.ingest_run(run)
    store.engine.dispose()
    return run_file


def fp8bench(*args: object, cwd: Path) -> CliResult:
    """The verb run in this process from ``cwd`` (the mount, not a process boundary, is what is tested here)."""
    with contextlib.chdir(cwd):
        return run_cli(*map(str, args), check=False)


@contextlib.contextmanager
def read_only_mount(source: Path, target: Path):
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("a read-only bind mount needs root")
    target.mkdir()
    made = subprocess.run(["mount", "--bind", str(source), str(target)], capture_output=True, text=True)
    if made.returncode:
        pytest.skip(f"cannot bind-mount here: {made.stderr.strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(target)], check=True, capture_output=True)
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], capture_output=True)


def test_verbs_that_read_work_on_a_read_only_mount_and_ingest_says_it_must_write(tmp_path):
    source = tmp_path / "store"
    run_file = fill(source)
    with read_only_mount(source, tmp_path / "ro") as mounted:
        with pytest.raises(OSError):
            (mounted / "probe").write_text("x")  # the mount is really read-only
        for verb, args in READ_VERBS.items():
            out = fp8bench(*args, "--store", mounted, cwd=tmp_path)
            assert out.returncode == 0, (verb, out.stderr)
            assert "Traceback" not in out.stderr, verb
        assert "gemm[m=64,n=64,k=64] fp8_rowwise torch cpu" in fp8bench(*READ_VERBS["export"], "--store", mounted,
                                                                        cwd=tmp_path).stdout
        refused = fp8bench("ingest", run_file, "--store", mounted, cwd=tmp_path)
        lines = refused.stderr.strip().splitlines()
        assert refused.returncode == 2 and len(lines) == 1 and "Traceback" not in refused.stderr
        assert "Read-only file system" in lines[0] and "a verb that writes needs write access" in lines[0]
        gated = fp8bench("gate", "r1", "r1", "--store", mounted, "--report-dir", tmp_path / "report", cwd=tmp_path)
        assert gated.returncode == 0 and (tmp_path / "report" / "report.json").is_file()
        assert [ln for ln in gated.stderr.splitlines() if "report not stored" in ln][0].count("\n") == 0
        assert sorted(p.name for p in mounted.iterdir()) == ["fp8bench.sqlite", "fp8bench.sqlite.lock"]


def test_an_older_schema_on_a_read_only_mount_is_one_line_saying_it_needs_write_access(tmp_path):
    source = tmp_path / "store"
    fill(source)
    with open_store(source).engine.begin() as conn:  # back to schema 4, as an older fp8bench left it
        conn.exec_driver_sql("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    with read_only_mount(source, tmp_path / "ro") as mounted:
        out = fp8bench("export", "--format", "csv", "--store", mounted, cwd=tmp_path)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "older schema" in out.stderr and "needs write access" in out.stderr


AS_OTHER_USER = textwrap.dedent("""
    import contextlib, io, json, os, sys
    from fp8bench.cli import main
    # Run each verb once on a store this process owns, so that every module it imports is loaded (the interpreter's
    # own files may not be readable by the other user), then drop to that user and run them on the real store.
    warm, store, verbs = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    for args in verbs:
        if "--report-dir" in args:  # the other user's report folder stays theirs to create
            at = args.index("--report-dir")
            args = args[:at] + args[at + 2:]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            main([*args, "--store", warm])
    os.setgid(UID)
    os.setuid(UID)
    codes = []
    for args in verbs:
        with contextlib.redirect_stdout(io.StringIO()):
            codes.append(main([*args, "--store", store]))
    print(json.dumps(codes))
""").replace("UID", str(NOBODY))


@pytest.fixture
def shared_tmp():
    """A temporary folder every user can enter (pytest's own is private to its user)."""
    folder = Path(tempfile.mkdtemp(prefix="fp8bench-other-user-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_verbs_that_read_work_on_another_users_store(shared_tmp):
    if os.geteuid() != 0:
        pytest.skip("running as another user needs root")
    warm, theirs, reports = shared_tmp / "warm", shared_tmp / "theirs", shared_tmp / "reports"
    fill(warm)
    fill(theirs)
    reports.mkdir(mode=0o777)
    reports.chmod(0o777)
    for path in (theirs, *theirs.iterdir()):
        os.chown(path, 12345, 12345)  # neither root's nor nobody's
    verbs = [args + (["--report-dir", str(reports / "gate")] if verb == "gate" else [])
             for verb, args in READ_VERBS.items()]
    verbs.append(["ingest", str(shared_tmp / "theirs-ro.json")])
    out = subprocess.run([sys.executable, "-c", AS_OTHER_USER, str(warm), str(theirs), json.dumps(verbs)],
                         cwd=shared_tmp, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    codes = json.loads(out.stdout.strip().splitlines()[-1])
    assert codes == [0] * len(READ_VERBS) + [2], out.stderr
    refusal = [ln for ln in out.stderr.splitlines() if ln.startswith("fp8bench ingest")]
    assert len(refusal) == 1 and "Permission denied" in refusal[0]
    assert "a verb that writes needs write access" in refusal[0]
    assert sorted(p.name for p in theirs.iterdir()) == ["fp8bench.sqlite", "fp8bench.sqlite.lock"]


def test_no_store_yet_is_named_by_a_verb_that_reads_and_nothing_is_created(tmp_path):
    with pytest.raises(StoreError) as refused:
        open_store(tmp_path / "nowhere", read_only=True)
    assert "no store at" in str(refused.value) and not (tmp_path / "nowhere").exists()


def test_the_schema_lock_is_the_resolved_path_and_a_waiter_says_what_it_waits_for(tmp_path, monkeypatch, capsys):
    real = tmp_path / "real"
    fill(real)
    for name in ("a.sqlite", "b.sqlite"):
        (tmp_path / name).symlink_to(real / "fp8bench.sqlite")
    monkeypatch.setattr(store_engine, "SCHEMA_LOCK_TIMEOUT_S", 1.0)
    lock = real / "fp8bench.sqlite.lock"
    with open(lock, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # another process setting the store up
        for name in ("a.sqlite", "b.sqlite"):
            with pytest.raises(StoreError) as gave_up:
                open_store(tmp_path / name)
            assert f"gave up after 1 s waiting for {lock}" in str(gave_up.value)
            assert f"waiting for {lock}: another fp8bench process is creating or migrating" in \
                capsys.readouterr().err
    assert not (tmp_path / "a.sqlite.lock").exists() and not (tmp_path / "b.sqlite.lock").exists()
    assert open_store(tmp_path / "a.sqlite").count_records() == 2  # released: both names open the one store
