"""CUDA conformance: every scaled GEMM of every FP8 path, replayed on fake CUDA tensors for real target GPUs.

For each case (workload x FP8 recipe x element format x backend) and each target in
:data:`fp8bench.verify.cuda_replay.TARGETS`, the capability matrix decides whether fp8bench runs the case there. Then:

* a case fp8bench runs must build on the simulated target with every scaled GEMM accepted by torch's meta
  functions and by the CUDA rules of :mod:`fp8bench.hardware.capabilities`, and it must issue at least one scaled GEMM;
* a case the capability matrix refuses for a GEMM rule must really be refused when replayed (no refusal is made
  up), and the skip reason names the rule.

The same replays run the FP8 linear layer's three GEMMs (forward, dgrad, wgrad) in the attention block (with its
backward pass) and the training step.
"""

from __future__ import annotations

import pytest
import torch
from grid import grid, one_per_kind

from fp8bench.core.devices import Device
from fp8bench.core.plugins import load_all
from fp8bench.core.precisions import RunOptions, ScaledRecipe, resolve_precision
from fp8bench.hardware import capabilities
from fp8bench.hardware.capabilities import (
    CudaTarget,
    ScaledGemmSpec,
    ScaleLayout,
    parse_version,
    scaled_gemm_reason,
)
from fp8bench.numerics import torch_api
from fp8bench.verify.cuda_replay import TARGETS, CaseReplay, CudaRefusal, Emulation, emulating, replay_case

load_all()  # registries in their canonical order before any test imports one backend module on its own
CUDA = Device("cuda", 0)
# The floor release, the installed one and the newest recorded: the H100 and B200 targets the compiled backend and
# the layer workloads replay on (every release's targets replay the gemm workload), plus the older toolkits and GPUs.
_EDGES = {torch_api.TORCH_FLOOR, parse_version(torch.__version__)[:2],
          max(parse_version(r)[:2] for r in torch_api.recorded())}
EDGE_TARGETS = tuple(name for name, t in TARGETS.items()
                     if not name.startswith(("h100-torch", "b200-torch")) or t.torch in _EDGES)


def _api_generation(version: tuple[int, ...]) -> tuple[object, ...]:
    """What the replay reads from a torch release: its scaled-GEMM entry points with their parameters, enums and
    dtypes. Releases that agree on all of it form one API generation (their meta functions are the installed
    torch's in every replay)."""
    s = torch_api.release_surface(version)
    return (tuple(sorted(s.functions.items())), s.names, tuple(sorted((k, tuple(sorted(v.items())))
                                                                        for k, v in s.enums.items())), s.dtypes)


# One target per GPU x CUDA toolkit x torch API generation (the edge releases preferred); every target under
# FP8BENCH_FULL_MATRIX=1 (tests/grid.py).
CONFORMANCE_TARGETS = tuple(one_per_kind(
    sorted(TARGETS), lambda n: (TARGETS[n].name, TARGETS[n].cc, TARGETS[n].cuda, _api_generation(TARGETS[n].torch)),
    preferred=EDGE_TARGETS))
LAYER_TARGETS = tuple(t for t in EDGE_TARGETS if t in CONFORMANCE_TARGETS)
RECIPES = ("fp8_tensorwise", "fp8_delayed", "fp8_rowwise", "fp8_blockwise", "mxfp8")
FORMATS = ("e4m3", "hybrid", "e5m2")
# Small shapes that still exercise every padding rule: K/128 = 3 pads to 4 block columns, M = 192 pads to 256
# rows of MX scales, K/32 = 12 MX blocks.
SHAPES = {"gemm": "192x256x384", "attention": "b=2,h=2,s=64,d=64,kv_heads=1,backward=1",
          "transformer_step": "tiny,layers=1,batch=2,seq=64"}


