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


# -- the instant power field: per-entry codes and value types (nvml.h nvmlFieldValue_t, nvmlValueType_t) ------------
def test_a_transient_field_error_fails_that_reading_only_and_is_asked_again():
    """An entry's NVML_ERROR_UNKNOWN says nothing about whether the driver has the field: the next sample asks again
    and holds the instant power; only NOT_SUPPORTED / INVALID_ARGUMENT stop the asking."""
    gpu = FakeGpu(power_w=640.0, field_returns=[pynvml.NVML_ERROR_UNKNOWN])
    nv = make_pynvml(gpu)
    dev = nvml.open_device(0, None, nv)
    failed = dev.sample()
    assert dev.sample().power_source is nvml.PowerSource.INSTANT
    # That sample's reading failed: no power and no source, and nothing else of it lost.
    assert failed.power_w is None and failed.power_source is None and failed.sm_clock_mhz == 1980
    gpu.field_returns = [pynvml.NVML_ERROR_UNKNOWN]
    with pytest.raises(nvml.FieldReadFailed, match="code 999"):
        dev.instant_power()
    assert dev.instant_power() == (640.0, nvml.PowerSource.INSTANT)


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT])
def test_a_field_the_driver_refuses_is_not_asked_again(code):
    gpu = FakeGpu(field_returns=[code])
    nv = make_pynvml(gpu)
    dev = nvml.open_device(0, None, nv)
    assert dev.instant_power()[1] is nvml.PowerSource.USAGE
    assert dev.instant_power()[1] is nvml.PowerSource.USAGE
    assert nv.nvmlDeviceGetFieldValues.call_count == 1


def test_an_unsigned_short_field_is_read_through_its_union_member():
    """nvidia-ml-py 12.570.86 and newer report NVML_VALUE_TYPE_UNSIGNED_SHORT (6) in member usVal."""
    gpu = FakeGpu(power_w=50.0, field_value_type=pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT)
    dev = nvml.open_device(0, None, make_pynvml(gpu))
    assert dev.instant_power() == (50.0, nvml.PowerSource.INSTANT)


@pytest.mark.parametrize("value_type", [pynvml.NVML_VALUE_TYPE_COUNT, 42])
def test_an_unknown_value_type_is_an_unavailable_field_not_a_failed_window(value_type):
    gpu = FakeGpu(power_w=300.0, field_value_type=value_type)
    nv = make_pynvml(gpu)
    dev = nvml.open_device(0, None, nv)
    watts, source = dev.instant_power()
    assert source is nvml.PowerSource.USAGE and watts == pytest.approx(300.0, rel=0.05)
    assert dev.sample().power_source is nvml.PowerSource.USAGE and nv.nvmlDeviceGetFieldValues.call_count == 1


def test_a_binding_whose_union_lacks_the_member_reads_the_field_as_unavailable():
    """nvidia-ml-py 12.560.30 defines NVML_VALUE_TYPE_UNSIGNED_SHORT but its c_nvmlValue_t has no usVal."""
    from types import SimpleNamespace

    entry = SimpleNamespace(fieldId=186, valueType=6, value=SimpleNamespace(uiVal=0))
    assert nvml._field_number(pynvml, entry) is None


# -- the fake's own rules, each from nvml.h (tests/fake_nvml.py docstring) ---------------------------------------
@pytest.mark.parametrize(("architecture", "ga100", "averaged"), [(9, False, True), (7, False, True), (7, True, False),
                                                                  (5, False, False)])
def test_fake_power_usage_averages_only_on_ampere_except_ga100_and_newer(architecture, ga100, averaged):
    import time

    gpu = FakeGpu(power_w=100.0, t0=time.perf_counter() - 5.0, architecture=architecture, ga100=ga100)
    nv = make_pynvml(gpu)
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    gpu.set_power(600.0)
    usage_w = nv.nvmlDeviceGetPowerUsage(h) / 1000
    assert (usage_w < 200.0) is averaged and (usage_w == 600.0) is not averaged
    average = nv.nvmlDeviceGetFieldValues(h, [(pynvml.NVML_FI_DEV_POWER_AVERAGE, pynvml.NVML_POWER_SCOPE_GPU)])[0]
    assert (average.nvmlReturn == pynvml.NVML_SUCCESS) is averaged
    assert nv.nvmlDeviceGetArchitecture(h) == architecture


def test_fake_lock_takes_the_symbolic_bounds_of_the_nvml_table():
    gpu = FakeGpu(sm_clock_mhz=1980, base_sm_clock_mhz=1590)
    nv = make_pynvml(gpu)
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    tdp, unlimited = pynvml.NVML_CLOCK_LIMIT_ID_TDP, pynvml.NVML_CLOCK_LIMIT_ID_UNLIMITED
    readings = {}
    for low, high in ((tdp, tdp), (unlimited, tdp), (tdp, unlimited), (unlimited, unlimited), (1400, 1400)):
        nv.nvmlDeviceSetGpuLockedClocks(h, low, high)
        readings[(low, high)] = nv.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
    assert list(readings.values()) == [1590, 1590, 1980, 1980, 1400]
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nv.nvmlDeviceSetGpuLockedClocks(h, unlimited, 1400)


def test_fake_idle_gpu_reads_its_idle_clock_even_locked():
    gpu = FakeGpu(idle=True)
    nv = make_pynvml(gpu)
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    nv.nvmlDeviceSetGpuLockedClocks(h, pynvml.NVML_CLOCK_LIMIT_ID_TDP, pynvml.NVML_CLOCK_LIMIT_ID_TDP)
    assert nv.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) == 345
    assert nv.nvmlDeviceGetCurrentClocksEventReasons(h) & pynvml.nvmlClocksEventReasonGpuIdle


def test_fake_refuses_every_query_outside_a_session_answered_or_not():
    nv = make_pynvml(FakeGpu())
    nv.nvmlDeviceGetBrand.return_value = 2  # no side effect of its own
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nv.nvmlDeviceGetBrand(object())
    nv.nvmlInit()
    assert nv.nvmlDeviceGetBrand(object()) == 2


def test_fake_shutdown_more_times_than_init_is_no_error():
    """nvml.h (API 13, go-nvml 2f9e261) :4027-4029: no error when nvmlShutdown is called more times than nvmlInit;
    a shutdown before any init still finds the library uninitialized."""
    gpu = FakeGpu()
    nv = make_pynvml(gpu)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nv.nvmlShutdown()
    nv.nvmlInit()
    nv.nvmlShutdown()
    nv.nvmlShutdown()  # one more than the inits
    assert gpu.nvml_refs == 0
    with pytest.raises(pynvml.NVMLError_Uninitialized):  # and the library is still shut
        nv.nvmlDeviceGetCount()


def test_a_deprecated_application_clock_falls_back_to_the_max_sm_clock():
    """NVML 13 deprecates the application clock ids (nvml.h :1127-1130) and their getters (DEPRECATED(13.0),
    :5672-5677). A driver answering NVML_ERROR_DEPRECATED (26, nvml.h :1324) for them means "no such reading":
    the reference clock falls back to the maximum SM clock, and the environment record still builds."""
    nv = make_pynvml(FakeGpu(max_sm_clock_mhz=2520, application_clocks_deprecated=True))
    with nvml.open_device(0, None, nv) as dev:
        assert dev.reference_sm_clock_mhz() == (2520, "max SM clock")
        info = dev.info()
    assert info["max_sm_clock_mhz"] == 2520
