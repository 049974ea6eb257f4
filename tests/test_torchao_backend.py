"""torchao backend: recipe mapping to Float8LinearConfig and real Float8Linear runs on the CPU; MXFP8 training through
the installed torchao (>= 0.17) and through a fake of the older API (tests/fake_torchao.py)."""

from __future__ import annotations

import sys

import fake_torchao
import pytest
import torch
from torch import nn

pytest.importorskip("torchao.float8")

from fp8bench.core.devices import Device  # noqa: E402
from fp8bench.core.pipeline import BuildContext, Unsupported  # noqa: E402
from fp8bench.core.precisions import RunOptions, resolve_precision  # noqa: E402
from fp8bench.kernels import torchao_backend as tab  # noqa: E402
from fp8bench.numerics.accuracy import compare  # noqa: E402
from fp8bench.workloads.gemm import GEMM  # noqa: E402


@pytest.mark.parametrize(("precision", "fmt", "wgrad_hp", "name"), [
    ("fp8_tensorwise", "hybrid", False, "tensorwise"),
    ("fp8_tensorwise", "e4m3", False, "tensorwise"),
    ("fp8_rowwise", "e4m3", False, "rowwise"),
    ("fp8_rowwise", "e4m3", True, "rowwise_with_gw_hp"),
    ("mxfp8", "e4m3", False, "mxfp8"),
    ("nvfp4", "e4m3", False, "nvfp4"),
    ("mxfp4", "e4m3", False, "mxfp4"),
])
def test_recipe_names(precision, fmt, wgrad_hp, name) -> None:
    assert tab.recipe_name(resolve_precision(precision, RunOptions(fp8_format=fmt)), wgrad_hp) == name


@pytest.mark.parametrize(("precision", "fmt", "match"), [
    ("fp8_delayed", "e4m3", "no delayed scaling"),
    ("fp8_blockwise", "e4m3", "no 1x128/128x128 blockwise recipe"),
    ("fp8_rowwise", "hybrid", "e4m3 only"),
    ("bf16", "e4m3", "plain nn.Linear"),
])
def test_refusals_name_the_reason(precision, fmt, match) -> None:
    with pytest.raises(Unsupported, match=match):
        tab.recipe_name(resolve_precision(precision, RunOptions(fp8_format=fmt)))


def test_tensorwise_hybrid_is_torchaos_recipe_and_e4m3_retargets_every_cast() -> None:
    from torchao.float8 import Float8LinearConfig

    hybrid = tab.torchao_config(resolve_precision("fp8_tensorwise", RunOptions(fp8_format="hybrid")))
    assert hybrid == Float8LinearConfig.from_recipe_name("tensorwise")
    assert hybrid.cast_config_grad_output.target_dtype == torch.float8_e5m2
    e4m3 = tab.torchao_config(resolve_precision("fp8_tensorwise", RunOptions(fp8_format="e4m3")))
    assert e4m3.cast_config_grad_output.target_dtype == torch.float8_e4m3fn
    assert e4m3.cast_config_input.target_dtype == torch.float8_e4m3fn


def test_rowwise_with_gw_hp_disables_the_weight_gradient_cast() -> None:
    from torchao.float8 import ScalingType

    cfg = tab.torchao_config(resolve_precision("fp8_rowwise"), wgrad_hp=True)
    assert cfg.cast_config_input_for_grad_weight.scaling_type is ScalingType.DISABLED


def test_convert_swaps_aligned_linears_only() -> None:
    from torchao.float8.float8_linear import Float8Linear

    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 24))  # 24 is not a multiple of 16
    converted = tab.convert(model, resolve_precision("fp8_rowwise"))
    kinds = [type(m) for m in converted if isinstance(m, nn.Linear)]
    assert kinds == [Float8Linear, nn.Linear]


def _build(precision: str, shape: str = "64x96x128", fmt: str = "e4m3") -> tuple:
    sh = GEMM.parse_shape(shape)
    inputs = GEMM.make_inputs(sh, Device("cpu"), seed=0)
    ctx = BuildContext("gemm", sh, resolve_precision(precision, RunOptions(fp8_format=fmt)), Device("cpu"), inputs)
    return tab.build_gemm(ctx), GEMM.reference(inputs)


