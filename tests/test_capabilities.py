"""The device capability matrix: the hardware rules of every scaled GEMM."""

from __future__ import annotations

import pytest

from fp8bench.core.devices import Device
from fp8bench.core.precisions import Granularity
from fp8bench.hardware import capabilities as caps

CUDA = Device("cuda", 0)
CPU = Device("cpu")


@pytest.mark.parametrize(("cc", "cuda", "tensorwise", "blockwise", "mx"), [
    ((8, 0), (12, 9), False, False, False),  # A100: no FP8 tensor cores
    ((8, 9), (12, 9), True, False, False),  # L4 / L40S / RTX 4090
    ((9, 0), (12, 9), True, True, False),  # H100 / H200
    ((9, 0), (12, 4), True, False, False),  # H100 with a torch built before cuBLASLt's block scales
    ((10, 0), (12, 9), True, False, True),  # B200: MX, but no 1x128/128x128 kernels (Hopper only)
    ((12, 0), (12, 9), True, False, False),  # RTX 50: neither block kind through PyTorch
])
def test_cuda_rules_follow_compute_capability_and_cuda(cc, cuda, tensorwise, blockwise, mx) -> None:
    c = caps.capabilities_for(CUDA, target=caps.CudaTarget("test GPU", cc, cuda, (2, 13)))
    assert (c.fp8_reason(Granularity.TENSORWISE) is None) is tensorwise
    assert (c.fp8_reason(Granularity.ROWWISE) is None) is tensorwise
    assert (c.fp8_reason(Granularity.BLOCKWISE) is None) is blockwise
    assert (c.fp8_reason(Granularity.MX) is None) is mx
    assert c.fp8_variant == "ocp"
    if not mx:
        assert f"{cc[0]}.{cc[1]}" in c.fp8_reason(Granularity.MX)
    # The 4-bit rows: FP4 tensor cores come with compute capability 10.x (B200, GB200, B300), as MX does here.
    assert set(c.fp8_reasons) == set(caps.MATRIX_KEYS)
    for row in ("nvfp4", "mxfp4"):
        assert (c.fp8_reasons[row] is None) is (cc[0] == 10), (cc, row)


def test_four_bit_recipes_read_their_own_rows() -> None:
    from fp8bench.core.precisions import PRECISIONS

    assert caps.capability_key(PRECISIONS.get("mxfp4")) == "mxfp4"
    assert caps.capability_key(PRECISIONS.get("mxfp8")) == "mx"
    assert caps.capability_key(PRECISIONS.get("nvfp4")) == "nvfp4"
    b200 = caps.capabilities_for(CUDA, target=caps.CudaTarget("NVIDIA B200", (10, 0), (12, 9), (2, 13)))
    assert b200.recipe_reason(PRECISIONS.get("nvfp4"), backward=True) is None
    assert b200.recipe_reason(PRECISIONS.get("mxfp4"), backward=True) is None
    old = caps.capabilities_for(CUDA, target=caps.CudaTarget("NVIDIA B200", (10, 0), (12, 6), (2, 13)))
    assert "CUDA 12.8+" in old.recipe_reason(PRECISIONS.get("nvfp4"))
    mi300 = caps.capabilities_for(CUDA, name="AMD Instinct MI300X", cc=(9, 4), rocm=True)
    assert "ROCm" in mi300.fp8_reasons["nvfp4"] and mi300.fp8_reasons["mxfp4"] is not None


def test_live_cuda_target_reads_torch_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(caps.torch.version, "cuda", "12.8")
    t = caps.CudaTarget.of(CUDA, name="test GPU", cc=(9, 0))
    assert (t.cc, t.cuda) == ((9, 0), (12, 8)) and t.torch == caps.parse_version(caps.torch.__version__)
    assert "cuBLASLt 12.9" in caps.capabilities_for(CUDA, target=t).fp8_reason(Granularity.BLOCKWISE)


def test_mi300_uses_fnuz_formats_and_has_no_mx() -> None:
    c = caps.capabilities_for(CUDA, name="AMD Instinct MI300X", cc=(9, 4), rocm=True)
    assert c.fp8_variant == "fnuz"
    assert c.fp8_reason(Granularity.TENSORWISE) is None
    assert c.fp8_reason(Granularity.MX) is not None


def test_cpu_runs_tensorwise_and_rowwise_only() -> None:
    c = caps.capabilities_for(CPU, name="test CPU")
    assert c.fp8_reason(Granularity.TENSORWISE) is None and c.fp8_reason(Granularity.ROWWISE) is None
    assert "tensorwise and rowwise" in c.fp8_reason(Granularity.BLOCKWISE)
    assert c.fp8_reason(Granularity.MX) is not None
    assert "no FP4 kernel" in c.fp8_reasons["nvfp4"] and "no FP4 kernel" in c.fp8_reasons["mxfp4"]
