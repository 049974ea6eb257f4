"""The Triton kernels against fp8bench's shared quantizers and the emulated GEMM.

On a machine without CUDA the kernels run under Triton's interpreter (correctness only). Shapes are small and odd
(not multiples of any tile) so that every masked edge is exercised.
"""

from __future__ import annotations

import fake_triton_dot
import pytest
import torch

from fp8bench.core.devices import Device
from fp8bench.core.formats import E4M3, E5M2, ElementFormat
from fp8bench.core.pipeline import BuildContext
from fp8bench.core.plugins import BACKENDS, load_all
from fp8bench.core.precisions import resolve_precision
from fp8bench.numerics import quantize as ref
from fp8bench.workloads.gemm import GEMM

tk = pytest.importorskip("fp8bench.kernels.triton_kernels")
if tk.TRITON_IMPORT_ERROR:
    pytest.skip(tk.TRITON_IMPORT_ERROR, allow_module_level=True)

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
FORMATS = [E4M3, E5M2]


def _bf16(rows: int, cols: int, seed: int, scale: float = 3.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=gen) * scale
    x[0, 0] = 0.0  # an exact zero must stay zero
    return x.bfloat16().to(DEVICE)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.view(torch.uint8).cpu(), b.view(torch.uint8).cpu())


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_tensorwise_matches_shared_quantizer_bit_for_bit(fmt: ElementFormat) -> None:
    x = _bf16(37, 301, seed=1)
    q, amax = tk.quantize_tensorwise(x, fmt)
    r = ref.quantize_tensorwise(x, fmt)
    assert amax.item() == x.float().abs().max().item()
    assert torch.equal(q.scale.cpu(), r.scale.cpu())
    assert _same_bits(q.data, r.data)


def test_tensorwise_with_given_scale_saturates_like_the_reference() -> None:
    x = _bf16(29, 67, seed=2)
    scale = torch.tensor(x.float().abs().max().item() / 448.0 / 4.0)  # 4x too small: the top values overflow
    q, amax = tk.quantize_tensorwise(x, E4M3, scale)
    r = ref.quantize_tensorwise(x, E4M3, scale)
    assert _same_bits(q.data, r.data)
    assert q.data.float().abs().max().item() == 448.0  # saturated, not NaN
    assert amax.item() == x.float().abs().max().item()  # still reported for the delayed history


def test_tensorwise_margin_matches_delayed_first_call() -> None:
    x = _bf16(19, 45, seed=3)
    q, _ = tk.quantize_tensorwise(x, E4M3, margin=2)
    expected = ref.scale_from_amax(x.abs().amax(), E4M3, margin=2)
    assert torch.equal(q.scale.cpu(), expected.cpu())


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_rowwise_matches_shared_quantizer_bit_for_bit(fmt: ElementFormat) -> None:
    x = _bf16(37, 301, seed=4)
    x[5] = 0.0  # an all-zero row gets the floored scale, not a division by zero
    q = tk.quantize_rowwise(x, fmt)
    r = ref.quantize_rowwise(x, fmt)
    assert q.scale.shape == (37, 1)
    assert torch.equal(q.scale.cpu(), r.scale.cpu())
    assert _same_bits(q.data, r.data)
    assert torch.isfinite(q.data.float()).all()


@pytest.mark.parametrize("block", [(1, 128), (128, 128)], ids=["1x128", "128x128"])
def test_blockwise_matches_shared_quantizer_bit_for_bit(block: tuple[int, int]) -> None:
    rows = 37 if block[0] == 1 else 256  # 1x128 tiles take any row count
    x = _bf16(rows, 384, seed=5)
    q = tk.quantize_blockwise(x, E4M3, block)
    r = ref.quantize_blockwise(x, E4M3, block)
    assert q.scale.shape == r.scale.shape
    assert torch.equal(q.scale.cpu(), r.scale.cpu())
    assert _same_bits(q.data, r.data)


def test_blockwise_rejects_partial_blocks_with_the_shapes() -> None:
    with pytest.raises(ValueError, match="37x200 tensor does not split into 1x128"):
        tk.quantize_blockwise(_bf16(37, 200, seed=6), E4M3, (1, 128))


def _emulated_product(qa: ref.Quantized, qb: ref.Quantized) -> torch.Tensor:
    return (qa.dequantize() @ qb.dequantize().t()).to(torch.bfloat16)


