"""A fake ``pynvml`` for tests: an autospec of a real nvidia-ml-py release driven by a simulated GPU.

``unittest.mock.create_autospec`` copies the module's surface, so calling a function that the release does not
have, or calling one with the wrong arguments, fails the test. The module's constants and exception classes are
copied in unchanged (they are data, not driver calls), so ``except pynvml.NVMLError_NotSupported`` works against
the fake exactly as against the driver.

Two surfaces can be faked: the installed release (the newest, in CI), and an older release recorded by
``scripts/pynvml_surface.py`` under ``tests/data/pynvml/`` (its functions with their parameters, its constants
with their values, its error class names). The recorded surface is how the oldest release ``pyproject.toml``
allows is tested without installing it: a name that release lacks is absent from its fake too.
"""

from __future__ import annotations

import functools
import inspect
import json
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pynvml

RELEASES = Path(__file__).parent / "data" / "pynvml"


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


def _copy_data(fake: Any, source: Any) -> None:
    for name in dir(source):
        value = getattr(source, name)
        is_error = isinstance(value, type) and issubclass(value, BaseException)
        if is_error or isinstance(value, (int, float, str, bytes)):
            setattr(fake, name, value)


@functools.cache
def release_surface(version: str) -> types.ModuleType:
    """A module with exactly the public surface recorded for nvidia-ml-py ``version``: functions with the recorded
    parameters (bodies never run: the autospec replaces them), constants with the recorded values, and the recorded
    ``NVMLError_*`` names bound to the installed release's classes (the class hierarchy is the same generated one)."""
    recorded = json.loads((RELEASES / f"nvidia-ml-py-{version}.json").read_text())
    module = types.ModuleType(f"pynvml_{version.replace('.', '_')}")
    for name, params in recorded["functions"].items():
        def stub(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("a recorded release's function body never runs")
        stub.__name__ = name
        stub.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
            inspect.Parameter(p, getattr(inspect.Parameter, kind), default=None if has_default else inspect.Parameter.empty)
            for p, kind, has_default in params])
        setattr(module, name, stub)
    for name, value in recorded["constants"].items():
        setattr(module, name, value)
    for name in recorded["errors"]:
        setattr(module, name, getattr(pynvml, name))
    return module


_AUTOSPECS: dict[str | None, Any] = {}


def make_pynvml(gpu: FakeGpu, release: str | None = None) -> Any:
    """An autospec of ``pynvml`` whose device functions read ``gpu``: the installed release, or with ``release``
    the recorded surface of that older release (:func:`release_surface`).

    Building an autospec takes most of a second, so one is built per surface and test process and reset for each
    call: a fake from an earlier call stops describing its GPU once a new one is made (one fake at a time per test).
    """
    source = pynvml if release is None else release_surface(release)
    if release not in _AUTOSPECS:
        _AUTOSPECS[release] = mock.create_autospec(source)
    nv = _AUTOSPECS[release]
    nv.reset_mock(return_value=True, side_effect=True)
    _copy_data(nv, source)
    N = source
    nv.nvmlDeviceGetCount.side_effect = lambda: gpu.count
    nv.nvmlDeviceGetHandleByIndex.side_effect = lambda i: SimpleNamespace(index=i)
    nv.nvmlDeviceGetHandleByUUID.side_effect = lambda u: SimpleNamespace(index=0)
    nv.nvmlDeviceGetTotalEnergyConsumption.side_effect = lambda h: gpu.energy_mj()
    nv.nvmlDeviceGetPowerUsage.side_effect = lambda h: int(gpu.power_w * 1000)
    clocks = {N.NVML_CLOCK_SM: lambda: gpu.sm_clock_mhz, N.NVML_CLOCK_MEM: lambda: gpu.mem_clock_mhz}
    nv.nvmlDeviceGetClockInfo.side_effect = lambda h, t: clocks[t]()
    nv.nvmlDeviceGetMaxClockInfo.side_effect = lambda h, t: gpu.max_sm_clock_mhz if t == N.NVML_CLOCK_SM else 2619
    nv.nvmlDeviceGetClock.side_effect = lambda h, t, i: gpu.default_sm_clock_mhz
    if hasattr(source, "nvmlDeviceGetTemperatureV"):  # nvidia-ml-py 12.570.86 and newer
        nv.nvmlDeviceGetTemperatureV.side_effect = lambda h, s, version=None: gpu.temperature_c
    nv.nvmlDeviceGetTemperature.side_effect = lambda h, s: gpu.temperature_c
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
