"""The attention workload: shape parsing and its errors, every phase measured by the real runner, phases adding up
to the end-to-end time (on a work clock, so that load on the machine cannot break the sum), numerics against FP64,
FP8 attention emulation."""

from __future__ import annotations

import pytest
from work_clock import WorkClock

from fp8bench.core.cases import Case
from fp8bench.core.devices import resolve_device
from fp8bench.core.plugins import WORKLOADS, load_all
from fp8bench.core.precisions import resolve_precision
from fp8bench.core.shapes import ShapeError
from fp8bench.measure.runner import CaseMeasurer
from fp8bench.measure.settings import EnergySettings, RunSettings, TimingSettings
from fp8bench.measure.timing import SamplingPolicy

load_all()
ATTN = WORKLOADS.get("attention")
CPU = resolve_device("cpu")
SMALL = "b=2,h=4,kv_heads=2,s=32,d=32"  # 64 tokens, width 128: aligned for every FP8 recipe's forward GEMMs


# These tests check statuses, phases and numerics, never the budget: it is far above what any case here takes, so
# that a busy machine cannot turn a case into `skipped: over budget` (one did at 20 s with both cores busy).
BUDGET_S = 600.0


def _measure(shape_text: str, precision: str, backend: str, budget: float = BUDGET_S, timer=None):
    settings = RunSettings(device="cpu",
                           timing=TimingSettings(budget_s=budget,
                                                 policy=SamplingPolicy(min_samples=5, min_time_s=0.01, max_time_s=0.3,
                                                                       target_rse=0.05)),
                           energy=EnergySettings(enabled=False))
    case = Case("attention", ATTN.parse_shape(shape_text), resolve_precision(precision), backend)
    return CaseMeasurer(settings, CPU, timer=timer).measure(case).to_dict()


def test_parse_presets_explicit_shapes_and_flags():
    assert ATTN.parse_shape("llama3_8b") == {"b": 1, "h": 32, "s": 8192, "d": 128, "kv_heads": 8, "causal": 1,
                                             "backward": 0, "fp8_attn": 0}
    shape = ATTN.parse_shape("b=2,h=8,s=1024,d=64")
    assert shape["kv_heads"] == 8 and shape["causal"] == 1  # no kv_heads given: plain multi-head attention
    assert ATTN.parse_shape("tiny,causal=0,backward=1")["backward"] == 1
    assert ATTN.parse_shape("llama3_70b,s=4096")["s"] == 4096


@pytest.mark.parametrize("text, message", [
    ("b=2,h=8,s=64,d=32,kv_heads=3", "kv_heads = 3 does not divide h = 8"),
    ("gpt2_small,s=4096", "s = 4096 exceeds the gpt2_small preset's context limit of 1024"),
    ("b=2,h=8,s=64", "missing d"),
    ("tiny,causal=2", "causal = '2' must be 0 or 1"),
    ("mistral", "unknown preset 'mistral'"),
    ("tiny,heads=4", "unknown key 'heads'"),
])
def test_bad_shapes_name_the_bad_value(text, message):
    with pytest.raises(ShapeError, match=message.replace("(", r"\(")):
        ATTN.parse_shape(text)


