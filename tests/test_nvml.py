"""The NVML boundary: each reading path works against an autospec of the installed ``pynvml`` (no GPU needed).
The names it calls, across releases, are checked in ``test_nvml_versions.py``."""

import pynvml
import pytest
from fake_nvml import FakeGpu, make_pynvml, skip_if_driver_present

from fp8bench.energy import nvml


def test_without_a_driver_open_device_says_why():
    """Real nvidia-ml-py on a machine without the NVIDIA driver: a clear reason, no crash."""
    skip_if_driver_present()
    with pytest.raises(nvml.NvmlUnavailable, match="NVML could not start: NVMLError_LibraryNotFound"):
        nvml.open_device(0)


def test_open_by_uuid_uses_nvml_spelling():
    nv = make_pynvml(FakeGpu())
    dev = nvml.open_device(0, "12345678-1234-1234-1234-123456789abc", nv)
    nv.nvmlDeviceGetHandleByUUID.assert_called_once_with("GPU-12345678-1234-1234-1234-123456789abc")
    assert dev.matched_by == "uuid"
    dev.close()
    dev.close()  # idempotent: one nvmlShutdown per nvmlInit
    assert nv.nvmlShutdown.call_count == 1


def test_open_unknown_device_is_unavailable_and_releases_nvml():
    nv = make_pynvml(FakeGpu())
    nv.nvmlDeviceGetHandleByIndex.side_effect = pynvml.NVMLError_NotFound()
    with pytest.raises(nvml.NvmlUnavailable, match="no device 3.*NVMLError_NotFound"):
        nvml.open_device(3, None, nv)
    assert nv.nvmlShutdown.call_count == 1


def test_sample_reads_clocks_temperature_power_reasons():
    gpu = FakeGpu(sm_clock_mhz=1410, temperature_c=71, power_w=512.5,
                  reasons=pynvml.nvmlClocksEventReasonSwPowerCap)
    dev = nvml.open_device(0, None, make_pynvml(gpu))
    s = dev.sample()
    assert (s.sm_clock_mhz, s.mem_clock_mhz, s.temperature_c, s.power_w) == (1410, 2619, 71, 512.5)
    assert nvml.decode_reasons(s.reasons_mask) == ["sw_power_cap"]


def test_old_driver_falls_back_to_deprecated_calls():
    """Drivers without the Event/V functions raise FunctionNotFound when called; the Throttle and plain
    temperature calls take over."""
    nv = make_pynvml(FakeGpu())
    nv.nvmlDeviceGetCurrentClocksEventReasons.side_effect = pynvml.NVMLError_FunctionNotFound()
    nv.nvmlDeviceGetCurrentClocksThrottleReasons.side_effect = lambda h: 0x40
    nv.nvmlDeviceGetTemperatureV.side_effect = pynvml.NVMLError_FunctionNotFound()
    nv.nvmlDeviceGetTemperature.side_effect = lambda h, sensor: 83
    dev = nvml.open_device(0, None, nv)
    s = dev.sample()
    assert s.reasons_mask == 0x40 and s.temperature_c == 83
    assert nvml.decode_reasons(0x40 | 0x1 | 0x10000) == ["gpu_idle", "hw_thermal_slowdown", "unknown_0x10000"]


def test_sample_raises_on_real_errors_but_not_on_unsupported():
    nv = make_pynvml(FakeGpu(instant_field=False))
    nv.nvmlDeviceGetPowerUsage.side_effect = pynvml.NVMLError_NotSupported()
    dev = nvml.open_device(0, None, nv)
    assert dev.sample().power_w is None
    nv.nvmlDeviceGetClockInfo.side_effect = pynvml.NVMLError_GpuIsLost()
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        dev.sample()


def test_energy_counter_reason_and_violations():
    nv = make_pynvml(FakeGpu(violation_ns={pynvml.NVML_PERF_POLICY_THERMAL: 5_000_000}))
    dev = nvml.open_device(0, None, nv)
    assert dev.energy_counter_reason() is None
    assert dev.violation_ns() == {"power": 0, "thermal": 5_000_000}
    nv.nvmlDeviceGetTotalEnergyConsumption.side_effect = pynvml.NVMLError_NotSupported()
    assert "not supported" in dev.energy_counter_reason()
    nv.nvmlDeviceGetViolationStatus.side_effect = pynvml.NVMLError_NotSupported()
    assert dev.violation_ns() == {"power": None, "thermal": None}


def test_info_reads_identity_limits_and_modes():
    nv = make_pynvml(FakeGpu())
    nv.nvmlDeviceGetMigMode.side_effect = pynvml.NVMLError_NotSupported()
    info = nvml.open_device(0, None, nv).info()
    assert info["name"] == "NVIDIA H100 80GB HBM3"
    assert info["uuid"].startswith("GPU-")
    assert info["driver_version"] == "550.54.15"
    assert info["cuda_driver_version"] == "12.4"
    assert info["compute_capability"] == "9.0"
    assert info["pci_bus_id"] == "00000000:18:00.0" and info["pci_device_id"] == "0x233010de"
    assert info["power_limit_w"] == info["enforced_power_limit_w"] == info["default_power_limit_w"] == 700.0
    assert info["ecc_mode"] == {"current": True, "pending": True}
    assert info["mig_mode"] is None  # not supported on this GPU: recorded as unknown, not as "off"
    assert info["persistence_mode"] is True
    assert (info["reference_sm_clock_mhz"], info["reference_sm_clock_source"]) == (1755, "default application clock")
    assert info["energy_counter"] is True


def test_reference_clock_falls_back_to_max_clock():
    nv = make_pynvml(FakeGpu(max_sm_clock_mhz=2520))
    nv.nvmlDeviceGetClock.side_effect = pynvml.NVMLError_NotSupported()
    assert nvml.open_device(0, None, nv).reference_sm_clock_mhz() == (2520, "max SM clock")


def test_topology_between_gpus():
    nv = make_pynvml(FakeGpu(count=2))
    with nvml.all_devices(nv) as devices:
        assert len(devices) == 2
        assert devices[0].topology(devices[1:]) == {"GPU-other-1": "system"}
    assert nv.nvmlInit.call_count == nv.nvmlShutdown.call_count


def test_error_text_needs_no_library():
    assert nvml.error_text(pynvml.NVMLError_GpuIsLost()) == "NVMLError_GpuIsLost (code 15)"


def test_sample_power_is_the_instant_field_and_says_which_it_holds():
    """GetPowerUsage averages the last second on Ampere and newer; the instant field does not. A step from 100 W
    to 600 W a moment ago reads 600 W through the field, ~100 W through GetPowerUsage."""
    import time

    gpu = FakeGpu(power_w=100.0, t0=time.perf_counter() - 5.0)
    dev = nvml.open_device(0, None, make_pynvml(gpu))
    gpu.set_power(600.0)
    s = dev.sample()
    assert s.power_w == 600.0
    assert s.power_source == nvml.PowerSource.INSTANT
    gpu.instant_field = False  # a driver without NVML_FI_DEV_POWER_INSTANT: the averaged call, named as such
    s = nvml.open_device(0, None, make_pynvml(gpu)).sample()
    assert s.power_source == nvml.PowerSource.USAGE and s.power_w < 200.0
