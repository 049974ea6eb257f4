"""Named shape sets that suite files refer to (``shape_set: llm_projections``).

LLM projection shapes follow the ``nn.Linear`` convention of the ``gemm`` workload: ``M`` tokens, ``N`` output
features, ``K`` input features. Model dimensions from the published Llama 3 configurations (hidden size, heads,
KV heads, head dim 128, FFN size): 8B = 4096 / 32 / 8 / 14336, 70B = 8192 / 64 / 8 / 28672. QKV is the fused
projection (``(heads + 2*kv_heads) * head_dim`` outputs) and gate/up the fused SwiGLU input projection.

MoE expert shapes (``grouped_gemm`` workload) come from the published model configurations, each expert a SwiGLU
MLP: its fused gate/up GEMM (``N = 2 * expert FFN``, ``K = hidden``) and its down GEMM (``N = hidden``, ``K =
expert FFN``), with the model's routed experts and experts per token; see :data:`MOE_MODELS`.
"""

from __future__ import annotations

from fp8bench.core.shapes import ShapeError

LLAMA3 = {
    "llama3_8b": {"hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128, "ffn": 14336},
    "llama3_70b": {"hidden": 8192, "heads": 64, "kv_heads": 8, "head_dim": 128, "ffn": 28672},
}
TOKEN_COUNTS = (1024, 4096, 16384)


def llm_projections(tokens: tuple[int, ...] = TOKEN_COUNTS) -> list[str]:
    shapes = []
    for cfg in LLAMA3.values():
        h, d, ffn = cfg["hidden"], cfg["head_dim"], cfg["ffn"]
        qkv = (cfg["heads"] + 2 * cfg["kv_heads"]) * d
        for m in tokens:
            for n, k in ((qkv, h), (h, cfg["heads"] * d), (2 * ffn, h), (h, ffn)):
                shapes.append(f"{m}x{n}x{k}")
    return shapes


# Routed-expert dimensions of published MoE models (shared experts, which see every token, are dense GEMMs).
MOE_MODELS = {
    # huggingface.co/deepseek-ai/DeepSeek-V3 config.json: hidden_size 7168, moe_intermediate_size 2048,
    # n_routed_experts 256, num_experts_per_tok 8.
    "deepseek_v3": {"hidden": 7168, "expert_ffn": 2048, "experts": 256, "top_k": 8},
    # huggingface.co/meta-llama/Llama-4-Scout-17B-16E config.json (text_config): hidden_size 5120,
    # intermediate_size 8192 (per expert), num_local_experts 16, num_experts_per_tok 1.
    "llama4_scout": {"hidden": 5120, "expert_ffn": 8192, "experts": 16, "top_k": 1},
    # huggingface.co/meta-llama/Llama-4-Maverick-17B-128E config.json (text_config): hidden_size 5120,
    # intermediate_size 8192, num_local_experts 128, num_experts_per_tok 1.
    "llama4_maverick": {"hidden": 5120, "expert_ffn": 8192, "experts": 128, "top_k": 1},
    # huggingface.co/mistralai/Mixtral-8x7B-v0.1 config.json: hidden_size 4096, intermediate_size 14336,
    # num_local_experts 8, num_experts_per_tok 2.
    "mixtral_8x7b": {"hidden": 4096, "expert_ffn": 14336, "experts": 8, "top_k": 2},
}
MOE_TOKENS = (4096, 16384)


def moe_experts(tokens: tuple[int, ...] = MOE_TOKENS, routes: tuple[str, ...] = ("balanced", "zipf")) -> list[str]:
    """Every model's gate/up and down expert GEMMs, for each token count and routing."""
    shapes = []
    for cfg in MOE_MODELS.values():
        h, ffn, g, top_k = cfg["hidden"], cfg["expert_ffn"], cfg["experts"], cfg["top_k"]
        for t in tokens:
            for route in routes:
                for n, k in ((2 * ffn, h), (h, ffn)):
                    shapes.append(f"g={g},tokens={t},top_k={top_k},n={n},k={k},route={route}")
    return shapes


SHAPE_SETS: dict[str, list[str]] = {
    "square": [f"{n}x{n}x{n}" for n in (256, 512, 1024, 2048, 4096, 8192, 16384)],
    "square_small": [f"{n}x{n}x{n}" for n in (256, 512, 1024)],
    "llm_projections": llm_projections(),
    "llm_projections_small": llm_projections((128,)),
    "moe_experts": moe_experts(),
    # CPU-sized: each model's expert count and top-k at 256 tokens and 1/32 of its expert dimensions.
    "moe_experts_small": [
        f"g={c['experts']},tokens=256,top_k={c['top_k']},n={2 * c['expert_ffn'] // 32},k={c['hidden'] // 32},"
        f"route={route}" for c in MOE_MODELS.values() for route in ("balanced", "zipf")],
}


def shape_set(name: str) -> list[str]:
    try:
        return SHAPE_SETS[name]
    except KeyError:
        raise ShapeError(f"unknown shape set {name!r}; accepted: {', '.join(SHAPE_SETS)}") from None
