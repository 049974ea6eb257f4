#!/usr/bin/env python
"""The results path of a nightly suite of 10,000 cases, timed stage by stage, each figure with the load average.

Stages (``--only`` picks some):

* ``write``: a run file of N records through ``RunFileWriter`` (what ``fp8bench run`` does after each case), for
  each N of ``--write-sizes``: seconds and bytes written (``wchar`` of /proc/self/io: every write(2) of the process)
  per record, over the whole run and over its first and last tenth. The per-record cost is flat when the last
  tenth's cost over the first tenth's, and the per-record cost at the largest N over that at the smallest, stay
  under 1.5.
* ``ingest``: that 10,000-record file into an empty store: records per second on SQLite and on PostgreSQL (a
  server started here on 127.0.0.1 with initdb and pg_ctl, its default settings, fsync on; skipped without the
  server binaries).
* ``gate``: ``fp8bench gate`` of two 10,000-case run files (reading both, the statistics, the report).
* ``store``: ``fp8bench changes``, ``fp8bench payoff`` and ``fp8bench export --format csv`` over a SQLite store of
  ``--store-records`` records (default 100,000; ``--store-records 1000000`` for the nightly-history size), built
  as ``scripts/bench_dashboard.py`` builds its stores: 10,000 through ``Store.ingest_run``, the rest by copying
  those runs in SQL as later nights.
* ``export``: ``fp8bench export --format csv`` of the 10,000-record run file.

Records are synthetic but schema-valid (``scripts/bench_dashboard.py``'s generator) with ``--samples`` raw samples
each (500 by default: about 12 KB of JSON, the size of a real GPU case's record).

    python scripts/bench_store_path.py                                  # every stage, 100,000-record store
    python scripts/bench_store_path.py --only store --store-records 1000000
    python scripts/bench_store_path.py --only write --write-sizes 100 250 500 --code /tmp/old-checkout
      # the same writer stage against another checkout's fp8bench (a "before" figure)
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import io
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

SCRIPTS = Path(__file__).resolve().parent
STAGES = ("write", "ingest", "gate", "store", "export")
FLAT_RATIO = 1.5  # the write stage's bound on per-record cost growth


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f} (1/5 min, {os.cpu_count()} CPUs)"


def report(what: str, figure: str) -> None:
    print(f"{what:<58} {figure:<44} {load()}", flush=True)


def wchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no wchar line")


def synthetic_run(n: int, samples: int, seed: int = 0, run_id: str = "bench-base") -> dict[str, Any]:
    """A run payload of ``n`` distinct cases on one device (``bench_dashboard``'s generator), ``samples`` raw
    samples each; ``seed`` draws other times for the same cases."""
    import numpy as np

    sys.path.insert(0, str(SCRIPTS))
    import bench_dashboard

    bench_dashboard.RECORDS_PER_RUN = n
    rng = np.random.default_rng(seed)
    payload = bench_dashboard.synthetic_run(0, rng)
    payload["run"]["run_id"] = run_id
    for rec in payload["records"]:
        median = rec["median_s"]
        rec["samples_s"] = list(median * rng.lognormal(0.0, 0.02, size=samples))
        rec["n"] = samples
    payload["run"]["status"] = "running"
    return payload


# -- write ---------------------------------------------------------------------------------------------------------
def write_run(path: Path, payload: dict[str, Any]) -> tuple[list[float], list[int]]:
    """Write ``payload`` as ``fp8bench run`` does; seconds and bytes of each append."""
    from fp8bench.results.runfile import RunFileWriter

    writer = RunFileWriter(path, payload["run"])
    seconds, nbytes = [], []
    for rec in payload["records"]:
        b0, t0 = wchar(), time.perf_counter()
        writer.append(rec)
        seconds.append(time.perf_counter() - t0)
        nbytes.append(wchar() - b0)
    writer.finish(status="complete")
    return seconds, nbytes


def stage_write(sizes: list[int], samples: int, folder: Path) -> Path:
    """Time the writer at each size; returns the largest run's file."""
    per_record: dict[int, tuple[float, float]] = {}
    for n in sizes:
        path = folder / f"write-{n}.json"
        seconds, nbytes = write_run(path, synthetic_run(n, samples))
        tenth = max(1, n // 10)
        t_ratio = (sum(seconds[-tenth:]) / tenth) / (sum(seconds[:tenth]) / tenth)
        b_ratio = (sum(nbytes[-tenth:]) / tenth) / (sum(nbytes[:tenth]) / tenth)
        per_record[n] = (sum(seconds) / n, sum(nbytes) / n)
        report(f"write {n:>6,} records ({path.stat().st_size / 1e6:.1f} MB file)",
               f"{sum(seconds):.2f} s; {1e3 * per_record[n][0]:.2f} ms, {per_record[n][1] / 1e3:.1f} KB/record")
        report(f"  last tenth / first tenth of the {n:,}-record run",
               f"time x{t_ratio:.2f}, bytes x{b_ratio:.2f}")
    small, large = min(per_record), max(per_record)
    t_growth = per_record[large][0] / per_record[small][0]
    b_growth = per_record[large][1] / per_record[small][1]
    flat = t_growth < FLAT_RATIO and b_growth < FLAT_RATIO
    report(f"write: per record at {large:,} / at {small:,}",
           f"time x{t_growth:.2f}, bytes x{b_growth:.2f} ({'flat' if flat else 'NOT flat'}: < {FLAT_RATIO})")
    return folder / f"write-{large}.json"


# -- ingest --------------------------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_server_user(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@contextlib.contextmanager
def postgres_server() -> Iterator[str | None]:
    """A PostgreSQL server on a free loopback port for this script (started as ``tests/test_store_postgres.py``
    starts one, but with the server's default durability); ``None`` without the server binaries."""
    found = shutil.which("initdb") or next(iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))[::-1]), None)
    if found is None:
        yield None
        return
    bindir = Path(found).parent
    tmp = Path(tempfile.mkdtemp(prefix="fp8bench-pg-bench-"))
    if os.geteuid() == 0:
        shutil.chown(tmp, "postgres", "postgres")
    data, port = tmp / "data", _free_port()
    try:
        subprocess.run(_as_server_user([str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
                                        "-E", "UTF8"]), check=True, capture_output=True, timeout=300)
        subprocess.run(_as_server_user([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(tmp / "log"), "-w",
                                        "-t", "120", "-o", f"-p {port} -c listen_addresses=127.0.0.1 -k {tmp}",
                                        "start"]), check=True, capture_output=True, timeout=300)
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(_as_server_user([str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"]),
                       capture_output=True, timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)


def timed_ingest(target: str, path: Path) -> tuple[float, int]:
    from fp8bench.results.ingest import ingest_file
    from fp8bench.results.store import open_store

    store = open_store(target)
    started = time.perf_counter()
    done = ingest_file(store, path)
    elapsed = time.perf_counter() - started
    if "error" in done:
        raise RuntimeError(done["error"])
    return elapsed, done["records_added"]


def stage_ingest(path: Path, folder: Path) -> None:
    seconds, n = timed_ingest(str(folder / "ingest-store"), path)
    report(f"ingest {n:,} records into SQLite", f"{seconds:.1f} s, {n / seconds:,.0f} records/s")
    with postgres_server() as url:
        if url is None:
            report("ingest into PostgreSQL", "skipped: no initdb/pg_ctl on this machine")
            return
        seconds, n = timed_ingest(url, path)
        report(f"ingest {n:,} records into PostgreSQL (loopback)", f"{seconds:.1f} s, {n / seconds:,.0f} records/s")


# -- the verbs -----------------------------------------------------------------------------------------------------
def timed_verb(argv: list[str]) -> tuple[float, float, int]:
    """Wall and CPU seconds of ``fp8bench ARGV`` in this process (its output dropped), and its exit code."""
    from fp8bench.cli import main

    sink = io.StringIO()
    wall, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        code = main(argv)
    return time.perf_counter() - wall, time.process_time() - cpu, code


def verb_figure(name: str, argv: list[str], n: int, accept: Callable[[int], bool] = lambda c: c == 0) -> None:
    wall, cpu, code = timed_verb(argv)
    ok = "" if accept(code) else f" (exit {code}!)"
    report(f"{name}", f"{wall:.1f} s wall, {cpu:.1f} s CPU, {n / wall:,.0f} records/s{ok}")


def stage_gate(path: Path, samples: int, folder: Path) -> None:
    from fp8bench.results.runfile import read_run_file

    n = len(read_run_file(path)["records"])
    cand = folder / "gate-cand.json"
    write_run(cand, synthetic_run(n, samples, seed=1, run_id="bench-cand"))
    verb_figure(f"gate of two {n:,}-case run files", ["gate", str(path), str(cand), "--no-store-report",
                                                       "--report-dir", str(folder / "gate-report"), "--json"],
                2 * n, accept=lambda c: c in (0, 1, 2))


def build_big_store(target: Path, n: int) -> float:
    sys.path.insert(0, str(SCRIPTS))
    import bench_dashboard

    started = time.perf_counter()
    bench_dashboard.build_store(str(target), min(n, 10_000))
    bench_dashboard.grow_store(str(target), n)
    return time.perf_counter() - started


def stage_store(n: int, folder: Path) -> None:
    target = folder / f"store-{n}"
    seconds = build_big_store(target, n)
    report(f"build a {n:,}-record SQLite store (not a target)", f"{seconds:.0f} s")
    verb_figure(f"changes over {n:,} records", ["changes", "--store", str(target), "--all", "--json"], n,
                accept=lambda c: c in (0, 1))
    verb_figure(f"payoff over {n:,} records", ["payoff", "--store", str(target), "--json"], n)
    verb_figure(f"export --format csv of {n:,} stored records",
                ["export", "--store", str(target), "--format", "csv", "--out", str(folder / "store.csv")], n)


def stage_export(path: Path, folder: Path) -> None:
    verb_figure("export --format csv of the 10,000-record run file",
                ["export", str(path), "--format", "csv", "--out", str(folder / "run.csv")], 10_000)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=STAGES, default=list(STAGES))
    parser.add_argument("--write-sizes", nargs="+", type=int, default=[100, 1000, 10_000])
    parser.add_argument("--samples", type=int, default=500, help="raw samples per record (default 500: ~12 KB)")
    parser.add_argument("--store-records", type=int, default=100_000)
    parser.add_argument("--code", type=Path, default=None,
                        help="a checkout whose fp8bench is imported instead of this one (write stage only)")
    parser.add_argument("--folder", type=Path, default=None, help="work folder (default: a temporary one)")
    args = parser.parse_args()
    if args.code is not None:
        sys.path.insert(0, str(args.code.resolve()))
    import fp8bench

    print(f"fp8bench from {Path(fp8bench.__file__).parent}", flush=True)
    folder = args.folder or Path(tempfile.mkdtemp(prefix="fp8bench-store-path-"))
    folder.mkdir(parents=True, exist_ok=True)
    sizes = sorted(set(args.write_sizes) | ({10_000} if set(args.only) - {"write", "store"} else set()))
    run_file = stage_write(sizes, args.samples, folder) if {"write", "ingest", "gate", "export"} & set(args.only) \
        else None
    if "ingest" in args.only and run_file:
        stage_ingest(run_file, folder)
    if "gate" in args.only and run_file:
        stage_gate(run_file, args.samples, folder)
    if "export" in args.only and run_file:
        stage_export(run_file, folder)
    if "store" in args.only:
        stage_store(args.store_records, folder)
    if args.folder is None:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
