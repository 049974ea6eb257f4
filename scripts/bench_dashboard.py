#!/usr/bin/env python
"""How fast the dashboard's Overview renders from a large store, on SQLite or PostgreSQL.

Builds (or reuses) a store of synthetic but schema-valid records - every record is an ``fp8bench.core.records.Record``
stored through ``Store.ingest_run``, spread over nightly runs on two branches, commits, three device models, three
workloads, many shapes, several precisions and backends - then drives the real app with Streamlit's AppTest:

* first load, cold process: the first session of a fresh Python process on a cold cache, as the first reader of a
  newly started ``fp8bench dashboard`` sees it: the process has imported Streamlit (the server's own start-up,
  not timed), and the timed render imports the dashboard's modules, reads the store and draws the page. This is
  the figure the targets judge;
* first load, warm server: a new session on a cold cache in a process that has already served the app once (what
  opening the dashboard costs after a new run arrived: the cache is keyed by the store's state), printed beside it;
* rerun: the same session runs the script again (what a widget change or a reload costs);
* new session: another user opens the Overview while the store is cached.

The synthetic values only need to be plausible in shape (times follow FLOPs over a per-device rate with noise);
they measure the dashboard, not a device. Targets: cold first load under 1 s at 100,000 records and under 3 s at
1,000,000 (log-interpolated between); rerun under 0.3 s. Each is judged on wall seconds (the exit status) and on
CPU seconds (what the render costs without the machine's other load).

    python scripts/bench_dashboard.py                      # 100,000 records in a temp SQLite store
    python scripts/bench_dashboard.py --store /tmp/big --records 1000000 --repeats 5
    python scripts/bench_dashboard.py --store postgresql://user@127.0.0.1:5432/bench --records 100000
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from fp8bench.core.records import SCHEMA_VERSION, Record
from fp8bench.results.store import open_store

# records -> seconds of the cold first load (the store's design targets; docs/store.md has the measured figures)
FIRST_LOAD_TARGET_S = {100_000: 1.0, 1_000_000: 3.0}
RERUN_TARGET_S = 0.3
RECORDS_PER_RUN = 1000
# device name -> (kind, dense BF16 TFLOP/s used to make plausible times, memory TB/s, metered)
DEVICES = {"NVIDIA H100 80GB HBM3": ("cuda", 989.0, 3.35, True),
           "NVIDIA A100-SXM4-80GB": ("cuda", 312.0, 2.04, True),
           "Intel(R) Xeon(R) Processor": ("cpu", 0.4, 0.02, False)}
PRECISIONS = {"bf16": 1.0, "fp8_tensorwise": 1.7, "fp8_rowwise": 1.6, "fp8_blockwise": 1.4, "mxfp8": 1.5}
BACKENDS = ("torch", "te", "emulated", "triton")
WORKLOADS = ("gemm", "attention", "transformer_step")


def _shapes(n: int) -> list[dict[str, int]]:
    sizes = [256, 512, 1024, 2048, 4096, 8192]
    return [{"m": m, "n": nn, "k": k} for m, nn, k in itertools.islice(itertools.product(sizes, repeat=3), n)]


def synthetic_run(index: int, rng: np.random.Generator) -> dict[str, Any]:
    """One run file's payload: a header and RECORDS_PER_RUN schema-valid records."""
    name = list(DEVICES)[index % len(DEVICES)]
    kind, bf16_tflops, mem_tbps, metered = DEVICES[name]
    run_id = f"bench{index:05d}"
    commit = f"{index // 3:07x}".rjust(40, "0")  # the three devices measure each commit
    branch = "main" if index % 30 else "release"
    started = f"2026-01-{1 + index // 40:02d}T{(index % 24):02d}:{index % 60:02d}:00+00:00"
    shapes = _shapes(RECORDS_PER_RUN // (len(PRECISIONS) * len(BACKENDS) * len(WORKLOADS)) + 1)
    cases = itertools.islice(itertools.product(WORKLOADS, shapes, PRECISIONS, BACKENDS), RECORDS_PER_RUN)
    records = []
    for seq, (workload, shape, precision, backend) in enumerate(cases):
        flops = 2 * shape["m"] * shape["n"] * shape["k"]
        elem = 1 if precision != "bf16" else 2
        nbytes = elem * (shape["m"] * shape["k"] + shape["k"] * shape["n"]) + 2 * shape["m"] * shape["n"]
        rate = bf16_tflops * PRECISIONS[precision] * 1e12 * rng.uniform(0.3, 0.8)
        median = max(flops / rate, nbytes / (mem_tbps * 1e12))
        samples = list(median * rng.lognormal(0.0, 0.02, size=10))
        quantize = 0.0 if precision == "bf16" else median * rng.uniform(0.05, 0.3)
        joules = median * rng.uniform(300, 700) if metered else None
        throttled = metered and rng.random() < 0.01
        records.append(Record(
            workload=workload, shape=shape, precision=precision, backend=backend, device=kind,
            status="invalid" if throttled else "ok", reason="throttled: power cap" if throttled else None,
            fp8_format=None if precision == "bf16" else "e4m3", samples_s=samples, median_s=float(np.median(samples)),
            iqr_s=median * 0.02, rsd=0.02, n=10, target_reached=True, prequant_median_s=median - quantize,
            flops=flops, bytes=nbytes, tflops=flops / median / 1e12, prequant_tflops=flops / (median - quantize) / 1e12,
            gbps=nbytes / median / 1e9, pct_of_peak=100 * flops / median / 1e12 / (bf16_tflops * PRECISIONS[precision]),
            peak_tflops=bf16_tflops * PRECISIONS[precision], peak_source="synthetic", peak_mem_tbps=mem_tbps,
            phases={"quantize": quantize, "gemm": median - quantize} if quantize else {"gemm": median},
            energy_j=joules, avg_power_w=joules / median if joules else None,
            tflops_per_w=flops / joules / 1e12 if joules else None,
            energy={"method": "nvml" if metered else "none", "reason": None if metered else "no meter (synthetic)",
                    "invalid_reasons": ["power cap"] if throttled else []},
            numerics={"sqnr_db": 50.0 if precision == "bf16" else float(rng.uniform(25, 32)),
                      "rel_err": float(rng.uniform(1e-3, 5e-2)), "max_abs_err": 0.1, "overflow_frac": 0.0,
                      "underflow_frac": 0.0},
            valid=not throttled, interpreted=backend == "triton" and kind == "cpu", seq=seq).to_dict())
    run = {"run_id": run_id, "started_at": started, "finished_at": started, "status": "complete",
           "device_spec": kind, "git": {"commit": commit, "dirty": False, "branch": branch,
                                        "first_parent_depth": index // 3 + 1}, "host": {"alias": "bench-host"},
           "device": {"name": name, "kind": kind}, "software": {"torch": "2.13.0", "python": "3.11"},
           "settings": {"budget_s": 30.0}, "spec": {"suite": "synthetic"}, "n_records": len(records)}
    return {"schema_version": SCHEMA_VERSION, "run": run, "records": records}


def build_store(target: str, n_records: int, seed: int = 0) -> float:
    """Fill ``target`` up to ``n_records`` records; returns seconds spent (0 when already there)."""
    store = open_store(target)
    have = store.count_records()
    if have >= n_records:
        return 0.0
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    for index in range(have // RECORDS_PER_RUN, -(-n_records // RECORDS_PER_RUN)):
        store.ingest_run(synthetic_run(index, rng))
        print(f"\rstored {store.count_records():,} records", end="", file=sys.stderr)
    print(file=sys.stderr)
    return time.perf_counter() - started


def grow_store(target: str, n_records: int) -> float:
    """Grow a store to ``n_records`` by copying its runs in SQL, each copy a later night on later commits (new
    run ids, start times shifted by whole years, commit depths shifted past the originals). Building a million
    records through ``ingest_run`` takes over an hour on a busy 2-core machine; a copy of stored rows keeps every
    column as the store wrote it. Returns seconds spent."""
    import sqlalchemy as sa

    from fp8bench.results.store import record_data_table, record_phases_table, records_table, runs_table

    store = open_store(target)
    started = time.perf_counter()
    with store.engine.connect() as conn:
        base = [dict(r) for r in conn.execute(sa.select(runs_table).order_by(runs_table.c.started_at)).mappings()]
        depth = conn.execute(sa.select(sa.func.max(runs_table.c.commit_depth))).scalar() or 0
    copy = 1
    record_cols = [c for c in records_table.columns if c.name != "id"]
    overrides = {"run_id", "run_started_at", "git_commit", "commit_depth"}
    while store.count_records() < n_records:
        for run in base:
            if store.count_records() >= n_records:
                break
            new_id = f"{run['run_id']}-copy{copy}"
            year = int(str(run["started_at"])[:4]) + copy
            when = f"{year}{str(run['started_at'])[4:]}"
            commit = f"{copy:04x}{str(run['git_commit'])[4:]}"
            new_depth = (run["commit_depth"] or 0) + copy * depth
            with store.engine.begin() as conn:
                data = dict(run["data"]) if isinstance(run["data"], dict) else run["data"]
                conn.execute(runs_table.insert().values({**run, "run_id": new_id, "started_at": when,
                                                         "git_commit": commit, "commit_depth": new_depth,
                                                         "data": data}))
                values = {"run_id": sa.literal(new_id), "run_started_at": sa.literal(when),
                          "git_commit": sa.literal(commit), "commit_depth": sa.literal(new_depth)}
                source = sa.select(*[values[c.name] if c.name in overrides else c for c in record_cols]).where(
                    records_table.c.run_id == run["run_id"])
                conn.execute(records_table.insert().from_select([c.name for c in record_cols], source))
                old, new = records_table.alias("old"), records_table.alias("new")
                for side, columns in ((record_phases_table, ["phase", "median_s"]), (record_data_table, ["data"])):
                    rows = (sa.select(new.c.id, *[side.c[c] for c in columns])
                            .join(old, old.c.id == side.c.record_id)
                            .join(new, sa.and_(new.c.run_id == new_id, new.c.seq == old.c.seq))
                            .where(old.c.run_id == run["run_id"]))
                    conn.execute(side.insert().from_select(["record_id", *columns], rows))
        print(f"\rgrown to {store.count_records():,} records", end="", file=sys.stderr)
        copy += 1
    print(file=sys.stderr)
    return time.perf_counter() - started


def first_load_target(records: int) -> float:
    """The first-load target for a store of this size (interpolated on a log scale between the two targets)."""
    if records <= 100_000:
        return FIRST_LOAD_TARGET_S[100_000]
    if records >= 1_000_000:
        return FIRST_LOAD_TARGET_S[1_000_000]
    low, high = FIRST_LOAD_TARGET_S[100_000], FIRST_LOAD_TARGET_S[1_000_000]
    return float(low * (high / low) ** (np.log10(records) - 5.0))


CPU_SECONDS: list[float] = []  # CPU time of each timed render, in the order taken (see timed_run)
POSTGRES_SERVER_PID = 0  # the postmaster of a PostgreSQL server on this machine, when the store is one


def postgres_server_pid(store: Any) -> int:
    """The postmaster's process id, when the store is a PostgreSQL server on this machine (0 otherwise): the
    parent of this connection's backend process."""
    import sqlalchemy as sa

    if store.engine.dialect.name != "postgresql":
        return 0
    with store.engine.connect() as conn:
        backend = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
    try:
        return int(Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def server_cpu_s() -> float:
    """CPU seconds used so far by the PostgreSQL server: the postmaster with its exited children (utime, stime,
    cutime, cstime) plus its live children (backends, background workers)."""
    if not POSTGRES_SERVER_PID:
        return 0.0

    def stat(pid: int | str) -> list[str]:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()

    ticks = sum(int(x) for x in stat(POSTGRES_SERVER_PID)[11:15])
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = stat(pid)
        except OSError:
            continue
        if int(fields[1]) == POSTGRES_SERVER_PID:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def timed_run(app: Any) -> float:
    """Wall seconds of one render; its CPU seconds go to CPU_SECONDS: every thread of this process (the script
    runs in one; SQLite runs inside this process) plus, for a PostgreSQL server on this machine, the server's
    processes. On a shared machine the CPU time is what the render would take alone (short of what another
    process's cache traffic costs it), while the wall time grows with the load."""
    c0, s0, t0 = time.process_time(), server_cpu_s(), time.perf_counter()
    app.run()
    elapsed = time.perf_counter() - t0
    CPU_SECONDS.append(time.process_time() - c0 + server_cpu_s() - s0)
    if app.exception:
        raise RuntimeError(f"the Overview raised: {app.exception[0].value}")
    return elapsed


# The fresh process of the cold first load: Streamlit imported first (a started server has it), then one timed
# render; it prints its wall and CPU seconds and whether the render imported torch.
COLD_CHILD = r"""
import json, sys, time
from streamlit.testing.v1 import AppTest

app = AppTest.from_file(sys.argv[1], default_timeout=600)
c0, t0 = time.process_time(), time.perf_counter()
app.run()
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
if app.exception:
    raise SystemExit(f"the Overview raised: {app.exception[0].value}")
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "torch_imported": "torch" in sys.modules}))
"""


def cold_first_load(app_path: str) -> dict[str, Any]:
    """Wall and CPU seconds of the first render in a fresh process (see COLD_CHILD); the CPU seconds include a
    PostgreSQL server's on this machine. Its CPU seconds also go to CPU_SECONDS."""
    s0 = server_cpu_s()
    proc = subprocess.run([sys.executable, "-c", COLD_CHILD, app_path], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"the cold-process render failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["cpu_s"] += server_cpu_s() - s0
    CPU_SECONDS.append(out["cpu_s"])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000, help="records in the store (default 100,000)")
    parser.add_argument("--store", default=None,
                        help="store to build or reuse: a folder, or a postgresql:// URL (default: a temp folder)")
    parser.add_argument("--repeats", type=int, default=5, help="timed renders after the first load (default 5)")
    parser.add_argument("--ingest", type=int, default=100_000,
                        help="records built through the store's ingest; beyond them the store grows by copying "
                             "stored runs in SQL (default 100,000)")
    args = parser.parse_args()
    if args.records < 1 or args.repeats < 1:
        parser.error(f"--records {args.records} and --repeats {args.repeats} must be at least 1")

    from streamlit.testing.v1 import AppTest

    import fp8bench.dashboard
    from fp8bench.dashboard.data import STORE_ENV

    target = args.store or tempfile.mkdtemp(prefix="fp8bench_dash_bench_")
    build_s = build_store(target, min(args.records, args.ingest)) + grow_store(target, args.records)
    store = open_store(target)
    stored = store.count_records()
    global POSTGRES_SERVER_PID
    POSTGRES_SERVER_PID = postgres_server_pid(store)
    os.environ[STORE_ENV] = str(target)
    app_path = str(Path(fp8bench.dashboard.__file__).parent / "app.py")
    from fp8bench.dashboard.data import clear_caches

    cold = cold_first_load(app_path)
    cold_process, cold_cpu = cold["wall_s"], cold["cpu_s"]
    warm = []
    for _ in range(args.repeats):  # a new run arrived: the cache misses, the process is warm
        clear_caches()
        warm.append(timed_run(AppTest.from_file(app_path, default_timeout=600)))
    warm_cpu = CPU_SECONDS[-args.repeats:]
    session = AppTest.from_file(app_path, default_timeout=600)
    timed_run(session)
    shown = len(session.dataframe[0].value) if session.dataframe else 0
    reruns = [timed_run(session) for _ in range(args.repeats)]
    rerun_cpu = CPU_SECONDS[-args.repeats:]
    new_sessions = [timed_run(AppTest.from_file(app_path, default_timeout=600)) for _ in range(args.repeats)]
    target_s = first_load_target(stored)
    result = {
        "records_in_store": stored, "store": store.url, "dialect": store.engine.dialect.name,
        "store_build_s": round(build_s, 1), "first_load_cold_process_s": round(cold_process, 3),
        "first_load_warm_median_s": round(statistics.median(warm), 3), "first_load_warm_max_s": round(max(warm), 3),
        "overview_rows": shown, "rerun_median_s": round(statistics.median(reruns), 3),
        "rerun_max_s": round(max(reruns), 3), "new_session_median_s": round(statistics.median(new_sessions), 3),
        "new_session_max_s": round(max(new_sessions), 3), "first_load_target_s": target_s,
        "rerun_target_s": RERUN_TARGET_S, "load_average": os.getloadavg()[0],
        "torch_imported_by_first_load": cold["torch_imported"],
        "cpu_s": {"first_load_cold_process": round(cold_cpu, 3),
                  "first_load_warm_median": round(statistics.median(warm_cpu), 3),
                  "rerun_median": round(statistics.median(rerun_cpu), 3)},
    }
    # The cold process is what the first reader after a server start waits for, so it is the figure judged.
    result["meets_target"] = (result["first_load_cold_process_s"] < target_s
                              and result["rerun_median_s"] < RERUN_TARGET_S)
    # The same judgement on CPU seconds: what the render costs without the machine's other load.
    result["meets_target_cpu"] = (result["cpu_s"]["first_load_cold_process"] < target_s
                                  and result["cpu_s"]["rerun_median"] < RERUN_TARGET_S)
    print(f"{stored:,} records ({result['dialect']}): first load {cold_process:.2f} s in a cold process "
          f"({cold_cpu:.2f} CPU s; target < {target_s:.1f} s: {'met' if result['meets_target'] else 'missed'}, "
          f"on CPU seconds {'met' if result['meets_target_cpu'] else 'missed'}), "
          f"beside it {result['first_load_warm_median_s']:.2f} s median on a warm server; "
          f"rerun median {result['rerun_median_s']:.3f} s (max {result['rerun_max_s']:.3f}, target < "
          f"{RERUN_TARGET_S} s); new session median {result['new_session_median_s']:.3f} s; CPU seconds "
          f"{result['cpu_s']} at load average {result['load_average']:.1f}")
    print(json.dumps(result))
    return 0 if result["meets_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