def _replay(workload: str, recipe: str, fmt: str, backend: str, target: CudaTarget,
            fast_accum: bool | None = None) -> CaseReplay:
    precision = resolve_precision(recipe, RunOptions(fp8_format=fmt, fast_accum=fast_accum))
    return replay_case(workload, SHAPES[workload], precision, backend, target)


def _report(replay: CaseReplay | Emulation) -> str:
    return "\n".join(c.describe() for c in replay.calls)


def _check(workload: str, recipe: str, fmt: str, backend: str, target_name: str) -> None:
    target = TARGETS[target_name]
    replay = _replay(workload, recipe, fmt, backend, target)
    if replay.skip_reason is None:
        assert replay.error is None, f"fp8bench runs this case on {target.describe()}, but CUDA would refuse it: " \
                                     f"{replay.error}\ncalls:\n{_report(replay)}"
        assert replay.calls, "an FP8 case issued no scaled GEMM"
        assert replay.conforms, _report(replay)
        return
    gemm_rule = capabilities.capabilities_for(CUDA, target=target).recipe_reason(
        resolve_precision(recipe, RunOptions(fp8_format=fmt)), backward=workload != "gemm")
    if gemm_rule and gemm_rule in replay.skip_reason:
        assert replay.refused, f"skipped for a GEMM rule ({replay.skip_reason}) that no replayed call breaks:\n" \
                               f"{_report(replay)}"


# Every pair of recipe, format and backend-on-target values at least once (the full product with
# FP8BENCH_FULL_MATRIX=1).
@pytest.mark.parametrize(("recipe", "fmt", "backend_target"), grid(
    RECIPES, FORMATS, [("torch", t) for t in CONFORMANCE_TARGETS] + [("compiled", t) for t in LAYER_TARGETS]),
    ids=lambda v: "-".join(v) if isinstance(v, tuple) else v)
def test_gemm_workload_conforms(recipe: str, fmt: str, backend_target: tuple[str, str]) -> None:
    _check("gemm", recipe, fmt, *backend_target)


@pytest.mark.parametrize(("workload", "recipe", "fmt", "target"), grid(
    ("attention", "transformer_step"), RECIPES, ("e4m3", "hybrid"), LAYER_TARGETS))
def test_fp8_layers_conform_forward_and_backward(workload: str, recipe: str, fmt: str, target: str) -> None:
    _check(workload, recipe, fmt, "torch", target)


@pytest.mark.parametrize("target", ("h100-torch2.13", "b200-torch2.9", "l4-cuda12.4"))
@pytest.mark.parametrize("recipe", ("fp8_tensorwise", "fp8_rowwise"))
@pytest.mark.parametrize("workload", ("gemm", "attention", "transformer_step"))
def test_torchao_calls_conform(workload: str, recipe: str, target: str) -> None:
    """torchao issues its own ``torch._scaled_mm`` calls from inside its FP8 tensor subclass: replayed too."""
    pytest.importorskip("torchao.float8")
    replay = _replay(workload, recipe, "e4m3", "torchao", TARGETS[target])
    assert replay.skip_reason is None and replay.calls and replay.conforms, replay.skip_reason or _report(replay)
    assert all(c.site.startswith("float8_ops.py") for c in replay.calls), {c.site for c in replay.calls}
    # torchao's Float8LinearConfig: fast accumulation in the output (forward) GEMM, full in both gradient GEMMs.
    flags = {c.spec.fast_accum for c in replay.calls if c.spec}
    assert flags == ({True} if workload == "gemm" else {True, False}), flags
    full = _replay(workload, recipe, "e4m3", "torchao", TARGETS[target], fast_accum=False)
    assert full.conforms and {c.spec.fast_accum for c in full.calls if c.spec} == {False}


@pytest.mark.parametrize("workload", ("attention", "transformer_step"))
def test_compiled_layers_conform_on_h100(workload: str) -> None:
    for recipe in ("fp8_tensorwise", "fp8_rowwise", "fp8_blockwise"):
        _check(workload, recipe, "e4m3", "compiled", "h100-torch2.13")