@pytest.mark.parametrize("precision", ["fp8_rowwise", "fp8_tensorwise"])
def test_gemm_as_a_float8_linear_is_as_accurate_as_e4m3_allows(precision: str) -> None:
    pipeline, ref = _build(precision)
    out = pipeline.output()
    assert out.dtype == torch.bfloat16 and out.shape == (64, 96)
    num = compare(out, ref)
    # Two E4M3 operands (3 mantissa bits): about 28 dB; torchao's rowwise power-of-two scales cost up to ~3 dB.
    assert 22.0 < num.sqnr_db < 35.0
    assert pipeline.phases == {} and pipeline.prequantized_phases == ()
    assert pipeline.extra["torchao_recipe"] == tab.recipe_name(resolve_precision(precision))


def test_mxfp8_is_refused_on_the_cpu_by_the_capability_matrix() -> None:
    why = tab.TORCHAO.unsupported_reason("gemm", resolve_precision("mxfp8"), Device("cpu"))
    assert why and "tensorwise and rowwise" in why


# -- MXFP8 training: torchao >= 0.17 (the installed release, for real) and <= 0.16 (tests/fake_torchao.py) --------

def _mx_ctx(shape: str = "64x96x128") -> BuildContext:
    sh = GEMM.parse_shape(shape)
    return BuildContext("gemm", sh, resolve_precision("mxfp8"), Device("cpu"), GEMM.make_inputs(sh, Device("cpu"), 0))


def test_mxfp8_conversion_is_recognised_by_the_weights_tensor_class() -> None:
    """torchao >= 0.17 keeps the ``nn.Linear`` and wraps its weight in ``MXFP8TrainingWeightWrapperTensor``
    (``prototype/moe_training/config.py`` ``_moe_training_transform`` -> ``_swap_params``): the backend must see
    the conversion and reach the forward, where torchao itself refuses the CPU."""
    with pytest.raises(Unsupported) as refused:
        tab.build_gemm(_mx_ctx())
    assert "left a 96x128 weight in high precision" not in str(refused.value)
    assert str(refused.value).startswith("torchao mxfp8 failed on cpu: ")  # torchao's own refusal, from forward
    api = tab.mx_api()
    assert api.shape == "MXFP8TrainingOpConfig (torchao >= 0.17)" and api.recipe == "mxfp8_rceil"
    layer = nn.Linear(128, 96, bias=False, dtype=torch.bfloat16)
    assert not api.converted(layer)
    converted = tab.convert(layer, resolve_precision("mxfp8"))
    assert type(converted) is nn.Linear and type(converted.weight).__name__ == "MXFP8TrainingWeightWrapperTensor"
    assert api.converted(converted)


@pytest.mark.parametrize(("version", "recipe"), [(fake_torchao.OLD, "mxfp8_cublas_rceil"),
                                                 (fake_torchao.OLDEST, "mxfp8_cublas")])
def test_mxfp8_through_the_older_mxlinearconfig_api(monkeypatch, version, recipe) -> None:
    """torchao <= 0.16: MXLinearConfig; quantize_ turns the nn.Linear into an MXLinear in place. The backend finds
    the API, picks the RCEIL recipe where it exists, sees the conversion, and reaches torch._scaled_mm with E8M0
    block scales, which this CPU refuses with ATen's own message."""
    modules = fake_torchao.install(monkeypatch, version)
    api = tab.mx_api()
    assert (api.shape, api.recipe) == ("MXLinearConfig (torchao <= 0.16)", recipe)
    layer = tab.convert(nn.Linear(128, 96, bias=False, dtype=torch.bfloat16), resolve_precision("mxfp8"))
    assert type(layer) is modules["torchao.prototype.mx_formats.mx_linear"].MXLinear and api.converted(layer)
    with pytest.raises(Unsupported, match="^torchao mxfp8 failed on cpu: Invalid scaling configuration"):
        tab.build_gemm(_mx_ctx())


