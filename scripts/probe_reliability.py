"""Probe fp8bench the way a hostile or unlucky user would, and print one verdict line per probe.

Each probe runs the real command line in a child process (``python -m fp8bench.cli``), as a user at a terminal
would, against temporary files: a password in a store URL, an --out that names a device node, a FIFO or an
existing run, damaged or partial gate inputs, a database that never answers, a full disk, SIGTERM, malformed
files to ingest, hostile text in the dashboard, a GEMM too big for memory, and a few impossible settings.

    python scripts/probe_reliability.py            # everything this machine can do
    python scripts/probe_reliability.py --only 3 7 # items 3 and 7

Probes that need something this machine may lack say SKIP with the reason: root (a device node, a small tmpfs),
a PostgreSQL server (``initdb`` on PATH or under /usr/lib/postgresql), Chromium and playwright (the dashboard in
a browser). Exit code: 0 when no probe failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import http.server
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

ROOT = Path(__file__).resolve().parents[1]
SECRET = "PASSWORD-probe-1234"
QUICK = ["--shape", "64x64x64", "--backend", "torch", "--budget", "0.5", "--max-time", "0.02", "--no-energy"]
RESULTS: list[tuple[str, str]] = []


def fp8bench(*args: object, timeout: float = 600, env: dict[str, str] | None = None,
             cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fp8bench.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, cwd=cwd or ROOT)


def verdict(item: int, name: str, ok: bool | None, detail: str) -> None:
    word = "SKIP" if ok is None else "PASS" if ok else "FAIL"
    line = f"{word}  [{item}] {name}: {' '.join(detail.split())[:220]}"
    RESULTS.append((word, line))
    print(line, flush=True)


def probe(item: int, name: str, fn: Callable[[], tuple[bool | None, str]]) -> None:
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
        first_id = json.loads(out_file.read_text())["run"]["run_id"]
        again = fp8bench("run", *QUICK, "--precision", "bf16", "--out", out_file, "--no-store")
        kept = json.loads(out_file.read_text())["run"]["run_id"] == first_id
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
            kept = json.loads((mount / "run.json").read_text())
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
                if json.loads(out_file.read_text())["records"]:
                    break
            time.sleep(0.2)
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=120)
        kept = json.loads(out_file.read_text())
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
        chromium = os.environ.get("FP8BENCH_CHROMIUM", "/usr/bin/chromium")
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            return None, "the playwright package is not installed"
        if not shutil.which(chromium):
            return None, f"no Chromium at {chromium}"
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", type=int, default=list(range(1, 10)), help="item numbers to run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fp8bench-probe-") as name:
        tmp = Path(name)
        with postgres() as pg:
            steps = {1: lambda: item1(tmp, pg), 2: lambda: item2(tmp), 3: lambda: item3(tmp),
                     4: lambda: item4(tmp, pg), 5: lambda: item5(tmp), 6: lambda: item6(tmp, pg),
                     7: lambda: item7(tmp), 8: lambda: item8(tmp), 9: lambda: item9(tmp)}
            for item in args.only:
                steps[item]()
    failed = sum(word == "FAIL" for word, _ in RESULTS)
    print(f"{len(RESULTS)} probes: {sum(w == 'PASS' for w, _ in RESULTS)} pass, {failed} fail, "
          f"{sum(w == 'SKIP' for w, _ in RESULTS)} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
