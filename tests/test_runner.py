"""The runner against real kernels, plus small test backends for what real kernels rarely do on demand: crash,
return NaN, or run too long."""

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import torch
from work_clock import WorkClock

from fp8bench.core.cases import Case
from fp8bench.core.devices import Device
from fp8bench.core.pipeline import Pipeline
from fp8bench.core.plugins import BACKENDS, Backend, load_all
from fp8bench.measure.runner import CaseMeasurer, expand_cases, run_cases
from fp8bench.measure.settings import EnergySettings, RunSettings, TimingSettings
from fp8bench.measure.timing import SamplingPolicy
from fp8bench.results.runfile import read_run_file
from fp8bench.results.store import open_store
from tests.settings_support import with_policy

load_all()
CPU = Device("cpu")
FAST = RunSettings(device="cpu",
                   timing=TimingSettings(budget_s=5,
                                         policy=SamplingPolicy(min_samples=5, min_time_s=0.0, max_time_s=0.05),
                                         warmup_s=0.0),
                   energy=EnergySettings(enabled=True))


def make_backend(name, make_output, sleep_s=0.0):
    backend = Backend(name=name, kind="custom", description=f"test backend {name}")

    @backend.builder("gemm")
    def build(ctx):
        def call():
            if sleep_s:
                time.sleep(sleep_s)
            return make_output(ctx)

        return Pipeline(end_to_end=call, phases={"gemm": call}, output=call, prequantized_phases=("gemm",))

    return backend


@pytest.fixture
def extra_backends():
    def crash(ctx):
        raise RuntimeError("kernel launch failed: illegal memory access")

    def nan(ctx):
        out = ctx.inputs["a"] @ ctx.inputs["b"].t()
        out[0, 0] = float("nan")
        return out

    backends = [make_backend("test_crash", crash), make_backend("test_nan", nan),
                make_backend("test_slow", lambda ctx: ctx.inputs["a"] @ ctx.inputs["b"].t(), sleep_s=0.2)]
    for b in backends:
        BACKENDS.add(b.name, b)
    yield
    for b in backends:
        BACKENDS.remove(b.name)


def cases(shapes, precisions, backends, settings=FAST):
    return expand_cases([("gemm", shapes)], precisions, backends, settings)


def test_ok_record_carries_the_contract_fields(results_dir):
    record = CaseMeasurer(FAST, CPU).measure(cases(["64x64x64"], ["bf16"], ["torch"])[0]).to_dict()
    for field in ("workload", "shape", "precision", "backend", "device", "status", "reason", "samples_s", "median_s",
                  "iqr_s", "rsd", "n", "flops", "bytes", "tflops", "gbps", "pct_of_peak", "phases", "energy_j",
                  "avg_power_w", "tflops_per_w", "numerics", "telemetry", "valid", "notes"):
        assert field in record
    assert record["status"] == "ok" and record["valid"]
    assert record["n"] == len(record["samples_s"]) >= 5
    assert record["flops"] == 2 * 64**3
    assert record["tflops"] == pytest.approx(record["flops"] / record["median_s"] / 1e12)
    assert record["energy_j"] is None and "RAPL" in record["energy"]["reason"]
    assert set(record["numerics"]) >= {"sqnr_db", "rel_err", "max_abs_err", "overflow_frac", "underflow_frac"}
    assert record["timing"]["overhead_s"] >= 0


def test_phases_add_up_to_end_to_end():
    """On a :class:`work_clock.WorkClock` (seconds are the operators and FLOPs a call runs), the phase medians add
    up to the end-to-end median exactly when the phases split its work, none of it twice and none left out. On the
    real clock the sum also depends on whatever else runs on the machine."""
    settings = with_policy(FAST, min_samples=5, max_time_s=0.5).with_timing(budget_s=60)
    (case,) = cases(["256x256x256"], ["fp8_rowwise"], ["emulated"])
    record = CaseMeasurer(settings, CPU, timer=WorkClock()).measure(case)
    assert record.status == "ok", record.reason
    timed = record.samples
    assert set(timed.phases) == {"quantize", "gemm", "epilogue"}
    assert timed.prequant_median_s == pytest.approx(timed.phases["gemm"] + timed.phases["epilogue"])
    assert sum(timed.phases.values()) == pytest.approx(timed.median_s, rel=1e-3), timed.phases


