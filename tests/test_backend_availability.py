"""Each backend's own availability: device kinds, the optional libraries it declares, its own rule, its note."""

from __future__ import annotations

import pytest

from fp8bench.core.devices import Device
from fp8bench.core.libraries import Library, parse_version
from fp8bench.core.plugins import BACKENDS, Backend, declared_libraries, load_all
from fp8bench.kernels import compiled, te_backend, torchao_backend, triton_backend

CUDA = Device("cuda", 0)
CPU = Device("cpu")
load_all()


@pytest.mark.parametrize(("text", "parsed"), [("2.20.2+cu128", (2, 20, 2)), ("0.18.0", (0, 18, 0)),
                                              ("3.0.0.dev20240101", (3, 0, 0)), ("2.9rc1", (2, 9))])
def test_parse_version(text, parsed) -> None:
    assert parse_version(text) == parsed


def test_library_status_names_missing_and_old_versions() -> None:
    assert torchao_backend.TORCHAO_LIBRARY.status(version="0.18.0").reason is None
    old = te_backend.TE_LIBRARY.status(version="1.13.0")
    assert "transformer_engine 1.13.0 is too old" in old.reason and "2.0+" in old.reason
    missing = Library("no_such_library_xyz", (1, 0), extra="xyz").status()
    assert missing.version is None and missing.reason == (
        "no_such_library_xyz is not installed (pip install 'fp8bench[xyz]')")


def test_doctor_lists_every_declared_library_once() -> None:
    assert [lib.name for lib in declared_libraries()] == ["triton", "torchao", "transformer_engine"]


def test_a_backend_refuses_other_device_kinds_then_missing_libraries_then_its_own_rule() -> None:
    calls: list[str] = []

    def own_rule(device: Device) -> str | None:
        calls.append(str(device))
        return "own rule"

    absent = Library("no_such_library_xyz", (1, 0), extra="xyz")
    gpu_only = Backend("gpu_only", "custom", "test", device_kinds=("cuda",), requires=(absent,), check=own_rule)
    assert gpu_only.availability(CPU) == "backend gpu_only runs on CUDA devices only"
    assert gpu_only.availability(CUDA) == "no_such_library_xyz is not installed (pip install 'fp8bench[xyz]')"
    assert calls == []
    present = Backend("present", "custom", "test", check=own_rule)
    assert present.availability(CPU) == "own rule" and calls == ["cpu"]
    reason = present.unsupported_reason("gemm", object(), CPU)  # type: ignore[arg-type]
    assert reason == "backend present unavailable: own rule"


def test_te_needs_cuda_not_rocm_and_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    te = BACKENDS.get("te")
    assert te.availability(CPU) == "Transformer Engine runs on CUDA devices only"
    monkeypatch.setattr(te_backend.torch.version, "hip", None)
    monkeypatch.setattr(Library, "installed_version", lambda self: None)
    assert te.availability(CUDA) == "transformer_engine is not installed (pip install 'fp8bench[te]')"
    monkeypatch.setattr(Library, "installed_version", lambda self: "2.20.2")
    assert te.availability(CUDA) is None
    monkeypatch.setattr(te_backend.torch.version, "hip", "6.2")
    assert "ROCm" in te.availability(CUDA)


def test_compiled_on_cpu_needs_a_cxx_compiler_and_on_cuda_triton(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = BACKENDS.get("compiled")
    monkeypatch.setattr(compiled, "cxx_compiler", lambda: None)
    assert "C++ compiler" in backend.availability(CPU)
    monkeypatch.setattr(compiled, "cxx_compiler", lambda: "g++")
    assert backend.availability(CPU) is None and "g++" in backend.note(CPU)
    monkeypatch.setattr(Library, "installed_version", lambda self: None)
    assert backend.availability(CUDA) == "triton is not installed (pip install 'fp8bench[triton]')"


def test_torchao_and_triton_need_their_libraries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Library, "installed_version", lambda self: "0.1")
    assert BACKENDS.get("torchao").availability(CPU) == "torchao 0.1 is too old; fp8bench needs 0.10+"
    assert BACKENDS.get("triton").availability(CPU) == "triton 0.1 is too old; fp8bench needs 3.0+"
    assert triton_backend.TRITON.requires == (triton_backend.TRITON_LIBRARY,)


def test_torch_and_emulated_are_always_available_and_have_no_note() -> None:
    for name in ("torch", "emulated"):
        assert BACKENDS.get(name).availability(CPU) is None and BACKENDS.get(name).note(CPU) is None
    assert "interpreter" in BACKENDS.get("triton").note(CPU)


def test_a_library_outside_the_extras_names_its_own_package() -> None:
    lib = Library("no_such_library_xyz", (1, 0), distributions=("no-such-library-xyz",))
    assert lib.status().reason == "no_such_library_xyz is not installed (pip install no-such-library-xyz)"