@pytest.mark.parametrize("granularity", ["tensorwise", "rowwise"])
def test_gemm_matches_emulated_reference_on_odd_shapes(granularity: str) -> None:
    a, b = _bf16(37, 161, seed=7, scale=1.0), _bf16(45, 161, seed=8, scale=0.1)
    quant = ref.quantize_tensorwise if granularity == "tensorwise" else ref.quantize_rowwise
    qa, qb = quant(a, E4M3), quant(b, E4M3)
    out = tk.scaled_mm(qa, qb)
    expected = _emulated_product(qa, qb)
    assert out.dtype == torch.bfloat16 and out.shape == (37, 45)
    # Same FP8 operands, FP32 accumulation in both: only the summation order and the final BF16 rounding differ,
    # so each element is within two BF16 steps (2**-7 relative) of the reference.
    tol = 2 * 2.0**-7 * expected.float().abs() + 1e-6
    assert ((out.float() - expected.float()).abs() <= tol).all()


def test_persistent_launch_gives_the_same_result() -> None:
    a, b = _bf16(37, 96, seed=9, scale=1.0), _bf16(70, 96, seed=10, scale=0.1)
    qa, qb = ref.quantize_rowwise(a, E4M3), ref.quantize_rowwise(b, E4M3)
    assert torch.equal(tk.scaled_mm(qa, qb, persistent=True), tk.scaled_mm(qa, qb, persistent=False))


def test_blockwise_gemm_matches_emulated_reference() -> None:
    a, b = _bf16(37, 256, seed=16, scale=1.0), _bf16(128, 256, seed=17, scale=0.1)
    a[:, :128] *= 30.0  # the two K blocks get very different scales: per-block rescaling must be right
    qa, qb = tk.quantize_blockwise(a, E4M3, (1, 128)), tk.quantize_blockwise(b, E4M3, (128, 128))
    out = tk.scaled_mm(qa, qb)
    expected = _emulated_product(qa, qb)
    tol = 2 * 2.0**-7 * expected.float().abs() + 1e-3 * expected.float().abs().max()
    assert ((out.float() - expected.float()).abs() <= tol).all()


def test_gemm_refuses_mixed_and_mx_scales() -> None:
    a = _bf16(16, 128, seed=11)
    qm = ref.quantize_mx(a, E4M3)
    with pytest.raises(ValueError, match="tensorwise, rowwise or blockwise"):
        tk.scaled_mm(qm, qm)
    qt, qr = ref.quantize_tensorwise(a, E4M3), ref.quantize_rowwise(_bf16(16, 128, seed=12), E4M3)
    with pytest.raises(ValueError, match="tensorwise x rowwise"):
        tk.scaled_mm(qt, qr)
    q1 = ref.quantize_blockwise(a, E4M3, (1, 128))
    with pytest.raises(ValueError, match="1x128 tiles on A and 128x128 on B"):
        tk.scaled_mm(q1, q1)


def _build(precision_name: str, shape: str = "48x80x96", fast_accum: bool | None = None, **options: object):
    load_all()
    device = Device(DEVICE.type, 0 if DEVICE.type == "cuda" else None)
    sh = GEMM.parse_shape(shape)
    inputs = GEMM.make_inputs(sh, device, seed=0)
    precision = resolve_precision(precision_name)
    if fast_accum is not None:
        precision = precision.with_options(fast_accum=fast_accum)
    ctx = BuildContext("gemm", sh, precision, device, inputs, dict(options))
    return BACKENDS.get("triton").build(ctx), inputs


def test_backend_pipeline_marks_interpreted_records_and_reports_cast_stats() -> None:
    pipeline, _ = _build("fp8_rowwise")
    assert pipeline.interpreted == tk.INTERPRETED
    assert set(pipeline.phases) == {"quantize", "gemm"} and pipeline.prequantized_phases == ("gemm",)
    stats = pipeline.cast_stats()
    assert set(stats) == {"a", "b"} and stats["a"].overflow_frac == 0.0
    if not tk.INTERPRETED:
        assert pipeline.extra["autotune_s"] > 0 and pipeline.extra["gemm_config"]


