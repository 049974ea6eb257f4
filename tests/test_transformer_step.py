"""The transformer_step workload: shapes and their errors, a full training step in several precisions through the
real runner (phases, extras, numerics against the FP64 model), and a run that keeps going past bad cases."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fp8bench.core.cases import Case
from fp8bench.core.devices import resolve_device
from fp8bench.core.plugins import WORKLOADS, load_all
from fp8bench.core.precisions import resolve_precision
from fp8bench.core.shapes import ShapeError
from fp8bench.measure.runner import CaseMeasurer, run_cases
from fp8bench.measure.settings import EnergySettings, RunSettings, TimingSettings
from fp8bench.measure.timing import SamplingPolicy
from fp8bench.results.runfile import read_run_file
from fp8bench.workloads.model import PRESETS, model_flops
from fp8bench.workloads.transformer_step import config_of

load_all()
STEP = WORKLOADS.get("transformer_step")
CPU = resolve_device("cpu")
SMALL = "tiny,layers=1,batch=2"  # 128 tokens of width 128: aligned for every FP8 recipe, including wgrad blocks
HUGE = "layers=64,width=16384,heads=128,kv_heads=8,ffn=53248,vocab=128256,seq=256,batch=1,max_seq=256"


@pytest.fixture(autouse=True)
def one_thread():
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


def _settings(budget: float = 30.0) -> RunSettings:
    return RunSettings(device="cpu",
                       timing=TimingSettings(budget_s=budget,
                                             policy=SamplingPolicy(min_samples=4, min_time_s=0.01, max_time_s=0.5,
                                                                   target_rse=0.1)),
                       energy=EnergySettings(enabled=False))


def _measure(text: str, precision: str, backend: str = "emulated") -> dict:
    case = Case("transformer_step", STEP.parse_shape(text), resolve_precision(precision), backend)
    return CaseMeasurer(_settings(), CPU).measure(case).to_dict()


def test_presets_and_overrides():
    assert config_of(STEP.parse_shape("tiny")) == PRESETS["tiny"]
    llama = config_of(STEP.parse_shape("llama_1b"))
    assert 1.0e9 < llama.parameters() < 1.6e9  # a ~1B-parameter Llama-like configuration
    assert STEP.parse_shape("small,seq=256")["seq"] == 256
    assert STEP.parse_shape("layers=1,width=64,heads=2,kv_heads=1")["width"] == 64  # rest from tiny


@pytest.mark.parametrize("text, message", [
    ("tiny,heads=5", "heads = 5 does not divide width = 128"),
    ("tiny,kv_heads=3", "kv_heads = 3 does not divide heads = 4"),
    ("tiny,seq=512", "seq = 512 exceeds this preset's context limit max_seq = 256"),
    ("gpt2_small,seq=2048", "seq = 2048 exceeds"),
    ("tiny,width=0", "width = 0 must be a positive integer"),
    ("gpt5", "unknown preset 'gpt5'"),
])
def test_bad_shapes_name_the_bad_value(text, message):
    with pytest.raises(ShapeError, match=message):
        STEP.parse_shape(text)


@pytest.mark.slow
@pytest.mark.parametrize("precision, low, high", [
    ("fp32", 90.0, None),  # only accumulation order differs from FP64
    ("bf16", 25.0, 80.0),
    ("fp8_rowwise", 15.0, 55.0),
])
def test_training_step_numerics_against_fp64_model(precision, low, high):
    rec = _measure(SMALL, precision)
    assert rec["status"] == "ok", rec["reason"]
    sqnr = rec["numerics"]["sqnr_db"]
    assert sqnr > low and (high is None or sqnr < high), sqnr
    assert set(rec["phases"]) == {"forward", "backward", "optimizer"}
    assert rec["flops"] == model_flops(config_of(STEP.parse_shape(SMALL)))
    assert rec["extra"]["tokens_per_step"] == 128
    assert rec["extra"]["tokens_per_s"] == pytest.approx(128 / rec["median_s"])
    assert rec["extra"]["peak_memory_bytes"] is None and "CPU allocator" in rec["extra"]["peak_memory_reason"]


def test_phases_add_up_to_the_step():
    ratios = []
    for _ in range(3):  # see test_attention._phases_add_up for why the lower quartile and the retries
        rec = _measure(SMALL, "bf16", "torch")
        assert rec["status"] == "ok", rec["reason"]
        ratios.append(sum(rec["phases"].values()) / float(np.percentile(rec["samples_s"], 25)))
        if 0.5 < ratios[-1] < 2.0:
            return
    raise AssertionError(f"phase sum / step time = {ratios}")


@pytest.mark.slow
def test_fp8_step_on_torch_backend_uses_native_rowwise_gemms():
    rec = _measure(SMALL, "fp8_rowwise", "torch")
    assert rec["status"] == "ok", rec["reason"]
    assert 15.0 < rec["numerics"]["sqnr_db"] < 55.0


@pytest.mark.slow
def test_run_continues_past_out_of_memory_and_keeps_everything(tmp_path):
    shapes = [STEP.parse_shape(SMALL), STEP.parse_shape(HUGE), STEP.parse_shape(SMALL)]
    cases = [Case("transformer_step", shapes[0], resolve_precision("bf16"), "emulated"),
             Case("transformer_step", shapes[1], resolve_precision("bf16"), "emulated"),
             Case("transformer_step", shapes[2], resolve_precision("fp8_rowwise"), "emulated")]
    run_file = tmp_path / "run.json"
    outcome = run_cases(cases, _settings(), CPU, run_file=run_file)
    statuses = [r.status for r in outcome.records]
    assert statuses == ["ok", "failed", "ok"], [r.reason for r in outcome.records]
    reason = outcome.records[1].reason
    assert reason.startswith("out of memory on cpu: a training step needs at least") and "GiB available" in reason
    assert len(read_run_file(run_file)["records"]) == 3


def test_probe_shape_shrinks_big_steps_for_cost_estimates():
    shape = STEP.parse_shape("gpt2_small")
    probe = STEP.probe_shape(shape, 2e9)
    assert probe is not None and STEP.flops(probe) < STEP.flops(shape) / 100
    assert probe["width"] == shape["width"] and probe["heads"] == shape["heads"]
    assert probe["batch"] * probe["seq"] >= 128  # whole blocks for every FP8 recipe's weight-gradient GEMM
    assert STEP.probe_shape(STEP.parse_shape(SMALL), 1e12) is None
