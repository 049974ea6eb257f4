"""FP8 on the wire: packing bytes and scales into one buffer and reading them back, without any process group."""

import pytest
import torch

from fp8bench.core.formats import E4M3, E5M2
from fp8bench.core.precisions import Granularity
from fp8bench.numerics.fp8_comm import WireLayout, chunk_wire_bytes, decode, encode
from fp8bench.numerics.quantize import quantize_rowwise, quantize_tensorwise


@pytest.mark.parametrize("granularity,quantize", [
    (Granularity.TENSORWISE, quantize_tensorwise), (Granularity.ROWWISE, quantize_rowwise)])
@pytest.mark.parametrize("chunks", [1, 4])
def test_pack_then_decode_is_the_quantizers_own_dequantization(granularity, quantize, chunks):
    x = torch.randn(32, 24, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    layout = WireLayout(32, 24, chunks, E4M3, granularity)
    packed = encode(x, lambda t: quantize(t, E4M3), layout)
    assert packed.dtype == torch.uint8 and packed.shape == (chunks, layout.chunk_bytes)
    assert packed.numel() == chunks * chunk_wire_bytes(32 // chunks, 24, granularity)
    # Decoding every chunk returns exactly what the quantizer's own dequantize gives, chunk by chunk.
    expected = quantize(x, E4M3).dequantize(torch.float32).reshape(chunks, 32 // chunks, 24)
    assert torch.equal(decode(packed, layout), expected)


def test_each_senders_scale_travels_with_its_bytes():
    # Two senders with very different magnitudes: each chunk must come back with its own scale.
    small, large = torch.full((4, 8), 0.01), torch.full((4, 8), 300.0)
    layout = WireLayout(4, 8, 1, E5M2, Granularity.TENSORWISE)
    buffers = [encode(t, lambda v: quantize_tensorwise(v, E5M2), layout) for t in (small, large)]
    out = decode(torch.cat(buffers), layout)
    torch.testing.assert_close(out[0], small, rtol=0.13, atol=0)
    torch.testing.assert_close(out[1], large, rtol=0.13, atol=0)


def test_wire_sizes_are_one_byte_per_element_plus_fp32_scales():
    assert chunk_wire_bytes(128, 256, Granularity.TENSORWISE) == 128 * 256 + 4
    assert chunk_wire_bytes(128, 256, Granularity.ROWWISE) == 128 * 256 + 4 * 128


def test_layouts_refuse_what_they_cannot_pack():
    with pytest.raises(ValueError, match="tensorwise, rowwise scales; got blockwise"):
        WireLayout(128, 128, 1, E4M3, Granularity.BLOCKWISE)
    with pytest.raises(ValueError, match="10 rows do not split into 4 chunks"):
        WireLayout(10, 8, 4, E4M3, Granularity.ROWWISE)