def test_delayed_quantizer_uses_the_history_not_the_current_amax() -> None:
    from fp8bench.kernels.triton_backend import operand_quantizer

    quant = operand_quantizer(resolve_precision("fp8_delayed"))
    a = _bf16(24, 40, seed=15)
    first = quant(a)  # no history yet: current scaling
    second = quant(a * 4)  # the range jumps 4x: the scale still comes from the first amax, so values saturate
    assert torch.equal(first.scale, second.scale)
    assert second.data.float().abs().max().item() == 448.0
    third = quant(a)  # the history now holds 4x the amax: the scale widened
    assert third.scale.item() == pytest.approx(4 * first.scale.item())


@pytest.mark.gpu
def test_cuda_gemm_autotunes_and_matches_reference() -> None:
    a, b = _bf16(1000, 1024, seed=13, scale=1.0), _bf16(1030, 1024, seed=14, scale=0.05)
    qa, qb = tk.quantize_rowwise(a, E4M3), tk.quantize_rowwise(b, E4M3)
    out = tk.scaled_mm(qa, qb)
    expected = _emulated_product(qa, qb)
    assert tk.best_config() is not None
    assert ((out.float() - expected.float()).norm() / expected.float().norm()).item() < 2.0**-7


def test_the_backend_uses_only_what_the_kernels_module_defines() -> None:
    """Every ``tk.X`` the backend reads exists: the compiled-Triton branch never runs on a CPU machine, so a
    missing name there would only show on the first GPU."""
    import ast
    from pathlib import Path

    from fp8bench.kernels import triton_backend

    tree = ast.parse(Path(triton_backend.__file__).read_text())
    used = {n.attr for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "tk"}
    assert {"scaled_mm", "INTERPRETED", "best_config"} <= used  # the scan sees the compiled branch
    assert sorted(n for n in used if not hasattr(tk, n)) == []


