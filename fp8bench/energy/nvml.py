"""The NVML boundary: every call into NVIDIA's management library (``pynvml`` from nvidia-ml-py) lives here.

NVML is the driver's own view of a GPU. fp8bench reads four kinds of facts through it:

* **Energy.** ``nvmlDeviceGetTotalEnergyConsumption`` is a cumulative counter in millijoules since the driver was
  loaded (Volta and newer). NVIDIA does not document its update period; it is observed to step about every 100 ms,
  so a window must span many updates before a difference means anything. Where the counter is unsupported,
  ``nvmlDeviceGetPowerUsage`` (milliwatts) can be sampled instead; on Ampere (except GA100) and newer it is already
  a one-second average, so integrating it smooths short bursts away.
* **Telemetry.** Current SM and memory clocks (MHz), GPU temperature (degrees C), power (W) and the *clocks event
  reasons* bitmask, which says why clocks are below their maximum right now (idle, power cap, thermal slowdown,
  hardware brake...). The bitmask is a snapshot, so :meth:`NvmlDevice.violation_ns` also reads the cumulative
  violation counters (nanoseconds spent held down by power or thermal limits), whose growth over a window catches a
  throttle that no snapshot happened to see.
* **Limits and policy.** Default and enforced power limits (W), the default application clock (the reference a
  measured clock is compared with) and the maximum clocks.
* **Identity.** Name, UUID, board part number, PCI ids, VBIOS, driver and CUDA driver versions, ECC, MIG and
  persistence modes, topology between GPUs.

NVML numbers devices in PCI bus order and ignores ``CUDA_VISIBLE_DEVICES``; a CUDA device is therefore matched by
UUID, never by index alone. Functions a given driver lacks raise ``NVMLError_FunctionNotFound`` when called (not at
import), and features a GPU lacks raise ``NVMLError_NotSupported``: both become ``None`` in what this module returns.
Across nvidia-ml-py releases: every name used as ``nv.X`` below exists in the oldest release ``pyproject.toml``
allows (12.535.77, the first with the "clocks event reasons" spelling) and in the newest; names that only newer
releases define are listed in :data:`NEWER_NAMES` and read with ``getattr(nv, name, None)`` and a fallback. Tests
check both against the recorded surface of the floor release and the installed one, and drive this module with
autospecs of each.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, TypeVar

from fp8bench.energy.telemetry import PowerSource, Sample

T = TypeVar("T")

# Bits of the clocks event (throttle) reasons mask: (name used in records, pynvml's name, bit). The bits are the
# driver's (the mask is a uint64 from nvmlDeviceGetCurrentClocksEventReasons) and the same in every release; the
# names are not: nvidia-ml-py defines the two highest only from 13.615.71 (`nvmlClocksThrottleReasonBoardLimit =
# 0x200`, `nvmlClocksThrottleReasonReliability = 0x400`), so decoding uses these values, and a test checks them
# against every release that names them.
REASON_BITS: tuple[tuple[str, str, int], ...] = (
    ("gpu_idle", "nvmlClocksEventReasonGpuIdle", 0x001),
    ("applications_clocks_setting", "nvmlClocksEventReasonApplicationsClocksSetting", 0x002),
    ("sw_power_cap", "nvmlClocksEventReasonSwPowerCap", 0x004),
    ("hw_slowdown", "nvmlClocksEventReasonHwSlowdown", 0x008),
    ("sync_boost", "nvmlClocksEventReasonSyncBoost", 0x010),
    ("sw_thermal_slowdown", "nvmlClocksEventReasonSwThermalSlowdown", 0x020),
    ("hw_thermal_slowdown", "nvmlClocksEventReasonHwThermalSlowdown", 0x040),
    ("hw_power_brake_slowdown", "nvmlClocksEventReasonHwPowerBrakeSlowdown", 0x080),
    ("display_clock_setting", "nvmlClocksEventReasonDisplayClockSetting", 0x100),
    ("board_limit", "nvmlClocksThrottleReasonBoardLimit", 0x200),
    ("reliability", "nvmlClocksThrottleReasonReliability", 0x400),
)

# pynvml functions newer than the oldest supported release, with the first release that has them. Each is read
# with getattr(nv, name, None) and has a fallback for older releases.
NEWER_NAMES: dict[str, str] = {
    "nvmlDeviceGetTemperatureV": "12.570.86",  # before it: nvmlDeviceGetTemperature (deprecated since, same value)
    # Defined by 12.560.30 (absent from 12.535.77); its union member usVal only from 12.570.86 (_field_number).
    "NVML_VALUE_TYPE_UNSIGNED_SHORT": "12.560.30",
}


class _FallBack(Exception):
    """The driver lacks a newer NVML function: use the older one."""


class FieldReadFailed(RuntimeError):
    """One entry of ``nvmlDeviceGetFieldValues`` came back with an error other than "the driver lacks this field":
    that reading failed, and says nothing about the next one. ``code`` is the entry's ``nvmlReturn``."""

    def __init__(self, field_id: int, code: int) -> None:
        super().__init__(f"NVML field {field_id}: reading failed (code {code})")
        self.code = code


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here; the message says why (no package, no driver, no such device)."""


def load_pynvml() -> ModuleType:
    """Import nvidia-ml-py's ``pynvml``, refusing the unrelated third-party ``pynvml`` distribution.

    Importing does not touch the driver; :func:`open_device` does.
    """
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable("nvidia-ml-py is not installed (pip install 'fp8bench[nvml]')") from exc
    if not hasattr(pynvml, "_nvmlGetFunctionPointer"):
        raise NvmlUnavailable("the installed `pynvml` is not nvidia-ml-py (pip install nvidia-ml-py)")
    return pynvml


def error_text(exc: BaseException) -> str:
    """A short, library-free description of an NVML error: its class name and code.

    ``str()`` of an NVMLError calls back into the library for the message, which fails once the driver is gone.
    """
    code = getattr(exc, "value", None)
    return f"{type(exc).__name__}" + (f" (code {code})" if code is not None else "")


class NvmlDevice:
    """One GPU seen through NVML. Use :func:`open_device`; close it (or use it as a context manager) when done.

    Reads that a device or driver does not support return ``None``; other NVML errors propagate as ``pynvml``'s
    ``NVMLError`` subclasses, so that a window can tell "not supported" from "failed mid-measurement".
    """

    def __init__(self, nv: ModuleType, handle: Any, matched_by: str) -> None:
        self.nv, self.handle, self.matched_by = nv, handle, matched_by
        self._closed = False
        self._instant: bool | None = None  # whether the driver answers the instant power field (asked once)

    # -- plumbing ------------------------------------------------------------------------------------------------
    def _optional(self, call: Callable[[], T], fallback: bool = False) -> T | None:
        """``call()``, or ``None`` when the GPU or driver does not support it, including a reading NVML has
        deprecated (``NVML_ERROR_DEPRECATED``, 26: nvml.h of NVML API 13, go-nvml 2f9e261, :1324; NVML 13 deprecates
        the application clock ids, :1127-1130). With ``fallback``, a driver that lacks the function raises
        :class:`_FallBack` instead, so the caller can try the older call."""
        nv = self.nv
        try:
            return call()
        except nv.NVMLError_FunctionNotFound:
            if fallback:
                raise _FallBack() from None
            return None
        except (nv.NVMLError_NotSupported, nv.NVMLError_NoPermission, nv.NVMLError_InvalidArgument,
                nv.NVMLError_Deprecated):
            return None

    def close(self) -> None:
        """Release this process's NVML reference (``nvmlInit`` is reference-counted)."""
        if not self._closed:
            self._closed = True
            with contextlib.suppress(self.nv.NVMLError):
                self.nv.nvmlShutdown()

    def __enter__(self) -> NvmlDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- energy and power ----------------------------------------------------------------------------------------
    def energy_mj(self) -> int:
        """The total-energy counter, millijoules since the driver loaded. Raises ``NVMLError_NotSupported`` before
        Volta or on devices without it."""
        return int(self.nv.nvmlDeviceGetTotalEnergyConsumption(self.handle))

    def energy_counter_reason(self) -> str | None:
        """``None`` if the energy counter can be read, else why not."""
        nv = self.nv
        try:
            self.energy_mj()
        except nv.NVMLError_NotSupported:
            return "NVML total-energy counter not supported on this GPU (needs Volta or newer)"
        except nv.NVMLError as exc:
            return f"NVML total-energy counter unreadable: {error_text(exc)}"
        return None

    def power_w(self) -> float:
        """Board power in watts (a one-second average on Ampere except GA100 and newer; instantaneous before)."""
        return self.nv.nvmlDeviceGetPowerUsage(self.handle) / 1000.0

    def instant_power(self) -> tuple[float, PowerSource]:
        """Board power in watts and which reading it is: the instantaneous field ``NVML_FI_DEV_POWER_INSTANT``
        (GPU scope) where the driver answers it, else :meth:`power_w`.

        ``nvmlDeviceGetFieldValues`` succeeds as a call and reports each field in its entry's own ``nvmlReturn``
        (nvml.h, ``nvmlFieldValue_t``: the value is undefined unless it is ``NVML_SUCCESS``). Only an answer that
        means the driver lacks the field (``NVML_ERROR_NOT_SUPPORTED`` or ``NVML_ERROR_INVALID_ARGUMENT`` in the
        entry or from the call, a driver without the call, or a value type these bindings cannot read) stops the
        asking for this device; any other code is one failed reading, raised as :class:`FieldReadFailed`, and the
        next call asks again. Assumption: an ``INVALID_ARGUMENT`` in one *entry* means "field unknown to this
        driver"; nvml.h (NVML API 13, go-nvml 2f9e261, :10223-10229) documents that code only for the whole call
        (an invalid device or a null array), and says nothing of what an entry may hold."""
        if self._instant is not False:
            watts = self._instant_field_w()
            if watts is not None:
                return watts, PowerSource.INSTANT
        return self.power_w(), PowerSource.USAGE

    def _instant_field_w(self) -> float | None:
        """The instant power field in watts; ``None`` (and never asked again) where the driver lacks it."""
        nv = self.nv
        entry = self._optional(lambda: nv.nvmlDeviceGetFieldValues(
            self.handle, [(nv.NVML_FI_DEV_POWER_INSTANT, nv.NVML_POWER_SCOPE_GPU)])[0])
        code = entry.nvmlReturn if entry is not None else nv.NVML_ERROR_NOT_SUPPORTED
        if code not in (nv.NVML_SUCCESS, nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_INVALID_ARGUMENT):
            raise FieldReadFailed(nv.NVML_FI_DEV_POWER_INSTANT, int(code))
        milliwatts = _field_number(nv, entry) if code == nv.NVML_SUCCESS else None
        self._instant = milliwatts is not None
        return milliwatts / 1000.0 if milliwatts is not None else None

    # -- telemetry -----------------------------------------------------------------------------------------------
    def reasons_mask(self) -> int:
        """The clocks event reasons bitmask now; the deprecated Throttle call on drivers without the Event one."""
        nv = self.nv
        try:
            return int(nv.nvmlDeviceGetCurrentClocksEventReasons(self.handle))
        except nv.NVMLError_FunctionNotFound:
            return int(nv.nvmlDeviceGetCurrentClocksThrottleReasons(self.handle))

    def temperature_c(self) -> int | None:
        """GPU die temperature in degrees C: the V form where both the bindings and the driver have it, else the
        older call (deprecated in newer releases, still answered by drivers that lack the V form)."""
        nv = self.nv
        v_form = getattr(nv, "nvmlDeviceGetTemperatureV", None)
        if v_form is not None:
            try:
                return self._optional(lambda: int(v_form(self.handle, nv.NVML_TEMPERATURE_GPU)), fallback=True)
            except _FallBack:
                pass
        return self._optional(lambda: int(nv.nvmlDeviceGetTemperature(self.handle, nv.NVML_TEMPERATURE_GPU)))

    def sample(self) -> Sample:
        """One snapshot of clocks, temperature, power and throttle reasons. Raises on NVML errors other than
        "not supported" (a lost GPU mid-window must not read as a quiet one)."""
        nv = self.nv
        try:
            power = self._optional(self.instant_power)
        except FieldReadFailed:
            power = None  # this sample's power reading failed; the next sample asks again
        return Sample(
            t=time.perf_counter(),
            sm_clock_mhz=self._optional(lambda: int(nv.nvmlDeviceGetClockInfo(self.handle, nv.NVML_CLOCK_SM))),
            mem_clock_mhz=self._optional(lambda: int(nv.nvmlDeviceGetClockInfo(self.handle, nv.NVML_CLOCK_MEM))),
            temperature_c=self.temperature_c(),
            power_w=power[0] if power is not None else None,
            reasons_mask=self._optional(self.reasons_mask),
            power_source=power[1] if power is not None else None,
        )

    def violation_ns(self) -> dict[str, int | None]:
        """Cumulative nanoseconds clocks were held down by the power limit and by thermal limits."""
        nv = self.nv
        out: dict[str, int | None] = {}
        for key, policy in (("power", nv.NVML_PERF_POLICY_POWER), ("thermal", nv.NVML_PERF_POLICY_THERMAL)):
            status = self._optional(functools.partial(nv.nvmlDeviceGetViolationStatus, self.handle, policy))
            out[key] = int(status.violationTime) if status is not None else None
        return out

    def reference_sm_clock_mhz(self) -> tuple[int | None, str]:
        """The SM clock a loaded GPU should hold, and where it came from: the default application clock, else the
        maximum SM clock. A window whose clocks sit well under it was slowed down."""
        nv = self.nv
        default = self._optional(
            lambda: int(nv.nvmlDeviceGetClock(self.handle, nv.NVML_CLOCK_SM, nv.NVML_CLOCK_ID_APP_CLOCK_DEFAULT)))
        if default:
            return default, "default application clock"
        return self._optional(lambda: int(nv.nvmlDeviceGetMaxClockInfo(self.handle, nv.NVML_CLOCK_SM))), "max SM clock"

    # -- identity and policy -------------------------------------------------------------------------------------
    def uuid(self) -> str | None:
        """NVML's UUID of this GPU (``GPU-...``)."""
        return self._optional(lambda: self.nv.nvmlDeviceGetUUID(self.handle))

    def info(self) -> dict[str, Any]:
        """Identity, limits and modes of this GPU for the run's environment record (units in the key names)."""
        nv, h = self.nv, self.handle
        opt = self._optional

        def limit_w(fn: Callable[[Any], int]) -> float | None:
            mw = opt(lambda: fn(h))
            return mw / 1000.0 if mw is not None else None

        def mode_pair(fn: Callable[[Any], Any]) -> dict[str, bool] | None:
            pair = opt(lambda: fn(h))
            return None if pair is None else {"current": bool(pair[0]), "pending": bool(pair[1])}

        pci = opt(lambda: nv.nvmlDeviceGetPciInfo(h))
        memory = opt(lambda: nv.nvmlDeviceGetMemoryInfo(h))
        cc = opt(lambda: nv.nvmlDeviceGetCudaComputeCapability(h))
        cuda_driver = opt(nv.nvmlSystemGetCudaDriverVersion_v2)
        persistence = opt(lambda: nv.nvmlDeviceGetPersistenceMode(h))
        reference, reference_source = self.reference_sm_clock_mhz()
        app_sm = opt(lambda: int(nv.nvmlDeviceGetClock(h, nv.NVML_CLOCK_SM, nv.NVML_CLOCK_ID_APP_CLOCK_TARGET)))
        max_sm = opt(lambda: int(nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)))
        return {
            "name": opt(lambda: nv.nvmlDeviceGetName(h)),
            "uuid": self.uuid(),
            "nvml_index": opt(lambda: nv.nvmlDeviceGetIndex(h)),
            "matched_by": self.matched_by,
            "board_part_number": opt(lambda: nv.nvmlDeviceGetBoardPartNumber(h)),
            "pci_bus_id": _text(pci.busId) if pci is not None else None,
            "pci_device_id": f"0x{pci.pciDeviceId:08x}" if pci is not None else None,
            "pci_subsystem_id": f"0x{pci.pciSubSystemId:08x}" if pci is not None else None,
            "vbios_version": opt(lambda: nv.nvmlDeviceGetVbiosVersion(h)),
            "driver_version": opt(nv.nvmlSystemGetDriverVersion),
            "cuda_driver_version": (f"{cuda_driver // 1000}.{cuda_driver % 1000 // 10}"
                                    if cuda_driver is not None else None),
            "compute_capability": f"{cc[0]}.{cc[1]}" if cc is not None else None,
            "memory_total_bytes": int(memory.total) if memory is not None else None,
            "ecc_mode": mode_pair(nv.nvmlDeviceGetEccMode),
            "mig_mode": mode_pair(nv.nvmlDeviceGetMigMode),
            "persistence_mode": bool(persistence) if persistence is not None else None,
            "power_limit_w": limit_w(nv.nvmlDeviceGetPowerManagementLimit),
            "default_power_limit_w": limit_w(nv.nvmlDeviceGetPowerManagementDefaultLimit),
            "enforced_power_limit_w": limit_w(nv.nvmlDeviceGetEnforcedPowerLimit),
            "max_sm_clock_mhz": max_sm,
            "max_mem_clock_mhz": opt(lambda: int(nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM))),
            "app_sm_clock_mhz": app_sm,
            "reference_sm_clock_mhz": reference,
            "reference_sm_clock_source": reference_source,
            "energy_counter": self.energy_counter_reason() is None,
        }

    def topology(self, others: list[NvmlDevice]) -> dict[str, str | None]:
        """Common PCIe/NVLink ancestor level between this GPU and each other one, keyed by the other's UUID."""
        nv = self.nv
        levels = {nv.NVML_TOPOLOGY_INTERNAL: "internal", nv.NVML_TOPOLOGY_SINGLE: "single",
                  nv.NVML_TOPOLOGY_MULTIPLE: "multiple", nv.NVML_TOPOLOGY_HOSTBRIDGE: "hostbridge",
                  nv.NVML_TOPOLOGY_NODE: "node", nv.NVML_TOPOLOGY_SYSTEM: "system"}
        out: dict[str, str | None] = {}
        for other in others:
            level = self._optional(functools.partial(nv.nvmlDeviceGetTopologyCommonAncestor, self.handle, other.handle))
            out[str(other.uuid())] = levels.get(level, str(level)) if level is not None else None
        return out


