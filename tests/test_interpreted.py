"""Interpreted backends check correctness quickly: a fresh output and two repeated calls checked against it,
numerics, no timings, never compared."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from fp8bench.analysis.gate.report import gate
from fp8bench.analysis.report import baseline_index, speedups
from fp8bench.core.devices import Device
from fp8bench.core.pipeline import BuildContext, Pipeline
from fp8bench.core.plugins import BACKENDS, Backend, load_all
from fp8bench.measure.runner import INTERPRETED_REASON, CaseMeasurer, expand_cases
from fp8bench.measure.settings import EnergySettings, RunSettings, TimingSettings
from tests.gate_fixtures import payload, record, rounds

load_all()
CPU = Device("cpu")
CALLS: dict[str, int] = {}


@pytest.fixture
def interpreted_backend():
    """A backend that declares itself interpreted and counts its calls: a plain FP32 GEMM underneath."""
    backend = Backend("test_interpreted", "custom", "counts calls; interpreted everywhere",
                      interpreted=lambda device: True)
    CALLS.clear()

    @backend.builder("gemm")
    def build(ctx: BuildContext) -> Pipeline:
        CALLS["build"] = CALLS.get("build", 0) + 1
        CALLS["shape"] = dict(ctx.shape)

        def call() -> torch.Tensor:
            CALLS["call"] = CALLS.get("call", 0) + 1
            return ctx.inputs["a"] @ ctx.inputs["b"].t()

        return Pipeline(end_to_end=call, phases={"gemm": call}, output=call, interpreted=True)

    BACKENDS.add(backend.name, backend)
    yield backend.name
    BACKENDS.remove(backend.name)


def _measure(shape: str, precision: str, backend: str) -> dict:
    settings = RunSettings(device="cpu", timing=TimingSettings(budget_s=30), energy=EnergySettings(enabled=False))
    (case,) = expand_cases([("gemm", [shape])], [precision], [backend], settings)
    return CaseMeasurer(settings, CPU).measure(case).to_dict()


def test_an_interpreted_case_records_numerics_and_its_output_check_without_timings(interpreted_backend):
    rec = _measure("64x64x64", "fp32", interpreted_backend)
    # The fresh output (also the numerics' output), then the call where a timed case warms up and where it samples.
    assert CALLS == {"build": 1, "call": 3, "shape": {"m": 64, "n": 64, "k": 64}}
    assert rec["status"] == "ok" and rec["reason"] == INTERPRETED_REASON and rec["interpreted"] is True
    assert rec["output_check"]["method"] == "bitwise" and rec["output_check"]["passed"] is True
    for field in ("median_s", "iqr_s", "rsd", "tflops", "gbps", "pct_of_peak", "prequant_median_s", "energy_j"):
        assert rec[field] is None, field
    assert rec["samples_s"] == [] and rec["n"] == 0 and rec["phases"] == {}
    assert rec["numerics"]["sqnr_db"] > 100  # FP32 against FP64 on the same inputs
    assert rec["energy"]["reason"] == INTERPRETED_REASON


def test_a_large_interpreted_case_checks_numerics_at_the_smallest_legal_shape(interpreted_backend):
    rec = _measure("1024x512x2048", "fp32", interpreted_backend)
    assert CALLS["shape"] == {"m": 128, "n": 128, "k": 128} and CALLS["call"] == 3
    assert rec["shape"] == {"m": 1024, "n": 512, "k": 2048}  # the case keeps its own shape
    assert rec["extra"]["numerics_shape"] == {"m": 128, "n": 128, "k": 128}
    assert any("m=128,n=128,k=128" in n for n in rec["notes"])
    assert rec["numerics"]["sqnr_db"] > 100


def test_real_triton_interpreter_checks_an_fp8_gemm_without_timing_it():
    from fp8bench.kernels import triton_kernels as tk

    if not tk.INTERPRETED or BACKENDS.get("triton").availability(CPU):
        pytest.skip("Triton's CPU interpreter is not what runs here")
    rec = _measure("64x64x64", "fp8_rowwise", "triton")
    assert rec["status"] == "ok" and rec["reason"] == INTERPRETED_REASON
    assert rec["median_s"] is None and rec["samples_s"] == []
    assert 20 < rec["numerics"]["sqnr_db"] < 40  # E4M3 with per-row scales on Gaussian inputs
    assert rec["output_check"]["passed"] is True  # its repeated calls return the fresh output's bits


def _interpreted(r: dict) -> dict:
    return {**r, "interpreted": True}


def test_gate_never_compares_interpreted_timings():
    # Records from an interpreter that still carry timings (older run files did) are not compared either.
    base = rounds("b", {(64, "bf16"): 1e-3})
    cand = rounds("h", {(64, "bf16"): 9e-3})  # 9x slower, if it were compared
    for payloads in (base, cand):
        for p in payloads:
            p["records"] = [_interpreted(r) for r in p["records"]]
    (case,) = gate(base, cand).cases
    assert case.verdict == "not measured" and "interpreted" in case.reason and case.ratio is None


def test_gate_calls_interpreted_on_one_side_incomparable():
    base = rounds("b", {(64, "bf16"): 1e-3})
    cand = [payload(f"h-r{i}", [_interpreted(record(64, "bf16", [9e-3] * 5))]) for i in range(10)]
    report = gate(base, cand)
    (case,) = report.cases
    assert case.verdict == "incomparable" and "candidate side only" in case.reason
    assert report.exit_code == 2


def test_table_and_dashboard_never_compare_interpreted_timings():
    from fp8bench.analysis.selection import speed_comparable_frame as speed_comparable

    timed = {**record(64, "bf16", [1e-3] * 5), "interpreted": False}
    interp = {**record(64, "fp8_rowwise", [5e-3] * 5), "interpreted": True}
    assert speedups(interp, baseline_index([timed, interp], "bf16")) == (None, None)
    frame = pd.DataFrame([{"status": r["status"], "valid": True, "interpreted": r["interpreted"],
                           "median_s": r["median_s"], "precision": r["precision"]} for r in (timed, interp)])
    assert speed_comparable(frame)["precision"].tolist() == ["bf16"]