def test_flops_closed_form_and_causal_convention():
    shape = ATTN.parse_shape("b=2,h=4,s=64,d=32")
    tokens, width = 128, 128
    proj = 2 * tokens * width * 3 * width + 2 * tokens * width * width
    core = 4 * 2 * 4 * 64 * 64 * 32
    assert ATTN.flops(shape) == proj + core // 2  # causal: half the score and value products
    assert ATTN.flops({**shape, "causal": 0}) == proj + core
    assert ATTN.flops({**shape, "backward": 1}) == 3 * (proj + core // 2)


def _phases_add_up(shape_text: str, precision: str, backend: str) -> dict:
    """Measure on a :class:`work_clock.WorkClock`, whose seconds are the operators and FLOPs each call runs: the
    phase medians add up to the end-to-end median exactly when the phases split the end-to-end call's work
    between them, none of it twice and none of it left out. (Timed on the real clock, the sum was also at the mercy
    of whatever else ran on a shared 2-core machine.)"""
    rec = _measure(shape_text, precision, backend, timer=WorkClock())
    assert rec["status"] == "ok", rec["reason"]
    assert sum(rec["phases"].values()) == pytest.approx(rec["median_s"], rel=1e-3), (rec["phases"], rec["notes"])
    return rec


@pytest.mark.parametrize("backend", ["torch", "emulated"])
@pytest.mark.parametrize("precision, min_sqnr", [("bf16", 35.0), ("fp8_rowwise", 18.0)])
def test_forward_block_runs_with_phases_that_add_up(backend, precision, min_sqnr):
    rec = _phases_add_up(SMALL, precision, backend)
    assert set(rec["phases"]) == {"qkv_proj", "attention", "out_proj"}
    assert rec["numerics"]["sqnr_db"] > min_sqnr
    assert rec["extra"]["tokens_per_s"] == pytest.approx(64 / rec["median_s"])


def test_the_work_clock_sees_a_phase_that_does_the_work_twice(monkeypatch):
    """The phase-sum check can fail: an out_proj phase that runs its GEMM twice breaks the sum."""
    from dataclasses import replace

    real_build = CaseMeasurer._build

    def doubled(self, case, shape, inputs):
        pipeline = real_build(self, case, shape, inputs)
        out_proj = pipeline.phases["out_proj"]

        def twice():
            out_proj()
            return out_proj()

        return replace(pipeline, phases={**pipeline.phases, "out_proj": twice})

    monkeypatch.setattr(CaseMeasurer, "_build", doubled)
    with pytest.raises(AssertionError, match="out_proj"):
        _phases_add_up(SMALL, "bf16", "torch")


def test_forward_backward_block_times_six_phases_and_checks_input_gradient():
    rec = _phases_add_up(SMALL + ",backward=1", "fp8_rowwise", "emulated")
    assert set(rec["phases"]) == {"qkv_proj", "attention", "out_proj", "out_proj_bwd", "attention_bwd",
                                  "qkv_proj_bwd"}
    assert 15.0 < rec["numerics"]["sqnr_db"] < 35.0  # y and dx through E4M3: FP8-like, not BF16-like
    assert rec["flops"] == ATTN.flops(ATTN.parse_shape(SMALL + ",backward=1"))


def test_fp8_attention_is_emulated_and_costs_accuracy():
    plain = _measure(SMALL, "fp8_rowwise", "emulated")
    fp8_attn = _measure(SMALL + ",fp8_attn=1", "fp8_rowwise", "emulated")
    assert fp8_attn["status"] == "ok", fp8_attn["reason"]
    assert any("FP8 attention emulated" in n for n in fp8_attn["notes"])
    assert fp8_attn["numerics"]["sqnr_db"] < plain["numerics"]["sqnr_db"]
    skipped = _measure(SMALL + ",fp8_attn=1", "bf16", "emulated")
    assert skipped["status"] == "skipped" and "fp8_attn=1" in skipped["reason"]


def test_misaligned_fp8_shape_is_skipped_with_the_rule():
    rec = _measure("b=1,h=3,s=10,d=8", "fp8_rowwise", "emulated")
    assert rec["status"] == "skipped"
    assert "tokens b*s = 10" in rec["reason"] and "width h*d = 24" in rec["reason"]


def test_torch_backend_refuses_block_recipes_on_cpu_with_reason():
    rec = _measure(SMALL, "mxfp8", "torch")
    assert rec["status"] == "skipped" and "tensorwise and rowwise kernels only" in rec["reason"]


def test_case_too_big_for_memory_fails_clearly_before_allocating():
    rec = _measure("b=64,h=64,kv_heads=8,s=131072,d=128", "bf16", "emulated")
    assert rec["status"] == "failed"
    assert rec["reason"].startswith("out of memory on cpu: this attention case needs about")


def test_probe_shape_keeps_heads_and_shrinks_batch_and_sequence():
    shape = ATTN.parse_shape("llama3_8b")
    probe = ATTN.probe_shape(shape, 2e10)
    assert probe is not None and ATTN.flops(probe) <= 2e10 and probe["h"] == 32 and probe["d"] == 128
    assert probe["b"] * probe["s"] >= 128
    assert ATTN.probe_shape(ATTN.parse_shape("tiny"), 2e7) is None  # small cases run as they are