def test_fp8_linear_replays_forward_dgrad_and_wgrad_per_layer() -> None:
    """One training step of the attention block issues three GEMMs per FP8 projection, each from its own site."""
    replay = _replay("attention", "fp8_blockwise", "e4m3", "torch", TARGETS["h100-torch2.13"])
    assert replay.conforms, replay.error
    sites = [c.site for c in replay.calls]
    # qkv and output projections: forward in the build's forward pass, dgrad and wgrad in its backward pass.
    assert sum("in forward" in s for s in sites) >= 2 and sum("in backward" in s for s in sites) >= 4, sites
    layouts = {(c.spec.scale_a, c.spec.scale_b) for c in replay.calls if c.spec}
    assert layouts == {(ScaleLayout.BLOCK_1X128, ScaleLayout.BLOCK_128X128),
                       (ScaleLayout.BLOCK_1X128, ScaleLayout.BLOCK_1X128)}, layouts


def test_accumulation_follows_the_vendors_default_and_can_be_turned_off() -> None:
    """Fast accumulation in the forward GEMM only (torchao, Transformer Engine); ``fast_accum=False``: none."""
    for fast, expected in ((None, {True, False}), (False, {False})):
        replay = _replay("attention", "fp8_rowwise", "e4m3", "torch", TARGETS["h100-torch2.13"], fast)
        assert replay.conforms, replay.error
        by_site = {(c.site.split(" in ")[-1], c.spec.fast_accum) for c in replay.calls if c.spec}
        assert {fast for _, fast in by_site} == expected
        assert all(not fast for site, fast in by_site if site == "backward"), by_site


# --- the replay machinery itself --------------------------------------------------------------------------------

H100 = TARGETS["h100-torch2.13"]


def _emulated_mm(target: CudaTarget, a: torch.Tensor, b: torch.Tensor, *scales: torch.Tensor, **kw) -> Emulation:
    with emulating(target) as emulation:
        torch._scaled_mm(a, b, *scales, **kw)
    return emulation


def test_meta_refusals_reach_the_caller_as_cuda_would_raise_them() -> None:
    a = torch.zeros(64, 256, dtype=torch.float8_e4m3fn)
    w = torch.zeros(128, 256, dtype=torch.float8_e4m3fn)
    one = torch.ones(())
    assert _emulated_mm(H100, a, w.t(), one, one, out_dtype=torch.bfloat16).calls[0].accepted
    with pytest.raises(CudaRefusal, match="mat2 must be col_major") as info:  # row-major B: what cuBLASLt refuses
        _emulated_mm(H100, a, w.t().contiguous(), one, one, out_dtype=torch.bfloat16)
    assert info.value.call.refused_by == "meta"
    with pytest.raises(CudaRefusal, match="divisible by 16"):
        _emulated_mm(H100, a[:, :200], w[:, :200].t(), one, one, out_dtype=torch.bfloat16)


def test_rules_the_meta_functions_lack_are_applied() -> None:
    a = torch.zeros(64, 256, dtype=torch.float8_e5m2)
    w = torch.zeros(128, 256, dtype=torch.float8_e5m2)
    one = torch.ones(())
    with pytest.raises(ValueError, match="E5M2 x E5M2"):
        _emulated_mm(H100, a, w.t(), one, one, out_dtype=torch.bfloat16)
    with pytest.raises(NotImplementedError, match="8.9 or 9.0"):
        _emulated_mm(TARGETS["a100-cuda12.4"], a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn).t(), one, one,
                     out_dtype=torch.bfloat16)


