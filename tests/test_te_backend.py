"""Transformer Engine backend: recipe mapping and availability logic, without TE installed.

TE cannot be imported without CUDA, so the vendor boundary (:class:`TEApi`) is replaced by a fake that records
what fp8bench asks of it. The fake stands in for TE only; the mapping, checks and pipeline code are the real ones.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch
from torch import nn

from fp8bench.devices import Device
from fp8bench.kernels import te_backend as teb
from fp8bench.pipeline import BuildContext, Unsupported
from fp8bench.recipes import resolve_precision
from fp8bench.workloads.gemm import GEMM


@pytest.mark.parametrize(("precision", "fmt", "cls", "check"), [
    ("fp8_delayed", "hybrid", "DelayedScaling", "is_fp8_available"),
    ("fp8_tensorwise", "e4m3", "Float8CurrentScaling", "is_fp8_available"),
    ("fp8_blockwise", "e4m3", "Float8BlockScaling", "is_fp8_block_scaling_available"),
    ("mxfp8", "e4m3", "MXFP8BlockScaling", "is_mxfp8_available"),
])
def test_recipe_mapping(precision: str, fmt: str, cls: str, check: str) -> None:
    spec = teb.te_recipe_spec(resolve_precision(precision, fmt))
    assert spec is not None and spec.cls == cls and spec.check == check
    assert spec.kwargs["fp8_format"] == fmt.upper()


def test_delayed_carries_history_and_margin() -> None:
    spec = teb.te_recipe_spec(resolve_precision("fp8_delayed", "hybrid", amax_history_len=64, margin=1))
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
        teb.te_recipe_spec(resolve_precision(precision, fmt))
    assert match in teb.precision_support(resolve_precision(precision, fmt), Device("cuda", 0))


def test_float_precisions_run_with_autocast_off_but_tf32_is_refused() -> None:
    assert teb.te_recipe_spec(resolve_precision("bf16")) is None
    assert "TF32" in teb.precision_support(resolve_precision("tf32"), Device("cuda", 0))


def test_old_te_refuses_newer_recipes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(teb, "installed_version", lambda name: "2.1.0")
    why = teb.precision_support(resolve_precision("fp8_tensorwise"), Device("cuda", 0))
    assert why == "Float8CurrentScaling needs Transformer Engine 2.2+, installed 2.1.0"
    assert teb.precision_support(resolve_precision("fp8_delayed", "hybrid"), Device("cuda", 0)) is None


def test_backend_is_unavailable_on_the_cpu() -> None:
    assert teb.TE.unsupported_reason("gemm", resolve_precision("fp8_delayed", "hybrid"), Device("cpu")) == \
        "backend te unavailable: Transformer Engine runs on CUDA devices only"


def test_real_import_failure_becomes_a_refusal() -> None:
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception:
        with pytest.raises(Unsupported, match="transformer_engine.pytorch import failed"):
            teb.TEApi()
    else:
        pytest.skip("Transformer Engine is importable here")


# --- a fake TE at the vendor boundary --------------------------------------------------------------------------

class FakeTELinear(nn.Linear):
    """Stands in for te.Linear (a distinct type, so a swap is visible)."""


class FakeTE(teb.TEApi):
    """Records recipes, autocast regions and support queries; its Linear is torch's."""

    def __init__(self, unsupported: dict[str, str] | None = None) -> None:
        self.unsupported = unsupported or {}
        self.regions: list[tuple[str | None, bool]] = []
        self.made: list[tuple[str, dict[str, Any]]] = []

    def make_recipe(self, spec: teb.TERecipeSpec) -> Any:
        self.made.append((spec.cls, spec.kwargs))
        return spec.cls

    def support_reason(self, spec: teb.TERecipeSpec) -> str | None:
        return self.unsupported.get(spec.check)

    def autocast(self, recipe: Any, enabled: bool = True) -> contextlib.AbstractContextManager[Any]:
        self.regions.append((recipe, enabled))
        return contextlib.nullcontext()

    def linear(self, in_features: int, out_features: int, *, bias: bool, dtype: torch.dtype,
               device: torch.device) -> nn.Module:
        return FakeTELinear(in_features, out_features, bias=bias, dtype=dtype, device=device)


@pytest.fixture
def fake_te():
    fake = FakeTE()
    previous = teb.set_api_factory(lambda: fake)
    yield fake
    teb.set_api_factory(previous)


