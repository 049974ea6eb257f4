"""The ``grouped_gemm`` workload: shapes, routing, closed forms, numerics, refusals and CUDA conformance replays."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from fp8bench.cli import main
from fp8bench.core.devices import Device
from fp8bench.core.pipeline import BuildContext, Pipeline, Unsupported
from fp8bench.core.plugins import BACKENDS, WORKLOADS, load_all
from fp8bench.core.precisions import PRECISIONS, resolve_precision
from fp8bench.core.shapes import ShapeError, label
from fp8bench.hardware.grouped_rules import GROUPED_RULES
from fp8bench.numerics.accuracy import compare
from fp8bench.results.runfile import read_run_file
from fp8bench.verify.cuda_replay import TARGETS, CudaRefusal, emulating, replay_case
from fp8bench.workloads.grouped_gemm import routing, zipf_probabilities
from fp8bench.workloads.shape_sets import SHAPE_SETS

load_all()
WL = WORKLOADS.get("grouped_gemm")
CPU = Device("cpu")
SMALL = "g=4,tokens=96,top_k=2,n=64,k=128"
SKEWED = "g=8,tokens=200,top_k=2,n=64,k=128,route=zipf,alpha=1.2"


def _build(shape_text: str, precision: str, backend: str) -> tuple[Pipeline, dict[str, torch.Tensor]]:
    shape = WL.parse_shape(shape_text)
    inputs = WL.make_inputs(shape, CPU, 0)
    ctx = BuildContext("grouped_gemm", shape, PRECISIONS.get(precision), CPU, inputs)
    return BACKENDS.get(backend).build(ctx), inputs


# --- shapes -------------------------------------------------------------------------------------------------------

def test_defaults_fill_missing_keys_and_the_label_parses_back():
    shape = WL.parse_shape(WL.default_shape)
    assert shape == {"g": 8, "tokens": 512, "top_k": 2, "n": 256, "k": 256, "route": "balanced", "seed": 0,
                     "align": 32, "impl": "grouped"}
    skewed = WL.parse_shape("g=8,tokens=64,n=32,k=32,route=zipf")
    assert skewed["alpha"] == 1.2  # the default exponent comes with route=zipf only
    for text in (WL.default_shape, SKEWED, "g=3,tokens=5,top_k=3,n=16,k=16,align=1,impl=loop,seed=7"):
        assert WL.parse_shape(label(WL.parse_shape(text))) == WL.parse_shape(text)


@pytest.mark.parametrize(("text", "key"), [
    ("g=8,tokens=64,n=32,k=32,experts=8", "experts"),
    ("g=8,tokens=64,n=32,k=32,route=random", "route"),
    ("g=8,tokens=64,n=32,k=32,route=zipf,alpha=steep", "alpha"),
    ("g=8,tokens=64,n=32,k=32,route=zipf,alpha=-1", "alpha"),
    ("g=8,tokens=64,n=32,k=32,alpha=1.2", "alpha"),
    ("g=8,tokens=64,n=32,k=32,impl=fused", "impl"),
    ("g=0,tokens=64,n=32,k=32", "g"),
    ("g=8,tokens=64,n=32,k=x", "k"),
    ("g=4,tokens=64,top_k=5,n=32,k=32", "top_k"),
    ("g=4,tokens=64,n=32,k=32,n=64", "n"),
    ("g=4,tokens=64,n=32,k=32,align", "align"),
])
def test_bad_shape_keys_give_one_line_errors_naming_the_key(text, key):
    with pytest.raises(ShapeError) as info:
        WL.parse_shape(text)
    message = str(info.value)
    assert "\n" not in message and key in message and "grouped_gemm shape" in message


def test_moe_shape_sets_parse_and_carry_the_models_expert_sizes():
    shapes = [WL.parse_shape(s) for s in SHAPE_SETS["moe_experts"]]
    deepseek_up = WL.parse_shape("g=256,tokens=4096,top_k=8,n=4096,k=7168,route=balanced")
    mixtral_down = WL.parse_shape("g=8,tokens=16384,top_k=2,n=4096,k=14336,route=zipf")
    assert deepseek_up in shapes and mixtral_down in shapes
    for text in SHAPE_SETS["moe_experts_small"]:
        WL.parse_shape(text)


# --- routing ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [SMALL, SKEWED, "g=7,tokens=333,top_k=3,n=16,k=16,route=zipf,alpha=2.5,seed=3",
                                  "g=64,tokens=50,top_k=6,n=16,k=16,align=1"])
def test_routing_counts_sum_to_tokens_times_top_k_and_pad_to_the_alignment(text):
    shape = WL.parse_shape(text)
    r = routing(shape)
    assert len(r.counts) == shape["g"] and sum(r.counts) == shape["tokens"] * shape["top_k"]
    assert all(p % shape["align"] == 0 and 0 <= p - c < shape["align"] for c, p in zip(r.counts, r.padded, strict=True))
    assert r.offsets[-1] == r.rows and list(r.offsets) == sorted(r.offsets)
    inputs = WL.make_inputs(shape, CPU, 0)
    assert inputs["offs"].dtype == torch.int32 and inputs["offs"].tolist() == list(r.offsets)
    assert inputs["a"].shape == (r.rows, shape["k"]) and inputs["w"].shape == (shape["g"], shape["n"], shape["k"])


def test_balanced_routing_is_even_and_zipf_is_really_skewed():
    balanced = routing(WL.parse_shape("g=16,tokens=4096,top_k=1,n=16,k=16"))
    assert max(balanced.counts) - min(balanced.counts) <= 1 and balanced.imbalance == 1.0
    skew = routing(WL.parse_shape("g=16,tokens=4096,top_k=1,n=16,k=16,route=zipf,alpha=1.2"))
    # With one choice per token the hottest expert's share is Zipf's p(rank 1), up to sampling noise.
    expected = zipf_probabilities(16, 1.2)[0].item() * 4096
    assert abs(max(skew.counts) - expected) < 4 * expected**0.5
    assert skew.imbalance > 4  # p(1) * 16 ~ 5.3 times the fair share
    ranked = sorted(skew.counts, reverse=True)
    assert ranked[0] > 2 * ranked[3] > 0 and ranked[-1] < 4096 / 16 / 2
    steeper = routing(WL.parse_shape("g=16,tokens=4096,top_k=1,n=16,k=16,route=zipf,alpha=2"))
    assert steeper.imbalance > skew.imbalance


def test_routing_is_seeded_and_deterministic():
    a = routing(WL.parse_shape(SKEWED))
    assert routing(WL.parse_shape(SKEWED)) == a
    assert routing(WL.parse_shape(SKEWED + ",seed=1")).counts != a.counts


# --- closed forms -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [SMALL, SKEWED])
def test_flops_closed_form_matches_flop_counter_on_the_loop_reference(text):
    shape = WL.parse_shape(text)
    inputs = WL.make_inputs(shape, CPU, 0)
    with FlopCounterMode(display=False) as counter:
        WL.reference(inputs)
    assert WL.flops(shape) == counter.get_total_flops() == 2 * routing(shape).rows * shape["n"] * shape["k"]


def test_min_bytes_reads_only_active_experts():
    shape = WL.parse_shape("g=64,tokens=8,top_k=1,n=32,k=64,route=zipf,alpha=2,align=1")
    r = routing(shape)
    assert r.active < 64  # eight tokens cannot reach 64 experts
    bf16, fp8 = PRECISIONS.get("bf16"), PRECISIONS.get("fp8_rowwise")
    assert WL.min_bytes(shape, bf16) == (8 * 64 + r.active * 32 * 64) * 2 + 8 * 32 * 2
    assert WL.min_bytes(shape, fp8) == (8 * 64 + r.active * 32 * 64) * 1 + 8 * 32 * 2


def test_memory_is_estimated_and_a_model_sized_case_refused_before_allocating():
    deepseek = WL.parse_shape(SHAPE_SETS["moe_experts"][0])
    why = WL.memory_reason(deepseek, PRECISIONS.get("bf16"), CPU)
    assert why is not None and "out of memory" in why and "grouped GEMM" in why
    assert WL.memory_reason(WL.parse_shape(SMALL), PRECISIONS.get("bf16"), CPU) is None


# --- numerics and implementations ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [SMALL, SKEWED])
def test_grouped_kernel_matches_the_loop_reference(text):
    grouped, inputs = _build(text, "fp32", "torch")
    loop, _ = _build(text + ",impl=loop", "fp32", "torch")
    reference = WL.reference(inputs)
    assert compare(grouped.output(), reference).sqnr_db > 120
    assert compare(loop.output(), reference).sqnr_db > 120
    assert compare(_build(text, "bf16", "torch")[0].output(), reference).sqnr_db > 40


@pytest.mark.parametrize("recipe", ["fp8_rowwise", "mxfp8"])
def test_fp8_numerics_against_the_fp64_loop(recipe):
    emulated, inputs = _build(SKEWED + ",impl=loop", recipe, "emulated")
    sqnr = compare(emulated.output(), WL.reference(inputs)).sqnr_db
    assert 24 < sqnr < 34, sqnr  # E4M3 on both operands: about 28 dB
    assert set(emulated.cast_stats()) == {"a", "w"}


def test_torch_fp8_loop_runs_scaled_mm_on_the_cpu_and_agrees_with_the_emulation():
    native, inputs = _build(SKEWED + ",impl=loop", "fp8_rowwise", "torch")
    emulated, _ = _build(SKEWED + ",impl=loop", "fp8_rowwise", "emulated")
    out = native.output()
    assert out.dtype == torch.bfloat16 and out.shape == (routing(WL.parse_shape(SKEWED)).rows, 64)
    assert compare(out, emulated.output().double()).sqnr_db > 45  # the same FP8 operands; BF16 outputs


def test_cpu_refusals_are_reasons_not_failures():
    with pytest.raises(Unsupported, match="aten::_scaled_grouped_mm.*CPU"):
        _build(SMALL, "fp8_rowwise", "torch")
    with pytest.raises(Unsupported, match="impl=loop"):
        _build(SMALL, "bf16", "emulated")
    assert "fp16" in WL.shape_reason(WL.parse_shape(SMALL), PRECISIONS.get("fp16"))
    assert "n = 40" in WL.shape_reason(WL.parse_shape("g=4,tokens=64,n=40,k=64"), PRECISIONS.get("fp8_rowwise"))
    assert "align = 16" in WL.shape_reason(WL.parse_shape("g=4,tokens=64,n=32,k=64,align=16"),
                                           PRECISIONS.get("mxfp8"))


@pytest.mark.slow  # a real run of every routing
def test_run_records_routing_and_phases(capsys, results_dir):
    code = main(["run", "--workload", "grouped_gemm", "--shape", SKEWED + ",impl=loop", "--precision", "bf16",
                 "fp8_rowwise", "--backend", "torch", "emulated", "--budget", "20", "--min-samples", "3",
                 "--results-dir", str(results_dir)])
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    records = read_run_file(summary["run_file"])["records"]
    assert {(r["precision"], r["backend"]) for r in records if r["status"] == "ok"} == {
        ("bf16", "torch"), ("bf16", "emulated"), ("fp8_rowwise", "torch"), ("fp8_rowwise", "emulated")}
    r = routing(WL.parse_shape(SKEWED))
    for rec in records:
        assert rec["flops"] == 2 * r.rows * 64 * 128
        assert rec["extra"]["expert_imbalance"] > 1.5 and rec["extra"]["routed_rows"] == r.rows
    fp8 = next(rec for rec in records if rec["precision"] == "fp8_rowwise" and rec["backend"] == "emulated")
    assert set(fp8["phases"]) >= {"quantize", "gemm", "epilogue"}


# --- CUDA conformance ---------------------------------------------------------------------------------------------

def _replay(text: str, recipe: str, target: str):
    return replay_case("grouped_gemm", text, resolve_precision(recipe), "torch", TARGETS[target])


def test_scaled_grouped_calls_conform_where_the_kernels_exist():
    rowwise = _replay(SKEWED + ",align=16", "fp8_rowwise", "h100-torch2.13")
    assert rowwise.conforms and [c.op for c in rowwise.calls] == ["_scaled_grouped_mm"]
    mx = _replay(SKEWED, "mxfp8", "b200-torch2.13")
    assert mx.conforms and mx.calls[0].grouped.offsets == routing(WL.parse_shape(SKEWED)).offsets
    loop = _replay(SKEWED + ",impl=loop", "fp8_rowwise", "l4-cuda12.4")
    assert loop.conforms and len(loop.calls) == routing(WL.parse_shape(SKEWED)).active


@pytest.mark.parametrize(("text", "recipe", "target", "rule"), [
    (SKEWED, "fp8_rowwise", "l4-cuda12.4", "grouped architecture"),
    (SKEWED, "fp8_rowwise", "b200-torch2.13", "grouped architecture"),
    (SKEWED + ",align=1", "fp8_rowwise", "h100-torch2.13", "token-group alignment"),
    (SKEWED + ",align=16", "mxfp8", "b200-torch2.13", "token-group alignment"),
    ("g=4,tokens=64,top_k=2,n=40,k=128", "fp8_rowwise", "h100-torch2.13", "grouped dimensions"),
])
def test_scaled_grouped_calls_cuda_refuses_are_refused_with_the_rule(text, recipe, target, rule):
    replay = _replay(text, recipe, target)
    assert replay.refused and not replay.conforms
    assert replay.calls[-1].refused_by == rule, replay.calls[-1].describe()


def _fake_grouped(*, offs_dtype=torch.int32, row_major_b=False, scale_a_2d=False, out_dtype=torch.bfloat16):
    g, m, n, k = 4, 64, 32, 64
    a = torch.zeros(m, k, dtype=torch.float8_e4m3fn)
    w = torch.zeros(g, n, k, dtype=torch.float8_e4m3fn)
    b = w.transpose(-2, -1).contiguous() if row_major_b else w.transpose(-2, -1)
    scale_a = torch.ones(m, 1) if scale_a_2d else torch.ones(m)
    offs = torch.tensor([16, 32, 48, 64], dtype=offs_dtype)
    with emulating(TARGETS["h100-torch2.13"]) as emulation:
        torch._scaled_grouped_mm(a, b, scale_a, torch.ones(g, n), offs=offs, out_dtype=out_dtype)
    return emulation


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"offs_dtype": torch.int64}, "int32"),
    ({"row_major_b": True}, "column major"),
    ({"scale_a_2d": True}, "1D tensor"),
    ({"out_dtype": torch.float32}, "bfloat16"),
])
def test_meta_layout_rules_of_the_grouped_call_are_replayed(kwargs, message):
    assert _fake_grouped().calls[0].accepted
    with pytest.raises(CudaRefusal, match=message) as info:
        _fake_grouped(**kwargs)
    assert info.value.call.refused_by == "meta"


def test_every_grouped_rule_names_its_source():
    for rule in GROUPED_RULES:
        assert ".cpp" in rule.source or ".py" in rule.source, rule
