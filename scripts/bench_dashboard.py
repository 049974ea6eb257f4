#!/usr/bin/env python
"""How fast the dashboard's Overview renders from a large store, once the store has been read.

Builds (or reuses) a SQLite store of synthetic but schema-valid records - every record is an
``fp8bench.records.Record`` stored through ``Store.ingest_run``, spread over runs, commits, three device models,
three workloads, many shapes, several precisions and backends - then drives the real app with Streamlit's AppTest:

* first load: a new session on a cold cache (reads and flattens the whole store);
* rerun: the same session runs the script again (what a widget change or a reload costs);
* new session: another user opens the Overview while the store is cached.

The synthetic values only need to be plausible in shape (times follow FLOPs over a per-device rate with noise);
they measure the dashboard, not a device. Target: rerun and new-session renders under 2 s at 100,000 records.

    python scripts/bench_dashboard.py                      # 100,000 records in a temp store
    python scripts/bench_dashboard.py --store /tmp/big --records 100000 --repeats 5
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from fp8bench.records import SCHEMA_VERSION, Record
from fp8bench.store import open_store

TARGET_S = 2.0
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
    commit = f"{index // 3:07x}".rjust(40, "0")
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
           "device_spec": kind, "git": {"commit": commit, "dirty": False}, "host": {"alias": "bench-host"},
           "device": {"name": name, "kind": kind}, "software": {"torch": "2.13.0", "python": "3.11"},
           "settings": {"budget_s": 30.0}, "spec": {"suite": "synthetic"}, "n_records": len(records)}
    return {"schema_version": SCHEMA_VERSION, "run": run, "records": records}


def build_store(target: Path, n_records: int, seed: int = 0) -> float:
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


def timed_run(app: Any) -> float:
    t0 = time.perf_counter()
    app.run()
    elapsed = time.perf_counter() - t0
    if app.exception:
        raise RuntimeError(f"the Overview raised: {app.exception[0].value}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000, help="records in the store (default 100,000)")
    parser.add_argument("--store", type=Path, default=None, help="results folder to build or reuse (default: temp)")
    parser.add_argument("--repeats", type=int, default=5, help="timed renders after the first load (default 5)")
    args = parser.parse_args()
    if args.records < 1 or args.repeats < 1:
        parser.error(f"--records {args.records} and --repeats {args.repeats} must be at least 1")

    from streamlit.testing.v1 import AppTest

    import fp8bench.dashboard
    from fp8bench.dashboard.data import STORE_ENV

    target = args.store or Path(tempfile.mkdtemp(prefix="fp8bench_dash_bench_"))
    build_s = build_store(target, args.records)
    stored = open_store(target).count_records()
    os.environ[STORE_ENV] = str(target)
    app_path = str(Path(fp8bench.dashboard.__file__).parent / "app.py")

    session = AppTest.from_file(app_path, default_timeout=600)
    first_load = timed_run(session)
    shown = len(session.dataframe[0].value) if session.dataframe else 0
    reruns = [timed_run(session) for _ in range(args.repeats)]
    new_sessions = [timed_run(AppTest.from_file(app_path, default_timeout=600)) for _ in range(args.repeats)]
    result = {
        "records_in_store": stored, "store": str(target), "store_build_s": round(build_s, 1),
        "first_load_s": round(first_load, 3), "overview_rows": shown,
        "rerun_median_s": round(statistics.median(reruns), 3), "rerun_max_s": round(max(reruns), 3),
        "new_session_median_s": round(statistics.median(new_sessions), 3),
        "new_session_max_s": round(max(new_sessions), 3), "target_s": TARGET_S,
    }
    result["meets_target"] = max(result["rerun_max_s"], result["new_session_max_s"]) < TARGET_S
    print(f"{stored:,} records: first load {first_load:.2f} s; overview after it: rerun median "
          f"{result['rerun_median_s']:.3f} s (max {result['rerun_max_s']:.3f}), new session median "
          f"{result['new_session_median_s']:.3f} s (max {result['new_session_max_s']:.3f}); target < {TARGET_S} s")
    print(json.dumps(result))
    return 0 if result["meets_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
