"""A fake ``pynvml`` for tests: an autospec of a real nvidia-ml-py release driven by a simulated GPU.

``unittest.mock.create_autospec`` copies the module's surface, so calling a function that the release does not
have, or calling one with the wrong arguments, fails the test. The module's constants and exception classes are
copied in unchanged (they are data, not driver calls), so ``except pynvml.NVMLError_NotSupported`` works against
the fake exactly as against the driver.

Two surfaces can be faked: the installed release (the newest, in CI), and an older release recorded by
``scripts/pynvml_surface.py`` under ``tests/data/pynvml/`` (its functions with their parameters, its constants
with their values, its error class names). The recorded surface is how the oldest release ``pyproject.toml``
allows is tested without installing it: a name that release lacks is absent from its fake too.

Driver rules the fake enforces (nvidia-ml-py 13.615.71 ``pynvml.py``; ``nvml.h`` of NVML API version 13 as
NVIDIA/go-nvml ``gen/nvml/nvml.h`` carries it at 2f9e261, its doc comments quoted by function):

* **Reference-counted sessions.** ``nvmlInit`` counts up and ``nvmlShutdown`` counts down (``pynvml.py``,
  ``_nvmlLib_refcount``, ``nvmlInitWithFlags``/``nvmlShutdown``; ``nvml.h`` ``nvmlInit_v2``: "A reference count of
  the number of initializations is maintained. Shutdown only occurs when the reference count reaches zero"). Every
  device or system function of the module, whether a test gave it an answer or not, raises
  ``NVMLError_Uninitialized`` (code 1) while the count is zero, as each documents (``NVML_ERROR_UNINITIALIZED`` "if
  the library has not been successfully initialized"). A shutdown past the count is no error ("for backwards
  compatibility", ``nvml.h`` :4027-4029); a shutdown before any init raises ``NVMLError_Uninitialized``: ``nvml.h``
  :4033 lists ``NVML_ERROR_UNINITIALIZED`` among ``nvmlShutdown``'s returns, and pynvml 12.535.77 raises it before
  any call while no library is loaded (``_nvmlGetFunctionPointer``, :910-911).
* **Two powers, by architecture.** ``nvmlDeviceGetPowerUsage`` returns milliwatts averaged over one second on
  Ampere except GA100 and newer, and instantaneous power on GA100 and older architectures (``nvml.h``,
  ``nvmlDeviceGetPowerUsage``): :attr:`FakeGpu.architecture` (an ``NVML_DEVICE_ARCH_*`` value, also what
  ``nvmlDeviceGetArchitecture`` answers) and :attr:`FakeGpu.ga100` choose. The fields: ``NVML_FI_DEV_POWER_INSTANT``
  (186) "Current GPU power, supported on all architectures"; ``NVML_FI_DEV_POWER_AVERAGE`` (185) "GPU power averaged
  over 1 sec interval, supported on Ampere (except GA100) or newer" (``nvml.h`` comments on both ids, :2716 for
  185); elsewhere 185 answers ``NVML_ERROR_NOT_SUPPORTED`` in its entry, by assumption ("Assumptions" below).
* **Per-entry field results.** ``nvmlDeviceGetFieldValues`` succeeds as a call and reports each field in its own
  entry: ``nvmlReturn`` "must be checked before looking at value, as value is undefined if nvmlReturn !=
  NVML_SUCCESS", and ``valueType`` names the member of the ``value`` union that holds the number (``nvml.h``
  ``nvmlFieldValue_t``, ``nvmlValueType_t``, ``nvmlValue_t``). :attr:`FakeGpu.instant_field` off models a driver
  without field 186 (``NOT_SUPPORTED``); :attr:`FakeGpu.field_returns` queues the codes of the next entries (a
  transient ``NVML_ERROR_UNKNOWN``, "on any unexpected error"); :attr:`FakeGpu.field_value_type` sets the type the
  driver reports (``NVML_VALUE_TYPE_UNSIGNED_SHORT`` = 6, member ``usVal``, exists in nvidia-ml-py 12.560.30 as a
  constant but its ``c_nvmlValue_t`` gains ``usVal`` only in 12.570.86); the entry's union holds only that member.
* **A stepped energy counter.** ``nvmlDeviceGetTotalEnergyConsumption`` is millijoules since the driver loaded
  (NVML reference), published only at whole update periods (:attr:`FakeGpu.counter_step_s`, configurable: NVIDIA
  does not document the period; ~100 ms observed, 10-100 ms reported, ``shared/reference/nvml_and_peaks.md``).
  It integrates the power history, so a power step shows in it as it does on a GPU.
* **Locked clocks, and a current clock that is only the current one.** ``nvmlDeviceSetGpuLockedClocks(h, min,
  max)`` takes two MHz values or two ``nvmlClockLimitId_t`` values (``nvml.h``, its table): TDP/TDP locks to the
  TDP (base) clock, UNLIMITED/TDP caps at it ("clock may drift below"), TDP/UNLIMITED floors at it ("may boost
  above"), UNLIMITED/UNLIMITED unlocks "(== nvmlDeviceResetGpuLockedClocks)", and a mixed numeric and symbolic
  pair is ``NVML_ERROR_INVALID_ARGUMENT``. NVML has no getter for the locked range; ``nvmlDeviceGetClockInfo``
  "Retrieves the current clock speeds" (``nvml.h``), so an idle GPU (:attr:`FakeGpu.idle`) reads its idle clock and
  sets ``nvmlClocksEventReasonGpuIdle`` ("GPU is idle"), locked or not: the fake never promises that a lock reads
  back as its target (whether a lock holds an idle GPU at its locked clock is not documented either way; the fake
  takes the case that would hurt). What ``NVML_CLOCK_LIMIT_ID_TDP`` locks to is an assumption: ``nvml.h`` :8913
  says only "Lock clock to TDP"; the fake takes the base clock (:attr:`FakeGpu.base_sm_clock_mhz`), the clock
  NVIDIA's data sheets rate at TDP. ``NVML_VALUE_NOT_AVAILABLE`` (-1) is documented only for members of structures
  fp8bench does not read (process and accounting statistics, ``nvml.h``), so no answer of the fake carries it.
* **Deprecated application clocks (NVML 13).** ``NVML_CLOCK_ID_APP_CLOCK_TARGET`` and ``_DEFAULT`` are "Deprecated,
  do not use" (``nvml.h`` :1127-1130) and their getters ``DEPRECATED(13.0)``, to be removed in CUDA 14.0
  (:5672-5677). :attr:`FakeGpu.application_clocks_deprecated` models a driver of that line: ``nvmlDeviceGetClock``
  with either id raises ``NVMLError_Deprecated`` (``NVML_ERROR_DEPRECATED`` = 26, :1324; a class in every
  nvidia-ml-py fp8bench allows, 12.535.77 ``pynvml.py`` :243). Which code such a driver returns is an assumption:
  ``nvml.h`` lists none for a deprecated clock id, and 26 is the one whose handling would otherwise go untested.
* **Assumptions, not vendor statements.** Field 185 answering ``NOT_SUPPORTED`` on GA100 and older: ``nvml.h``
  :2716 says only where it is supported, not what the driver answers elsewhere. ``NOT_SUPPORTED`` for every power
  scope but ``NVML_POWER_SCOPE_GPU``: the memory scope answers on H100 (``shared/reference/nvml_and_peaks.md``),
  but fp8bench asks only for the GPU scope, so the fake keeps the refusal.
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
    """The simulated device: instantaneous power ``power_w`` (change it with :meth:`set_power` to keep its history),
    an energy counter that steps every ``counter_step_s`` seconds, an NVML session count ``nvml_refs``."""

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
    nvml_refs: int = 0  # open nvmlInit sessions (module docstring)
    # What NVML_CLOCK_LIMIT_ID_TDP locks to. Assumption: the base clock (H100 SXM's); nvml.h :8913 says only "Lock
    # clock to TDP" (module docstring).
    base_sm_clock_mhz: int = 1590
    locked_sm_clock_mhz: int | None = None
    instant_field: bool = True  # the driver answers NVML_FI_DEV_POWER_INSTANT
    architecture: int = 9  # NVML_DEVICE_ARCH_HOPPER (nvml.h: AMPERE = 7, ADA = 8, HOPPER = 9)
    ga100: bool = False  # an Ampere GA100 (A100): GetPowerUsage instantaneous, no averaged field
    field_returns: list[int] = field(default_factory=list)  # nvmlReturn of the next field entries, then SUCCESS
    field_value_type: int = 1  # NVML_VALUE_TYPE_UNSIGNED_INT: the type the driver reports power fields in
    idle: bool = False  # nothing runs: the current SM clock is the idle clock and the GpuIdle bit is set
    idle_sm_clock_mhz: int = 345
    # Whether an idle GPU sets nvmlClocksEventReasonGpuIdle: the bit "may be removed in a later release" (nvml.h
    # :3319-3322), so a driver without it reads idle as a low clock with no reason.
    idle_reason_bit: bool = True
    power_history: list[tuple[float, float]] = field(default_factory=list)  # (perf_counter s, watts) from then on
    nvml_inits: int = 0  # nvmlInit calls ever made (a shutdown before the first is Uninitialized)
    application_clocks_deprecated: bool = False  # an NVML 13 driver (module docstring, "Deprecated")

    def set_power(self, watts: float, at: float | None = None) -> None:
        """The instantaneous power changes to ``watts`` now (or at ``at``, perf_counter seconds)."""
        self._history().append((time.perf_counter() if at is None else at, watts))
        self.power_w = watts

    def _history(self) -> list[tuple[float, float]]:
        if not self.power_history:
            self.power_history.append((self.t0, self.power_w))
        return self.power_history

    def joules_between(self, a: float, b: float) -> float:
        """Energy (J) of the power history over ``[a, b]`` (perf_counter seconds)."""
        points = [*self._history(), (max(b, self._history()[-1][0]), 0.0)]
        total = 0.0
        for (start, watts), (end, _) in zip(points, points[1:], strict=False):
            lo, hi = max(start, a), min(end, b)
            if hi > lo:
                total += watts * (hi - lo)
        return total

    def energy_mj(self) -> int:
        """Millijoules since start, published only at whole counter steps (like the real counter)."""
        steps = int((time.perf_counter() - self.t0) / self.counter_step_s)
        return round(self.joules_between(self.t0, self.t0 + steps * self.counter_step_s) * 1000)

    def average_power_w(self, window_s: float = 1.0) -> float:
        """The power averaged over the last ``window_s`` seconds (what GetPowerUsage reports on Ampere+)."""
        now = time.perf_counter()
        start = max(self.t0, now - window_s)
        return self.joules_between(start, now) / (now - start) if now > start else self.power_w

    @property
    def averages_power_usage(self) -> bool:
        """Whether ``nvmlDeviceGetPowerUsage`` is the one-second average: Ampere except GA100, and newer."""
        return self.architecture >= 7 and not self.ga100

    def power_usage_w(self) -> float:
        """What ``nvmlDeviceGetPowerUsage`` reports, in watts (module docstring, "Two powers")."""
        return self.average_power_w() if self.averages_power_usage else self.power_w

    def current_sm_clock_mhz(self) -> int:
        if self.idle:
            return self.idle_sm_clock_mhz
        return self.locked_sm_clock_mhz if self.locked_sm_clock_mhz is not None else self.sm_clock_mhz

    def current_reasons(self) -> int:
        return self.reasons | (0x1 if self.idle and self.idle_reason_bit else 0)  # nvmlClocksEventReasonGpuIdle


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
            inspect.Parameter(p, getattr(inspect.Parameter, kind),
                              default=None if has_default else inspect.Parameter.empty)
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
    nv.nvmlDeviceGetPowerUsage.side_effect = lambda h: int(gpu.power_usage_w() * 1000)
    nv.nvmlDeviceGetArchitecture.side_effect = lambda h: gpu.architecture
    nv.nvmlDeviceGetFieldValues.side_effect = lambda h, ids: [_field_value(gpu, N, f) for f in ids]
    clocks = {N.NVML_CLOCK_SM: gpu.current_sm_clock_mhz, N.NVML_CLOCK_MEM: lambda: gpu.mem_clock_mhz}
    nv.nvmlDeviceGetClockInfo.side_effect = lambda h, t: clocks[t]()
    nv.nvmlDeviceGetMaxClockInfo.side_effect = lambda h, t: gpu.max_sm_clock_mhz if t == N.NVML_CLOCK_SM else 2619
    nv.nvmlDeviceGetClock.side_effect = lambda h, t, i: _clock(gpu, N, i)
    if hasattr(source, "nvmlDeviceGetTemperatureV"):  # nvidia-ml-py 12.570.86 and newer
        nv.nvmlDeviceGetTemperatureV.side_effect = lambda h, s, version=None: gpu.temperature_c
    nv.nvmlDeviceGetTemperature.side_effect = lambda h, s: gpu.temperature_c
    nv.nvmlDeviceGetCurrentClocksEventReasons.side_effect = lambda h: gpu.current_reasons()
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
    nv.nvmlDeviceSetGpuLockedClocks.side_effect = lambda h, lo, hi: _lock(gpu, N, lo, hi)
    nv.nvmlDeviceResetGpuLockedClocks.side_effect = lambda h: setattr(gpu, "locked_sm_clock_mhz", None)
    _count_sessions(nv, gpu)
    return nv


# The member of pynvml's ``c_nvmlValue_t`` union each ``nvmlValueType_t`` names (nvml.h ``nvmlValue_t`` comments;
# pynvml.py 13.615.71 ``c_nvmlValue_t``): a field entry carries only its own type's member.
UNION_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _field_value(gpu: FakeGpu, N: Any, field_id: Any) -> SimpleNamespace:
    """One ``c_nvmlFieldValue_t``-shaped entry: its own ``nvmlReturn``, never an exception (module docstring)."""
    fid, scope = field_id if isinstance(field_id, tuple) else (field_id, 0)
    watts = {N.NVML_FI_DEV_POWER_INSTANT: gpu.power_w if gpu.instant_field else None,
             N.NVML_FI_DEV_POWER_AVERAGE: gpu.average_power_w() if gpu.averages_power_usage else None}.get(fid)
    code = N.NVML_SUCCESS if watts is not None and scope == N.NVML_POWER_SCOPE_GPU else N.NVML_ERROR_NOT_SUPPORTED
    if code == N.NVML_SUCCESS and gpu.field_returns:
        code = gpu.field_returns.pop(0)
    member = UNION_MEMBERS.get(gpu.field_value_type)
    value = SimpleNamespace(**({member: int(watts * 1000)} if code == N.NVML_SUCCESS and member else {}))
    return SimpleNamespace(fieldId=fid, scopeId=scope, timestamp=int(time.time() * 1e6), latencyUsec=0,
                           valueType=gpu.field_value_type, nvmlReturn=code, value=value)


def _clock(gpu: FakeGpu, N: Any, clock_id: int) -> int:
    """``nvmlDeviceGetClock``: the default clock, or ``NVMLError_Deprecated`` for an application clock id on an NVML
    13 driver (module docstring, "Deprecated")."""
    app_ids = (N.NVML_CLOCK_ID_APP_CLOCK_TARGET, N.NVML_CLOCK_ID_APP_CLOCK_DEFAULT)
    if gpu.application_clocks_deprecated and clock_id in app_ids:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DEPRECATED)
    return gpu.default_sm_clock_mhz


def _lock(gpu: FakeGpu, N: Any, low: int, high: int) -> None:
    """``nvmlDeviceSetGpuLockedClocks``: two MHz values, or two ``nvmlClockLimitId_t`` values read through the
    table of ``nvml.h`` (module docstring); a symbolic bound beside a numeric one is INVALID_ARGUMENT."""
    tdp, unlimited = int(N.NVML_CLOCK_LIMIT_ID_TDP), int(N.NVML_CLOCK_LIMIT_ID_UNLIMITED)
    symbolic = (low in (tdp, unlimited), high in (tdp, unlimited))
    if symbolic[0] != symbolic[1]:
        raise N.NVMLError(N.NVML_ERROR_INVALID_ARGUMENT)
    if not symbolic[0]:
        gpu.locked_sm_clock_mhz = int(high)
    elif low == high == unlimited:
        gpu.locked_sm_clock_mhz = None  # unlocked, as nvmlDeviceResetGpuLockedClocks
    elif low == high == tdp:  # "Lock clock to TDP": the base clock, by assumption (module docstring)
        gpu.locked_sm_clock_mhz = gpu.base_sm_clock_mhz
    elif high == tdp:  # capped at the TDP clock, may drift below it
        gpu.locked_sm_clock_mhz = min(gpu.sm_clock_mhz, gpu.base_sm_clock_mhz)
    else:  # floored at the TDP clock, may boost above it
        gpu.locked_sm_clock_mhz = max(gpu.sm_clock_mhz, gpu.base_sm_clock_mhz)


def _count_sessions(nv: Any, gpu: FakeGpu) -> None:
    """``nvmlInit``/``nvmlShutdown`` reference counting, and ``Uninitialized`` for every query made while no
    session is open (module docstring)."""
    def init(*args: Any) -> None:
        gpu.nvml_refs += 1
        gpu.nvml_inits += 1

    def shutdown() -> None:
        if gpu.nvml_inits == 0:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        gpu.nvml_refs = max(gpu.nvml_refs - 1, 0)  # past the count: no error (nvml.h :4027-4029)

    nv.nvmlInit.side_effect = init
    nv.nvmlShutdown.side_effect = shutdown
    for name in dir(nv):
        if not name.startswith(("nvmlDevice", "nvmlSystem")):
            continue
        mocked = getattr(nv, name)
        if not callable(mocked):
            continue
        # A function with no answer of its own returns its return_value (mock.DEFAULT), still only in a session.
        answer = getattr(mocked, "side_effect", None) or _return_value
        mocked.side_effect = _needs_session(gpu, answer)


def _return_value(*args: Any, **kwargs: Any) -> Any:
    return mock.DEFAULT


def _needs_session(gpu: FakeGpu, answer: Any) -> Any:
    def guarded(*args: Any, **kwargs: Any) -> Any:
        if gpu.nvml_refs == 0:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        return answer(*args, **kwargs)
    return guarded


def skip_if_driver_present() -> None:
    """For tests of the no-driver path with the real nvidia-ml-py: skip where NVML actually starts."""
    import pytest

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return
    pynvml.nvmlShutdown()
    pytest.skip("an NVIDIA driver is present")
