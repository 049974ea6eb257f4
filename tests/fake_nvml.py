"""A fake ``pynvml`` for tests: an autospec of the real nvidia-ml-py module driven by a simulated GPU.

``unittest.mock.create_autospec`` copies the real module's surface, so calling a function that nvidia-ml-py does
not have, or calling one with the wrong arguments, fails the test. The real module's constants and exception
classes are copied in unchanged (they are data, not driver calls), so ``except pynvml.NVMLError_NotSupported``
works against the fake exactly as against the driver.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pynvml


@dataclass
class FakeGpu:
    """The simulated device: constant power, an energy counter that steps every ``counter_step_s`` seconds."""

    power_w: float = 300.0
    counter_step_s: float = 0.02  # real GPUs: ~0.1 s; shorter here so tests stay fast
    sm_clock_mhz: int = 1980
    default_sm_clock_mhz: int = 1755
    max_sm_clock_mhz: int = 1980
    mem_clock_mhz: int = 2619
    temperature_c: int = 55
    reasons: int = 0
    violation_ns: dict[int, int] = field(default_factory=dict)
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-12345678-1234-1234-1234-123456789abc"
    count: int = 1
    t0: float = field(default_factory=time.perf_counter)

    def energy_mj(self) -> int:
        """Millijoules since start, published only at whole counter steps (like the real counter)."""
        steps = int((time.perf_counter() - self.t0) / self.counter_step_s)
        return int(steps * self.counter_step_s * self.power_w * 1000)


def _copy_data(fake: Any) -> None:
    for name in dir(pynvml):
        value = getattr(pynvml, name)
        is_error = isinstance(value, type) and issubclass(value, BaseException)
        if is_error or isinstance(value, (int, float, str, bytes)):
            setattr(fake, name, value)


_AUTOSPEC: Any = None


def make_pynvml(gpu: FakeGpu) -> Any:
    """An autospec of the real ``pynvml`` whose device functions read ``gpu``.

    Building the autospec takes most of a second, so one is built per test process and reset for each call: a fake
    from an earlier call stops describing its GPU once a new one is made (one fake at a time per test).
    """
    global _AUTOSPEC
    if _AUTOSPEC is None:
        _AUTOSPEC = mock.create_autospec(pynvml)
    nv = _AUTOSPEC
    nv.reset_mock(return_value=True, side_effect=True)
    _copy_data(nv)
    N = pynvml
    nv.nvmlDeviceGetCount.side_effect = lambda: gpu.count
    nv.nvmlDeviceGetHandleByIndex.side_effect = lambda i: SimpleNamespace(index=i)
    nv.nvmlDeviceGetHandleByUUID.side_effect = lambda u: SimpleNamespace(index=0)
    nv.nvmlDeviceGetTotalEnergyConsumption.side_effect = lambda h: gpu.energy_mj()
    nv.nvmlDeviceGetPowerUsage.side_effect = lambda h: int(gpu.power_w * 1000)
    clocks = {N.NVML_CLOCK_SM: lambda: gpu.sm_clock_mhz, N.NVML_CLOCK_MEM: lambda: gpu.mem_clock_mhz}
    nv.nvmlDeviceGetClockInfo.side_effect = lambda h, t: clocks[t]()
    nv.nvmlDeviceGetMaxClockInfo.side_effect = lambda h, t: gpu.max_sm_clock_mhz if t == N.NVML_CLOCK_SM else 2619
    nv.nvmlDeviceGetClock.side_effect = lambda h, t, i: gpu.default_sm_clock_mhz
    nv.nvmlDeviceGetTemperatureV.side_effect = lambda h, s: gpu.temperature_c
    nv.nvmlDeviceGetCurrentClocksEventReasons.side_effect = lambda h: gpu.reasons
    nv.nvmlDeviceGetViolationStatus.side_effect = lambda h, p: SimpleNamespace(
        violationTime=gpu.violation_ns.get(p, 0), referenceTime=0)
    nv.nvmlDeviceGetName.side_effect = lambda h: gpu.name
    nv.nvmlDeviceGetUUID.side_effect = lambda h: gpu.uuid if h.index == 0 else f"GPU-other-{h.index}"
    nv.nvmlDeviceGetIndex.side_effect = lambda h: h.index
    nv.nvmlDeviceGetBoardPartNumber.side_effect = lambda h: "699-2G530-0200-000"
    nv.nvmlDeviceGetPciInfo.side_effect = lambda h: SimpleNamespace(
        busId=b"00000000:18:00.0", pciDeviceId=0x233010DE, pciSubSystemId=0x16C110DE)
    nv.nvmlDeviceGetVbiosVersion.side_effect = lambda h: "96.00.74.00.01"
    nv.nvmlSystemGetDriverVersion.side_effect = lambda: "550.54.15"
    nv.nvmlSystemGetCudaDriverVersion_v2.side_effect = lambda: 12040
    nv.nvmlDeviceGetCudaComputeCapability.side_effect = lambda h: (9, 0)
    nv.nvmlDeviceGetMemoryInfo.side_effect = lambda h, version=None: SimpleNamespace(total=85520809984)
    nv.nvmlDeviceGetEccMode.side_effect = lambda h: [1, 1]
    nv.nvmlDeviceGetMigMode.side_effect = lambda h: [0, 0]
    nv.nvmlDeviceGetPersistenceMode.side_effect = lambda h: 1
    nv.nvmlDeviceGetPowerManagementLimit.side_effect = lambda h: 700_000
    nv.nvmlDeviceGetPowerManagementDefaultLimit.side_effect = lambda h: 700_000
    nv.nvmlDeviceGetEnforcedPowerLimit.side_effect = lambda h: 700_000
    nv.nvmlDeviceGetTopologyCommonAncestor.side_effect = lambda a, b: N.NVML_TOPOLOGY_SYSTEM
    return nv


def skip_if_driver_present() -> None:
    """For tests of the no-driver path with the real nvidia-ml-py: skip where NVML actually starts."""
    import pytest

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return
    pynvml.nvmlShutdown()
    pytest.skip("an NVIDIA driver is present")
