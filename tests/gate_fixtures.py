"""Run payloads built from constructed samples, for the gate, store and ingest tests."""

from __future__ import annotations

from typing import Any

import numpy as np


def record(m: int, precision: str, samples: list[float] | None, status: str = "ok", seq: int = 0,
           reason: str | None = None, backend: str = "torch") -> dict[str, Any]:
    samples = list(samples or [])
    return {"workload": "gemm", "shape": {"m": m, "n": m, "k": m}, "precision": precision, "backend": backend,
            "device": "cpu", "status": status, "reason": reason, "fp8_format": None, "samples_s": samples,
            "median_s": float(np.median(samples)) if samples else None, "n": len(samples), "valid": True,
            "seq": seq, "numerics": {}, "extra": {}}


def payload(run_id: str, records: list[dict[str, Any]], torch: str = "2.13.0", commit: str = "c0ffee",
            gpu: dict[str, Any] | None = None, started_at: str = "2026-11-21T00:00:00+00:00",
            load: tuple[float, int] | None = None) -> dict[str, Any]:
    """A finished run of ``records``; ``load`` is (1-minute load average, logical CPUs) when the run started."""
    host: dict[str, Any] = {"alias": "host-test"}
    if load is not None:
        host["load"] = {"load_avg_1m": load[0], "logical_cpus": load[1], "overloaded": load[0] > load[1]}
    run: dict[str, Any] = {"run_id": run_id, "started_at": started_at, "status": "complete",
                           "git": {"commit": commit, "dirty": False}, "host": host,
                           "device": {"name": "Test CPU"}, "device_spec": "cpu",
                           "software": {"torch": torch, "cuda_runtime": None},
                           "settings": {"flush_l2": True, "seed": 0}}
    if gpu is not None:
        run["gpu"] = gpu
    return {"schema_version": 1, "run": run, "records": [{**r, "seq": i} for i, r in enumerate(records)]}


def rounds(prefix: str, cases: dict[tuple[int, str], float], n_rounds: int = 10, cv: float = 0.01, seed: int = 0,
           **run_fields: Any) -> list[dict[str, Any]]:
    """``n_rounds`` run payloads; each case's per-round median is log-normal around its given seconds."""
    rng = np.random.default_rng(seed)
    out = []
    for r in range(n_rounds):
        recs = []
        for (m, precision), seconds in cases.items():
            center = seconds * float(np.exp(rng.normal(0, cv)))
            recs.append(record(m, precision, [center * f for f in (0.99, 1.0, 1.0, 1.01, 1.02)]))
        out.append(payload(f"{prefix}-r{r:02d}", recs, **run_fields))
    return out
