"""The device capability matrix: which FP8 GEMM kinds a device can run natively, and why not.

Every backend's availability check asks this module, so the rules live in one place:

* NVIDIA FP8 tensor cores start at compute capability **8.9** (Ada: L4, L40S, RTX 4090) and **9.0** (Hopper).
* Block-scaled FP8 GEMMs with FP32 scales (1x128 / 128x128 tiles) need Hopper (**9.0+**) in cuBLAS/PyTorch.
* MXFP8 (E8M0 scales per 32 elements) is a Blackwell feature: **10.0+** (B200, GB200; 12.0 for RTX 50).
* AMD MI300-class GPUs (gfx942) use the ``fnuz`` FP8 variants (E4M3 max 240); later ones use the OCP formats.
* PyTorch's CPU ``_scaled_mm`` runs tensorwise and rowwise scales (seen with torch 2.13) and refuses block scales.

A rule here says what the hardware can do; a backend may still refuse a case at build time (its library too
old, a layout it lacks), and that refusal is recorded with its own message.

The second half of the matrix is software: which optional kernel libraries are installed, at which version, and
whether they can run on the device. :func:`backend_reason` is the availability check of every backend, so
``fp8bench doctor`` and the runner read the same rules:

* ``torch``, ``emulated``: always (per-precision rules above).
* ``triton``: Triton >= 3.0. CUDA runs compiled kernels (FP8 ``tl.dot`` needs 8.9+, checked per precision); the CPU
  runs them under Triton's interpreter, for correctness only.
* ``compiled``: ``torch.compile`` with Inductor: a C++ compiler on the CPU, Triton on CUDA.
* ``torchao``: torchao >= 0.10 (its float8 training API). It makes no device check itself; FP8 GEMMs follow the rules
  above (the CPU's ``_scaled_mm`` runs its tensorwise and rowwise recipes).
* ``te``: Transformer Engine >= 2.0, CUDA only (it cannot be imported without CUDA libraries). Its version is read
  from package metadata so that this check never imports it on a machine where the import would fail.
"""

from __future__ import annotations

import importlib.metadata
import re
import shutil
from dataclasses import dataclass
from functools import lru_cache

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


# --- software: optional kernel libraries and per-backend availability ---------------------------------------------

# Oldest versions whose APIs the backends are written against: Triton 3.0 (tl.float8e4nv dots, knobs-free jit
# arguments), torchao 0.10 (Float8LinearConfig.from_recipe_name with the rowwise recipes), Transformer Engine 2.0
# (MXFP8BlockScaling; Float8CurrentScaling and Float8BlockScaling are checked per recipe by their own versions).
MIN_VERSIONS: dict[str, tuple[int, ...]] = {"triton": (3, 0), "torchao": (0, 10), "transformer_engine": (2, 0)}
_DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "triton": ("triton", "pytorch-triton", "pytorch-triton-rocm"),
    "torchao": ("torchao",),
    "transformer_engine": ("transformer_engine", "transformer-engine"),
}


@dataclass(frozen=True)
class LibraryStatus:
    """An optional library: its installed version (``None``: not installed) and why it is unusable, if it is."""

    name: str
    version: str | None
    reason: str | None


def parse_version(text: str) -> tuple[int, ...]:
    """Leading numeric release of a version string: ``"2.20.2+cu128"`` -> ``(2, 20, 2)``."""
    parts: list[int] = []
    for piece in text.split("."):
        m = re.match(r"\d+", piece)
        if not m:
            break
        parts.append(int(m.group()))
        if m.end() != len(piece):
            break
    return tuple(parts)


def installed_version(name: str) -> str | None:
    """Installed version of one of the optional libraries, from package metadata (no import)."""
    for dist in _DISTRIBUTIONS.get(name, (name,)):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def library_status(name: str, version: str | None = None) -> LibraryStatus:
    """Whether ``name`` is installed and new enough; ``version`` overrides the metadata lookup (for tests)."""
    if name not in MIN_VERSIONS:
        raise ValueError(f"unknown library {name!r}; known: {', '.join(MIN_VERSIONS)}")
    version = version if version is not None else installed_version(name)
    minimum = ".".join(map(str, MIN_VERSIONS[name]))
    if version is None:
        return LibraryStatus(name, None, f"{name} is not installed (pip install 'fp8bench[{_extra(name)}]')")
    if parse_version(version) < MIN_VERSIONS[name]:
        return LibraryStatus(name, version, f"{name} {version} is too old; fp8bench needs {minimum}+")
    return LibraryStatus(name, version, None)


def _extra(name: str) -> str:
    return {"transformer_engine": "te"}.get(name, name)


@lru_cache(maxsize=1)
def cxx_compiler() -> str | None:
    """The C++ compiler Inductor's CPU backend would call (``CXX``, else ``g++``/``c++``/``clang++``), or ``None``."""
    import os

    for candidate in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if candidate and shutil.which(candidate):
            return candidate
    return None


def backend_reason(backend: str, device: Device) -> str | None:
    """Why ``backend`` cannot run on ``device`` at all (``None``: it can). The one availability rule per backend."""
    if backend in ("torch", "emulated"):
        return None
    if backend == "triton":
        lib = library_status("triton")
        if lib.reason:
            return lib.reason
        from fp8bench.kernels import triton_kernels  # imported here: it decides Triton's interpreter mode

        return triton_kernels.device_reason(device.torch)
    if backend == "compiled":
        if not hasattr(torch, "compile"):
            return f"torch {torch.__version__} has no torch.compile"
        if device.is_cuda:
            return library_status("triton").reason  # Inductor generates Triton kernels for CUDA
        if cxx_compiler() is None:
            return "Inductor's CPU backend needs a C++ compiler (set CXX or install g++)"
        return None
    if backend == "torchao":
        return library_status("torchao").reason
    if backend == "te":
        if not device.is_cuda:
            return "Transformer Engine runs on CUDA devices only"
        if _is_rocm():
            return "Transformer Engine's PyTorch build here is CUDA-only (ROCm has its own fork)"
        return library_status("transformer_engine").reason
    raise ValueError(f"unknown backend {backend!r}; known: torch, emulated, triton, compiled, torchao, te")


def backend_note(backend: str, device: Device) -> str | None:
    """A caveat on an available backend (how it runs here), for ``fp8bench doctor``; ``None`` if there is none."""
    if backend == "triton" and not device.is_cuda and backend_reason("triton", device) is None:
        return "Triton interpreter on the CPU: correctness only, timings never compared"
    if backend == "compiled" and not device.is_cuda and backend_reason("compiled", device) is None:
        return f"Inductor C++ backend ({cxx_compiler()}); compile time recorded as compile_s"
    return None


def fp8_gemm_reason(device: Device, granularity: Granularity) -> str | None:
    """Shorthand for the hardware rule of one FP8 scaling granularity on ``device``."""
    return capabilities_for(device).fp8_reason(granularity)