@pytest.mark.parametrize(("target", "spec", "refused"), [
    ("h100-torch2.13", ScaledGemmSpec(torch.float8_e4m3fn, torch.float8_e4m3fn, ScaleLayout.BLOCK_1X128,
                                     ScaleLayout.BLOCK_128X128, torch.bfloat16), None),
    ("b200-torch2.13", ScaledGemmSpec(torch.float8_e4m3fn, torch.float8_e4m3fn, ScaleLayout.BLOCK_1X128,
                                     ScaleLayout.BLOCK_128X128, torch.bfloat16), "compute capability 9.x only"),
    ("h100-cuda12.4-torch2.9", ScaledGemmSpec(torch.float8_e4m3fn, torch.float8_e4m3fn, ScaleLayout.BLOCK_1X128,
                                              ScaleLayout.BLOCK_128X128, torch.bfloat16), "cuBLASLt 12.9"),
    ("h100-torch2.13", ScaledGemmSpec(torch.float8_e5m2, torch.float8_e4m3fn, ScaleLayout.BLOCK_1X128,
                                     ScaleLayout.BLOCK_1X128, torch.bfloat16), "E4M3 operands only"),
    ("h100-torch2.13", ScaledGemmSpec(torch.float8_e4m3fn, torch.float8_e4m3fn, ScaleLayout.MX_1X32,
                                     ScaleLayout.MX_1X32, torch.bfloat16), "10.x"),
    ("b200-torch2.13", ScaledGemmSpec(torch.float8_e4m3fn, torch.float8_e4m3fn, ScaleLayout.MX_1X32,
                                     ScaleLayout.MX_1X32, torch.bfloat16), None),
    ("b200-torch2.9", ScaledGemmSpec(torch.float8_e5m2, torch.float8_e4m3fn, ScaleLayout.ROWWISE,
                                              ScaleLayout.ROWWISE, torch.float32), "BF16 only"),
    ("b200-torch2.9", ScaledGemmSpec(torch.float8_e5m2, torch.float8_e4m3fn, ScaleLayout.ROWWISE,
                                              ScaleLayout.ROWWISE, torch.bfloat16), None),
    ("h100-torch2.13", ScaledGemmSpec(torch.float8_e5m2, torch.float8_e4m3fn, ScaleLayout.ROWWISE,
                                     ScaleLayout.ROWWISE, torch.float32), None),  # cuBLASLt's own rowwise kernel
    ("l4-cuda12.4", ScaledGemmSpec(torch.float8_e4m3fn, torch.float8_e4m3fn, ScaleLayout.TENSORWISE,
                                   ScaleLayout.TENSORWISE, torch.float32), None),
])
def test_scaled_gemm_rules(target: str, spec: ScaledGemmSpec, refused: str | None) -> None:
    why = scaled_gemm_reason(spec, TARGETS[target])
    assert (why is None) if refused is None else (why is not None and refused in why), why


def test_every_rule_names_its_cuda_source() -> None:
    for rule in capabilities.SCALED_GEMM_RULES:
        assert ".cpp" in rule.source or ".py" in rule.source or "cuBLASLt" in rule.source, rule


def test_capability_matrix_and_recipes_read_the_same_rules() -> None:
    h100 = capabilities.capabilities_for(CUDA, target=H100)
    b200 = capabilities.capabilities_for(CUDA, target=TARGETS["b200-torch2.13"])
    blockwise = resolve_precision("fp8_blockwise")
    assert h100.recipe_reason(blockwise) is None and "9.x only" in b200.recipe_reason(blockwise)
    # Hybrid training sends E5M2 gradients into the backward GEMMs, which block-scaled kernels refuse.
    hybrid = resolve_precision("fp8_blockwise", RunOptions(fp8_format="hybrid"))
    assert h100.recipe_reason(hybrid) is None
    assert "dgrad GEMM" in h100.recipe_reason(hybrid, backward=True)
    assert "E5M2 x E5M2" in h100.recipe_reason(resolve_precision("fp8_rowwise", RunOptions(fp8_format="e5m2")))
    assert isinstance(hybrid, ScaledRecipe)


# --- 4-bit recipes --------------------------------------------------------------------------------------------

FP4 = torch.float4_e2m1fn_x2


