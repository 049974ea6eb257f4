"""The environment record: the CPU run's header, and the GPU part read through NVML (an autospec of the real
``pynvml``) and ``nvidia-smi`` (a stand-in script on PATH)."""

import os

import pynvml
import pytest
from fake_nvml import FakeGpu, make_pynvml, skip_if_driver_present

from fp8bench.core.comparability import comparability_key
from fp8bench.core.devices import Device
from fp8bench.core.records import load_record
from fp8bench.hardware import environment
from fp8bench.hardware.environment import (
    CLOCK_POLICY_ENV,
    capture,
    clock_policy,
    gpu_environment,
    nvidia_smi_q,
)

CPU = Device("cpu")
GPU = Device("cuda", 0)
REQUIRED = ("driver_version", "cuda_driver_version", "power_limit_w", "enforced_power_limit_w", "clock_policy",
            "name", "uuid")


def test_cpu_run_says_no_gpu_and_keeps_the_rest():
    env = capture(CPU)
    assert env["gpu"] == {"available": False, "reason": "cpu run: no GPU in use"}
    assert env["device"]["kind"] == "cpu" and env["software"]["torch"]
    assert env["host"]["logical_cpus"] == os.cpu_count()


def test_gpu_environment_from_nvml(monkeypatch):
    monkeypatch.delenv(CLOCK_POLICY_ENV, raising=False)
    asked = []
    gpu = gpu_environment(GPU, nv=make_pynvml(FakeGpu()), smi=lambda uuid: asked.append(uuid) or "==NVSMI LOG==")
    for key in REQUIRED:
        assert gpu[key] is not None, key
    assert gpu["available"] is True
    assert gpu["name"] == "NVIDIA H100 80GB HBM3"
    assert gpu["uuid"] == "GPU-12345678-1234-1234-1234-123456789abc"
    assert (gpu["driver_version"], gpu["cuda_driver_version"]) == ("550.54.15", "12.4")
    assert gpu["power_limit_w"] == gpu["enforced_power_limit_w"] == 700.0
    assert gpu["clock_policy"] == "default"
    assert gpu["vbios_version"] == "96.00.74.00.01" and gpu["board_part_number"] == "699-2G530-0200-000"
    assert gpu["ecc_mode"]["current"] is True and gpu["mig_mode"] == {"current": False, "pending": False}
    assert gpu["persistence_mode"] is True and gpu["gpu_count"] == 1 and "topology" not in gpu
    assert gpu["nvidia_smi_q"] == "==NVSMI LOG==" and asked == [gpu["uuid"]]


def test_gpu_environment_feeds_the_comparability_key(monkeypatch):
    monkeypatch.delenv(CLOCK_POLICY_ENV, raising=False)
    run = {"device": {"name": "NVIDIA H100 80GB HBM3"}, "software": {"torch": "2.6.0", "cuda_runtime": "12.4"},
           "settings": {}, "gpu": gpu_environment(GPU, nv=make_pynvml(FakeGpu()), smi=lambda uuid: None)}
    record = load_record({"workload": "gemm", "shape": {"m": 8}, "precision": "bf16", "backend": "torch",
                          "device": "cuda:0", "status": "ok"})
    key = comparability_key(record, run)
    assert (key.driver_major, key.cuda_driver, key.power_limit_w, key.clock_policy) == ("550", "12.4", 700.0,
                                                                                       "default")
    capped = {**run, "gpu": gpu_environment(GPU, nv=_capped_nvml(), smi=lambda uuid: None)}
    assert comparability_key(record, capped).differences(key) == {"power_limit_w": (500.0, 700.0)}


def _capped_nvml():
    nv = make_pynvml(FakeGpu())
    nv.nvmlDeviceGetPowerManagementLimit.side_effect = lambda h: 500_000
    return nv


def test_multi_gpu_count_and_topology():
    gpu = gpu_environment(GPU, nv=make_pynvml(FakeGpu(count=2)), smi=lambda uuid: None)
    assert gpu["gpu_count"] == 2 and gpu["topology"] == {"GPU-other-1": "system"}


def test_clock_policy_declared_or_application_clocks(monkeypatch):
    monkeypatch.delenv(CLOCK_POLICY_ENV, raising=False)
    source = "default application clock"
    assert clock_policy({"app_sm_clock_mhz": 1755, "reference_sm_clock_mhz": 1755,
                         "reference_sm_clock_source": source}) == "default"
    assert clock_policy({"app_sm_clock_mhz": 1410, "reference_sm_clock_mhz": 1755,
                         "reference_sm_clock_source": source}) == "applications:1410"
    monkeypatch.setenv(CLOCK_POLICY_ENV, "locked:1410")
    assert clock_policy({}) == "declared:locked:1410"


def test_partial_record_when_nvml_fails_midway(monkeypatch):
    nv = make_pynvml(FakeGpu())
    nv.nvmlDeviceGetCount.side_effect = pynvml.NVMLError_Unknown()
    gpu = gpu_environment(GPU, nv=nv, smi=lambda uuid: None)
    assert gpu["driver_version"] == "550.54.15"  # read before the failure, kept
    assert gpu["nvml_error"] == "NVMLError_Unknown (code 999)"


def test_gpu_environment_without_a_driver_says_why():
    skip_if_driver_present()
    gpu = gpu_environment(GPU, smi=lambda uuid: None)
    assert gpu["available"] is True and "NVMLError_LibraryNotFound" in gpu["nvml_reason"]
    assert all(k in gpu for k in REQUIRED) and gpu["driver_version"] is None


def test_nvidia_smi_text_is_captured(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\necho "==============NVSMI LOG=============="\necho "args: $*"\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    text = nvidia_smi_q("GPU-abc")
    assert text.startswith("==============NVSMI LOG") and "args: -q -i GPU-abc" in text
    smi.write_text("#!/bin/sh\nexit 9\n")
    assert nvidia_smi_q(None) is None  # a failing nvidia-smi records nothing rather than its error text


def test_nvidia_smi_absent_is_none(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert environment.nvidia_smi_q(None) is None


@pytest.mark.gpu
def test_real_gpu_environment_has_the_comparability_fields():
    pytest.importorskip("pynvml")
    gpu = capture(GPU)["gpu"]
    assert gpu["available"] is True
    if "nvml_reason" in gpu:
        pytest.skip(f"NVML unusable on this GPU runner: {gpu['nvml_reason']}")
    for key in REQUIRED:
        assert gpu[key] is not None, key
    assert gpu["uuid"].startswith(("GPU-", "MIG-")) and gpu["sm_count"] > 0
