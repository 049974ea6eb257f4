"""The environment a run was measured in, captured once per run and stored with every record.

A number without its environment cannot be compared: a different torch, a different cuBLAS, another thread count
or another power limit moves results by more than most kernel changes. This module records what can be read
without privileges: git commit and dirty flag, host alias, CPU model and thread count, device name and properties,
library versions (torch, CUDA, cuBLAS, cuDNN, Triton, Transformer Engine, torchao), and the environment variables
and flags that change kernel selection.

On a GPU run the ``gpu`` key adds what NVML knows (:func:`gpu_environment`): identity (name, board part number,
UUID, PCI ids, VBIOS), driver and CUDA driver versions, the CUDA runtime torch was built with, ECC, MIG and
persistence modes, default, current and enforced power limits, the clock policy, the GPU count and topology, and
the raw ``nvidia-smi -q`` text. The stable fields among them (device name, driver, CUDA, power limit, clock
policy) feed the comparability key (:mod:`fp8bench.core.comparability`); the rest explains a surprising number later.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from fp8bench.core.commits import web_url
from fp8bench.core.devices import Device, cpu_model
from fp8bench.core.git import git_fact
from fp8bench.core.noise import host_load

# Environment variables that change which kernels run or how many threads they use.
RELEVANT_ENV = (
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE",
    "NVIDIA_TF32_OVERRIDE", "OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
    "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "TORCH_CUDNN_V8_API_ENABLED", "TORCHINDUCTOR_MAX_AUTOTUNE",
    "TRITON_INTERPRET", "NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN", "NVTE_FUSED_ATTN_BACKEND", "NVTE_DPA_FP8_RECIPE",
    "PYTORCH_CUDA_ALLOC_CONF",
    # TE's power-of-two scale switches: fp8bench overrides them per recipe object (kernels/te_backend.py), but what
    # the environment asked for is part of the record of how TE was set up.
    "NVTE_FP8_BLOCK_SCALING_FP32_SCALES", "NVTE_FP8_CURRENT_SCALING_POWER_2_SCALES",
    "FP8BENCH_HOST_ALIAS", "FP8BENCH_CLOCK_POLICY",
)

# NVML has no getter for clocks locked with `nvidia-smi -lgc`; an operator who locks them declares it here
# (for example "locked:1410"), and the declaration becomes the run's clock policy.
CLOCK_POLICY_ENV = "FP8BENCH_CLOCK_POLICY"
# nvidia-smi -q can take a few seconds on a many-GPU host; past this it is skipped, not waited for.
NVIDIA_SMI_TIMEOUT_S = 30


def host_alias() -> str:
    """A stable, non-identifying name for this host: ``FP8BENCH_HOST_ALIAS`` or a hash of the hostname."""
    alias = os.environ.get("FP8BENCH_HOST_ALIAS")
    if alias:
        return alias
    return "host-" + hashlib.sha256(socket.gethostname().encode()).hexdigest()[:10]


def git_info(path: Path | None = None) -> dict[str, Any]:
    """Where the measured code came from: commit, branch, dirty flag, and what orders commits on a branch.

    ``first_parent_depth`` is the number of commits on the first-parent chain up to HEAD (``git rev-list --count
    --first-parent HEAD``): along one branch it grows by one per commit, so it orders nightly runs by commit without
    trusting clocks; it is ``None`` in a shallow clone, where the count would be wrong. ``commit_time`` is the
    committer date (ISO 8601), the fallback order. ``remote`` is the ``origin`` URL as a web address with any user
    name or token removed, for links to the commit. A detached HEAD (CI checkouts) takes its branch from
    ``$FP8BENCH_GIT_BRANCH`` or the CI's branch variables when set.
    """
    cwd = path or Path.cwd()

    def git(*args: str) -> str | None:
        return git_fact(cwd, *args)

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None, "branch": None, "dirty": None}
    status = git("status", "--porcelain", "--untracked-files=no")
    branch = git("rev-parse", "--abbrev-ref", "HEAD")
    if branch in (None, "HEAD"):
        branch = next((os.environ[v] for v in BRANCH_ENV if os.environ.get(v)), branch)
    depth = None
    if git("rev-parse", "--is-shallow-repository") == "false":
        count = git("rev-list", "--count", "--first-parent", "HEAD")
        depth = int(count) if count and count.isdigit() else None
    return {"commit": commit, "branch": branch, "dirty": bool(status), "first_parent_depth": depth,
            "commit_time": git("show", "-s", "--format=%cI", "HEAD"),
            "remote": web_url(git("remote", "get-url", "origin"))}


# Where CI systems put the branch of a detached checkout (GitHub Actions: HEAD_REF on pull requests).
BRANCH_ENV = ("FP8BENCH_GIT_BRANCH", "GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME", "BRANCH_NAME")


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
    """Everything about this machine and software that a record's numbers depend on. ``host.load`` is the load
    when the run starts (:mod:`fp8bench.core.noise`): a run measured beside other work is noisy."""
    load = host_load()
    return {
        "git": git_info(),
        "host": {"alias": host_alias(), "os": platform.platform(), "cpu_model": cpu_model(),
                 "logical_cpus": os.cpu_count(), "load": load.to_dict() if load else None},
        "device": device_properties(device),
        "software": software_versions(),
        "env": {k: os.environ[k] for k in RELEVANT_ENV if k in os.environ},
        "flags": flags(),
        "gpu": gpu_environment(device),
    }


def nvidia_smi_q(uuid: str | None) -> str | None:
    """The raw ``nvidia-smi -q`` report for one GPU (all GPUs when ``uuid`` is ``None``), or ``None``."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-q", *(["-i", uuid] if uuid else [])], capture_output=True, text=True,
                             timeout=NVIDIA_SMI_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def clock_policy(info: dict[str, Any]) -> str:
    """``declared:<text>`` from :data:`CLOCK_POLICY_ENV`; ``applications:<MHz>`` when the application SM clock was
    moved off its default; otherwise ``default`` (boost as the driver decides; NVML cannot see locked clocks)."""
    declared = os.environ.get(CLOCK_POLICY_ENV)
    if declared:
        return f"declared:{declared}"
    app, default = info.get("app_sm_clock_mhz"), info.get("reference_sm_clock_mhz")
    if app and default and info.get("reference_sm_clock_source") == "default application clock" and app != default:
        return f"applications:{app}"
    return "default"