def _field_number(nv: ModuleType, entry: Any) -> float | None:
    """The number in one ``nvmlDeviceGetFieldValues`` entry, read through the member of its value union that its
    ``valueType`` names (nvml.h ``nvmlValueType_t`` and ``nvmlValue_t``; pynvml.py ``c_nvmlValue_t``). ``None``
    where these bindings cannot read it: a type they do not define (newer drivers may add some), or a member their
    union lacks (nvidia-ml-py 12.560.30 defines ``NVML_VALUE_TYPE_UNSIGNED_SHORT`` but not ``usVal``)."""
    members = {nv.NVML_VALUE_TYPE_DOUBLE: "dVal", nv.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
               nv.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal", nv.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
               nv.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal", nv.NVML_VALUE_TYPE_SIGNED_INT: "siVal"}
    unsigned_short = getattr(nv, "NVML_VALUE_TYPE_UNSIGNED_SHORT", None)
    if unsigned_short is not None:
        members[unsigned_short] = "usVal"
    number = getattr(entry.value, members.get(entry.valueType, ""), None)
    return float(number) if number is not None else None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def nvml_uuid(cuda_uuid: str) -> str:
    """NVML's spelling of a CUDA device UUID: torch prints ``3f2a...``; NVML expects ``GPU-3f2a...``."""
    return cuda_uuid if cuda_uuid.startswith(("GPU-", "MIG-")) else f"GPU-{cuda_uuid}"


def open_device(index: int, uuid: str | None = None, nv: ModuleType | None = None) -> NvmlDevice:
    """Initialize NVML and open the GPU with this UUID (preferred), or NVML index ``index`` when no UUID is known.

    Raises :class:`NvmlUnavailable` with the reason when NVML cannot be loaded or the device is not found.
    """
    nv = nv if nv is not None else load_pynvml()
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        raise NvmlUnavailable(f"NVML could not start: {error_text(exc)} (no NVIDIA driver?)") from exc
    try:
        if uuid:
            return NvmlDevice(nv, nv.nvmlDeviceGetHandleByUUID(nvml_uuid(uuid)), "uuid")
        return NvmlDevice(nv, nv.nvmlDeviceGetHandleByIndex(index), "index (NVML order is PCI bus order)")
    except nv.NVMLError as exc:
        with contextlib.suppress(nv.NVMLError):
            nv.nvmlShutdown()
        raise NvmlUnavailable(f"NVML has no device {uuid or index}: {error_text(exc)}") from exc


def device_count(nv: ModuleType) -> int:
    """GPUs NVML sees (all of them, whatever ``CUDA_VISIBLE_DEVICES`` says). NVML must be initialized."""
    return int(nv.nvmlDeviceGetCount())


@contextlib.contextmanager
def all_devices(nv: ModuleType) -> Iterator[list[NvmlDevice]]:
    """Every GPU NVML sees, each holding its own NVML reference, closed on exit."""
    devices = [open_device(i, None, nv) for i in range(_count_once(nv))]
    try:
        yield devices
    finally:
        for d in devices:
            d.close()


def _count_once(nv: ModuleType) -> int:
    nv.nvmlInit()
    try:
        return device_count(nv)
    finally:
        nv.nvmlShutdown()


def decode_reasons(mask: int) -> list[str]:
    """Names of the bits set in a clocks event reasons ``mask`` (unknown bits as hex). The bits are the driver's
    and the same in every nvidia-ml-py release (:data:`REASON_BITS`)."""
    names, known = [], 0
    for name, _attr, bit in REASON_BITS:
        known |= bit
        if mask & bit:
            names.append(name)
    if mask & ~known:
        names.append(f"unknown_0x{mask & ~known:x}")
    return names