def test_unsupported_and_misaligned_cases_are_skipped_with_reasons():
    measurer = CaseMeasurer(FAST, CPU)
    blockwise = measurer.measure(cases(["128x128x128"], ["fp8_blockwise"], ["torch"])[0])
    assert blockwise.status == "skipped" and "tensorwise and rowwise kernels only" in blockwise.reason
    odd = measurer.measure(cases(["100x100x100"], ["fp8_rowwise"], ["emulated"])[0])
    assert odd.status == "skipped" and "multiples of 16" in odd.reason
    assert odd.throughput.flops == 2 * 100**3  # a skipped record still says what the case was


def test_crash_fails_the_case_and_nan_makes_it_invalid(extra_backends):
    measurer = CaseMeasurer(FAST, CPU)
    crashed = measurer.measure(cases(["32x32x32"], ["fp32"], ["test_crash"])[0])
    assert crashed.status == "failed" and "illegal memory access" in crashed.reason
    nan = measurer.measure(cases(["32x32x32"], ["fp32"], ["test_nan"])[0])
    assert nan.status == "invalid" and not nan.valid and "non-finite" in nan.reason
    assert nan.samples.median_s is not None  # its timing is kept, but marked untrustworthy


def test_over_budget_is_skipped_not_hung(extra_backends):
    settings = RunSettings(device="cpu",
                           timing=TimingSettings(budget_s=1.0, policy=SamplingPolicy(min_samples=10), warmup_s=0.0))
    started = time.monotonic()
    record = CaseMeasurer(settings, CPU).measure(cases(["32x32x32"], ["fp32"], ["test_slow"])[0])
    assert record.status == "skipped" and record.reason.startswith("over budget")
    assert time.monotonic() - started < 3.0


@contextmanager
def gemm_with_delays(name: str, delay_s: Callable[[int], float]) -> Iterator[None]:
    """Within the block, backend ``name``: a GEMM whose n-th call (counted across every pipeline built, probe and
    warm-up included, from 1) first sleeps ``delay_s(n)`` seconds."""
    backend = Backend(name=name, kind="custom", description="test backend with delayed calls")
    calls = {"n": 0}

    @backend.builder("gemm")
    def build(ctx):
        def call():
            calls["n"] += 1
            time.sleep(delay_s(calls["n"]))
            return ctx.inputs["a"] @ ctx.inputs["b"].t()

        return Pipeline(end_to_end=call, phases={"gemm": call}, output=call, prequantized_phases=("gemm",))

    BACKENDS.add(backend.name, backend)
    try:
        yield
    finally:
        BACKENDS.remove(backend.name)


def test_one_preempted_probe_timing_does_not_skip_a_cheap_case():
    """The probe's first timed call is held up 0.5 s (as by another process taking the core); its retimes are fast,
    so the case runs instead of being skipped from an estimate of 12 calls x 8 x 0.5 s (the 128^3 probe scaled to
    256^3) against a 5 s budget."""
    settings = RunSettings(device="cpu",
                           timing=TimingSettings(budget_s=5.0, policy=SamplingPolicy(min_samples=10, max_time_s=0.2),
                                                 warmup_s=0.0),
                           energy=EnergySettings(enabled=False))
    # Only the first call after the probe's warm-up call is held up.
    with gemm_with_delays("test_hiccup", lambda n: 0.5 if n == 2 else 0.0):
        record = CaseMeasurer(settings, CPU).measure(cases(["256x256x256"], ["fp32"], ["test_hiccup"], settings)[0])
    assert record.status == "ok", record.reason