def _ctx(precision: str, shape: str = "64x128x256", fmt: str = "hybrid") -> BuildContext:
    sh = GEMM.parse_shape(shape)
    return BuildContext("gemm", sh, resolve_precision(precision, fmt), Device("cpu"),
                        GEMM.make_inputs(sh, Device("cpu"), seed=0))


def test_gemm_pipeline_runs_the_layer_inside_the_recipe_region(fake_te: FakeTE) -> None:
    ctx = _ctx("fp8_delayed")
    pipeline = teb.build_gemm(ctx)
    out = pipeline.output()
    assert out.shape == (64, 128)
    expected = (ctx.inputs["a"].bfloat16() @ ctx.inputs["b"].bfloat16().t()).float()
    assert torch.allclose(out.float(), expected, rtol=2e-2, atol=2e-2)  # the weights were copied from B
    assert fake_te.made[0][0] == "DelayedScaling"
    assert fake_te.regions[-1] == ("DelayedScaling", True)
    assert pipeline.extra["te_recipe"] == "DelayedScaling"


def test_float_precision_runs_with_the_region_disabled(fake_te: FakeTE) -> None:
    teb.build_gemm(_ctx("bf16")).output()
    assert fake_te.regions[-1] == (None, False) and fake_te.made == []


def test_te_refusal_on_this_gpu_skips_the_case_with_tes_reason(fake_te: FakeTE) -> None:
    fake_te.unsupported["is_mxfp8_available"] = "MXFP8 is not supported on 9.0"
    with pytest.raises(Unsupported, match="cannot run MXFP8BlockScaling on this GPU: MXFP8 is not supported"):
        teb.build_gemm(_ctx("mxfp8", fmt="e4m3"))


def test_alignment_is_checked_per_recipe(fake_te: FakeTE) -> None:
    with pytest.raises(Unsupported, match=r"multiples of 128; got M=64"):
        teb.build_gemm(_ctx("fp8_blockwise", shape="64x128x256", fmt="e4m3"))


def test_converter_swaps_linears_and_runs_each_inside_the_region(fake_te: FakeTE) -> None:
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Sequential(nn.Linear(64, 32, bias=False)))
    reference = [p.detach().clone() for p in model.parameters()]
    convert = teb.make_converter(resolve_precision("fp8_delayed", "hybrid"), {"tokens": 16, "hidden": 32})
    converted = convert(model)
    linears = [m for m in converted.modules() if isinstance(m, nn.Linear)]
    assert len(linears) == 2 and all(type(m) is FakeTELinear for m in linears)
    assert all(torch.equal(a, b) for a, b in zip(reference, converted.parameters(), strict=True))
    converted(torch.randn(16, 32)).sum().backward()
    assert fake_te.regions[-2:] == [("DelayedScaling", True)] * 2  # one region per linear call
    assert all(p.grad is not None for p in converted.parameters())


def test_model_workloads_build_with_te_layers(fake_te: FakeTE) -> None:
    from fp8bench.workloads.attention import ATTENTION

    shape = ATTENTION.parse_shape("b=2,h=4,s=32,d=32")
    ctx = BuildContext("attention", shape, resolve_precision("fp8_delayed", "hybrid"), Device("cpu"),
                       ATTENTION.make_inputs(shape, Device("cpu"), seed=0))
    pipeline = teb.TE.build(ctx)
    out = pipeline.output()
    assert torch.isfinite(out.float()).all()
    assert pipeline.extra["te_recipe"] == "DelayedScaling"
    assert ("DelayedScaling", True) in fake_te.regions


@pytest.mark.gpu
def test_real_te_linear_on_cuda_matches_the_reference() -> None:
    from fp8bench.capabilities import backend_reason

    device = Device("cuda", 0)
    why = backend_reason("te", device)
    if why:
        pytest.skip(why)
    sh = GEMM.parse_shape("256x256x256")
    inputs = GEMM.make_inputs(sh, device, seed=0)
    ctx = BuildContext("gemm", sh, resolve_precision("fp8_delayed", "hybrid"), device, inputs)
    try:
        pipeline = teb.build_gemm(ctx)
    except Unsupported as exc:  # a GPU older than Ada: TE's own reason
        pytest.skip(str(exc))
    from fp8bench.numerics import compare

    assert compare(pipeline.output(), GEMM.reference(inputs)).sqnr_db > 20.0