def test_best_config_reads_the_choice_of_tritons_own_autotuner(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GEMM is wrapped in Triton's real ``Autotuner``; after a tuned launch it holds the winner in
    ``best_config`` (set by ``Autotuner.run``). Nothing tuned yet: ``None``."""
    import triton

    tuned = triton.autotune(configs=[triton.Config(dict(c), num_warps=4, num_stages=3)
                                     for c in ({"BLOCK_M": 64}, {"BLOCK_M": 128})], key=["M"])(
        triton.jit(tk._scaled_mm))
    kernels = tk._KernelSet(None, None, None, None, tuned)
    monkeypatch.setattr(tk, "_KERNELS", kernels)
    assert tk.best_config() is None
    tuned.best_config = triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 8},
                                      num_warps=8, num_stages=3)  # what Autotuner.run leaves after a launch
    assert tk.best_config() == {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 8,
                                "num_stages": 3}
    monkeypatch.setattr(tk, "_KERNELS", None)
    assert tk.best_config() is None  # nothing decorated yet


@pytest.mark.skipif(not tk.INTERPRETED, reason="records the interpreter's tl.dot calls")
@pytest.mark.parametrize(("precision", "fast_accum", "shape"), [
    ("fp8_tensorwise", False, "48x80x96"), ("fp8_rowwise", False, "48x80x96"), ("fp8_delayed", False, "48x80x96"),
    ("fp8_blockwise", False, "32x128x256"), ("fp8_tensorwise", True, "48x80x96"), ("fp8_rowwise", True, "48x80x96")])
def test_every_fp8_dot_gets_the_accumulation_its_recipe_asks_for(monkeypatch, precision, fast_accum, shape) -> None:
    """On sm_90 a ``tl.dot`` left without ``max_num_imprecise_acc`` accumulates FP8 products in the tensor cores'
    reduced precision over the whole K loop (tests/fake_triton_dot.py). Full accumulation must promote to FP32 at
    least once per K tile; fast accumulation is Triton's default, the vendors' fast mode."""
    calls = fake_triton_dot.record_dots(monkeypatch)
    pipeline, _ = _build(precision, shape, fast_accum=fast_accum)
    fmt = resolve_precision(precision).forward_format
    assert calls, "the GEMM issued no tl.dot"
    assert {(c.lhs, c.rhs, c.out) for c in calls} == {(str(tk._tl_dtype(fmt)),) * 2 + ("fp32",)}
    spans = {c.imprecise_span for c in calls}
    if fast_accum and precision != "fp8_blockwise":
        assert spans == {None}  # reduced precision across the whole K loop: the fast mode the record names
        assert "fast accumulation: under the interpreter" in " ".join(pipeline.notes)
    else:
        tile_k = tk.INTERPRETER_GEMM_CONFIG["BLOCK_K"] if precision != "fp8_blockwise" else tk.GEMM_SCALE_BLOCK
        assert spans == {tile_k}, f"full accumulation must promote every K tile on sm_90, got spans {spans}"
        expected = ("full accumulation: promoted to FP32 every K tile" if precision == "fp8_blockwise" else
                    "full accumulation: under the interpreter")
        assert expected in " ".join(pipeline.notes)


@pytest.mark.parametrize("capability", [(9, 0), (9, 4), (8, 9), (10, 0), (12, 0), None])
@pytest.mark.parametrize("fast_accum", [True, False])
def test_accumulation_note_says_what_applies_on_the_device_it_ran_on(capability, fast_accum) -> None:
    """``max_num_imprecise_acc`` acts on the accumulation on compute capability 9.0 exactly (the WGMMA path; its
    default is ``2**30`` there and 0 elsewhere, tests/fake_triton_dot.py; ROCm's MI300 reports (9, 4)), so sm_90's
    promotion rule may be named on (9, 0) only;
    elsewhere the note says the argument does not apply, and under the interpreter that the dot is an FP32 matmul."""
    tb = pytest.importorskip("fp8bench.kernels.triton_backend")
    recipe = resolve_precision("fp8_tensorwise").with_options(fast_accum=fast_accum)
    note = tb.accumulation_note(recipe, capability)
    mode = "fast accumulation" if fast_accum else "full accumulation"
    assert note.startswith(mode)
    if capability == (9, 0):
        assert ("2**30" in note) == fast_accum and ("every K tile" in note) != fast_accum
    else:
        assert "2**30" not in note and "every K tile" not in note, note
        expected = "interpreter" if capability is None else f"compute capability {capability[0]}.{capability[1]}"
        assert expected in note and ("FP32" in note if capability is None else "unused" in note), note
    blockwise = tb.accumulation_note(resolve_precision("fp8_blockwise"), capability)
    assert "each 128-deep block-scaled partial product is added in FP32" in blockwise


def _stub_operand(dtype: str, k: int):
    from types import SimpleNamespace

    return SimpleNamespace(dtype=dtype, shape=[16, k], type=SimpleNamespace(element_ty=dtype))


@pytest.mark.parametrize("api", ["method", "function"])
def test_dot_recorder_patches_the_semantic_dot_of_each_triton_release(monkeypatch, api) -> None:
    """Triton 3.4-3.9 have ``TritonSemantic.dot(self, lhs, rhs, acc, input_precision, max_num_imprecise_acc,
    out_dtype)``; 3.0-3.3 a module-level ``semantic.dot(lhs, rhs, acc, input_precision, max_num_imprecise_acc,
    out_dtype, builder)`` (tests/fake_triton_dot.py). The recorder must hook whichever the installed release has and
    pass every argument on unchanged; the 3.0-3.3 shape is laid over the installed module here."""
    from triton.language import semantic

    forwarded: list[tuple] = []
    if api == "function":
        monkeypatch.delattr(semantic, "TritonSemantic")
        monkeypatch.setattr(semantic, "dot", lambda *args: forwarded.append(args) or "result", raising=False)
    else:
        monkeypatch.setattr(semantic.TritonSemantic, "dot", lambda *args: forwarded.append(args) or "result")
    calls = fake_triton_dot.record_dots(monkeypatch)
    lhs, rhs, acc = _stub_operand("fp8e4nv", 64), _stub_operand("fp8e4nv", 64), _stub_operand("fp32", 32)
    if api == "function":
        assert semantic.dot(lhs, rhs, acc, None, 32, None, "builder") == "result"
        assert forwarded == [(lhs, rhs, acc, None, 32, None, "builder")]
    else:
        owner = object.__new__(semantic.TritonSemantic)
        assert semantic.TritonSemantic.dot(owner, lhs, rhs, acc, None, 32, None) == "result"
        assert forwarded == [(owner, lhs, rhs, acc, None, 32, None)]
    assert calls == [fake_triton_dot.DotCall("fp8e4nv", "fp8e4nv", "fp32", 64, True, 32)]
    assert calls[0].imprecise_span == 32
