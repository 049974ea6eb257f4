"""Probe fp8bench the way a hostile or unlucky user would, and print one verdict line per probe.

Each probe runs the real command line in a child process (``python -m fp8bench.cli``), as a user at a terminal
would, against temporary files: a password in a store URL, an --out that names a device node, a FIFO or an
existing run, damaged or partial gate inputs, a database that never answers, a full disk, SIGTERM, malformed
files to ingest, hostile text in the dashboard, a GEMM too big for memory, and a few impossible settings.

    python scripts/probe_reliability.py            # everything this machine can do
    python scripts/probe_reliability.py --only 3 7 # items 3 and 7
    python scripts/probe_reliability.py --only bounded-reads --before-ref c5a7f8e   # memory, before and after

A second set of probes is named rather than numbered: ``traces`` (a Phases trace download swapped for a link to
``/etc/passwd`` after drawing, in Chromium), ``outputs`` (``export --out`` and ``gate --report-dir`` on devices,
FIFOs, links and existing files), ``stored-data`` (records whose fields have the wrong type, at ingest and in an
older store being upgraded), ``identity`` (two records with one seq; a partial copy of a finished run),
``escaping`` (Markdown, CSV, Rich markup, ``javascript:`` links), ``secrets`` (a store error's text),
``read-only`` (a read-only bind mount, another user's store, the schema lock through two links),
``bounded-reads`` (a FIFO and ``/dev/zero`` to ingest; the peak memory of ingesting a 200 MB run file, and with
``--before-ref`` the same for an older commit's code, side by side) and ``smaller`` (an A/B side that hangs, masked
environments and dirty flags, ``--store sqlite://``, ``--fail-on regression`` with nothing compared).

Probes that need something this machine may lack say SKIP with the reason: root (a device node, a small tmpfs),
a PostgreSQL server (``initdb`` on PATH or under /usr/lib/postgresql), Chromium and playwright (the dashboard in
a browser). Exit code: 0 when no probe failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import glob
import http.server
import io
import json
import logging
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

from fp8bench.results.runfile import read_run_file

ROOT = Path(__file__).resolve().parents[1]
SECRET = "PASSWORD-probe-1234"
QUICK = ["--shape", "64x64x64", "--backend", "torch", "--budget", "0.5", "--max-time", "0.02", "--no-energy"]
RESULTS: list[tuple[str, str]] = []


def fp8bench(*args: object, timeout: float = 600, env: dict[str, str] | None = None,
             cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fp8bench.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, cwd=cwd or ROOT)


def verdict(item: int | str, name: str, ok: bool | None, detail: str) -> None:
    word = "SKIP" if ok is None else "PASS" if ok else "FAIL"
    line = f"{word}  [{item}] {name}: {' '.join(detail.split())[:220]}"
    RESULTS.append((word, line))
    print(line, flush=True)


def probe(item: int | str, name: str, fn: Callable[[], tuple[bool | None, str]]) -> None:
    try:
        ok, detail = fn()
    except Exception as exc:  # a probe that crashes is a failed probe, with its reason
        ok, detail = False, f"probe crashed: {type(exc).__name__}: {exc}"
    verdict(item, name, ok, detail)


def last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def run_payload(run_id: str, n: int = 3, samples: list[float] | None = None, status: str = "complete") -> dict:
    samples = samples or [1.0e-3, 1.01e-3, 0.99e-3, 1.0e-3, 1.02e-3, 0.98e-3] * 3
    records = [{"workload": "gemm", "shape": {"m": 64 * (i + 1), "n": 64, "k": 64}, "precision": "bf16",
                "backend": "torch", "device": "cpu", "status": "ok", "samples_s": list(samples),
                "median_s": sorted(samples)[len(samples) // 2], "valid": True, "seq": i} for i in range(n)]
    run = {"run_id": run_id, "started_at": "2026-11-23T00:00:00+00:00", "status": status,
           "git": {"commit": "c0ffee"}, "host": {"alias": "probe"}, "device": {"name": "Probe CPU"},
           "device_spec": "cpu", "software": {"torch": "2.13.0"}, "settings": {}}
    return {"schema_version": 1, "run": run, "records": records}


def write_json(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data))  # NaN and Infinity are written as such, as a careless tool would
    return path


# -- PostgreSQL, when the server binaries exist --------------------------------------------------------------------
@contextlib.contextmanager
def postgres() -> Iterator[str | None]:
    """A throwaway PostgreSQL on a free loopback port (role ``probe_pw`` authenticates by password); its URL, or
    ``None`` when no server can be started here."""
    found = shutil.which("initdb") or next(iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))[-1:]), None)
    if not found:
        yield None
        return
    bindir = Path(found).parent
    as_user = (lambda cmd: ["runuser", "-u", "postgres", "--", *cmd]) if os.geteuid() == 0 else (lambda cmd: cmd)
    folder = Path(tempfile.mkdtemp(prefix="fp8bench-probe-pg-"))  # its own folder: the server's user must enter it
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    data, port = folder / "data", free_port()
    try:
        subprocess.run(as_user([str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
                                "--no-sync"]), check=True, capture_output=True)
        hba = data / "pg_hba.conf"
        hba.write_text("host all probe_pw 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        subprocess.run(as_user([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(folder / "log"), "-w", "-o",
                                f"-p {port} -c listen_addresses=127.0.0.1 -k {folder} -c fsync=off", "start"]),
                       check=True, capture_output=True)
    except subprocess.CalledProcessError as exc:
        print(f"(PostgreSQL could not be started: {exc.stderr.decode(errors='replace').strip()[-200:]})")
        shutil.rmtree(folder, ignore_errors=True)
        yield None
        return
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}"
    finally:
        subprocess.run(as_user([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
                       capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


def psql(server: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(server + "/postgres", autocommit=True) as conn:
        conn.execute(sql)


def chromium_or_reason() -> tuple[str | None, str]:
    """The Chromium to drive through playwright, or ``None`` and why it cannot be."""
    chromium = os.environ.get("FP8BENCH_CHROMIUM", "/usr/bin/chromium")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return None, "the playwright package is not installed"
    if not shutil.which(chromium):
        return None, f"no Chromium at {chromium}"
    return chromium, ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- 1. secrets ----------------------------------------------------------------------------------------------------
def item1(tmp: Path, pg: str | None) -> None:
    url = f"postgresql://bench:{SECRET}@127.0.0.1:1/fp8bench"
    run = write_json(tmp / "s.json", run_payload("s"))

    def shown(*args: object) -> tuple[bool, str]:
        out = fp8bench(*args)
        text = out.stdout + out.stderr
        lines = text.strip().splitlines() or [""]
        return SECRET not in text, next((ln for ln in lines if "***" in ln), lines[-1])

    probe(1, "dashboard --store with a password, --print-command", lambda: shown(
        "dashboard", "--store", url, "--print-command"))
    probe(1, "mistyped scheme postgresq:// in ingest", lambda: shown(
        "ingest", run, "--store", url.replace("postgresql", "postgresq")))
    probe(1, "run --store with a password, server refusing", lambda: shown(
        "run", *QUICK, "--precision", "bf16", "--store", url, "--results-dir", tmp / "r1"))

    def off_loopback() -> tuple[bool, str]:
        out = fp8bench("dashboard", "--host", "0.0.0.0", "--print-command")
        warning = next((ln for ln in out.stderr.splitlines() if "no login" in ln), "")
        return bool(warning) and "docs/security.md" in warning, warning or out.stderr

    probe(1, "dashboard --host 0.0.0.0 warns that it has no login", off_loopback)

    def sidebar() -> tuple[bool | None, str]:
        try:
            from streamlit.testing.v1 import AppTest
        except ImportError:
            return None, "streamlit not installed"
        for name in [n for n in logging.root.manager.loggerDict if n.startswith("streamlit")]:
            logging.getLogger(name).setLevel(logging.ERROR)  # AppTest's bare-mode notices
        os.environ["FP8BENCH_DASHBOARD_STORE"] = url
        at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=120)
        at.run()
        texts = [c.value for c in at.sidebar.caption] + [e.value for e in at.error]
        # As the reader sees it: the page backslash-escapes Markdown and puts word joiners into addresses.
        plain = " ".join(re.sub(r"\\(.)", r"\1", t).replace("\u2060", "") for t in texts)
        return SECRET not in plain and "bench:***@" in plain, plain[:160]

    probe(1, "dashboard sidebar and error box (Streamlit AppTest)", sidebar)

    def pgpass() -> tuple[bool | None, str]:
        if pg is None:
            return None, "no PostgreSQL server binaries"
        psql(pg, f"CREATE ROLE probe_pw LOGIN PASSWORD '{SECRET}'")
        psql(pg, "CREATE DATABASE probe_pw OWNER probe_pw")
        host_port = pg.split("@", 1)[1]
        passfile = tmp / "pgpass"
        passfile.write_text(f"{host_port}:probe_pw:probe_pw:{SECRET}\n")
        passfile.chmod(0o600)
        target = f"postgresql://probe_pw@{host_port}/probe_pw"
        without = fp8bench("ingest", run, "--store", target, env={"PGPASSFILE": str(tmp / "none")})
        with_file = fp8bench("ingest", run, "--store", target, env={"PGPASSFILE": str(passfile)})
        ok = without.returncode != 0 and with_file.returncode == 0 and SECRET not in without.stderr
        return ok, f"without a password: exit {without.returncode}; with ~/.pgpass-style PGPASSFILE: exit " \
                   f"{with_file.returncode}"

    probe(1, "password from PGPASSFILE (libpq's ~/.pgpass), none in the URL", pgpass)


# -- 2. never clobber ----------------------------------------------------------------------------------------------
def item2(tmp: Path) -> None:
    def refused(target: Path, what: str) -> tuple[bool, str]:
        before = os.lstat(target)
        out = fp8bench("run", *QUICK, "--precision", "bf16", "--out", target, "--no-store", "--force")
        after = os.lstat(target)
        same = (before.st_mode, before.st_ino, before.st_rdev) == (after.st_mode, after.st_ino, after.st_rdev)
        return out.returncode == 2 and same, f"{what}: exit {out.returncode}, unchanged={same}; " + \
            out.stderr.strip().splitlines()[-1]

    def device() -> tuple[bool | None, str]:
        node = tmp / "full"
        try:
            os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        except PermissionError:
            return None, "making a device node needs root"
        return refused(node, "a character device like /dev/full (made in a temporary folder)")

    probe(2, "--out on a character device", device)
    fifo = tmp / "fifo"
    os.mkfifo(fifo)
    probe(2, "--out on a FIFO", lambda: refused(fifo, "FIFO"))
    victim = tmp / "victim.txt"
    victim.write_text("keep")
    link = tmp / "link.json"
    link.symlink_to(victim)
    probe(2, "--out on a symbolic link", lambda: refused(link, "symlink"))

    def existing() -> tuple[bool, str]:
        out_file = tmp / "run.json"
        first = fp8bench("run", *QUICK, "--precision", "bf16", "--out", out_file, "--no-store")
        first_id = read_run_file(out_file)["run"]["run_id"]
        again = fp8bench("run", *QUICK, "--precision", "bf16", "--out", out_file, "--no-store")
        kept = read_run_file(out_file)["run"]["run_id"] == first_id
        forced = fp8bench("run", *QUICK, "--precision", "bf16", "--out", out_file, "--no-store", "--force")
        mode = stat.S_IMODE(out_file.stat().st_mode)
        umask = os.umask(0)
        os.umask(umask)
        ok = first.returncode == 0 and again.returncode == 2 and kept and forced.returncode == 0 and \
            mode == 0o666 & ~umask
        return ok, f"second run without --force: exit {again.returncode}, earlier run kept={kept}; with --force: " \
                   f"exit {forced.returncode}; file mode {mode:o} (umask {umask:03o})"

    probe(2, "an existing run file is kept unless --force; normal permissions", existing)


# -- 3. the gate ---------------------------------------------------------------------------------------------------
def item3(tmp: Path) -> None:
    base = write_json(tmp / "base.json", run_payload("base"))

    def gate(*args: object) -> subprocess.CompletedProcess[str]:
        return fp8bench("gate", *args, "--no-store-report", "--report-dir", tempfile.mkdtemp(dir=tmp))

    def bad(name: str, samples: list[float], base_side: bool = False) -> tuple[bool, str]:
        damaged = write_json(tmp / f"{name}.json", run_payload(name, samples=samples))
        out = gate(damaged, base) if base_side else gate(base, damaged)
        line = (out.stderr.strip().splitlines() or [""])[-1]
        return out.returncode == 3 and str(damaged) in line and "Traceback" not in out.stderr, \
            f"exit {out.returncode}: {line}"

    probe(3, "negative samples in the candidate", lambda: bad("negative", [-0.0585] * 12))
    probe(3, "zero samples in the candidate", lambda: bad("zero", [0.0] * 12))
    probe(3, "negative samples in the base", lambda: bad("negbase", [-1e-3] * 12, base_side=True))
    probe(3, "NaN samples", lambda: bad("nan", [1e-3, float("nan")] * 6))

    def killed() -> tuple[bool, str]:
        full = write_json(tmp / "b24.json", run_payload("b24", n=24))
        partial = run_payload("c20", n=20, status="interrupted")
        partial["run"].update(n_records=20, n_cases=24)
        cand = write_json(tmp / "c20.json", partial)
        refused = gate(full, cand)
        allowed = gate(full, cand, "--allow-partial", "--json")
        report = last_json(allowed.stdout)
        ok = refused.returncode == 3 and allowed.returncode == 1 and report["counts"]["missing"] == 4
        return ok, f"interrupted candidate: exit {refused.returncode}; with --allow-partial: exit " \
                   f"{allowed.returncode}, {report['counts']['missing']} missing"

    probe(3, "a killed candidate with 20 of 24 cases", killed)

    def same() -> tuple[bool, str]:
        out = gate(base, base)
        warning = next((ln for ln in out.stderr.splitlines() if "warning" in ln), "")
        return bool(warning), warning or "no warning"

    probe(3, "gate A A (a run against itself)", same)

    def huge() -> tuple[bool, str]:
        import random

        rnd = random.Random(0)
        samples = [1e-3 * (1 + 0.01 * rnd.random()) for _ in range(100_000)]
        a = write_json(tmp / "huge_a.json", run_payload("ha", n=1, samples=samples))
        b = write_json(tmp / "huge_b.json", run_payload("hb", n=1, samples=[s * 1.02 for s in samples]))
        code = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True); "
                "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
        cmd = [sys.executable, "-c", code, sys.executable, "-m", "fp8bench.cli", "gate", str(a), str(b),
               "--no-store-report", "--report-dir", tempfile.mkdtemp(dir=tmp)]
        rc, rss_kib = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT).stdout.split()
        gib = int(rss_kib) / 2**20
        return gib < 1.5, f"two 100,000-sample cases: exit {rc}, peak RSS {gib:.2f} GiB (was 6.4 GB)"

    probe(3, "bootstrap memory with 100,000 samples", huge)


# -- 4. a stalled database -----------------------------------------------------------------------------------------
def item4(tmp: Path, pg: str | None) -> None:
    def silent_server() -> tuple[bool, str]:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # accepts (the kernel completes the handshake) and never answers
        url = f"postgresql://bench@127.0.0.1:{listener.getsockname()[1]}/fp8bench"
        started = time.monotonic()
        try:
            out = fp8bench("ingest", write_json(tmp / "st.json", run_payload("st")), "--store", url, timeout=120)
        finally:
            listener.close()
        took = time.monotonic() - started
        line = (out.stderr.strip().splitlines() or [""])[-1]
        return out.returncode == 2 and took < 60, f"ingest returned after {took:.1f} s: {line}"

    probe(4, "PostgreSQL that accepts but never answers (ingest)", silent_server)

    def locked() -> tuple[bool | None, str]:
        if pg is None:
            return None, "no PostgreSQL server binaries"
        import psycopg

        psql(pg, "CREATE DATABASE probe_lock")
        store = f"{pg}/probe_lock"
        fp8bench("ingest", write_json(tmp / "l.json", run_payload("l")), "--store", store)  # the schema
        with psycopg.connect(store) as blocker:
            blocker.execute("LOCK TABLE records IN ACCESS EXCLUSIVE MODE")
            started = time.monotonic()
            out = fp8bench("run", *QUICK, "--precision", "bf16", "--results-dir", tmp / "r4", "--store",
                           store + "?options=-c%20statement_timeout%3D2000", timeout=300)
            took = time.monotonic() - started
        line = next((ln for ln in out.stderr.splitlines() if "store write failed" in ln), out.stderr[-200:])
        return out.returncode == 0 and "statement timeout" in line, f"run finished in {took:.1f} s: {line}"

    probe(4, "a store write stuck behind a lock (statement timeout set to 2 s in the URL)", locked)


# -- 5. full disk, SIGTERM, a killed dashboard ---------------------------------------------------------------------
def item5(tmp: Path) -> None:
    def full_disk() -> tuple[bool | None, str]:
        mount = tmp / "tiny"
        mount.mkdir()
        made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mount)], capture_output=True)
        if made.returncode:
            return None, "cannot mount a small tmpfs (needs root)"
        try:
            out = fp8bench("run", *QUICK, "--precision", "all", "--backend", "torch", "emulated", "--out",
                           mount / "run.json", "--store", tmp / "store5", "--json")
            summary = last_json(out.stdout)
            kept = read_run_file(mount / "run.json")
        finally:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        ok = out.returncode == 74 and 1 <= len(kept["records"]) <= len(summary["records"])
        return ok, f"exit {out.returncode}; {len(summary['records'])} measured, {len(kept['records'])} in the " \
                   f"readable run file; " + out.stderr.strip().splitlines()[-1]

    probe(5, "the disk fills mid-run (16 KiB tmpfs)", full_disk)

    def terminated(signum: int) -> tuple[bool, str]:
        out_file = tmp / f"sig{signum}.json"
        proc = subprocess.Popen([sys.executable, "-m", "fp8bench.cli", "run", "--shape", "128x128x128", "--precision",
                                 "all", "--backend", "torch", "emulated", "--budget", "2", "--no-energy", "--out",
                                 str(out_file), "--no-store"], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(OSError, ValueError, KeyError):
                if read_run_file(out_file)["records"]:
                    break
            time.sleep(0.2)
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=120)
        kept = read_run_file(out_file)
        ok = proc.returncode == 130 and kept["run"]["status"] == "interrupted" and bool(kept["records"])
        return ok, f"exit {proc.returncode}, status {kept['run']['status']!r}, {len(kept['records'])} record(s) " \
                   f"kept; {stderr.strip().splitlines()[-1] if stderr.strip() else ''}"

    probe(5, "SIGTERM ends a run like Ctrl-C", lambda: terminated(signal.SIGTERM))
    probe(5, "SIGHUP ends a run like Ctrl-C", lambda: terminated(signal.SIGHUP))

    def dashboard(signum: int) -> tuple[bool | None, str]:
        if not Path("/proc/self/task").exists():
            return None, "needs Linux /proc"
        parent = subprocess.Popen([sys.executable, "-m", "fp8bench.cli", "dashboard", "--results-dir",
                                   str(tmp / "dash"), "--port", str(free_port())], cwd=ROOT,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        children: list[int] = []
        try:
            deadline = time.monotonic() + 60
            while not children and time.monotonic() < deadline:
                time.sleep(0.3)
                with contextlib.suppress(OSError):
                    children = [int(c) for c in Path(f"/proc/{parent.pid}/task/{parent.pid}/children")
                                .read_text().split()]
            if not children:
                return False, "no Streamlit child appeared"
            os.kill(parent.pid, signum)
            parent.wait(timeout=30)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and Path(f"/proc/{children[0]}").exists():
                time.sleep(0.2)
            gone = not Path(f"/proc/{children[0]}").exists()
            return gone, f"Streamlit (pid {children[0]}) {'exited' if gone else 'still running'} after the " \
                         f"dashboard got {signal.Signals(signum).name}"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(parent.pid, signal.SIGKILL)

    probe(5, "a dashboard killed with SIGTERM takes its Streamlit child", lambda: dashboard(signal.SIGTERM))
    probe(5, "a dashboard killed with SIGKILL takes its Streamlit child", lambda: dashboard(signal.SIGKILL))


# -- 6. ingest one file at a time ----------------------------------------------------------------------------------
def item6(tmp: Path, pg: str | None) -> None:
    def files() -> list[Path]:
        missing = run_payload("missing")
        del missing["records"][1]["workload"]
        not_object = run_payload("notobj")
        not_object["records"][2] = "gemm"
        nan = run_payload("nan")
        nan["records"][0]["samples_s"][3] = float("nan")
        long_id = run_payload("x" * 100)
        made = [write_json(tmp / "good1.json", run_payload("good1")), write_json(tmp / "missing.json", missing),
                write_json(tmp / "notobj.json", not_object), tmp / "binary.json",
                write_json(tmp / "nan.json", nan), write_json(tmp / "longid.json", long_id),
                write_json(tmp / "good2.json", run_payload("good2"))]
        made[3].write_bytes(bytes(range(256)) * 8)
        return made

    def ingest(store: str, where: str) -> tuple[bool, str]:
        out = fp8bench("ingest", *files(), "--store", store, "--json")
        summary = last_json(out.stdout)
        ingested = [r["run_id"] for r in summary["ingested"]]
        lines = out.stderr.strip().splitlines()
        ok = (ingested == ["good1", "good2"] and len(summary["errors"]) == 5 and len(lines) == 5
              and "Traceback" not in out.stderr and "[SQL" not in out.stderr)
        return ok, f"{where}: ingested {ingested}; " + " | ".join(ln.split(": ", 1)[-1][:60] for ln in lines)

    probe(6, "bad files among good ones (SQLite)", lambda: ingest(str(tmp / "store6"), "SQLite"))

    def on_postgres() -> tuple[bool | None, str]:
        if pg is None:
            return None, "no PostgreSQL server binaries"
        psql(pg, "CREATE DATABASE probe_ingest")
        ok, detail = ingest(f"{pg}/probe_ingest", "PostgreSQL")
        import psycopg

        with psycopg.connect(f"{pg}/probe_ingest") as conn:
            runs = sorted(r[0] for r in conn.execute("SELECT run_id FROM runs"))
        return ok and runs == ["good1", "good2"], f"{detail}; run rows {runs} (no orphan)"

    probe(6, "bad files among good ones (PostgreSQL)", on_postgres)

    def budget_inf() -> tuple[bool, str]:
        out = fp8bench("run", *QUICK, "--precision", "bf16", "--budget", "inf", "--no-store", "--results-dir",
                       tmp / "r6")
        return out.returncode == 2, out.stderr.strip()

    probe(6, "--budget inf", budget_inf)


# -- 7. the dashboard renders no markup from URLs or stored names --------------------------------------------------
def item7(tmp: Path) -> None:
    def browser() -> tuple[bool | None, str]:
        chromium, missing = chromium_or_reason()
        if chromium is None:
            return None, missing
        from playwright.sync_api import sync_playwright

        hits: list[str] = []

        class Pixel(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                hits.append(self.path)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        pixel = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Pixel)
        threading.Thread(target=pixel.serve_forever, daemon=True).start()
        host = f"http://127.0.0.1:{pixel.server_address[1]}"
        payload = run_payload("hostile")
        payload["run"]["device"]["name"] = (f"![d]({host}/stored) [Login](http://evil.example/s) "
                                            '<a href="http://evil.example/chart">c</a>')
        store = tmp / "store7"
        fp8bench("ingest", write_json(tmp / "hostile.json", payload), "--store", store)
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "fp8bench.cli", "dashboard", "--store", store, "--port",
                                   str(port)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
        try:
            base = f"http://127.0.0.1:{port}"
            for _ in range(200):
                with contextlib.suppress(OSError):
                    urllib.request.urlopen(f"{base}/_stcore/health", timeout=2)
                    break
                time.sleep(0.3)
            query = urllib.parse.urlencode({"backend": "[Session expired](http://evil.example/url)",
                                            "device": f"![x]({host}/typed)"})
            links_js = ("() => Array.from(document.querySelectorAll('a')).map(a => a.getAttribute('href') || "
                        "a.getAttribute('xlink:href') || '').filter(h => h.includes('evil'))")
            with sync_playwright() as pw:
                b = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
                page = b.new_page(viewport={"width": 1400, "height": 1200})
                page.goto(f"{base}/?{query}")
                page.get_by_text("matches no record").nth(1).wait_for(timeout=120_000)
                page.wait_for_timeout(1500)
                links = page.evaluate(links_js)
                images = page.locator(f'img[src^="{host}"]').count()
                page.goto(base)
                page.locator(".js-plotly-plot .main-svg").first.wait_for(timeout=120_000)
                page.wait_for_timeout(1500)
                links += page.evaluate(links_js)
                b.close()
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            pixel.shutdown()
        ok = not links and not images and not hits
        return ok, f"live links to evil.example: {len(links)}; images from the pixel host: {images}; requests " \
                   f"it received: {len(hits)} (URL parameters, stored device name, plotly labels)"

    probe(7, "hostile URL parameters and stored names in a real browser", browser)


# -- 8. memory before allocating -----------------------------------------------------------------------------------
def item8(tmp: Path) -> None:
    def huge_gemm() -> tuple[bool, str]:
        started = time.monotonic()
        out = fp8bench("run", "--shape", "100000x100000x100000", "--precision", "bf16", "--backend", "torch",
                       "--budget", "100000", "--no-energy", "--no-store", "--results-dir", tmp / "r8", "--json")
        took = time.monotonic() - started
        record = last_json(out.stdout)["records"][0]
        ok = record["status"] == "failed" and "out of memory" in record["reason"] and took < 120
        return ok, f"{took:.1f} s: {record['reason']}"

    probe(8, "GEMM of 100000^3 with a large budget", huge_gemm)


# -- 9. smaller ----------------------------------------------------------------------------------------------------
def item9(tmp: Path) -> None:
    def threads() -> tuple[bool, str]:
        out = fp8bench("run", *QUICK, "--precision", "bf16", "--threads", "99999", "--no-store")
        return out.returncode == 2 and "99999" in out.stderr, out.stderr.strip()

    probe(9, "--threads 99999", threads)

    def question_mark() -> tuple[bool, str]:
        target = tmp / "store?x"
        out = fp8bench("ingest", write_json(tmp / "q.json", run_payload("q")), "--store", target)
        ok = out.returncode == 0 and (target / "fp8bench.sqlite").is_file() and not (tmp / "store").exists()
        return ok, f"exit {out.returncode}; database at {target / 'fp8bench.sqlite'}: " \
                   f"{(target / 'fp8bench.sqlite').is_file()}"

    probe(9, "a store path with '?'", question_mark)

    def no_store() -> tuple[bool, str]:
        work = tmp / "cwd9"
        work.mkdir()
        env = {k: v for k, v in os.environ.items() if k != "FP8BENCH_RESULTS_DIR"}
        out = subprocess.run([sys.executable, "-m", "fp8bench.cli", "run", *QUICK, "--precision", "bf16",
                              "--no-store", "--out", str(tmp / "ns.json")], cwd=work, env=env, capture_output=True,
                             text=True, timeout=600)
        return out.returncode == 0 and not (work / "results").exists(), \
            f"exit {out.returncode}; results/ created: {(work / 'results').exists()}"

    probe(9, "--no-store --out leaves results/ alone", no_store)

    def schema_zero() -> tuple[bool, str]:
        bad = run_payload("z")
        bad["schema_version"] = 0
        out = fp8bench("ingest", write_json(tmp / "z.json", bad), "--store", tmp / "store9")
        return out.returncode == 2, out.stderr.strip()

    probe(9, "schema_version 0", schema_zero)


# -- stored data and files: trace downloads, output paths, record shapes, identity, escaping, secrets, read-only
# stores, bounded reads, and the smaller A/B and gate items -------------------------------------------------------
def _cli_in(code_root: Path) -> list[str]:
    """The command line of the fp8bench whose code is in ``code_root`` (this checkout, or an older one unpacked by
    ``--before-ref``): its folder goes first on ``sys.path``, ahead of the installed copy."""
    return [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); from fp8bench.cli import main; "
            "sys.exit(main(sys.argv[1:]))", str(code_root)]


def traces(tmp: Path) -> None:
    def swapped_in_browser() -> tuple[bool | None, str]:
        chromium, missing = chromium_or_reason()
        if chromium is None:
            return None, missing
        from playwright.sync_api import sync_playwright

        results = tmp / "traces"
        out = fp8bench("run", "--shape", "64x64x64", "--precision", "bf16", "--backend", "emulated", "--budget", "2",
                       "--max-time", "0.2", "--no-energy", "--profile", "--json", "--results-dir", results)
        trace = Path(last_json(out.stdout)["records"][0]["extra"]["profile"]["trace"])
        port = free_port()
        server = subprocess.Popen([sys.executable, "-m", "fp8bench.cli", "dashboard", "--results-dir", results,
                                   "--port", str(port)], cwd=ROOT, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            for _ in range(200):
                with contextlib.suppress(OSError):
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2)
                    break
                time.sleep(0.3)
            with sync_playwright() as pw:
                b = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
                page = b.new_page(viewport={"width": 1400, "height": 2400})
                page.goto(f"http://127.0.0.1:{port}/phases")
                button = page.get_by_role("button", name="Download the trace of bf16 / emulated")
                button.wait_for(timeout=120_000)
                link = trace.with_name(trace.name + ".swap")
                link.symlink_to("/etc/passwd")
                os.replace(link, trace)  # after the page was drawn, before the click
                with page.expect_download(timeout=120_000) as info:
                    button.click()
                served = Path(info.value.path()).read_bytes()
                b.close()
        finally:
            os.killpg(server.pid, signal.SIGTERM)
        leaked = b"root:" in served
        return not leaked, f"trace swapped for a link to /etc/passwd after drawing; the click served " \
                           f"{len(served)} bytes: {served[:90]!r}"

    probe("traces", "Phases trace download after the file became a link (real Chromium)", swapped_in_browser)


def outputs(tmp: Path) -> None:
    run = write_json(tmp / "o.json", run_payload("o"))

    def refused(args: list[object], target: Path, what: str, code: int = 2) -> tuple[bool, str]:
        before = os.lstat(target)
        out = fp8bench(*args)
        after = os.lstat(target)
        same = (before.st_mode, before.st_ino, before.st_rdev) == (after.st_mode, after.st_ino, after.st_rdev)
        line = (out.stderr.strip().splitlines() or [""])[-1]
        return out.returncode == code and same, f"{what}: exit {out.returncode}, unchanged={same}; {line}"

    def device() -> tuple[bool | None, str]:
        node = tmp / "out-full"
        try:
            os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        except PermissionError:
            return None, "making a device node needs root"
        return refused(["export", run, "--format", "csv", "--out", node, "--force"], node, "export --out /dev/full")

    probe("outputs", "export --out on a character device, with --force", device)
    fifo = tmp / "out-fifo"
    os.mkfifo(fifo)
    probe("outputs", "export --out on a FIFO", lambda: refused(["export", run, "--format", "csv", "--out", fifo],
                                                               fifo, "FIFO"))
    victim = tmp / "out-victim.txt"
    victim.write_text("keep")
    (tmp / "out-link.csv").symlink_to(victim)
    probe("outputs", "export --out on a symbolic link", lambda: refused(
        ["export", run, "--format", "csv", "--out", tmp / "out-link.csv"], tmp / "out-link.csv", "symlink"))

    def existing() -> tuple[bool, str]:
        out_file = tmp / "out-existing.csv"
        out_file.write_text("earlier")
        again = fp8bench("export", run, "--format", "csv", "--out", out_file)
        kept = out_file.read_text() == "earlier"
        forced = fp8bench("export", run, "--format", "csv", "--out", out_file, "--force")
        return again.returncode == 2 and kept and forced.returncode == 0, \
            f"without --force: exit {again.returncode}, kept={kept}; with --force: exit {forced.returncode}"

    probe("outputs", "export --out on an existing file", existing)

    def report_dir() -> tuple[bool, str]:
        folder = tmp / "out-reports"
        folder.mkdir()
        (folder / "report.md").symlink_to(victim)
        return refused(["gate", run, run, "--report-dir", folder, "--no-store-report"], folder / "report.md",
                       "gate --report-dir holding a linked report.md", code=3)

    probe("outputs", "gate --report-dir with report.md a link", report_dir)


def _hostile_records() -> dict[str, tuple[str, object]]:
    return {"phases-list": ("phases", [1e-3]), "extra-text": ("extra", "x"), "numerics-text": ("numerics", "x"),
            "number-text": ("tflops", "1.5"), "int-beyond-64-bits": ("n", 2**70),
            "shape-64k": ("shape", {"m": "64k", "n": 64, "k": 64})}


def stored_data(tmp: Path, pg: str | None) -> None:
    def files() -> list[Path]:
        made = []
        for name, (field, value) in _hostile_records().items():
            bad = run_payload(name)
            bad["records"][1][field] = value
            made.append(write_json(tmp / f"sd-{name}.json", bad))
        deep = tmp / "sd-deep.json"
        deep.write_text(json.dumps(run_payload("deep")).replace('"valid": true', '"valid": true, "extra": ' +
                                                                "[" * 200_000 + "]" * 200_000, 1))
        return [*made, deep, write_json(tmp / "sd-zz-good.json", run_payload("good"))]

    def ingest(store: str, where: str) -> tuple[bool, str]:
        out = fp8bench("ingest", *files(), "--store", store, "--json")
        summary = last_json(out.stdout)
        named = all(re.search(r"record \d", e["error"]) for e in summary["errors"])
        ok = ([r["run_id"] for r in summary["ingested"]] == ["good"] and len(summary["errors"]) == 7 and named
              and "Traceback" not in out.stderr)
        return ok, f"{where}: ingested {[r['run_id'] for r in summary['ingested']]}; " + " | ".join(
            e["error"].split(": ", 1)[-1][:70] for e in summary["errors"][:3])

    probe("stored-data", "records with wrongly typed fields, then a good file (SQLite)",
          lambda: ingest(str(tmp / "sd-store"), "SQLite"))

    def on_postgres() -> tuple[bool | None, str]:
        if pg is None:
            return None, "no PostgreSQL server binaries"
        psql(pg, "CREATE DATABASE probe_shapes")
        return ingest(f"{pg}/probe_shapes", "PostgreSQL")

    probe("stored-data", "records with wrongly typed fields, then a good file (PostgreSQL)", on_postgres)

    def migrated() -> tuple[bool, str]:
        """An older store (schema 4) holding such records, written the way an older fp8bench stored them."""
        import sqlite3

        store = tmp / "sd-old"
        fp8bench("ingest", write_json(tmp / "sd-old.json", run_payload("old")), "--store", store)
        db = store / "fp8bench.sqlite"
        with sqlite3.connect(db) as conn:
            data = json.loads(conn.execute("SELECT data FROM record_data LIMIT 1").fetchone()[0])
            data.update(phases=[1e-3], extra="text", numerics="good", tflops="1.5")
            conn.execute("UPDATE record_data SET data = ? WHERE record_id = 1", (json.dumps(data),))
            conn.execute("UPDATE records SET tflops = '1.5' WHERE id = 1")  # text in a number column
            conn.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
        codes = {verb: fp8bench(*args, "--store", store).returncode for verb, args in (
            ("export", ["export", "--format", "csv"]), ("payoff", ["payoff"]), ("changes", ["changes"]),
            ("ingest", ["ingest", write_json(tmp / "sd-new.json", run_payload("new"))]))}
        with sqlite3.connect(db) as conn:
            notes = json.loads(conn.execute("SELECT data FROM record_data WHERE record_id = 1").fetchone()[0])["notes"]
        return all(c == 0 for c in codes.values()) and len(notes) == 4, f"exit codes {codes}; notes: {notes[0]}"

    probe("stored-data", "an older store holding such records is repaired on upgrade", migrated)

    def sqlite_refuses() -> tuple[bool, str]:
        code = ("import sys; from fp8bench.results.store import open_store, StoreError; s = open_store(sys.argv[1]); "
                "s.add_run({'run_id': 't'}); "
                "r = dict(workload='gemm', shape={'m': 1}, precision='bf16', backend='torch', device='cpu', "
                "status='ok', n='abc', seq=0)\ntry:\n    s.add_records('t', [r])\nexcept StoreError as e:\n    print(e)")
        out = subprocess.run([sys.executable, "-c", code, str(tmp / "sd-typed")], capture_output=True, text=True,
                             cwd=ROOT)
        return "records.n is text 'abc'" in out.stdout, out.stdout.strip() or out.stderr[-200:]

    probe("stored-data", "text in an integer column (SQLite, through the store API)", sqlite_refuses)


def identity(tmp: Path) -> None:
    def duplicate_seq() -> tuple[bool, str]:
        twice = run_payload("twice")
        twice["records"][2]["seq"] = 0
        out = fp8bench("ingest", write_json(tmp / "id-twice.json", twice), "--store", tmp / "id-store", "--json")
        error = last_json(out.stdout)["errors"][0]["error"]
        return out.returncode == 2 and "both have seq 0" in error, error

    probe("identity", "two records with one seq", duplicate_seq)

    def rewind() -> tuple[bool, str]:
        done = run_payload("rw", n=3)
        done["run"].update(finished_at="2026-11-23T01:00:00+00:00", n_records=3)
        partial = run_payload("rw", n=1, status="running")
        store = tmp / "id-rewind"
        fp8bench("ingest", write_json(tmp / "id-done.json", done), "--store", store)
        fp8bench("ingest", write_json(tmp / "id-partial.json", partial), "--store", store)
        code = ("import sys; from fp8bench.results.store import open_store; r = open_store(sys.argv[1]).runs_frame()"
                ".iloc[0]; print(r['status'], r['finished_at'])")
        shown = subprocess.run([sys.executable, "-c", code, str(store)], capture_output=True, text=True,
                               cwd=ROOT).stdout.strip()
        return shown == "complete 2026-11-23T01:00:00+00:00", f"stored after the partial copy: {shown}"

    probe("identity", "re-ingesting an older partial copy of a finished run", rewind)


def escaping(tmp: Path) -> None:
    def gate_report() -> tuple[bool, str]:
        base = run_payload("eb", n=2)
        cand = run_payload("ec", n=2)
        cand["records"][1].update(status="failed", samples_s=[], median_s=None,
                                  reason="x\n\n## fp8bench gate: **PASS** (exit 0)\n![i](http://evil.example/i.png) "
                                         "@octocat [Login](http://evil.example)")
        folder = tmp / "esc-report"
        fp8bench("gate", write_json(tmp / "eb.json", base), write_json(tmp / "ec.json", cand), "--report-dir",
                 folder, "--no-store-report")
        md = (folder / "report.md").read_text()
        headings = [ln for ln in md.splitlines() if ln.startswith("#")]
        live = re.findall(r"(?<!\\)(!\[|\]\(|@octocat)", md)
        return len(headings) == 1 and not live, f"headings {headings}; unescaped markup {live}"

    probe("escaping", "a failure reason forging a verdict, image, mention and link in the gate report", gate_report)

    def csv_cells() -> tuple[bool, str]:
        hostile = run_payload("=HYPERLINK(\"http://evil.example\")")
        hostile["run"]["device"]["name"] = "@SUM(1+1)"
        out = fp8bench("export", write_json(tmp / "esc-csv.json", hostile), "--format", "csv")
        row = next(csv.DictReader(io.StringIO(out.stdout)))
        ok = row["run_id"].startswith("'=HYPERLINK") and row["device_name"] == "'@SUM(1+1)"
        return ok, f"run_id cell {row['run_id']!r}, device cell {row['device_name']!r}"

    probe("escaping", "CSV export of formula-like stored strings", csv_cells)

    def payoff() -> tuple[bool, str]:
        rec = run_payload("mk", n=2)
        rec["records"][1].update(precision="[/]fp8", shape=rec["records"][0]["shape"])
        store = tmp / "esc-payoff"
        fp8bench("ingest", write_json(tmp / "esc-payoff.json", rec), "--store", store)
        out = fp8bench("payoff", "--store", store)
        return out.returncode == 0 and "[/]fp8" in out.stdout, f"exit {out.returncode}; " + (
            out.stderr.strip().splitlines() or ["[/]fp8 shown"])[-1][:120]

    probe("escaping", "payoff with a precision named [/]fp8", payoff)

    def remote() -> tuple[bool, str]:
        code = ("from fp8bench.core.commits import commit_link, url_template; "
                "print(commit_link(url_template('javascript:alert(1)//{commit}'), 'abc'))")
        shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT).stdout.strip()
        return shown == "None", f"link from a javascript: remote: {shown}"

    probe("escaping", "a javascript: git remote as a commit link", remote)


def secrets(tmp: Path) -> None:
    def store_error() -> tuple[bool, str]:
        import sqlite3

        store = tmp / "sec-store"
        run = write_json(tmp / "sec.json", run_payload("sec"))
        fp8bench("ingest", run, "--store", store)
        with sqlite3.connect(store / "fp8bench.sqlite") as conn:
            conn.execute("CREATE TRIGGER no BEFORE INSERT ON gate_reports BEGIN SELECT RAISE(ABORT, 'refused'); END")
        out = fp8bench("gate", run, run, "--store", store, "--report-dir", tmp / "sec-report")
        line = next((ln for ln in out.stderr.splitlines() if "not stored" in ln), out.stderr[-200:])
        return "[SQL" not in out.stderr and "INSERT" not in out.stderr, line

    probe("secrets", "a store refusing the gate report", store_error)


def read_only(tmp: Path) -> None:
    source = tmp / "ro-source"
    run = write_json(tmp / "ro.json", run_payload("ro"))
    fp8bench("ingest", run, "--store", source)
    verbs = [["export", "--format", "csv"], ["payoff"], ["changes"], ["compare", "ro", "ro"],
             ["gate", "ro", "ro", "--no-store-report", "--report-dir", str(tmp / "ro-report")]]

    def mounted() -> tuple[bool | None, str]:
        mount = tmp / "ro-mount"
        mount.mkdir()
        made = subprocess.run(["mount", "--bind", str(source), str(mount)], capture_output=True, text=True)
        if made.returncode:
            return None, f"cannot bind-mount (needs root): {made.stderr.strip()}"
        try:
            subprocess.run(["mount", "-o", "remount,ro,bind", str(mount)], check=True, capture_output=True)
            codes = {args[0]: fp8bench(*args, "--store", mount).returncode for args in verbs}
            writer = fp8bench("ingest", run, "--store", mount)
        finally:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        line = writer.stderr.strip().splitlines()[-1]
        ok = all(c == 0 for c in codes.values()) and writer.returncode == 2 and "Traceback" not in writer.stderr
        return ok, f"read-only bind mount: {codes}; ingest: exit {writer.returncode}: {line[:110]}"

    probe("read-only", "verbs on a read-only bind mount", mounted)

    def other_user() -> tuple[bool | None, str]:
        if os.geteuid() != 0:
            return None, "running as another user needs root"
        shared = Path(tempfile.mkdtemp(prefix="fp8bench-probe-user-"))
        shared.chmod(0o755)
        try:
            theirs = shared / "theirs"
            shutil.copytree(source, theirs)
            for path in (theirs, *theirs.iterdir()):
                os.chown(path, 12345, 12345)
            (shared / "reports").mkdir(mode=0o777)
            (shared / "reports").chmod(0o777)
            plan = [[*a[:-2], "--report-dir", str(shared / "reports" / "g")] if a[0] == "gate" else a for a in verbs]
            script = ("import contextlib, io, json, os, sys\nfrom fp8bench.cli import main\n"
                      "warm, store, plan = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])\n"
                      "for a in plan:  # load every module the verbs import, as root, before dropping to nobody\n"
                      "    a = [x for i, x in enumerate(a) if '--report-dir' not in a[max(i - 1, 0):i + 1]]\n"
                      "    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
                      "        main([*a, '--store', warm])\n"
                      "os.setgid(65534); os.setuid(65534)\n"
                      "codes = []\nfor a in plan:\n    with contextlib.redirect_stdout(io.StringIO()):\n"
                      "        codes.append(main([*a, '--store', store]))\nprint(json.dumps(codes))")
            out = subprocess.run([sys.executable, "-c", script, str(source), str(theirs), json.dumps(plan)],
                                 capture_output=True, text=True, cwd=shared, timeout=600)
            codes = json.loads(out.stdout.strip().splitlines()[-1])
        finally:
            shutil.rmtree(shared, ignore_errors=True)
        return codes == [0] * len(verbs), f"as nobody on a store owned by uid 12345: exit codes {codes}"

    probe("read-only", "verbs on another user's store", other_user)

    def lock_wait() -> tuple[bool, str]:
        import fcntl

        for name in ("a.sqlite", "b.sqlite"):
            (tmp / f"ro-{name}").symlink_to(source / "fp8bench.sqlite")
        with open(source / "fp8bench.sqlite.lock", "a") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            code = ("import sys, fp8bench.results.store as s; s.SCHEMA_LOCK_TIMEOUT_S = 2\ntry:\n    s.open_store(sys.argv[1])"
                    "\nexcept s.StoreError as e:\n    print(e)")
            outs = [subprocess.run([sys.executable, "-c", code, str(tmp / f"ro-{n}")], capture_output=True,
                                   text=True, cwd=ROOT) for n in ("a.sqlite", "b.sqlite")]
        waited = all("waiting for" in o.stderr and "gave up after 2 s" in o.stdout for o in outs)
        return waited, outs[0].stderr.strip()[:150]

    probe("read-only", "two links to one store share one schema lock; a waiter says so and times out", lock_wait)


def bounded_reads(tmp: Path, before_ref: str | None, size_mb: float) -> None:
    def special_files() -> tuple[bool, str]:
        folder = tmp / "br"
        folder.mkdir()
        os.mkfifo(folder / "a.json")
        (folder / "b.json").symlink_to("/dev/zero")
        write_json(folder / "c.json", run_payload("c"))
        started = time.monotonic()
        out = fp8bench("ingest", *sorted(folder.glob("*.json")), "--store", tmp / "br-store", "--json", timeout=120)
        took = time.monotonic() - started
        summary = last_json(out.stdout)
        ok = [r["run_id"] for r in summary["ingested"]] == ["c"] and len(summary["errors"]) == 2
        return ok, f"{took:.1f} s; " + " | ".join(e["error"][-60:] for e in summary["errors"])

    probe("bounded-reads", "a FIFO and /dev/zero matched by a glob", special_files)

    def memory() -> tuple[bool, str]:
        big = tmp / "big-run.json"
        n = write_big_run_file(big, size_mb)
        peaks = {}
        for label, root in _code_roots(tmp, before_ref).items():
            wrapper = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True); "
                       "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
            rc, kib = subprocess.run([sys.executable, "-c", wrapper, *_cli_in(root), "ingest", str(big), "--store",
                                      str(tmp / f"big-store-{label}")], capture_output=True, text=True,
                                     cwd=ROOT).stdout.split()
            peaks[label] = (int(rc), int(kib) / 1024)
        detail = "; ".join(f"{label}: exit {rc}, peak RSS {mib:.0f} MiB" for label, (rc, mib) in peaks.items())
        return peaks["this checkout"][0] == 0, f"{big.stat().st_size / 1e6:.0f} MB, {n} records: {detail}"

    probe("bounded-reads", f"peak memory of ingesting a {size_mb:g} MB run file", memory)


def write_big_run_file(path: Path, size_mb: float) -> int:
    """A run file of about ``size_mb`` megabytes: GEMM records with 100 raw samples each; returns the record count."""
    import random

    rnd = random.Random(0)
    run = run_payload("big", n=0)["run"] | {"finished_at": "2026-11-23T01:00:00+00:00"}
    with path.open("w") as fh:
        fh.write('{"schema_version": 1, "run": ' + json.dumps(run) + ', "records": [')
        i, size = 0, fh.tell()
        while size < size_mb * 1e6:
            samples = [1e-3 * (1 + 0.01 * rnd.random()) for _ in range(100)]
            rec = {"workload": "gemm", "shape": {"m": 64 + i, "n": 64, "k": 64}, "precision": "bf16",
                   "backend": "torch", "device": "cpu", "status": "ok", "samples_s": samples,
                   "median_s": sorted(samples)[50], "valid": True, "seq": i, "phases": {"gemm": 1e-3},
                   "numerics": {"sqnr_db": 40.0}}
            text = (", " if i else "") + json.dumps(rec)
            fh.write(text)
            size += len(text)
            i += 1
        fh.write("]}")
    return i


def _code_roots(tmp: Path, before_ref: str | None) -> dict[str, Path]:
    """This checkout, and the code of ``before_ref`` (unpacked with ``git archive``) to measure side by side."""
    roots = {"this checkout": ROOT}
    if before_ref:
        folder = tmp / f"ref-{before_ref}"
        folder.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", before_ref, "fp8bench"], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
        roots[f"at {before_ref}"] = folder
    return roots


def smaller(tmp: Path) -> None:
    def round_timeout() -> tuple[bool, str]:
        plugins = ROOT / "tests" / "plugins"
        started = time.monotonic()
        out = fp8bench("ab", "--base", ROOT, "--head", ROOT, "--rounds", "2", "--round-timeout", "30", "--out",
                       tmp / "sm-ab", "--head-env", "FP8BENCH_PLUGINS=fp8bench_test_hang", "--head-env",
                       f"PYTHONPATH={plugins}", "--", *QUICK, "--precision", "bf16", timeout=600)
        took = time.monotonic() - started
        line = (out.stderr.strip().splitlines() or [""])[-1]
        return out.returncode == 3 and "head round 1 of 2 did not finish" in line, f"{took:.0f} s: {line[:150]}"

    probe("smaller", "ab with a side that hangs (--round-timeout 30)", round_timeout)

    def masked_and_dirty() -> tuple[bool, str]:
        out = fp8bench("ab", "--base", ROOT, "--head", ROOT, "--rounds", "2", "--no-rerun", "--out", tmp / "sm-ab2",
                       "--head-env", f"PROBE_TOKEN={SECRET}", "--results-dir", tmp / "sm-results", "--",
                       *QUICK, "--precision", "bf16", timeout=600)
        report = (tmp / "sm-ab2" / "report.json").read_text()
        ab = json.loads(report)["ab"]
        ok = SECRET not in report + out.stdout + out.stderr and "dirty" in ab
        return ok, f"head_env {ab['head_env']}; dirty {ab['dirty']}"

    probe("smaller", "ab --head-env values and each side's dirty flag in the report", masked_and_dirty)

    def no_path() -> tuple[bool, str]:
        out = fp8bench("ingest", write_json(tmp / "sm.json", run_payload("sm")), "--store", "sqlite://")
        return out.returncode == 2, out.stderr.strip()[:150]

    probe("smaller", "--store sqlite:// (no database file)", no_path)

    def lenient() -> tuple[bool, str]:
        base = run_payload("lb")
        cand = run_payload("lc")
        cand["run"]["software"]["torch"] = "2.9.1"  # every case incomparable
        folder = tmp / "sm-report"
        out = fp8bench("gate", write_json(tmp / "lb.json", base), write_json(tmp / "lc.json", cand), "--fail-on",
                       "regression", "--report-dir", folder, "--no-store-report")
        md = (folder / "report.md").read_text()
        return out.returncode == 0 and "nothing was compared" in md and "nothing was compared" in out.stderr, \
            next((ln for ln in md.splitlines() if "nothing was compared" in ln), "no warning")[:150]

    probe("smaller", "--fail-on regression with every case incomparable", lenient)


GROUPS = ("traces", "outputs", "stored-data", "identity", "escaping", "secrets", "read-only", "bounded-reads",
          "smaller")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", default=[*map(str, range(1, 10)), *GROUPS],
                        help=f"items to run: 1 to 9, or {', '.join(GROUPS)} (default: all)")
    parser.add_argument("--before-ref", default=None, metavar="GIT_REF",
                        help="bounded-reads: also measure the ingest memory of this commit's code, side by side")
    parser.add_argument("--big-mb", type=float, default=200, help="bounded-reads: size of the run file (MB)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fp8bench-probe-") as name:
        tmp = Path(name)
        with postgres() as pg:
            steps = {"1": lambda: item1(tmp, pg), "2": lambda: item2(tmp), "3": lambda: item3(tmp),
                     "4": lambda: item4(tmp, pg), "5": lambda: item5(tmp), "6": lambda: item6(tmp, pg),
                     "7": lambda: item7(tmp), "8": lambda: item8(tmp), "9": lambda: item9(tmp),
                     "traces": lambda: traces(tmp), "outputs": lambda: outputs(tmp),
                     "stored-data": lambda: stored_data(tmp, pg), "identity": lambda: identity(tmp),
                     "escaping": lambda: escaping(tmp), "secrets": lambda: secrets(tmp),
                     "read-only": lambda: read_only(tmp),
                     "bounded-reads": lambda: bounded_reads(tmp, args.before_ref, args.big_mb),
                     "smaller": lambda: smaller(tmp)}
            unknown = [item for item in args.only if item not in steps]
            if unknown:
                parser.error(f"unknown item(s) {', '.join(unknown)}; accepted: {', '.join(steps)}")
            for item in args.only:
                steps[item]()
    failed = sum(word == "FAIL" for word, _ in RESULTS)
    print(f"{len(RESULTS)} probes: {sum(w == 'PASS' for w, _ in RESULTS)} pass, {failed} fail, "
          f"{sum(w == 'SKIP' for w, _ in RESULTS)} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