@pytest.mark.parametrize(("workload", "target"), [("gemm", t) for t in CONFORMANCE_TARGETS]
                         + [(w, t) for w in ("attention", "transformer_step") for t in LAYER_TARGETS])
@pytest.mark.parametrize("recipe", ("nvfp4", "mxfp4"))
def test_four_bit_recipes_conform(workload: str, recipe: str, target: str) -> None:
    """Packed FP4 data and blocked scales through F.scaled_mm pass on 10.x with torch 2.10+; torch 2.9 has no entry
    point for them (refused naming the release that adds one); other architectures are refused by the FP4 rule."""
    _check(workload, recipe, "e4m3", "torch", target)
    t = TARGETS[target]
    replay = _replay(workload, recipe, "e4m3", "torch", t)
    if t.cc[0] == 10 and t.torch >= (2, 10):
        assert replay.conforms, replay.error
        assert {c.op for c in replay.calls} == {"_scaled_mm_v2"}
        assert all(c.spec and c.spec.a_dtype == FP4 and not c.spec.fast_accum for c in replay.calls)
    elif t.cc[0] == 10:
        assert replay.skip_reason and "torch 2.10" in replay.skip_reason and replay.refused
    else:
        assert replay.skip_reason and "compute capability 10.x" in replay.skip_reason and replay.refused


# --- each target's own torch release ---------------------------------------------------------------------------

@pytest.mark.parametrize(("recipe", "target", "api"), [
    ("fp8_blockwise", "h100-torch2.9", "_scaled_mm"), ("fp8_blockwise", "h100-torch2.10", "_scaled_mm_v2"),
    ("mxfp8", "b200-torch2.9", "_scaled_mm"), ("mxfp8", "b200-torch2.14", "_scaled_mm_v2")])
def test_block_recipes_run_the_entry_point_their_torch_release_has(recipe: str, target: str, api: str) -> None:
    """torch 2.9 has no F.scaled_mm, ScalingType, SwizzleType or aten._scaled_mm_v2: a blockwise or MXFP8 case that
    called them there died of AttributeError. Its torch._scaled_mm takes both kinds of block scales instead."""
    replay = _replay("gemm", recipe, "e4m3", "torch", TARGETS[target])
    assert replay.skip_reason is None and replay.error is None, replay.skip_reason or replay.error
    assert replay.calls and {c.op for c in replay.calls} == {api}, _report(replay)
    assert replay.conforms, _report(replay)


@pytest.mark.parametrize(("recipe", "reason"), [
    ("nvfp4", "nvfp4 GEMMs need torch.nn.functional.scaled_mm (torch 2.10.0 and newer have it)"),
    ("mxfp4", "MXFP4 on CUDA needs torch 2.10+ (_scaled_mxfp4_mxfp4)")])
def test_four_bit_recipes_need_a_torch_with_functional_scaled_mm(recipe: str, reason: str) -> None:
    replay = _replay("gemm", recipe, "e4m3", "torch", TARGETS["b200-torch2.9"])
    assert replay.skip_reason and reason in replay.skip_reason, replay.skip_reason
    assert replay.refused, "the refusal must be one the build confirms"


def test_a_call_the_target_release_lacks_is_refused_at_dispatch() -> None:
    """A dispatcher op the target's torch does not have (here aten._scaled_mm_v2 on torch 2.9, reached without the
    Python name) is refused by the release, not replayed."""
    a = torch.zeros(32, 32, dtype=torch.float8_e4m3fn)
    one = torch.ones(())
    with pytest.raises(CudaRefusal, match="torch 2.9.1 has no torch._scaled_mm_v2") as info, \
            emulating(TARGETS["h100-torch2.9"]):
        torch.ops.aten._scaled_mm_v2(a, a.t(), [one], [0], [], [one], [0], [], None, torch.bfloat16)
    assert info.value.call.refused_by == "torch 2.9.1"


