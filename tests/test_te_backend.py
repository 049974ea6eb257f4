"""Transformer Engine backend: recipe mapping, availability, and the real ``TEApi`` against fakes of TE's two API
shapes (``tests/fake_te.py``: TE <= 2.8 and TE >= 2.9), without TE installed.

TE cannot be imported without CUDA; the fakes stand in for TE's modules only, and enforce TE's refusals with their
sources. The mapping, checks, boundary and pipeline code are fp8bench's real ones.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from fake_te import NEW, OLD, FakeGpu, FakeTE, install
from torch import nn

from fp8bench.core.devices import Device
from fp8bench.core.pipeline import BuildContext, Unsupported
from fp8bench.core.precisions import RunOptions, resolve_precision
from fp8bench.kernels import te_backend as teb
from fp8bench.numerics.accuracy import compare
from fp8bench.workloads.gemm import GEMM


@pytest.mark.parametrize(("precision", "fmt", "cls", "check"), [
    ("fp8_delayed", "hybrid", "DelayedScaling", "is_fp8_available"),
    ("fp8_tensorwise", "e4m3", "Float8CurrentScaling", "is_fp8_available"),
    ("fp8_blockwise", "e4m3", "Float8BlockScaling", "is_fp8_block_scaling_available"),
    ("mxfp8", "e4m3", "MXFP8BlockScaling", "is_mxfp8_available"),
])
def test_recipe_mapping(precision: str, fmt: str, cls: str, check: str) -> None:
    spec = teb.te_recipe_spec(resolve_precision(precision, RunOptions(fp8_format=fmt)))
    assert spec is not None and spec.cls == cls and spec.check == check
    assert spec.kwargs["fp8_format"] == fmt.upper()


def test_delayed_carries_history_and_margin() -> None:
    spec = teb.te_recipe_spec(resolve_precision("fp8_delayed",
                                                RunOptions(fp8_format="hybrid", amax_history_len=64, margin=1)))
    assert spec.kwargs == {"fp8_format": "HYBRID", "margin": 1, "amax_history_len": 64, "amax_compute_algo": "max"}


def test_blockwise_and_mx_alignment_and_versions() -> None:
    block = teb.te_recipe_spec(resolve_precision("fp8_blockwise"))
    mx = teb.te_recipe_spec(resolve_precision("mxfp8"))
    assert (block.alignment, block.min_version) == (128, (2, 3))
    assert block.kwargs["x_block_scaling_dim"] == 1 and block.kwargs["w_block_scaling_dim"] == 2
    assert mx.alignment == 32


@pytest.mark.parametrize(("precision", "fmt", "match"), [
    ("fp8_rowwise", "e4m3", "no per-row"),
    ("fp8_tensorwise", "e5m2", "pure E5M2"),
])
def test_recipes_te_lacks_are_refused_with_reasons(precision: str, fmt: str, match: str) -> None:
    with pytest.raises(Unsupported, match=match):
        teb.te_recipe_spec(resolve_precision(precision, RunOptions(fp8_format=fmt)))
    assert match in teb.precision_support(resolve_precision(precision, RunOptions(fp8_format=fmt)), Device("cuda", 0))


def test_float_precisions_run_with_autocast_off() -> None:
    assert teb.te_recipe_spec(resolve_precision("bf16")) is None
    assert teb.precision_support(resolve_precision("bf16"), Device("cuda", 0)) is None


def test_old_te_refuses_newer_recipes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(teb, "te_version", lambda: "2.1.0")
    why = teb.precision_support(resolve_precision("fp8_tensorwise"), Device("cuda", 0))
    assert why == "Float8CurrentScaling needs Transformer Engine 2.2+, installed 2.1.0"
    assert teb.precision_support(resolve_precision("fp8_delayed",
                                                   RunOptions(fp8_format="hybrid")), Device("cuda", 0)) is None


def test_backend_is_unavailable_on_the_cpu() -> None:
    assert teb.TE.unsupported_reason("gemm", resolve_precision("fp8_delayed",
                                                               RunOptions(fp8_format="hybrid")), Device("cpu")) == \
        "backend te unavailable: Transformer Engine runs on CUDA devices only"


def test_real_import_failure_becomes_a_refusal() -> None:
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception:
        with pytest.raises(Unsupported, match="transformer_engine.pytorch import failed"):
            teb.TEApi()
    else:
        pytest.skip("Transformer Engine is importable here")


# --- Transformer Engine's own API, faked in both shapes (tests/fake_te.py) -------------------------------------

@pytest.fixture(params=[OLD, NEW], ids=["te2.8-fp8_autocast", "te2.20-autocast"])
def te(request, monkeypatch) -> FakeTE:
    return install(monkeypatch, request.param)


def _ctx(precision: str, shape: str = "64x128x256", fmt: str = "hybrid") -> BuildContext:
    sh = GEMM.parse_shape(shape)
    return BuildContext("gemm", sh, resolve_precision(precision, RunOptions(fp8_format=fmt)), Device("cpu"),
                        GEMM.make_inputs(sh, Device("cpu"), seed=0))


def test_gemm_runs_te_linear_inside_the_autocast_of_its_api_shape(te: FakeTE) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # TE >= 2.9 deprecates fp8_autocast: not used there
        pipeline = teb.build_gemm(_ctx("fp8_tensorwise", fmt="e4m3"))
        out = pipeline.output()
    assert out.shape == (64, 128)
    expected = (_ctx("bf16").inputs["a"] @ _ctx("bf16").inputs["b"].t())
    assert compare(out, expected).sqnr_db > 20  # the weights were copied from B and the product is FP8's
    entry, recipe, enabled = te.state.regions[-1]
    assert entry == ("fp8_autocast" if te.version == OLD else "autocast") and enabled
    assert type(recipe).__name__ == "Float8CurrentScaling" and recipe.fp8_format.name == "E4M3"
    assert pipeline.extra["te_recipe"] == "Float8CurrentScaling"
    assert pipeline.extra["te_api"] == ("fp8_autocast (Transformer Engine <= 2.8)" if te.version == OLD
                                        else "autocast (Transformer Engine >= 2.9)")


@pytest.mark.parametrize("precision", ["fp8_delayed", "fp8_tensorwise", "fp8_blockwise", "mxfp8"])
@pytest.mark.parametrize("fmt", ["e4m3", "hybrid"])
def test_every_recipe_fp8bench_builds_is_one_te_accepts(te: FakeTE, precision: str, fmt: str) -> None:
    spec = teb.te_recipe_spec(resolve_precision(precision, RunOptions(fp8_format=fmt)))
    recipe = teb.TEApi().make_recipe(spec)
    assert type(recipe).__name__ == spec.cls and recipe.fp8_format.name == fmt.upper()


def test_fp8bench_refuses_before_te_what_te_would_reject(te: FakeTE) -> None:
    """Pure E5M2 and a K that is not a multiple of 16 are refused by fp8bench with its own reason, before TE is
    called; the fake (tests/fake_te.py, each rule from TE's source) shows that TE would have rejected both."""
    why = teb.precision_support(resolve_precision("fp8_delayed", RunOptions(fp8_format="e5m2")), Device("cuda", 0))
    assert why == "Transformer Engine rejects pure E5M2 training in every recipe; use e4m3 or hybrid"
    recipe = te.modules["transformer_engine.common.recipe"]
    with pytest.raises(AssertionError, match="pure E5M2"):
        recipe.DelayedScaling(fp8_format=recipe.Format.E5M2)
    with pytest.raises(Unsupported, match="TE DelayedScaling needs M, N, K multiples of 16; got K=40"):
        teb.build_gemm(_ctx("fp8_delayed", shape="16x64x40"))
    assert not te.state.regions  # refused before any autocast region was entered
    layer = te.te.Linear(40, 64, params_dtype=torch.bfloat16, device="cpu")
    region = (te.te.fp8_autocast(enabled=True, fp8_recipe=recipe.DelayedScaling()) if te.version == OLD
              else te.te.autocast(enabled=True, recipe=recipe.DelayedScaling()))
    with pytest.raises(AssertionError if te.version == OLD else ValueError, match="multiple of 16"), region:
        layer(torch.randn(16, 40, dtype=torch.bfloat16))


def test_te_refusal_on_this_gpu_skips_the_case_with_tes_reason(te: FakeTE) -> None:
    te.gpu.compute_capability = (9, 0)
    with pytest.raises(Unsupported, match="cannot run MXFP8BlockScaling on this GPU: .*10.0"):
        teb.build_gemm(_ctx("mxfp8", fmt="e4m3"))
    te.gpu.compute_capability = (8, 0)
    with pytest.raises(Unsupported, match="on this GPU: .*8.9"):
        teb.build_gemm(_ctx("fp8_delayed"))


def test_alignment_is_checked_per_recipe(te: FakeTE) -> None:
    with pytest.raises(Unsupported, match=r"multiples of 128; got M=64"):
        teb.build_gemm(_ctx("fp8_blockwise", shape="64x128x256", fmt="e4m3"))


def test_tes_own_shape_refusal_inside_a_model_is_a_skip(te: FakeTE, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where fp8bench does not pre-check a model's dimensions, TE's own refusal (tokens 2*3=6 are not a multiple
    of 8), an AssertionError before 2.9 and a ValueError since, skips the case with TE's message."""
    from fp8bench.workloads.attention import ATTENTION

    monkeypatch.setattr(teb, "model_dims", lambda workload, shape: {})  # leave the check to TE

    shape = ATTENTION.parse_shape("b=2,h=2,s=3,d=16")
    ctx = BuildContext("attention", shape, resolve_precision("fp8_delayed",
                                                             RunOptions(fp8_format="hybrid")), Device("cpu"),
                       ATTENTION.make_inputs(shape, Device("cpu"), seed=0))
    with pytest.raises(Unsupported, match="Transformer Engine refused fp8_delayed: .*multiple of 16"):
        teb.TE.build(ctx)


def test_float_precision_runs_with_the_autocast_disabled(te: FakeTE) -> None:
    teb.build_gemm(_ctx("bf16")).output()
    assert te.state.regions[-1][1:] == (None, False)


def test_converter_swaps_linears_and_runs_each_inside_the_region(te: FakeTE) -> None:
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Sequential(nn.Linear(64, 32, bias=False)))
    reference = [p.detach().clone() for p in model.parameters()]
    convert = teb.make_converter(resolve_precision("fp8_delayed",
                                                   RunOptions(fp8_format="hybrid")), {"tokens": 16, "hidden": 32})
    converted = convert(model)
    linears = [m for m in converted.modules() if type(m) is te.te.Linear]
    assert len(linears) == 2 and not any(type(m) is nn.Linear for m in converted.modules())
    assert all(torch.equal(a, b) for a, b in zip(reference, converted.parameters(), strict=True))
    converted(torch.randn(16, 32)).sum().backward()
    assert [r[1:] for r in te.state.regions[-2:]] == [(r[1], True) for r in te.state.regions[-2:]]
    assert all(type(r[1]).__name__ == "DelayedScaling" for r in te.state.regions[-2:])  # one region per call
    assert all(p.grad is not None for p in converted.parameters())


def test_model_workloads_build_with_te_layers(te: FakeTE) -> None:
    from fp8bench.workloads.attention import ATTENTION

    shape = ATTENTION.parse_shape("b=2,h=4,s=32,d=32")
    ctx = BuildContext("attention", shape, resolve_precision("fp8_delayed",
                                                             RunOptions(fp8_format="hybrid")), Device("cpu"),
                       ATTENTION.make_inputs(shape, Device("cpu"), seed=0))
    pipeline = teb.TE.build(ctx)
    assert torch.isfinite(pipeline.output().float()).all()
    assert pipeline.extra["te_recipe"] == "DelayedScaling"
    assert any(type(r[1]).__name__ == "DelayedScaling" and r[2] for r in te.state.regions)


def test_delayed_scaling_gemm_updates_its_scales(te: FakeTE) -> None:
    """TE updates DelayedScaling's amax history and scales when the outermost autocast exits, and only with grad
    enabled (TE 2.20.2 quantization.py autocast_exit; 2.8.0 fp8.py fp8_autocast_exit). A forward under
    torch.no_grad() would run with scale 1.0 forever."""
    ctx = _ctx("fp8_delayed", shape="64x128x256")
    pipeline = teb.build_gemm(ctx)
    for _ in range(3):
        pipeline.end_to_end()
    assert te.state.scale_updates >= 3
    (layer,) = te.state.linears
    scales = layer.fp8_meta["scaling_fwd"].scale
    amax_a = ctx.inputs["a"].bfloat16().abs().max().item()
    assert scales[0].item() == pytest.approx(448.0 / amax_a, rel=1e-2)  # E4M3 forward: 448 / amax of the input
    assert "amax and scale update at each autocast exit" in " ".join(pipeline.notes)


def test_fp32_is_refused_on_te_because_its_fp32_gemm_is_tf32(te: FakeTE) -> None:
    """TE's cuBLASLt GEMM runs an all-FP32 GEMM with CUBLAS_COMPUTE_32F_FAST_TF32 (transformer_engine/common/gemm/
    cublaslt_gemm.cu, cublas_gemm: "Use TF32 only for pure FP32 GEMM"): it is measured as tf32, against the TF32
    peak, and fp32 is refused with that reason."""
    why = teb.precision_support(resolve_precision("fp32"), Device("cuda", 0))
    assert why and "CUBLAS_COMPUTE_32F_FAST_TF32" in why and "tf32" in why
    assert teb.precision_support(resolve_precision("tf32"), Device("cuda", 0)) is None
    pipeline = teb.build_gemm(_ctx("tf32"))
    assert pipeline.output().dtype == torch.float32
    assert te.state.regions[-1][1:] == (None, False)
    assert any("TF32" in n for n in pipeline.notes)


@pytest.mark.gpu
def test_real_te_linear_on_cuda_matches_the_reference() -> None:
    device = Device("cuda", 0)
    why = teb.TE.availability(device)
    if why:
        pytest.skip(why)
    sh = GEMM.parse_shape("256x256x256")
    inputs = GEMM.make_inputs(sh, device, seed=0)
    ctx = BuildContext("gemm", sh, resolve_precision("fp8_delayed", RunOptions(fp8_format="hybrid")), device, inputs)
    try:
        pipeline = teb.build_gemm(ctx)
    except Unsupported as exc:  # a GPU older than Ada: TE's own reason
        pytest.skip(str(exc))
    from fp8bench.numerics.accuracy import compare

    assert compare(pipeline.output(), GEMM.reference(inputs)).sqnr_db > 20.0


def test_accumulation_switch_maps_to_tes_fprop_split_accumulator(te: FakeTE) -> None:
    """TE's fast accumulation is ``use_split_accumulator=False``; only Float8CurrentScaling has a recipe field."""
    default = teb.TEApi().make_recipe(teb.te_recipe_spec(resolve_precision("fp8_tensorwise",
                                                                           RunOptions(fp8_format="hybrid"))))
    assert default.fp8_gemm_fprop.use_split_accumulator is False  # TE's own default: fast in fprop
    full = teb.TEApi().make_recipe(teb.te_recipe_spec(resolve_precision("fp8_tensorwise",
                                                                        RunOptions(fp8_format="hybrid",
                                                                                   fast_accum=False))))
    assert full.fp8_gemm_fprop.use_split_accumulator is True
    assert full.fp8_gemm_dgrad.use_split_accumulator and full.fp8_gemm_wgrad.use_split_accumulator
    with pytest.raises(Unsupported, match="_2X_ACC_FPROP"):
        teb.te_recipe_spec(resolve_precision("fp8_delayed", RunOptions(fp8_format="hybrid", fast_accum=False)))
    # Block scaling accumulates in full precision whatever is asked (TE asserts it); the fake enforces it too.
    block = teb.TEApi().make_recipe(teb.te_recipe_spec(resolve_precision("fp8_blockwise", RunOptions(fast_accum=True))))
    assert block.fp8_gemm_fprop.use_split_accumulator
    recipe = te.modules["transformer_engine.common.recipe"]
    with pytest.raises(AssertionError, match="fprop needs use_split_accumulator"):
        recipe.Float8BlockScaling(fp8_gemm_fprop=recipe.MMParams(use_split_accumulator=False))


# --- scale factors: FP32, as fp8bench defines its FP8 recipes, not TE's power-of-two default --------------------

# Two quantizations of the same BF16 operands with the same FP32 scales agree but for values that land exactly on an
# FP8 rounding tie (common with BF16 inputs), which TE's ``x * (448 / amax)`` and fp8bench's ``x / (amax / 448)``
# may break apart: about 50 dB between the products at 128x256x512. Power-of-two block scales move every block's
# grid: about 25 dB. The line between them:
SAME_FP8_VALUES_DB = 40.0


def _fp32_scaled_product(ctx: BuildContext, precision: str) -> torch.Tensor:
    """The product fp8bench's recipe defines, on the BF16 operands TE is handed: FP32 ``amax / 448`` scales per
    tensor (tensorwise) or per 1x128 / 128x128 block (blockwise), E4M3 data (fp8bench.numerics.quantize)."""
    from fp8bench.core.formats import E4M3
    from fp8bench.numerics.quantize import quantize_blockwise, quantize_tensorwise

    a, b = (ctx.inputs[k].bfloat16().float() for k in ("a", "b"))
    if precision == "fp8_blockwise":
        qa, qb = quantize_blockwise(a, E4M3, (1, 128)), quantize_blockwise(b, E4M3, (128, 128))
    else:
        qa, qb = quantize_tensorwise(a, E4M3), quantize_tensorwise(b, E4M3)
    return (qa.dequantize() @ qb.dequantize().t()).bfloat16()


@pytest.mark.parametrize("precision", ["fp8_blockwise", "fp8_tensorwise"])
def test_scaled_recipes_run_with_fp32_scales_as_fp8bench_defines_them(te: FakeTE, precision: str) -> None:
    """Float8BlockScaling rounds its scales down to powers of two unless NVTE_FP8_BLOCK_SCALING_FP32_SCALES=1 was set
    when TE was imported (common/recipe/__init__.py, 2.3 to 2.20.2); fp8bench's fp8_blockwise, on every backend, uses
    FP32 amax/448 scales. TE must run the recipe the name promises, and the record says which scales ran."""
    ctx = _ctx(precision, shape="128x256x512", fmt="e4m3")
    pipeline = teb.build_gemm(ctx)
    out = pipeline.output()
    used = [q for q in te.state.quantizers if q["recipe"] == teb.te_recipe_spec(ctx.precision).cls]
    assert used and not any(q["force_pow_2_scales"] for q in used), used
    assert pipeline.scale_format == "fp32"
    assert compare(out, _fp32_scaled_product(ctx, precision)).sqnr_db > SAME_FP8_VALUES_DB  # 50 dB blockwise here


def test_model_workloads_run_tes_block_scaling_with_fp32_scales_too(te: FakeTE) -> None:
    from fp8bench.workloads.attention import ATTENTION

    shape = ATTENTION.parse_shape("b=2,h=4,s=64,d=32")  # 128 tokens, width 128: TE's block alignment
    ctx = BuildContext("attention", shape, resolve_precision("fp8_blockwise"), Device("cpu"),
                       ATTENTION.make_inputs(shape, Device("cpu"), seed=0))
    pipeline = teb.TE.build(ctx)
    pipeline.output()
    assert pipeline.scale_format == "fp32"
    assert te.state.quantizers and not any(q["force_pow_2_scales"] for q in te.state.quantizers)


def test_the_fake_rounds_block_scales_to_powers_of_two_as_te_does_by_default(te: FakeTE) -> None:
    """The fake's own default is TE's: a recipe made straight from the recipe module (as TE's users do) quantizes
    with power-of-two block scales, whose product differs from fp8bench's by a quantization error, not a rounding."""
    module = te.modules["transformer_engine.common.recipe"]
    recipe = module.Float8BlockScaling()
    assert recipe.fp8_quant_fwd_inp.power_2_scale and recipe.fp8_quant_fwd_weight.power_2_scale
    ctx = _ctx("fp8_blockwise", shape="128x256x512", fmt="e4m3")
    layer = te.te.Linear(512, 256, bias=False, params_dtype=torch.bfloat16, device="cpu")
    with torch.no_grad():
        layer.weight.copy_(ctx.inputs["b"].bfloat16())
    region = te.te.autocast(recipe=recipe) if te.version == NEW else te.te.fp8_autocast(fp8_recipe=recipe)
    with torch.no_grad(), region:
        out = layer(ctx.inputs["a"].bfloat16())
    assert all(q["force_pow_2_scales"] for q in te.state.quantizers)
    assert compare(out, _fp32_scaled_product(ctx, "fp8_blockwise")).sqnr_db < SAME_FP8_VALUES_DB  # 25 dB here


def test_tes_scale_switches_are_read_once_when_te_is_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    """TE evaluates NVTE_FP8_BLOCK_SCALING_FP32_SCALES and NVTE_FP8_CURRENT_SCALING_POWER_2_SCALES in its recipe
    classes' bodies: set before the import they change the defaults; set after, nothing. fp8bench therefore sets
    the QParams on each recipe object, whatever the environment said, and records the outcome."""
    monkeypatch.delenv("NVTE_FP8_BLOCK_SCALING_FP32_SCALES", raising=False)
    te = install(monkeypatch, NEW)
    module = te.modules["transformer_engine.common.recipe"]
    monkeypatch.setenv("NVTE_FP8_BLOCK_SCALING_FP32_SCALES", "1")  # too late: TE is imported
    assert module.Float8BlockScaling().fp8_quant_fwd_inp.power_2_scale
    assert module.Float8BlockScaling(use_f32_scales=True).fp8_quant_fwd_inp.power_2_scale  # a field nobody reads
    with pytest.raises(TypeError, match="unexpected keyword argument 'fp8_quant_fwd_inp'"):
        module.Float8BlockScaling(fp8_quant_fwd_inp=module.QParams())
    imported_with_it = install(monkeypatch, NEW, environ={"NVTE_FP8_BLOCK_SCALING_FP32_SCALES": "1"})
    assert not imported_with_it.modules["transformer_engine.common.recipe"].Float8BlockScaling(
    ).fp8_quant_fwd_inp.power_2_scale
    pow2_current = install(monkeypatch, NEW, environ={"NVTE_FP8_CURRENT_SCALING_POWER_2_SCALES": "1"})
    for precision in ("fp8_tensorwise", "fp8_blockwise"):
        recipe = teb.TEApi().make_recipe(teb.te_recipe_spec(resolve_precision(precision,
                                                                              RunOptions(fp8_format="e4m3"))))
        assert teb.scale_format(recipe) == "fp32"
        assert not any(getattr(recipe, role).power_2_scale for role in teb.QPARAM_ROLES)
    assert pow2_current.modules["transformer_engine.common.recipe"].Float8CurrentScaling().use_power_2_scales


# --- 4-bit: NVFP4BlockScaling -------------------------------------------------------------------------------------

def test_nvfp4_maps_to_nvfp4blockscaling_with_its_options() -> None:
    spec = teb.te_recipe_spec(resolve_precision("nvfp4"))
    assert (spec.cls, spec.check, spec.min_version, spec.alignment) == (
        "NVFP4BlockScaling", "is_nvfp4_available", (2, 8), 128)
    # TE's defaults (RHT and stochastic rounding on) are fp8bench's; 1x16 weight blocks as the other backends.
    assert spec.kwargs == {"fp4_format": "E2M1", "fp8_format": "E4M3", "disable_rht": False,
                           "disable_stochastic_rounding": False, "disable_2d_quantization": True}
    plain = teb.te_recipe_spec(resolve_precision("nvfp4", RunOptions(stochastic_rounding=False, rht=False)))
    assert plain.kwargs["disable_rht"] and plain.kwargs["disable_stochastic_rounding"]


def test_mxfp4_is_refused_because_te_has_no_such_recipe() -> None:
    with pytest.raises(Unsupported, match="no MXFP4 recipe"):
        teb.te_recipe_spec(resolve_precision("mxfp4"))
    assert "no MXFP4 recipe" in teb.precision_support(resolve_precision("mxfp4"), Device("cuda", 0))


def test_nvfp4_recipe_is_one_te_accepts_and_runs_on_10x_only(te: FakeTE) -> None:
    spec = teb.te_recipe_spec(resolve_precision("nvfp4"))
    recipe = teb.TEApi().make_recipe(spec)
    assert type(recipe).__name__ == "NVFP4BlockScaling" and recipe.fp4_format.name == "E2M1"
    assert recipe.disable_2d_quantization and not recipe.disable_rht
    module = te.modules["transformer_engine.common.recipe"]
    with pytest.raises(AssertionError, match="fp8_format must be E4M3"):
        module.NVFP4BlockScaling(fp8_format=module.Format.HYBRID)
    te.gpu.compute_capability = (9, 0)
    with pytest.raises(Unsupported, match="cannot run NVFP4BlockScaling on this GPU: .*10.0"):
        teb.build_gemm(_ctx("nvfp4", shape="128x128x256", fmt="e4m3"))
    te.gpu.compute_capability = (10, 0)
    with pytest.raises(Unsupported, match=r"multiples of 128; got M=64"):
        teb.build_gemm(_ctx("nvfp4", shape="64x128x256", fmt="e4m3"))
    pipeline = teb.build_gemm(_ctx("nvfp4", shape="128x128x256", fmt="e4m3"))
    pipeline.output()
    assert pipeline.extra["te_recipe"] == "NVFP4BlockScaling"
    assert type(te.state.regions[-1][1]).__name__ == "NVFP4BlockScaling"


def test_te_older_than_2_8_refuses_nvfp4(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(teb, "te_version", lambda: "2.7.0")
    assert "needs Transformer Engine 2.8+" in teb.precision_support(resolve_precision("nvfp4"), Device("cuda", 0))


# An environment that sets every recipe field TE defaults from the environment away from its documented default.
RECIPE_ENV = {"NVTE_BACKWARD_OVERRIDE": "dequantized", "NVTE_NVFP4_ROW_SCALED_ACTIVATION": "1",
              "NVTE_NVFP4_4OVER6": "all", "NVTE_NVFP4_4OVER6_E4M3_USE_256": "none",
              "NVTE_NVFP4_4OVER6_ERR_MODE": "MSE", "NVTE_NVFP4_DISABLE_2D_QUANTIZATION": "0"}
NEUTRAL = {"backward_override": None, "row_scaled_activation": False, "nvfp4_4over6": "none",
           "nvfp4_4over6_e4m3_use_256": "all", "nvfp4_4over6_err_mode": "MAE"}


@pytest.mark.parametrize("version", [OLD, NEW], ids=["te2.8", "te2.20"])
@pytest.mark.parametrize(("precision", "fmt", "cc"), [
    ("fp8_delayed", "hybrid", (9, 0)), ("fp8_tensorwise", "e4m3", (9, 0)), ("fp8_blockwise", "e4m3", (9, 0)),
    ("mxfp8", "e4m3", (10, 0)), ("nvfp4", "e4m3", (10, 0))])
def test_recipe_fields_te_reads_from_the_environment_are_pinned(monkeypatch, version, precision, fmt, cc) -> None:
    """TE defaults some recipe fields from environment variables read when it is imported (tests/fake_te.py,
    ENV_DEFAULTED_FIELDS): a user's NVTE_BACKWARD_OVERRIDE or NVFP4 4over6 setting would change what runs under
    an fp8bench precision's name. Every such field the installed release has is set explicitly."""
    from fake_te import FakeGpu

    if precision == "fp8_blockwise" and cc >= (10, 0):
        pytest.skip("block scaling runs on Hopper only here")
    te = install(monkeypatch, version, FakeGpu(cc), environ=RECIPE_ENV)
    teb.build_gemm(_ctx(precision, shape="128x128x256", fmt=fmt)).output()
    recipe = te.state.regions[-1][1]
    present = {f: getattr(recipe, f) for f in NEUTRAL if hasattr(recipe, f)}
    assert present == {f: NEUTRAL[f] for f in present}, f"environment leaked into {type(recipe).__name__}"
    if version == NEW:
        assert "backward_override" in present


def test_blockwise_is_skipped_on_blackwell_with_the_reason_and_doctor_says_so(monkeypatch) -> None:
    """TE 2.9+ accepts Float8BlockScaling on compute capability 10.0+ but emulates it with MXFP8 GEMMs there, and its
    quantizers then require power-of-two scales; fp8bench's fp8_blockwise has FP32 scales, so the case is skipped
    up front with that reason, and ``doctor`` lists the limit whatever the device it runs on."""
    from fake_te import FakeGpu
    from rich.console import Console

    from fp8bench.commands import doctor

    install(monkeypatch, NEW, FakeGpu((10, 0)))
    with pytest.raises(Unsupported, match="emulates Float8BlockScaling with MXFP8.*power-of-two scales"):
        teb.build_gemm(_ctx("fp8_blockwise", shape="128x128x256", fmt="e4m3"))
    install(monkeypatch, NEW, FakeGpu((9, 0)))
    teb.build_gemm(_ctx("fp8_blockwise", shape="128x128x256", fmt="e4m3"))  # Hopper: native, FP32 scales
    limits = doctor.vendor_limits()
    assert {"backend": "te", "precision": "fp8_blockwise", "where": "compute capability 10.0+",
            "reason": teb.BLACKWELL_BLOCKWISE} in limits
    console = Console(record=True, width=200)
    doctor.render_vendor_limits(limits, console)
    assert "te fp8_blockwise on compute capability 10.0+: skipped" in console.export_text()


@pytest.mark.parametrize("cc", [(9, 0), (10, 0), (10, 3), (12, 0)])
def test_blackwell_blockwise_pre_check_refuses_exactly_what_te_refuses(monkeypatch, cc) -> None:
    """fp8bench's pre-check (``plan_for``) against TE's own refusal (tests/fake_te.py: the block quantizers of TE
    2.9+ require power-of-two scales on compute capability 10.0+): with the pre-check bypassed, TE refuses the
    FP32-scaled recipe on exactly the devices where the pre-check skips it, and runs it everywhere else."""
    install(monkeypatch, NEW, FakeGpu(cc))
    ctx = _ctx("fp8_blockwise", shape="128x128x256", fmt="e4m3")
    try:
        teb.build_gemm(ctx)
        pre_check_skips = False
    except Unsupported as exc:
        assert str(exc) == teb.BLACKWELL_BLOCKWISE
        pre_check_skips = True
    monkeypatch.setattr(teb.TEApi, "compute_capability", lambda self: (9, 0))  # bypass the pre-check
    try:
        teb.build_gemm(ctx).output()
        te_refuses = False
    except Unsupported as exc:
        assert "power-of-two scales" in str(exc)
        te_refuses = True
    assert te_refuses == pre_check_skips == (cc >= (10, 0))


def test_te_block_quantizers_take_power_of_two_scales_on_blackwell(monkeypatch) -> None:
    """TE's default Float8BlockScaling (power-of-two scales) runs on compute capability 10.0 (TE 2.9+); the same
    recipe with FP32 scales is refused when the block quantizer runs, inside the forward."""
    fake = install(monkeypatch, NEW, FakeGpu((10, 0)))
    te, recipes = fake.te, fake.modules["transformer_engine.common.recipe"]
    layer = te.Linear(256, 128, bias=False, params_dtype=torch.bfloat16, device="cpu")
    x = torch.randn(128, 256, dtype=torch.bfloat16)
    recipe = recipes.Float8BlockScaling()
    with te.autocast(recipe=recipe):
        layer(x)
    teb.use_fp32_scales(recipe)
    with te.autocast(recipe=recipe), pytest.raises(RuntimeError, match="power-of-two scales"):
        layer(x)


def test_fp8_autocast_warns_deprecated_where_autocast_replaces_it(te: FakeTE) -> None:
    if te.version == OLD:
        pytest.skip("TE 2.8 has only fp8_autocast, undeprecated")
    with pytest.warns(DeprecationWarning, match="fp8_autocast"):
        te.te.fp8_autocast(enabled=True)
