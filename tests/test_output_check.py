"""Outputs checked after timing (fp8bench/measure/output_check.py): the last timed call against a fresh call."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from fp8bench.cli import main
from fp8bench.core.devices import Device
from fp8bench.core.pipeline import WORKLOAD_OUTPUT, Returns, TimedReturn
from fp8bench.core.plugins import BACKENDS, load_all
from fp8bench.core.precisions import resolve_precision
from fp8bench.measure.output_check import (
    SQNR_CEILING_DB,
    SQNR_TOLERANCE_DB,
    OutputWatch,
    check,
    deterministic,
    sqnr_threshold_db,
)
from fp8bench.measure.runner import CaseMeasurer, expand_cases
from fp8bench.measure.settings import EnergySettings, RunSettings, TimingSettings
from fp8bench.measure.timing import SamplingPolicy
from fp8bench.results.runfile import read_run_file
from fp8bench.workloads.attention import timed_return
from fp8bench.workloads.transformer_step import STEP_RETURNS

load_all()
CPU = Device("cpu")


def test_bitwise_check_fails_on_one_differing_bit_and_passes_identical_bits():
    fresh = torch.randn(8, 8)
    assert check(fresh.clone(), fresh, exact=True, fresh_sqnr_db=None).passed is True
    timed = fresh.clone()
    timed.view(torch.int32)[0, 0] ^= 1  # the last mantissa bit of one element
    result = check(timed, fresh, exact=True, fresh_sqnr_db=None)
    assert result.passed is False and result.method == "bitwise"
    assert result.differing_frac == pytest.approx(1 / 64)
    assert "1.562% of elements differ bitwise" in result.reason
    # NaN in the same place is the same bits; a value comparison would call it a difference.
    nan = torch.full((2,), float("nan"))
    assert check(nan.clone(), nan, exact=True, fresh_sqnr_db=None).passed is True


def test_sqnr_check_allows_the_recipes_own_error_and_rejects_more():
    torch.manual_seed(0)
    fresh = torch.randn(256, 256)
    assert sqnr_threshold_db(30.0) == 30.0 - SQNR_TOLERANCE_DB
    assert sqnr_threshold_db(140.0) == SQNR_CEILING_DB and sqnr_threshold_db(3.0) == 0.0
    # Noise at the recipe's own level (SQNR ~30 dB against the fresh output) passes a 30 dB recipe ...
    near = fresh + torch.randn(256, 256) * fresh.std() * 10 ** (-30 / 20)
    passed = check(near, fresh, exact=False, fresh_sqnr_db=30.0)
    assert passed.passed is True and passed.method == "sqnr" and 29 < passed.sqnr_db < 31
    # ... half the work is not.
    failed = check(fresh * 0.5, fresh, exact=False, fresh_sqnr_db=30.0)
    assert failed.passed is False and failed.sqnr_db == pytest.approx(6.02, abs=0.01)
    assert "under the 24.0 dB the recipe's own error allows" in failed.reason


def test_shape_or_dtype_change_fails():
    fresh = torch.zeros(4, 4)
    assert check(torch.zeros(4, 2), fresh, exact=True, fresh_sqnr_db=None).passed is False
    assert check(torch.zeros(4, 4, dtype=torch.bfloat16), fresh, exact=False, fresh_sqnr_db=None).passed is False


def test_of_the_precisions_only_delayed_scaling_is_compared_by_sqnr():
    assert deterministic(resolve_precision("bf16"), WORKLOAD_OUTPUT)
    assert deterministic(resolve_precision("fp8_rowwise"), WORKLOAD_OUTPUT)
    assert not deterministic(resolve_precision("fp8_delayed"), WORKLOAD_OUTPUT)


def test_a_kernel_declared_non_deterministic_is_compared_by_sqnr():
    """Attention's backward on CUDA (flash and memory-efficient kernels accumulate in no fixed order) is declared
    so, and its outputs are then compared by SQNR; on the CPU, and forward everywhere, bitwise."""
    assert not deterministic(resolve_precision("bf16"), timed_return(True, Device("cuda", 0)))
    assert deterministic(resolve_precision("bf16"), timed_return(False, Device("cuda", 0)))
    assert deterministic(resolve_precision("bf16"), timed_return(True, CPU))


def test_watch_takes_the_fresh_output_first_and_the_last_timed_one():
    values = iter([torch.ones(3), torch.full((3,), 2.0), torch.full((3,), 3.0)])
    calls = []

    def call():
        calls.append(1)
        return next(values)

    watch = OutputWatch(call, WORKLOAD_OUTPUT, graph=False, exact=True)
    assert len(calls) == 1 and torch.equal(watch.fresh, torch.ones(3))
    timed = watch.timed(call)
    timed(), timed()
    watch.keep_last()
    result = watch.verdict(torch.ones(3, dtype=torch.float64))
    assert torch.equal(watch.timed_output, torch.full((3,), 3.0)) and result.passed is False


def test_identical_outputs_are_passed_without_an_sqnr(monkeypatch):
    """The SQNR against the FP64 reference sets the threshold of the sqnr comparison only: outputs that agree
    bitwise pass without it (one FP64 pass over the output fewer per case)."""
    from fp8bench.measure import output_check

    computed = []
    real = output_check.compare
    monkeypatch.setattr(output_check, "compare", lambda *a, **k: computed.append(1) or real(*a, **k))
    for exact in (True, False):
        watch = OutputWatch(lambda: torch.ones(4), WORKLOAD_OUTPUT, graph=False, exact=exact)
        watch.timed(lambda: torch.ones(4))()
        watch.keep_last()
        assert watch.verdict(torch.ones(4, dtype=torch.float64)).passed is True
    assert computed == []


def test_the_first_timed_call_can_be_the_fresh_output():
    """Where the timed call is ``output`` itself, its first call (the first warm-up call) is the fresh output:
    :meth:`OutputWatch.first_call` keeps it, and no separate call is made."""
    values = iter([torch.ones(3), torch.full((3,), 2.0)])
    calls = []

    def call():
        calls.append(1)
        return next(values)

    watch = OutputWatch(call, WORKLOAD_OUTPUT, graph=False, exact=True, timed_fn=call)
    assert calls == [] and watch.fresh is None
    timed = watch.timed(call)
    timed()
    watch.first_call()
    timed()
    watch.keep_last()
    assert len(calls) == 2 and torch.equal(watch.fresh, torch.ones(3))
    assert watch.verdict(torch.ones(3, dtype=torch.float64)).passed is False  # the second call differs


def test_watch_says_why_it_does_not_check():
    calls = []

    def out():
        calls.append("output")
        return torch.ones(2)

    def step():
        return torch.ones(2)

    other = TimedReturn.other("a training step's loss, which moves with every update")
    separate = OutputWatch(out, other, graph=False, exact=True)
    assert separate.timed(step) is step and calls == []  # nothing wraps the timed call, no fresh call is made
    assert separate.verdict(torch.ones(2)).to_dict()["passed"] is None
    assert separate.verdict(torch.ones(2)).reason == (
        "not checked: the timed call returns a training step's loss, which moves with every update")
    graph = OutputWatch(step, WORKLOAD_OUTPUT, graph=True, exact=True)
    assert "CUDA-graph replays hand back no output" in graph.verdict(torch.ones(2)).reason


def test_a_declared_output_is_checked_whatever_function_returns_it():
    """The check follows the declaration: a timed call that is not ``output`` itself is compared all the same,
    after the declared ``as_output``; one that returns no tensor fails instead of escaping the check."""
    def out():
        return torch.arange(6.0)

    right = OutputWatch(out, TimedReturn.output(lambda v: v.reshape(-1)), graph=False, exact=True)
    right.timed(lambda: torch.arange(6.0).reshape(2, 3))()
    right.keep_last()
    assert right.verdict(torch.arange(6.0, dtype=torch.float64)).passed is True
    none = OutputWatch(out, WORKLOAD_OUTPUT, graph=False, exact=True)
    none.timed(lambda: None)()
    none.keep_last()
    result = none.verdict(torch.arange(6.0, dtype=torch.float64))
    assert result.passed is False and "returned NoneType, not a tensor" in result.reason


def test_a_timed_return_other_than_the_output_must_say_why():
    with pytest.raises(ValueError, match="needs a reason"):
        TimedReturn.other("")
    with pytest.raises(ValueError, match="takes no reason"):
        TimedReturn(Returns.OUTPUT, reason="because")
    with pytest.raises(ValueError, match="accepted: OUTPUT, OTHER"):
        TimedReturn("output")  # type: ignore[arg-type]


def test_a_kernel_that_skips_work_after_its_first_call_ends_invalid(tmp_path, plugin_in_process):
    """Real torch GEMMs on the CPU: bf16 through a plugin that multiplies half of K after its first call, fp32
    untouched. The run exits 1 (a case came out invalid) and says why."""
    out = tmp_path / "run.json"
    plugin_in_process("fp8bench_test_skips_work", FP8BENCH_TEST_SKIPS_WORK_PRECISIONS="bf16")
    code = main(["run", "--device", "cpu", "--shape", "64x64x64", "--precision", "bf16", "fp32", "--backend", "torch",
                 "--no-store", "--no-energy", "--json", "--min-samples", "3", "--max-time", "0.05", "--out", str(out)])
    assert code == 1
    records = {r["precision"]: r for r in read_run_file(out)["records"]}
    skipping, honest = records["bf16"], records["fp32"]
    assert skipping["status"] == "invalid" and skipping["valid"] is False
    assert skipping["reason"].startswith("timed output differs from a fresh call's: ")
    assert skipping["output_check"]["method"] == "bitwise" and skipping["output_check"]["passed"] is False
    assert skipping["output_check"]["differing_frac"] > 0.9
    assert honest["status"] == "ok" and honest["output_check"] == {
        "method": "bitwise", "passed": True, "reason": None, "differing_frac": 0.0, "sqnr_db": None,
        "threshold_db": None}


def _run_with_zeros_plugin(tmp_path: Path, load: Callable[..., None], backend: str, precisions: list[str],
                           zeroed: str) -> tuple[int, dict[str, dict]]:
    """One real run through the plugin whose GEMM returns zeros after its first call (only its timed call is
    wrapped, as a user's plugin would): its exit code and its records by precision."""
    out = tmp_path / "run.json"
    load("fp8bench_test_zeros_after_first", FP8BENCH_TEST_ZEROS_BACKENDS=backend,
         FP8BENCH_TEST_ZEROS_PRECISIONS=zeroed)
    code = main(["run", "--device", "cpu", "--shape", "64x64x64", "--precision", *precisions, "--backend", backend,
                 "--no-store", "--no-energy", "--json", "--min-samples", "3", "--max-time", "0.05", "--out", str(out)])
    assert out.exists()
    return code, {r["precision"]: r for r in read_run_file(out)["records"]}


def test_a_wrapped_torch_gemm_that_returns_zeros_after_its_first_call_ends_invalid(tmp_path, plugin_in_process):
    """The wrapper replaces only ``end_to_end``; its ``output`` stays torch's own: the timed calls are checked
    against it all the same. fp32, unwrapped, is checked and passes."""
    code, records = _run_with_zeros_plugin(tmp_path, plugin_in_process, "torch", ["bf16", "fp32"], "bf16")
    zeroed, honest = records["bf16"], records["fp32"]
    assert zeroed["status"] == "invalid" and zeroed["valid"] is False
    assert code == 1  # a case came out invalid
    assert zeroed["reason"].startswith("timed output differs from a fresh call's: ")
    assert zeroed["output_check"]["method"] == "bitwise" and zeroed["output_check"]["passed"] is False
    assert zeroed["output_check"]["differing_frac"] > 0.9
    assert honest["status"] == "ok" and honest["output_check"]["passed"] is True


def test_a_wrapped_triton_gemm_that_returns_zeros_after_its_first_call_ends_invalid(tmp_path, plugin_in_process):
    """Triton under its CPU interpreter: the case is not timed, but its end-to-end call runs as a timed case's
    would (once in the warm-up's place, once in the samples'), and the last call is checked against the fresh
    output."""
    from fp8bench.kernels import triton_kernels as tk

    if not tk.INTERPRETED or BACKENDS.get("triton").availability(CPU):
        pytest.skip("Triton's CPU interpreter is not what runs here")
    code, records = _run_with_zeros_plugin(tmp_path, plugin_in_process, "triton", ["fp8_rowwise", "fp8_tensorwise"],
                                           "fp8_rowwise")
    zeroed, honest = records["fp8_rowwise"], records["fp8_tensorwise"]
    assert zeroed["status"] == "invalid" and zeroed["valid"] is False and zeroed["interpreted"] is True
    assert code == 1
    assert "timed output differs from a fresh call's: " in zeroed["reason"]
    assert zeroed["output_check"]["method"] == "bitwise" and zeroed["output_check"]["passed"] is False
    assert honest["status"] == "ok" and honest["output_check"]["passed"] is True
    assert honest["median_s"] is None  # still not timed


def _measure(workload: str, shape: str, precision: str, backend: str) -> dict:
    settings = RunSettings(device="cpu",
                           timing=TimingSettings(budget_s=30, warmup_s=0.0,
                                                 policy=SamplingPolicy(min_samples=3, max_time_s=0.05)),
                           energy=EnergySettings(enabled=False))
    (case,) = expand_cases([(workload, [shape])], [precision], [backend], settings)
    return CaseMeasurer(settings, CPU).measure(case).to_dict()


@pytest.mark.parametrize(("backward", "precision", "backend", "method"), [
    (0, "bf16", "torch", "bitwise"), (1, "bf16", "torch", "bitwise"), (1, "fp8_delayed", "emulated", "sqnr")])
def test_attention_timed_outputs_are_checked(backward, precision, backend, method):
    """The attention block's timed call returns ``y`` (and ``dx`` when training), unflattened: it is compared with
    ``output()`` after its declared flattening, in the forward and the training direction."""
    rec = _measure("attention", f"tiny,backward={backward}", precision, backend)
    assert rec["status"] == "ok", rec["reason"]
    assert rec["output_check"]["method"] == method and rec["output_check"]["passed"] is True


def test_a_training_step_is_not_compared_and_its_record_says_why():
    rec = _measure("transformer_step", "tiny", "fp32", "torch")
    assert rec["status"] == "ok", rec["reason"]
    assert rec["output_check"]["passed"] is None
    assert rec["output_check"]["reason"] == f"not checked: the timed call returns {STEP_RETURNS.reason}"