def test_a_case_that_runs_out_of_budget_while_sampling_is_skipped_with_its_samples():
    """The probe and warm-up find the call cheap; then it slows to 0.3 s a call, so the samples cannot reach their
    least count inside the budget: the case is skipped, keeping the samples it took, not failed."""
    settings = RunSettings(device="cpu", timing=TimingSettings(budget_s=1.0, policy=SamplingPolicy(min_samples=10),
                                                               warmup_s=0.0),
                           energy=EnergySettings(enabled=False))
    # Slow past the probe's and the warm-up's calls.
    with gemm_with_delays("test_slows_down", lambda n: 0.3 if n > 8 else 0.0):
        record = CaseMeasurer(settings, CPU).measure(cases(["32x32x32"], ["fp32"], ["test_slows_down"], settings)[0])
    assert record.status == "skipped", record.reason
    assert re.fullmatch(r"over budget: \d of 10 samples in the 1 s budget", record.reason), record.reason
    assert record.samples.n == len(record.samples.samples_s) >= 1


def test_big_case_is_skipped_from_a_probe_estimate():
    # FP16 matmul on this CPU class is pathologically slow: a 4096^3 call would take minutes.
    settings = RunSettings(device="cpu",
                           timing=TimingSettings(budget_s=2.0, policy=SamplingPolicy(min_samples=10), warmup_s=0.0))
    started = time.monotonic()
    record = CaseMeasurer(settings, CPU).measure(cases(["8192x8192x8192"], ["fp8_tensorwise"], ["torch"])[0])
    assert record.status == "skipped" and "estimated" in record.reason and "probe shape" in record.reason
    assert time.monotonic() - started < 10.0


def test_run_streams_records_to_file_and_store_and_keeps_them_on_interrupt(results_dir, extra_backends):
    store = open_store(results_dir)
    run_file = results_dir / "runs" / "r.json"
    planned = cases(["32x32x32"], ["fp32", "bf16"], ["torch", "test_crash"]) + cases(["64x64x64"], ["fp32"], ["torch"])

    def interrupt_at_fourth(i, case):
        if i == 3:
            raise KeyboardInterrupt

    outcome = run_cases(planned, FAST, CPU, run_file=run_file, store=store, results_dir=results_dir,
                        on_start=interrupt_at_fourth)
    assert outcome.interrupted and len(outcome.records) == 3
    saved = read_run_file(run_file)
    assert saved["run"]["status"] == "interrupted"
    assert [r["seq"] for r in saved["records"]] == [0, 1, 2]
    assert [r["status"] for r in saved["records"]] == ["ok", "failed", "ok"]
    assert store.count_records(outcome.run_id) == 3
    header = saved["run"]
    assert header["git"]["commit"] is None or len(header["git"]["commit"]) == 40
    assert header["device"]["kind"] == "cpu" and header["device"]["threads"] == torch.get_num_threads()
    assert header["software"]["torch"] == torch.__version__
    json.dumps(saved)  # strict JSON


def test_cpu_ceilings_give_a_percent_of_peak_and_are_cached(results_dir, monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 0.2, 0.2))  # a quiet host: its ceilings are cached
    record = CaseMeasurer(FAST, CPU, peaks=None).measure(cases(["64x64x64"], ["bf16"], ["torch"])[0])
    assert record.throughput.pct_of_peak is None
    from fp8bench.hardware.peaks import Peaks

    peaks = Peaks(CPU, "cpu", results_dir)
    record = CaseMeasurer(FAST, CPU, peaks=peaks).measure(cases(["64x64x64"], ["bf16"], ["torch"])[0])
    # The percentage is the record's own rate over the ceiling; how the two compare depends on the load.
    rates = record.throughput
    assert rates.pct_of_peak == pytest.approx(100 * rates.tflops / rates.peak_tflops) and rates.pct_of_peak > 0
    assert "measured" in rates.peak_source
    cache = json.loads((results_dir / "cpu_ceilings.json").read_text())
    (entry,) = cache.values()
    assert entry["bf16"] > 0 and entry["fp32"] > 0 and entry["mem_bw"] > 0


def test_case_description():
    (case,) = cases(["8x16x32"], ["fp8_rowwise"], ["emulated"])
    assert isinstance(case, Case)
    assert case.describe() == "gemm[m=8,n=16,k=32] fp8_rowwise emulated"
