"""The harness's own cost per case (Record.harness) and per run (the run header's ``harness``)."""

from __future__ import annotations

import pytest

from fp8bench.core.devices import Device
from fp8bench.core.plugins import load_all
from fp8bench.core.record_parts import HarnessCost, SampleFigures
from fp8bench.core.records import Record
from fp8bench.hardware import peaks
from fp8bench.measure.harness_cost import PARTS, CostClock, summarise
from fp8bench.measure.runner import expand_cases, run_cases
from fp8bench.measure.settings import EnergySettings, RunSettings, TimingSettings
from fp8bench.measure.timing import SamplingPolicy
from fp8bench.results.runfile import read_run_file

load_all()
CPU = Device("cpu")
FAST = RunSettings(device="cpu",
                   timing=TimingSettings(budget_s=5,
                                         policy=SamplingPolicy(min_samples=3, min_time_s=0.0, max_time_s=0.01),
                                         warmup_s=0.0),
                   energy=EnergySettings(enabled=False))


def test_split_adds_up_to_the_wall_time_less_the_measured_time() -> None:
    clock = CostClock()
    clock.spent.update(warmup=0.2, sampling=1.5, numerics=0.1)
    cost = clock.record(wall_s=2.0, measured_s=1.2)
    assert cost.split_s is not None
    assert cost.split_s["sampling"] == pytest.approx(0.3)  # the samples themselves are not harness time
    assert cost.harness_s == pytest.approx(0.8) and cost.share == pytest.approx(0.4)
    assert sum(cost.split_s.values()) == pytest.approx(cost.harness_s)
    assert set(cost.split_s) == {*PARTS, "bookkeeping"}
    with pytest.raises(ValueError, match="harness part 'lunch'; accepted: probe"), clock.part("lunch"):
        pass


def test_summary_counts_long_calls_apart() -> None:
    case = ("gemm", {"m": 8, "n": 8, "k": 8}, "bf16", "torch", "cpu", "ok")
    short = Record(*case, samples=SampleFigures(median_s=1e-4), harness=CostClock().record(1.0, 0.5))
    long = Record(*case, samples=SampleFigures(median_s=0.02), harness=CostClock().record(2.0, 1.9))
    out = summarise([short, long, Record(*case)], stream_s=0.3)
    assert out["cases"] == 2 and out["wall_s"] == pytest.approx(3.0) and out["stream_s"] == 0.3
    assert out["long_calls"]["cases"] == 1 and out["long_calls"]["worst_share"] == pytest.approx(0.05)


def test_every_record_carries_its_cost_and_the_run_its_sum(tmp_path) -> None:
    cases = expand_cases([("gemm", ["64x64x64"])], ["fp32", "tf32"], ["torch"], FAST)
    outcome = run_cases(cases, FAST, CPU, run_file=tmp_path / "run.json", results_dir=tmp_path)
    measured, refused = outcome.records
    cost = measured.harness
    assert measured.status == "ok" and refused.status == "skipped"
    assert cost.measured_s == measured.timing.timed_s > 0
    assert cost.wall_s == pytest.approx(cost.measured_s + cost.harness_s)
    assert sum(cost.split_s.values()) == pytest.approx(cost.harness_s)
    assert refused.harness.measured_s == 0
    run = read_run_file(tmp_path / "run.json")
    assert run["run"]["harness"]["cases"] == 2
    assert run["run"]["harness"]["wall_s"] == pytest.approx(cost.wall_s + refused.harness.wall_s)
    assert Record.from_dict(run["records"][0]).harness == cost


def test_a_record_written_before_the_harness_cost_still_loads() -> None:
    old = Record(workload="gemm", shape={"m": 8, "n": 8, "k": 8}, precision="fp32", backend="torch",
                 device="cpu", status="ok").to_dict()
    del old["harness"]
    assert Record.from_dict(old).harness == HarnessCost() and not Record.from_dict(old).harness


def test_the_cpu_ceilings_are_the_runs_cost_not_its_first_cases(tmp_path, monkeypatch) -> None:
    """The CPU's ceilings are measured once per run: before the first case, not inside its wall time."""
    measured_at: list[str] = []
    started: list[int] = []

    def fake_measure() -> dict:
        measured_at.append("before the first case" if not started else "inside a case")
        return {"fp32": 0.1, "bf16": 0.1, "mem_bw": 0.01, "load": None, "measured_at": "2026-11-28T00:00:00+00:00",
                "method": "test"}

    monkeypatch.setattr(peaks, "measure_cpu_ceilings", fake_measure)
    monkeypatch.setattr(peaks, "_THIS_PROCESS", {})  # no earlier measurement of this process stands in
    cases = expand_cases([("gemm", ["64x64x64"])], ["fp32"], ["torch"], FAST)
    run_cases(cases, FAST, CPU, run_file=None, results_dir=None, on_start=lambda i, case: started.append(i))
    assert measured_at == ["before the first case"]


def test_a_deterministic_case_takes_its_numerics_from_the_fresh_output(tmp_path) -> None:
    """Where every call must return the same bits (the output check holds it to that), the fresh output already is
    the output the numerics need; and where the timed call is the pipeline's output itself, the first warm-up call
    is that fresh call: no call of the pipeline is made outside the warm-up and the samples."""
    from fp8bench.core.pipeline import Pipeline
    from fp8bench.core.plugins import BACKENDS, Backend

    calls = {"output": 0}
    backend = Backend(name="test_counted", kind="custom", description="counts its output calls")

    @backend.builder("gemm")
    def build(ctx):
        def call():
            return ctx.inputs["a"] @ ctx.inputs["b"].t()

        def output():
            calls["output"] += 1
            return call()

        # the timed call and the output are one function, as in the pipelines the output check applies to
        return Pipeline(end_to_end=output, phases={"gemm": output}, output=output)

    BACKENDS.add("test_counted", backend)
    try:
        cases = expand_cases([("gemm", ["64x64x64"])], ["fp32"], ["test_counted"], FAST)
        measurer_runs = run_cases(cases, FAST, CPU, run_file=None, results_dir=tmp_path)
    finally:
        BACKENDS.remove("test_counted")
    (record,) = measurer_runs.records
    n_timed = record.samples.n + sum(s.n or 0 for s in record.samples.phase_stats.values() if s.n != record.samples.n)
    untimed = calls["output"] - n_timed - record.timing.warmup_calls
    assert record.status == "ok" and record.numerics.sqnr_db > 100 and record.output_check.passed is True
    assert untimed == 0  # the fresh output is the first warm-up call's, and the numerics reuse it
