"""The environment a run was measured in, captured once per run and stored with every record.

A number without its environment cannot be compared: a different torch, a different cuBLAS, another thread count
or another power limit moves results by more than most kernel changes. This module records what can be read
without privileges: git commit and dirty flag, host alias, CPU model and thread count, device name and properties,
library versions (torch, CUDA, cuBLAS, cuDNN, Triton, Transformer Engine, torchao), and the environment variables
and flags that change kernel selection.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any

import torch

from fp8bench.devices import Device

# Environment variables that change which kernels run or how many threads they use.
RELEVANT_ENV = (
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE",
    "NVIDIA_TF32_OVERRIDE", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE", "TORCH_CUDNN_V8_API_ENABLED", "TORCHINDUCTOR_MAX_AUTOTUNE", "TRITON_INTERPRET",
    "NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_FUSED_ATTN_BACKEND", "NVTE_DPA_FP8_RECIPE", "PYTORCH_CUDA_ALLOC_CONF",
    "FP8BENCH_HOST_ALIAS",
)


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's brand string (``AMD EPYC 9654 96-Core Processor``), or the platform's processor name."""
    try:
        import cpuinfo

        brand = cpuinfo.get_cpu_info().get("brand_raw")
        if brand:
            return str(brand)
    except Exception:  # cpuinfo can fail inside odd containers; fall back below
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_alias() -> str:
    """A stable, non-identifying name for this host: ``FP8BENCH_HOST_ALIAS`` or a hash of the hostname."""
    alias = os.environ.get("FP8BENCH_HOST_ALIAS")
    if alias:
        return alias
    return "host-" + hashlib.sha256(socket.gethostname().encode()).hexdigest()[:10]


def git_info(path: Path | None = None) -> dict[str, Any]:
    """Commit, branch and dirty flag of the repository at ``path`` (the working directory by default)."""
    cwd = str(path or Path.cwd())

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "branch": None, "dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "branch": git("rev-parse", "--abbrev-ref", "HEAD"), "dirty": bool(status)}


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def software_versions() -> dict[str, Any]:
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    cublas = None
    if torch.cuda.is_available():
        try:
            cublas = torch._C._cuda_getCompiledVersion()  # CUDA runtime version torch was built against
        except AttributeError:
            cublas = None
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "cuda_runtime": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "cudnn": cudnn,
        "cuda_compiled_version": cublas,
        "triton": _version("triton"),
        "transformer_engine": _version("transformer_engine") or _version("transformer-engine"),
        "torchao": _version("torchao"),
        "numpy": _version("numpy"),
        "fp8bench": _version("fp8bench"),
    }


def device_properties(device: Device) -> dict[str, Any]:
    if not device.is_cuda:
        return {"name": cpu_model(), "kind": "cpu", "threads": torch.get_num_threads(),
                "interop_threads": torch.get_num_interop_threads(), "logical_cpus": os.cpu_count(),
                "machine": platform.machine(), "mkldnn": torch.backends.mkldnn.is_available()}
    props = torch.cuda.get_device_properties(device.index or 0)
    return {"name": props.name, "kind": "cuda", "index": device.index or 0,
            "compute_capability": f"{props.major}.{props.minor}", "sm_count": props.multi_processor_count,
            "total_memory_bytes": props.total_memory, "l2_cache_bytes": getattr(props, "L2_cache_size", None),
            "uuid": str(getattr(props, "uuid", "")) or None, "device_count": torch.cuda.device_count()}


def flags() -> dict[str, Any]:
    return {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "deterministic": torch.are_deterministic_algorithms_enabled(),
    }


def capture(device: Device) -> dict[str, Any]:
    """Everything about this machine and software that a record's numbers depend on."""
    return {
        "git": git_info(),
        "host": {"alias": host_alias(), "os": platform.platform(), "cpu_model": cpu_model(),
                 "logical_cpus": os.cpu_count()},
        "device": device_properties(device),
        "software": software_versions(),
        "env": {k: os.environ[k] for k in RELEVANT_ENV if k in os.environ},
        "flags": flags(),
    }
