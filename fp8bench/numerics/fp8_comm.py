"""FP8 on the wire: what a collective sends when it communicates FP8 instead of BF16, and how it is read back.

Sending a tensor in FP8 takes three steps, which the ``collective`` workload times as its phases:

1. **encode**: quantize with the recipe's shared quantizer (:mod:`fp8bench.numerics.quantize`: amax, scale, saturating
   cast) and pack the FP8 bytes and their FP32 dequantization scales into one ``uint8`` buffer per destination chunk;
2. **communicate**: move the bytes (an all-gather, or an all-to-all for a reduction, below);
3. **decode**: unpack each sender's bytes and scales and dequantize (``x ~= data * scale``), in FP32.

Scales travel with their bytes, so every rank's chunk keeps the scales it was quantized with: tensorwise scaling is
one scale per rank's tensor (current scaling on the shard itself, no extra collective for a global amax), rowwise one
per row. Packing them into the same buffer keeps one collective per operation, as in BF16, so the two precisions
differ only in bytes and in the encode/decode work. Collectives move ``uint8``: gloo has no FP8 types at all
("Invalid scalar type", torch 2.13), and bytes are bytes to a transport that does not reduce them.

A **reduction** cannot run on FP8 bytes: each sender's values carry their own scales, and summing FP8 in FP8 would
round at every step. An FP8 reduce-scatter is therefore an all-to-all of FP8 chunks (rank ``j`` receives chunk ``j``
of every rank's tensor, with its scales) followed by a local dequantize-and-sum in FP32. It moves the same bytes
per rank as a reduce-scatter of the same buffer, ``S * (n-1)/n``, and nccl-tests counts an all-to-all's bus
bandwidth with the same ``(n-1)/n`` factor (``doc/PERFORMANCE.md``).

Wire size of a ``rows x cols`` chunk: ``rows * cols`` bytes plus 4 bytes per scale (one per chunk tensorwise, one
per row rowwise), :func:`chunk_wire_bytes`; BF16 sends ``2 * rows * cols``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fp8bench.core.formats import ElementFormat
from fp8bench.core.precisions import Granularity
from fp8bench.numerics.quantize import Quantized, Quantizer

SCALE_BYTES = 4  # FP32 dequantization scales
# Granularities whose scales split with the rows of a tensor (tensorwise: one per chunk; rowwise: one per row).
WIRE_GRANULARITIES = (Granularity.TENSORWISE, Granularity.ROWWISE)


@dataclass(frozen=True)
class WireLayout:
    """How ``chunks`` row-chunks of a ``rows x cols`` tensor lie in a ``[chunks, chunk_bytes]`` buffer: each
    chunk's FP8 data (``rows/chunks * cols`` bytes), then its FP32 scales."""

    rows: int
    cols: int
    chunks: int
    fmt: ElementFormat
    granularity: Granularity

    def __post_init__(self) -> None:
        if self.granularity not in WIRE_GRANULARITIES:
            raise ValueError(f"FP8 communication packs {', '.join(g.value for g in WIRE_GRANULARITIES)} scales; "
                             f"got {self.granularity.value}")
        if self.rows % self.chunks:
            raise ValueError(f"{self.rows} rows do not split into {self.chunks} chunks")

    @property
    def chunk_rows(self) -> int:
        return self.rows // self.chunks

    @property
    def data_bytes(self) -> int:
        """FP8 bytes of one chunk."""
        return self.chunk_rows * self.cols

    @property
    def scales_per_chunk(self) -> int:
        return 1 if self.granularity is Granularity.TENSORWISE else self.chunk_rows

    @property
    def chunk_bytes(self) -> int:
        return chunk_wire_bytes(self.chunk_rows, self.cols, self.granularity)


def chunk_wire_bytes(rows: int, cols: int, granularity: Granularity) -> int:
    """Bytes of one packed ``rows x cols`` chunk: its FP8 data and its FP32 scales."""
    return rows * cols + SCALE_BYTES * (1 if granularity is Granularity.TENSORWISE else rows)


def encode(x: torch.Tensor, quantize: Quantizer, layout: WireLayout) -> torch.Tensor:
    """Quantize a ``rows x cols`` tensor and pack it as ``[chunks, chunk_bytes]`` ``uint8`` (one row per chunk)."""
    return pack(quantize(x), layout)


def pack(q: Quantized, layout: WireLayout) -> torch.Tensor:
    """The FP8 data and scales of ``q`` as ``[chunks, chunk_bytes]`` ``uint8``."""
    data = q.data.contiguous().view(torch.uint8).reshape(layout.chunks, layout.data_bytes)
    scale = q.scale.float()
    if layout.granularity is Granularity.TENSORWISE:
        scale = scale.reshape(1, 1).expand(layout.chunks, 1)  # the one scale goes with every chunk
    scale = scale.reshape(layout.chunks, layout.scales_per_chunk).contiguous().view(torch.uint8)
    return torch.cat([data, scale], dim=1)


def decode(buffer: torch.Tensor, layout: WireLayout) -> torch.Tensor:
    """Dequantize ``[senders, chunk_bytes]`` received chunks to FP32 ``[senders, chunk_rows, cols]``, each with the
    scales its sender packed."""
    senders = buffer.shape[0]
    data = buffer[:, :layout.data_bytes].contiguous().view(layout.fmt.dtype)
    data = data.reshape(senders, layout.chunk_rows, layout.cols)
    scale = buffer[:, layout.data_bytes:].contiguous().view(torch.float32)
    scale = scale.reshape(senders, layout.scales_per_chunk, 1)  # tensorwise [s, 1, 1]; rowwise [s, rows, 1]
    return Quantized(data, scale, layout.fmt, layout.granularity).dequantize(torch.float32)
