"""The device capability matrix and the per-backend availability rules."""

from __future__ import annotations

import pytest

from fp8bench.core.devices import Device
from fp8bench.hardware import capabilities as caps
from fp8bench.numerics.recipes import Granularity

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
    from fp8bench.numerics.recipes import PRECISIONS

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


@pytest.mark.parametrize(("text", "parsed"), [("2.20.2+cu128", (2, 20, 2)), ("0.18.0", (0, 18, 0)),
                                              ("3.0.0.dev20240101", (3, 0, 0)), ("2.9rc1", (2, 9))])
def test_parse_version(text, parsed) -> None:
    assert caps.parse_version(text) == parsed


def test_library_status_names_missing_and_old_versions() -> None:
    assert caps.library_status("torchao", version="0.18.0").reason is None
    old = caps.library_status("transformer_engine", version="1.13.0")
    assert "1.13.0 is too old" in old.reason and "2.0+" in old.reason
    with pytest.raises(ValueError, match="unknown library 'tensorrt'"):
        caps.library_status("tensorrt")


def test_library_status_reads_installed_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(caps, "installed_version", lambda name: None)
    missing = caps.library_status("torchao")
    assert missing.version is None and "fp8bench[torchao]" in missing.reason


def test_te_needs_cuda_and_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    assert caps.backend_reason("te", CPU) == "Transformer Engine runs on CUDA devices only"
    monkeypatch.setattr(caps, "_is_rocm", lambda: False)
    monkeypatch.setattr(caps, "installed_version", lambda name: None)
    assert "transformer_engine is not installed" in caps.backend_reason("te", CUDA)
    monkeypatch.setattr(caps, "installed_version", lambda name: "2.20.2")
    assert caps.backend_reason("te", CUDA) is None


def test_compiled_on_cpu_needs_a_cxx_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(caps, "cxx_compiler", lambda: None)
    assert "C++ compiler" in caps.backend_reason("compiled", CPU)
    monkeypatch.setattr(caps, "cxx_compiler", lambda: "g++")
    assert caps.backend_reason("compiled", CPU) is None


def test_torch_and_emulated_are_always_available_and_unknown_names_fail() -> None:
    assert caps.backend_reason("torch", CPU) is None and caps.backend_reason("emulated", CPU) is None
    with pytest.raises(ValueError, match="unknown backend 'cutlass'"):
        caps.backend_reason("cutlass", CPU)


@pytest.mark.parametrize("name", ["triton", "compiled", "torchao", "te"])
def test_each_backend_availability_is_the_matrix_rule(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    module = importlib.import_module(f"fp8bench.kernels.{BACKEND_MODULES[name]}")
    backend = getattr(module, name.upper())
    assert backend.availability(CPU) == caps.backend_reason(name, CPU)
    monkeypatch.setattr(module, "backend_reason", lambda b, d: f"{b} off for the test")
    assert backend.availability(CPU) == f"{name} off for the test"


BACKEND_MODULES = {"triton": "triton_backend", "compiled": "compiled", "torchao": "torchao_backend",
                   "te": "te_backend"}


def test_doctor_notes_say_how_available_backends_run_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(caps, "backend_reason", lambda b, d: None)
    monkeypatch.setattr(caps, "cxx_compiler", lambda: "g++")
    assert "interpreter" in caps.backend_note("triton", CPU)
    assert "g++" in caps.backend_note("compiled", CPU)
    assert caps.backend_note("torch", CPU) is None
