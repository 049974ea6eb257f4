"""The scale layouts fp8bench hands PyTorch's scaled GEMMs: right values in the places CUDA reads them.

The layout rules themselves (shapes, strides, swizzle flags) are checked on fake CUDA tensors by
``tests/test_cuda_conformance.py``; these tests check the *contents*: computing the product the way the kernel
reads each layout must give the quantized product that the emulated reference computes.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from fp8bench.core.precisions import Granularity, resolve_precision
from fp8bench.numerics import torch_api
from fp8bench.numerics.quantize import quantize_blockwise, quantize_mx
from fp8bench.numerics.scaled_gemm import ScaledGemm, emulated_scaled_mm, fp8_scaled_mm, to_blocked_scales

E4M3 = resolve_precision("fp8_blockwise").forward_format


def _pytorch_to_blocked() -> Callable[[torch.Tensor], torch.Tensor]:
    """PyTorch's own MX scale swizzle (``torch/_vendor/quack/mx_utils.py``), loaded from its file: its package
    ``__init__`` needs CUDA Python bindings, the function itself only torch."""
    path = Path(torch.__file__).parent / "_vendor" / "quack" / "mx_utils.py"
    if not path.exists():
        pytest.skip(f"this torch ({torch.__version__}) ships no {path.name}")
    spec = importlib.util.spec_from_file_location("_pytorch_mx_utils", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.to_blocked


@pytest.mark.parametrize(("rows", "cols"), [(128, 4), (192, 12), (256, 3), (40, 1), (384, 8)])
def test_blocked_scales_match_pytorchs_reference(rows: int, cols: int) -> None:
    scales = torch.arange(rows * cols, dtype=torch.float32).reshape(rows, cols)
    assert torch.equal(to_blocked_scales(scales), _pytorch_to_blocked()(scales))


def _operands(m: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    # Rows and columns with very different magnitudes, so a scale in the wrong place changes the result.
    a = torch.randn(m, k, generator=gen) * torch.logspace(-2, 2, m)[:, None]
    b = torch.randn(n, k, generator=gen) * torch.logspace(1, -1, k)[None, :]
    return a, b


def _blockwise(surface: torch_api.TorchSurface) -> ScaledGemm:
    return ScaledGemm(Granularity.BLOCKWISE, False, surface=surface)


def test_blockwise_scales_are_read_where_cuda_reads_them() -> None:
    m, n, k = 64, 256, 384  # K/128 = 3 blocks, padded to 4 in the weight's scale layout
    a, b = _operands(m, n, k)
    qa, qb = quantize_blockwise(a, E4M3, (1, 128)), quantize_blockwise(b, E4M3, (128, 128))
    gemm = _blockwise(torch_api.release_surface((2, 13)))
    assert gemm.api == torch_api.V2
    (sa,), (sb,) = gemm.prepare(qa, "lhs").scales, gemm.prepare(qb, "rhs").scales
    assert sa.shape == (m, 3) and sa.stride() == (1, m)
    assert sb.shape == (4, n // 128) and sb.stride() == (1, 4)
    # ScaledBlas.cpp: scale_a[m, kb] scales a[m, kb*128:(kb+1)*128]; scale_b[kb, nb] scales the 128x128 tile of
    # B^T at rows kb*128.., columns nb*128.. . Sum the per-block partial products with those scales.
    partial = torch.einsum("mbk,nbk->mnb", qa.data.double().reshape(m, 3, 128), qb.data.double().reshape(n, 3, 128))
    scale = sa.double()[:, None, :] * sb[:3].t().double().repeat_interleave(128, dim=0)[None, :, :]
    kernel_view = (partial * scale).sum(-1)
    reference = qa.dequantize(torch.float64) @ qb.dequantize(torch.float64).t()
    torch.testing.assert_close(kernel_view, reference, rtol=1e-9, atol=1e-9)


def _unblock(flat: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Read a blocked layout back by the documented offset of (row, col): the inverse of the swizzle."""
    r = torch.arange(rows)[:, None]
    c = torch.arange(cols)[None, :]
    col_tiles = -(-cols // 4)
    tile = (r // 128) * col_tiles + c // 4
    offset = tile * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4
    return flat[offset]


def test_mx_scales_are_read_where_cuda_reads_them() -> None:
    m, n, k = 192, 64, 384  # M pads to 256 scale rows, K/32 = 12 scale columns
    a, b = _operands(m, n, k)
    qa, qb = quantize_mx(a, E4M3), quantize_mx(b, E4M3)
    flat_a, flat_b = to_blocked_scales(qa.scale), to_blocked_scales(qb.scale)
    assert flat_a.numel() == 256 * 12 and flat_b.numel() == 128 * 12
    sa, sb = _unblock(flat_a, m, k // 32), _unblock(flat_b, n, k // 32)
    assert torch.equal(sa, qa.scale) and torch.equal(sb, qb.scale)
    partial = torch.einsum("mbk,nbk->mnb", qa.data.double().reshape(m, 12, 32), qb.data.double().reshape(n, 12, 32))
    kernel_view = (partial * sa.double()[:, None, :] * sb.double()[None, :, :]).sum(-1)
    reference = qa.dequantize(torch.float64) @ qb.dequantize(torch.float64).t()
    torch.testing.assert_close(kernel_view, reference, rtol=1e-9, atol=1e-9)


def test_blockwise_scales_through_torch_scaled_mm_follow_its_transposed_check() -> None:
    """Without F.scaled_mm (torch 2.9), block scales go through torch._scaled_mm, whose get_joint_scaling checks
    b's scales transposed against b^T: the same values, a 128x128 b's unpadded and K-block-fastest."""
    m, n, k = 64, 256, 384
    a, b = _operands(m, n, k)
    qa, qb, qb1 = (quantize_blockwise(a, E4M3, (1, 128)), quantize_blockwise(b, E4M3, (128, 128)),
                   quantize_blockwise(b, E4M3, (1, 128)))
    gemm = _blockwise(torch_api.release_surface((2, 9)))
    assert gemm.api == torch_api.V1
    (sa,), (sb,), (sb1,) = (gemm.prepare(qa, "lhs").scales, gemm.prepare(qb, "rhs").scales,
                            gemm.prepare(qb1, "rhs").scales)
    assert sa.shape == (m, 3) and sa.stride() == (1, m) and torch.equal(sa, qa.scale)
    assert sb.shape == (3, n // 128) and sb.t().is_contiguous() and torch.equal(sb.t(), qb.scale)
    assert sb1.shape == (3, n) and sb1.is_contiguous() and torch.equal(sb1.t(), qb1.scale)


def test_other_block_tiles_are_refused_by_name() -> None:
    q = quantize_blockwise(torch.randn(64, 64), E4M3, (64, 64))
    with pytest.raises(ValueError, match="64x64 FP32 block scales; accepted: 1x128, 128x128"):
        _blockwise(torch_api.detect()).prepare(q, "lhs")


@pytest.mark.parametrize("fp4", [False, True])
def test_a_torch_without_functional_scaled_mm_has_no_4bit_entry_point(fp4: bool) -> None:
    """torch 2.9 runs MXFP8 through torch._scaled_mm but has no entry point for MXFP4 (nor NVFP4): refused with
    the release that adds one."""
    old = torch_api.release_surface((2, 9))
    if not fp4:
        assert ScaledGemm(Granularity.MX, False, surface=old).api == torch_api.V1
        return
    for granularity in (Granularity.MX, Granularity.NVFP4):
        with pytest.raises(ValueError, match=r"torch.nn.functional.scaled_mm \(torch 2.10.0 and newer"):
            ScaledGemm(granularity, True, surface=old)


def test_cpu_kernels_take_the_layouts_and_fast_accumulation_flag() -> None:
    """Tensorwise and rowwise run on the CPU: the flag is accepted, and the result equals the reference."""
    a, b = _operands(64, 128, 256)
    for recipe in ("fp8_rowwise",):
        from fp8bench.numerics.quantize import quantizer_for

        p = resolve_precision(recipe)
        qa, qb = quantizer_for(p, "lhs")(a), quantizer_for(p, "rhs")(b)
        for fast in (True, False):
            native = fp8_scaled_mm(qa, qb, torch.float32, fast)
            torch.testing.assert_close(native, emulated_scaled_mm(qa, qb, torch.float32), rtol=1e-4, atol=1e-3)