def _torch_gpu(device: Device) -> dict[str, Any]:
    """What CUDA itself says about the device (SM count is only here: NVML reports it for MIG slices only)."""
    if not torch.cuda.is_available():
        return {}
    props = torch.cuda.get_device_properties(device.index or 0)
    return {"name": props.name, "uuid": str(getattr(props, "uuid", "")) or None,
            "compute_capability": f"{props.major}.{props.minor}", "sm_count": props.multi_processor_count,
            "memory_total_bytes": props.total_memory, "cuda_visible_count": torch.cuda.device_count()}


def gpu_environment(device: Device, nv: Any = None,
                    smi: Callable[[str | None], str | None] = nvidia_smi_q) -> dict[str, Any]:
    """The GPU part of the environment: ``{"available": False, "reason": ...}`` on a CPU run, else NVML's and
    CUDA's view of the device (``nv`` is the ``pynvml`` module, loaded when ``None``). Never raises."""
    if not device.is_cuda:
        return {"available": False, "reason": f"{device} run: no GPU in use"}
    from fp8bench.energy import nvml

    cuda = _torch_gpu(device)
    keys = ("name", "uuid", "driver_version", "cuda_driver_version", "power_limit_w", "enforced_power_limit_w")
    out: dict[str, Any] = {"available": True, **dict.fromkeys(keys), **cuda,
                           "cuda_runtime_version": torch.version.cuda}
    try:
        dev = nvml.open_device(device.index or 0, cuda.get("uuid"), nv)
    except nvml.NvmlUnavailable as exc:
        out.update(nvml_reason=str(exc), clock_policy=clock_policy({}) if os.environ.get(CLOCK_POLICY_ENV) else None)
        out["nvidia_smi_q"] = smi(nvml.nvml_uuid(out["uuid"]) if out.get("uuid") else None)
        return out
    try:
        info = dev.info()
        # CUDA's numbers win where both exist (they describe what the process sees); NVML fills the rest.
        out.update({k: v for k, v in info.items() if out.get(k) is None})
        out["uuid"] = info.get("uuid") or out["uuid"]  # NVML's GPU-... spelling, the one nvidia-smi takes
        out["clock_policy"] = clock_policy(info)
        with nvml.all_devices(dev.nv) as every:
            out["gpu_count"] = len(every)
            if len(every) > 1:
                out["topology"] = dev.topology([d for d in every if d.uuid() != info.get("uuid")])
    except dev.nv.NVMLError as exc:  # a partial record beats none; say what failed
        out["nvml_error"] = nvml.error_text(exc)
    finally:
        dev.close()
    out["nvidia_smi_q"] = smi(out.get("uuid"))
    return out