def test_mxfp4_never_takes_torch_scaled_mm_on_cuda() -> None:
    """MXFP4 went through torch._scaled_mm, whose CUDA build takes packed FP4 with E8M0 scales on ROCm only
    (is_blockwise_1x32_scaling). The installed meta function accepts that call, so the rule must refuse it."""
    v1 = ScaledGemmSpec(FP4, FP4, ScaleLayout.MX_1X32, ScaleLayout.MX_1X32, torch.bfloat16, api="_scaled_mm")
    v2 = ScaledGemmSpec(FP4, FP4, ScaleLayout.MX_1X32, ScaleLayout.MX_1X32, torch.bfloat16, api="_scaled_mm_v2")
    for name, target in TARGETS.items():
        if target.cc[0] == 10:
            assert "ROCm only" in (scaled_gemm_reason(v1, target) or ""), name
            # F.scaled_mm's CUDA kernel arrived with 2.10 (as F.scaled_mm itself did).
            v2_reason = scaled_gemm_reason(v2, target)
            assert (v2_reason is None) == (target.torch >= (2, 10)), (name, v2_reason)
    replay = _replay("gemm", "mxfp4", "e4m3", "torch", TARGETS["b200-torch2.13"])
    assert replay.conforms and {c.op for c in replay.calls} == {"_scaled_mm_v2"}, _report(replay)


