"""The device capability matrix: which FP8 GEMM kinds a device can run natively, and why not.

Every backend's availability check asks this module, so the rules live in one place:

* NVIDIA FP8 tensor cores start at compute capability **8.9** (Ada: L4, L40S, RTX 4090) and **9.0** (Hopper).
* Block-scaled FP8 GEMMs with FP32 scales (1x128 / 128x128 tiles) need Hopper (**9.0+**) in cuBLAS/PyTorch.
* MXFP8 (E8M0 scales per 32 elements) is a Blackwell feature: **10.0+** (B200, GB200; 12.0 for RTX 50).
* AMD MI300-class GPUs (gfx942) use the ``fnuz`` FP8 variants (E4M3 max 240); later ones use the OCP formats.
* PyTorch's CPU ``_scaled_mm`` runs tensorwise and rowwise scales (seen with torch 2.13) and refuses block scales.

A rule here says what the hardware can do; a backend may still refuse a case at build time (its library too
old, a layout it lacks), and that refusal is recorded with its own message.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fp8bench.devices import Device
from fp8bench.recipes import Granularity

FP8_MIN_CC = (8, 9)
BLOCKWISE_MIN_CC = (9, 0)
MX_MIN_CC = (10, 0)


@dataclass(frozen=True)
class DeviceCapabilities:
    device: str
    name: str
    compute_capability: tuple[int, int] | None
    fp8_variant: str  # ocp | fnuz
    fp8_reasons: dict[str, str | None]  # granularity -> why a native FP8 GEMM cannot run (None: it can)

    def fp8_reason(self, granularity: Granularity) -> str | None:
        return self.fp8_reasons[granularity.value]

    def as_rows(self) -> list[tuple[str, str]]:
        return [(g, "yes" if r is None else f"no: {r}") for g, r in self.fp8_reasons.items()]


def _is_rocm() -> bool:
    return getattr(torch.version, "hip", None) is not None


def _cuda_reasons(cc: tuple[int, int]) -> dict[str, str | None]:
    def need(minimum: tuple[int, int], what: str) -> str | None:
        if cc >= minimum:
            return None
        return f"{what} needs compute capability {minimum[0]}.{minimum[1]}+, this device is {cc[0]}.{cc[1]}"

    return {
        Granularity.TENSORWISE.value: need(FP8_MIN_CC, "FP8 GEMM"),
        Granularity.ROWWISE.value: need(FP8_MIN_CC, "FP8 GEMM"),
        Granularity.BLOCKWISE.value: need(BLOCKWISE_MIN_CC, "block-scaled FP8 GEMM"),
        Granularity.MX.value: need(MX_MIN_CC, "MXFP8 (E8M0 block scales)"),
    }


def capabilities_for(device: Device, name: str | None = None, cc: tuple[int, int] | None = None,
                     rocm: bool | None = None) -> DeviceCapabilities:
    """Capabilities of ``device``; ``name``, ``cc`` and ``rocm`` override the live queries (for tests)."""
    if not device.is_cuda:
        cpu_reason = "torch's CPU _scaled_mm has tensorwise and rowwise kernels only"
        reasons: dict[str, str | None] = {Granularity.TENSORWISE.value: None, Granularity.ROWWISE.value: None,
                                          Granularity.BLOCKWISE.value: cpu_reason, Granularity.MX.value: cpu_reason}
        return DeviceCapabilities(str(device), name or device.name(), None, "ocp", reasons)
    cc = cc or device.capability()
    name = name or device.name()
    rocm = _is_rocm() if rocm is None else rocm
    assert cc is not None
    if rocm:
        # gfx942 (MI300X/MI325X) reports 9.4 through HIP; its FP8 is the fnuz variant and it has no MX units.
        fnuz = "MI300" in name or "MI325" in name or cc == (9, 4)
        reasons = {Granularity.TENSORWISE.value: None, Granularity.ROWWISE.value: None,
                   Granularity.BLOCKWISE.value: "no block-scaled FP8 GEMM in hipBLASLt through PyTorch",
                   Granularity.MX.value: "MXFP8 needs MX hardware (CDNA4+)" if fnuz else None}
        return DeviceCapabilities(str(device), name, cc, "fnuz" if fnuz else "ocp", reasons)
    return DeviceCapabilities(str(device), name, cc, "ocp", _cuda_reasons(cc))
