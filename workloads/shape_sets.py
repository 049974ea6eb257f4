"""Named shape sets that suite files refer to (``shape_set: llm_projections``).

LLM projection shapes follow the ``nn.Linear`` convention of the ``gemm`` workload: ``M`` tokens, ``N`` output
features, ``K`` input features. Model dimensions from the published Llama 3 configurations (hidden size, heads,
KV heads, head dim 128, FFN size): 8B = 4096 / 32 / 8 / 14336, 70B = 8192 / 64 / 8 / 28672. QKV is the fused
projection (``(heads + 2*kv_heads) * head_dim`` outputs) and gate/up the fused SwiGLU input projection.
"""

from __future__ import annotations

from fp8bench.shapes import ShapeError

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


SHAPE_SETS: dict[str, list[str]] = {
    "square": [f"{n}x{n}x{n}" for n in (256, 512, 1024, 2048, 4096, 8192, 16384)],
    "square_small": [f"{n}x{n}x{n}" for n in (256, 512, 1024)],
    "llm_projections": llm_projections(),
    "llm_projections_small": llm_projections((128,)),
}


def shape_set(name: str) -> list[str]:
    try:
        return SHAPE_SETS[name]
    except KeyError:
        raise ShapeError(f"unknown shape set {name!r}; accepted: {', '.join(SHAPE_SETS)}") from None