def test_the_older_mx_fake_rejects_what_torchao_rejects(monkeypatch) -> None:
    modules = fake_torchao.install(monkeypatch, fake_torchao.OLDEST)
    config_cls = modules["torchao.prototype.mx_formats"].MXLinearConfig
    with pytest.raises(AssertionError, match="unknown recipe"):
        config_cls.from_recipe_name("mxfp8_cublas_rceil")  # added in 0.13
    with pytest.raises(TypeError):
        config_cls(scale_calculation_mode="rceil")  # not a field of this release
    layer = tab.convert(nn.Linear(40, 32, bias=False, dtype=torch.bfloat16), resolve_precision("mxfp8"))
    with pytest.raises(AssertionError, match="block_size 32"):
        layer(torch.randn(8, 40, dtype=torch.bfloat16))
    emulated = modules["torchao.prototype.mx_formats.mx_linear"].MXLinear.from_float(
        nn.Linear(64, 32, bias=False, dtype=torch.bfloat16), config_cls.from_recipe_name("mxfp8_emulated"))
    x = torch.randn(16, 64, dtype=torch.bfloat16)
    assert compare(emulated(x), x.float() @ emulated.weight.detach().float().t()).sqnr_db > 20


def test_no_mxfp8_api_at_all_is_a_refusal_naming_both(monkeypatch) -> None:
    for name in ("torchao.prototype.moe_training.config", "torchao.prototype.mx_formats"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(Unsupported, match="neither MXFP8TrainingOpConfig.*nor MXLinearConfig"):
        tab.mx_api()


# --- 4-bit: torchao's inference configs -------------------------------------------------------------------------

def test_four_bit_recipes_are_refused_off_compute_capability_10_and_on_training_workloads() -> None:
    from fp8bench.core.plugins import BACKENDS

    cpu = Device("cpu")
    for name in ("nvfp4", "mxfp4"):
        precision = resolve_precision(name)
        assert "no FP4 kernel" in tab.precision_support(precision, cpu)
        assert "inference-only" in tab.model_support(precision, cpu)
        assert "inference-only" in BACKENDS.get("torchao").unsupported_reason("transformer_step", precision, cpu)
    with pytest.raises(ValueError, match="fp4_api"):
        tab.torchao_config(resolve_precision("nvfp4"))


def test_mxfp4_config_quantizes_weights_to_e2m1_mxtensors() -> None:
    """torchao's MXDynamicActivationMXWeightConfig with FP4 dtypes: its weight becomes an MXTensor of E2M1 data."""
    pytest.importorskip("torchao.prototype.mx_formats")
    api = tab.fp4_api("mxfp4")
    assert api.config.activation_dtype == api.config.weight_dtype == torch.float4_e2m1fn_x2
    assert api.config.block_size == 32 and "MXDynamicActivationMXWeightConfig" in api.shape
    model = nn.Sequential(nn.Linear(64, 32, bias=False, dtype=torch.bfloat16))
    converted = tab.convert(model, resolve_precision("mxfp4"))
    assert tab.low_precision_layers(converted, resolve_precision("mxfp4")) == 1
    assert "MXTensor" in type(converted[0].weight).__name__


def test_nvfp4_config_is_torchaos_two_level_format() -> None:
    pytest.importorskip("torchao.prototype.mx_formats")
    api = tab.fp4_api("nvfp4")
    assert type(api.config).__name__ == "NVFP4DynamicActivationNVFP4WeightConfig"
    assert api.config.use_dynamic_per_tensor_scale and not api.config.use_triton_kernel


def test_missing_four_bit_configs_are_a_refusal_naming_them(monkeypatch) -> None:
    import importlib

    real = importlib.import_module

    def without_mx_formats(name: str, *args, **kwargs):
        if name.startswith("torchao.prototype.mx_formats"):
            raise ImportError(f"No module named {name!r}")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(tab.importlib, "import_module", without_mx_formats)
    with pytest.raises(Unsupported, match="torchao has no nvfp4 config here"):
        tab.fp4_api("nvfp4")


@pytest.mark.parametrize(("precision", "wgrad_hp", "scales"), [
    ("fp8_tensorwise", False, "fp32"), ("fp8_rowwise", False, "pow2"), ("fp8_rowwise", True, "pow2"),
    ("mxfp8", False, None)])
def test_the_record_states_the_scale_format_torchaos_recipe_runs(precision, wgrad_hp, scales) -> None:
    """torchao's rowwise recipes round scales down to powers of two; fp8bench's fp8_rowwise does not, so a torchao
    rowwise record must say so, or it would be compared with the torch backend's as one recipe."""
    assert tab.scale_format(resolve_precision(precision), wgrad_hp) == scales
    if precision != "mxfp8":
        pipeline, _ = _build(precision)
        assert pipeline.scale_format == tab.scale_format(resolve_precision(precision))


@pytest.mark.parametrize("name", ["nvfp4", "mxfp4"])
def test_four_bit_gemm_quantizes_the_weight_in_every_timed_call(monkeypatch, name) -> None:
    """torchao's 4-bit configs quantize the weight once, in ``quantize_`` (tests/fake_torchao.py); every other
    backend quantizes B in each end-to-end call. The torchao figure must hold the same work."""
    counts = fake_torchao.install_fp4(monkeypatch)
    sh = GEMM.parse_shape("32x64x128")
    ctx = BuildContext("gemm", sh, resolve_precision(name), Device("cpu"), GEMM.make_inputs(sh, Device("cpu"), seed=0))
    pipeline = tab.build_gemm(ctx)
    weights, activations = counts.weight_quantizations, counts.activation_quantizations
    first = pipeline.end_to_end()
    second = pipeline.end_to_end()
    assert counts.activation_quantizations - activations == 2
    assert counts.weight_quantizations - weights == 2, "the end-to-end call did not quantize B"
    assert torch.equal(first, second)
    expected = ctx.inputs["a"].float() @ ctx.inputs["b"].float().t()
    assert compare(first, expected).sqnr_db > 10.0  # 4-bit elements: about 15-20 dB on Gaussian data
    assert "weight quantized in every call" in " ".join(pipeline.notes)


# -- the 4-bit fake against the installed torchao: the same refusals, the same re-quantization ----------------------

FP4 = torch.float4_e2m1fn_x2


def _fp4_apis(monkeypatch) -> dict[str, dict[str, object]]:
    """The installed torchao's 4-bit configs and ``quantize_``, and the fake's (a compute capability 10.0 device);
    torchao's NVFP4 transform is told it runs on sm100 (its only device check) so that both get past it."""
    import torchao.prototype.mx_formats as mx
    import torchao.prototype.mx_formats.inference_workflow as workflow
    from torchao.quantization import quantize_

    monkeypatch.setattr(workflow, "is_sm_at_least_100", lambda: True)
    fake = fake_torchao.make_fp4_modules(fake_torchao.Fp4Counts(), capability=(10, 0))
    fake_mx = fake["torchao.prototype.mx_formats"]
    return {"torchao": {"mx": mx, "quantize_": quantize_},
            "fake": {"mx": fake_mx, "quantize_": fake["torchao.quantization"].quantize_}}


@pytest.mark.parametrize(("config", "kwargs", "refusal"), [
    ("MXDynamicActivationMXWeightConfig", {"activation_dtype": FP4, "weight_dtype": torch.float8_e4m3fn},
     AssertionError),
    ("MXDynamicActivationMXWeightConfig", {"activation_dtype": torch.int8, "weight_dtype": torch.int8},
     AssertionError),
    ("MXDynamicActivationMXWeightConfig", {"block_size": 16, "activation_dtype": FP4, "weight_dtype": FP4}, None),
    ("MXDynamicActivationMXWeightConfig", {"bogus": 1}, TypeError),
    ("NVFP4DynamicActivationNVFP4WeightConfig", {"step": "bogus"}, ValueError),
    ("NVFP4DynamicActivationNVFP4WeightConfig", {"use_triton_kernel": False}, None),
])
def test_fake_fp4_configs_refuse_what_torchao_refuses(monkeypatch, config, kwargs, refusal) -> None:
    """Each config's ``__post_init__`` (tests/fake_torchao.py): the fake refuses exactly what the installed torchao
    refuses, with the same exception type."""
    for api in _fp4_apis(monkeypatch).values():
        cls = getattr(api["mx"], config)
        if refusal is None:
            cls(**kwargs)
        else:
            with pytest.raises(refusal):
                cls(**kwargs)


@pytest.mark.parametrize(("name", "refusal", "match"), [("nvfp4", NotImplementedError, "aten.abs"),
                                                        ("mxfp4", AssertionError, "unsupported")])
def test_fake_quantizes_a_quantized_weight_again_as_torchao_does(monkeypatch, name, refusal, match) -> None:
    """``quantize_``'s default filter takes every ``nn.Linear`` whatever its weight (it never checks the dtype, and
    excludes no 4-bit weight type), so it takes the layer again; the BF16 that torchao's 4-bit weights report gets
    the quantized weight past MX's bf16 assert, and the transform fails inside the quantizer. The
    fake must fail there too, with torchao's exception, so that a pipeline that forgets to restore the BF16 weight
    fails against the fake as it would against torchao."""
    for side, api in _fp4_apis(monkeypatch).items():
        mx = api["mx"]
        config = (mx.NVFP4DynamicActivationNVFP4WeightConfig(use_triton_kernel=False) if name == "nvfp4" else
                  mx.MXDynamicActivationMXWeightConfig(activation_dtype=FP4, weight_dtype=FP4))
        layer = nn.Linear(64, 32, bias=False, dtype=torch.bfloat16)
        api["quantize_"](layer, config)
        assert layer.weight.dtype == torch.bfloat16, side
        assert type(layer.weight) is not nn.Parameter, side
        with pytest.raises(refusal, match=match):
            api["quantize_"](layer, config)


@pytest.mark.parametrize("capability", [(9, 0), None])
def test_nvfp4_is_refused_below_sm100_as_torchao_asserts(monkeypatch, capability) -> None:
    """torchao's NVFP4 transform asserts compute capability 10.0+ (tests/fake_torchao.py); the refusal reaches the
    record as torchao's own reason. MXFP4's transform has no device check (the GEMM is the device's to refuse)."""
    fake_torchao.install_fp4(monkeypatch, capability=capability)
    sh = GEMM.parse_shape("32x64x128")
    ctx = BuildContext("gemm", sh, resolve_precision("nvfp4"), Device("cpu"),
                       GEMM.make_inputs(sh, Device("cpu"), seed=0))
    with pytest.raises(Unsupported, match="AssertionError: .*sm100"):
        tab.build_gemm(ctx)


def test_fake_fp4_configs_need_no_torchao_newer_than_the_floor(monkeypatch) -> None:
    """``QuantizationStep`` first ships in torchao 0.16; the fake's configs must build with 0.10-0.15 installed, and
    a ``step`` outside {prepare, convert} is still a ``ValueError``."""
    monkeypatch.setitem(sys.modules, "torchao.quantization.quantize_.common.quantization_step", None)
    fake = fake_torchao.make_fp4_modules(fake_torchao.Fp4Counts())
    config_cls = fake["torchao.prototype.mx_formats"].NVFP4DynamicActivationNVFP4WeightConfig
    assert config_cls(step="prepare").use_dynamic_per_tensor_scale is False
    with pytest.raises(ValueError, match="bogus"):
        config_cls(step="bogus")


@pytest.mark.parametrize("kwargs", [
    {"activation_dtype": torch.float8_e4m3fn, "weight_dtype": torch.float8_e4m3fn},
    {"activation_dtype": FP4, "weight_dtype": FP4, "block_size": 16}])
def test_fake_mx_refuses_the_configs_it_does_not_model(kwargs) -> None:
    """The fake's MX quantizer is MXFP4 with 32-element blocks, the only MX config fp8bench passes; any other
    config must be refused by name rather than quantized as MXFP4."""
    fake = fake_torchao.make_fp4_modules(fake_torchao.Fp4Counts())
    config = fake["torchao.prototype.mx_formats"].MXDynamicActivationMXWeightConfig(**kwargs)
    with pytest.raises(AssertionError, match="models MXFP4 with 32-element blocks only"):
        fake["torchao.quantization"].quantize_(nn.Linear(64, 32, bias=False, dtype=torch.bfloat16), config)


def test_fake_nvfp4_takes_the_weight_amax_only_with_the_dynamic_per_tensor_scale(monkeypatch) -> None:
    """torchao runs ``torch.max(torch.abs(weight))`` only when ``use_dynamic_per_tensor_scale`` is set
    (``inference_workflow.py``); with it off, the fake must not touch the weight's abs/max, and it refuses the
    config by name, since it quantizes NVFP4 with a per-tensor scale only."""
    fake = fake_torchao.make_fp4_modules(fake_torchao.Fp4Counts())
    config = fake["torchao.prototype.mx_formats"].NVFP4DynamicActivationNVFP4WeightConfig(
        use_triton_kernel=False, use_dynamic_per_tensor_scale=False)
    layer = nn.Linear(64, 32, bias=False, dtype=torch.bfloat16)
    seen: list[str] = []
    real_abs = torch.abs
    monkeypatch.setattr(torch, "abs", lambda t: seen.append("abs") or real_abs(t))
    with pytest.raises(AssertionError, match="use_dynamic_per_tensor_scale"):
        fake["torchao.quantization"].quantize_(layer, config)  # numerics without the tensor scale: not modelled
    assert seen == []