def test_mxfp4_scales_are_counted_on_the_unpacked_k_as_cuda_counts_them() -> None:
    """CUDA's _scaled_mxfp4_mxfp4 counts scales over the unpacked K; the installed meta function over the packed K
    (a count CUDA refuses). The replay holds the CUDA rule."""
    import torch.nn.functional as F

    from fp8bench.core.precisions import PRECISIONS
    from fp8bench.numerics.quantize import quantize_mx
    from fp8bench.numerics.scaled_gemm import to_blocked_scales

    fmt = PRECISIONS.get("mxfp4").forward_format  # type: ignore[union-attr]
    # K = 512 values, 256 bytes: 16 scale columns counted on the unpacked K, 8 on the packed one.
    a, b = torch.zeros(128, 256, dtype=torch.uint8).view(FP4), torch.zeros(128, 256, dtype=torch.uint8).view(FP4)
    qa = quantize_mx(torch.randn(128, 512), fmt)
    right = to_blocked_scales(qa.scale.to(torch.float8_e8m0fnu))  # 128 rows x 16 columns: 2048 scales
    packed_count = right[: right.numel() // 2]  # what the meta function expects: counted on the packed K
    mx, swizzled = [F.ScalingType.BlockWise1x32], [F.SwizzleType.SWIZZLE_32_4_4]
    with emulating(TARGETS["b200-torch2.13"]) as em:
        F.scaled_mm(a, b.t(), [right], mx, [right], mx, swizzle_a=swizzled, swizzle_b=swizzled,
                    output_dtype=torch.bfloat16)
    assert em.calls[0].accepted
    with pytest.raises(CudaRefusal, match="must be 2048 float8_e8m0fnu scales") as info, \
            emulating(TARGETS["b200-torch2.13"]):
        F.scaled_mm(a, b.t(), [packed_count], mx, [packed_count], mx, swizzle_a=swizzled, swizzle_b=swizzled,
                    output_dtype=torch.bfloat16)
    assert info.value.call.refused_by == "MXFP4 layout"


def test_nvfp4_passes_two_scale_levels_and_a_bad_layout_is_refused_by_meta() -> None:
    import torch.nn.functional as F

    from fp8bench.numerics.quantize import quantize_nvfp4
    from fp8bench.numerics.scaled_gemm import fp8_scaled_mm, to_blocked_scales

    b200 = TARGETS["b200-torch2.13"]
    qa, qb = quantize_nvfp4(torch.randn(192, 256)), quantize_nvfp4(torch.randn(128, 256))
    with emulating(b200) as emulation:
        fp8_scaled_mm(qa, qb, torch.bfloat16)
    call = emulation.calls[0]
    assert call.accepted and call.spec.scale_a is ScaleLayout.NV_1X16
    assert [int(r) for r in call.args["recipe_a"]] == [int(F.ScalingType.BlockWise1x16), int(F.ScalingType.TensorWise)]
    # 192 rows pad to 256 in the blocked layout, 256 / 16 = 16 scale columns: 4096 E4M3 scales.
    assert call.args["scale_a"][0].shape == (256 * 16,) and call.args["scale_a"][1].dtype == torch.float32
    a, b = torch.zeros(192, 128, dtype=torch.uint8).view(FP4), torch.zeros(128, 128, dtype=torch.uint8).view(FP4)
    unpadded = qa.scale.to(torch.float8_e4m3fn).reshape(-1)  # not blocked: too few scales
    recipe = [F.ScalingType.BlockWise1x16, F.ScalingType.TensorWise]
    swizzle = [F.SwizzleType.SWIZZLE_32_4_4, F.SwizzleType.NO_SWIZZLE]
    with pytest.raises(CudaRefusal, match="NV scaling") as info, emulating(b200):
        F.scaled_mm(a, b.t(), [unpadded, qa.tensor_scale], recipe,
                    [to_blocked_scales(qb.scale.to(torch.float8_e4m3fn)), qb.tensor_scale], recipe,
                    swizzle_a=swizzle, swizzle_b=swizzle, output_dtype=torch.bfloat16)
    assert info.value.call.refused_by == "meta"


@pytest.mark.parametrize(("target", "spec", "refused"), [
    ("b200-torch2.13", ScaledGemmSpec(FP4, FP4, ScaleLayout.NV_1X16, ScaleLayout.NV_1X16, torch.bfloat16), None),
    ("b200-torch2.13", ScaledGemmSpec(FP4, FP4, ScaleLayout.MX_1X32, ScaleLayout.MX_1X32, torch.bfloat16,
                                      api="_scaled_mm_v2"), None),
    ("b200-torch2.13", ScaledGemmSpec(FP4, FP4, ScaleLayout.MX_1X32, ScaleLayout.MX_1X32, torch.bfloat16,
                                      api="_scaled_mm"), "ROCm only"),
    ("b200-torch2.13", ScaledGemmSpec(FP4, FP4, ScaleLayout.NV_1X16, ScaleLayout.NV_1X16, torch.bfloat16,
                                     fast_accum=True), "use_fast_accum"),
    ("b200-torch2.13", ScaledGemmSpec(FP4, torch.float8_e4m3fn, ScaleLayout.NV_1X16, ScaleLayout.NV_1X16,
                                     torch.bfloat16), "both sides"),
    ("b200-torch2.13", ScaledGemmSpec(torch.float8_e4m3fn, torch.float8_e4m3fn, ScaleLayout.NV_1X16,
                                     ScaleLayout.NV_1X16, torch.bfloat16), "FP4 (float4_e2m1fn_x2) operands only"),
    ("h100-torch2.13", ScaledGemmSpec(FP4, FP4, ScaleLayout.NV_1X16, ScaleLayout.NV_1X16, torch.bfloat16), "10.x"),
    ("b200-torch2.13", ScaledGemmSpec(FP4, FP4, ScaleLayout.NV_1X16, ScaleLayout.MX_1X32, torch.bfloat16),
     "on both operands"),
])
def test_fp4_rules(target: str, spec: ScaledGemmSpec, refused: str | None) -> None:
    why = scaled_gemm_reason(spec, TARGETS[target])
    assert (why is None) if refused is None else (why is not None and refused in why), why
    old_cuda = CudaTarget("NVIDIA B200", (10, 0), (12, 6), (2, 13))
    if refused is None:
        assert "CUDA 12.8+" in (scaled_gemm_reason(spec, old_cuda) or "")
