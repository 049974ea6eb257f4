"""Closed-form FLOP counts against ``torch.utils.flop_counter.FlopCounterMode`` (within 1 %).

``FlopCounterMode`` counts matrix products (mm, addmm, bmm, and attention through its decomposition): the closed
forms count exactly those. PyTorch's CPU flash-attention kernel is not counted by it, so attention is run through
the math kernel here, which computes the full (dense) score matrix even under a causal mask: the comparison uses the
``dense`` convention, and the causal convention (half) is checked against it separately.
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from fp8bench.core.plugins import WORKLOADS, load_all
from fp8bench.workloads.model import (
    Attention,
    ModelConfig,
    attention_core_flops,
    build_decoder,
    init_parameters,
    linear_flops,
    model_flops,
)

load_all()


def _counted(fn) -> int:
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


@pytest.mark.parametrize("b, h, kv, s, d, causal", [(2, 4, 2, 32, 16, True), (1, 6, 6, 48, 8, False),
                                                   (3, 8, 1, 16, 32, True)])
def test_attention_block_forward_and_backward_match_flop_counter(b, h, kv, s, d, causal):
    block = Attention(h * d, h, kv, d, causal=causal)
    x = torch.randn(b, s, h * d, requires_grad=True)
    fwd = _counted(lambda: block(x))
    with sdpa_kernel(SDPBackend.MATH):  # the backward kernel follows the forward's choice
        y = block(x)
    bwd = _counted(lambda: y.backward(torch.randn_like(y)))
    tokens, width = b * s, h * d
    proj = linear_flops(tokens, width, (h + 2 * kv) * d, False) + linear_flops(tokens, h * d, width, False)
    expect_fwd = proj + attention_core_flops(b, h, s, d, causal, False, dense=True)
    expect_total = 3 * proj + attention_core_flops(b, h, s, d, causal, True, dense=True)
    assert fwd == pytest.approx(expect_fwd, rel=0.01)
    assert fwd + bwd == pytest.approx(expect_total, rel=0.01)


def test_attention_workload_uses_the_closed_form_with_causal_as_half():
    work = WORKLOADS.get("attention")
    causal = work.parse_shape("b=2,h=4,s=32,d=16,backward=1")
    dense = {**causal, "causal": 0}
    core = attention_core_flops(2, 4, 32, 16, False, True)
    assert work.flops(dense) - work.flops(causal) == core // 2


@pytest.mark.parametrize("cfg", [
    ModelConfig(layers=2, width=64, heads=4, kv_heads=2, ffn=128, vocab=96, seq=16, batch=2, max_seq=32),
    ModelConfig(layers=1, width=48, heads=3, kv_heads=3, ffn=80, vocab=50, seq=24, batch=1, max_seq=24),
])
def test_decoder_training_flops_match_flop_counter(cfg):
    model = build_decoder(cfg, init_parameters(cfg, 0), "cpu")
    tokens = torch.randint(cfg.vocab, (cfg.batch, cfg.seq + 1))
    fwd = _counted(lambda: model.loss(tokens))
    with sdpa_kernel(SDPBackend.MATH):
        loss = model.loss(tokens)
    bwd = _counted(loss.backward)
    assert fwd == pytest.approx(model_flops(cfg, backward=False, dense=True), rel=0.01)
    assert fwd + bwd == pytest.approx(model_flops(cfg, backward=True, dense=True), rel=0.01)
    # The workload reports the causal convention: attention's products halved, everything else identical.
    step = WORKLOADS.get("transformer_step")
    shape = {k: getattr(cfg, k) for k in ("layers", "width", "heads", "kv_heads", "ffn", "vocab", "seq", "batch",
                                          "max_seq")}
    halved = cfg.layers * attention_core_flops(cfg.batch, cfg.heads, cfg.seq, cfg.head_dim, True, True)
    assert model_flops(cfg, dense=True) - step.flops(shape) == halved


def test_fp8_linear_counts_its_three_scaled_gemms():
    from fp8bench.core.precisions import resolve_precision
    from fp8bench.numerics.fp8_linear import NATIVE, Fp8Linear

    layer = Fp8Linear(64, 32, resolve_precision("fp8_rowwise"), gemm=NATIVE)
    x = torch.randn(48, 64, dtype=torch.bfloat16, requires_grad=True)
    total = _counted(lambda: layer(x).backward(torch.ones(48, 32, dtype=torch.bfloat16)))
    if total == 0:
        pytest.skip("this torch's FlopCounterMode does not count torch._scaled_mm")
    assert total == pytest.approx(linear_flops(48, 64, 32, backward=True), rel=0.01)
