"""Energy windows: the NVML counter path, its failure paths and the power-sampling fallback (against an autospec of
the real ``pynvml``), RAPL over a sysfs tree, and energy on this CPU (``null`` with the reason, run complete)."""

import dataclasses
import time

import pynvml
import pytest
from fake_nvml import FakeGpu, make_pynvml

from fp8bench.core.devices import Device
from fp8bench.core.pipeline import Pipeline
from fp8bench.core.plugins import load_all
from fp8bench.energy import meters as energy
from fp8bench.energy.meters import (
    EnergyReading,
    MeterUnavailable,
    NullMeter,
    WindowMeter,
    WindowPolicy,
    configure_meter,
    measure_case_energy,
    meter_for,
    nvml_meter,
    rapl_meter,
)
from fp8bench.energy.rapl import RaplCounter, RaplUnavailable
from fp8bench.measure.runner import CaseMeasurer, expand_cases, run_cases
from fp8bench.measure.settings import ClockSettings, EnergySettings, RunSettings, TimingSettings
from fp8bench.measure.timing import SamplingPolicy

load_all()
CPU = Device("cpu")
GPU = Device("cuda", 0)  # only handed to the meter factory; the work itself runs on the CPU
SHORT = WindowPolicy(min_window_s=0.2, max_window_s=0.5, telemetry_interval_s=0.01)


def work():
    """The looped call. The fake GPU's power, not this call, sets the energy, so a cheap call keeps tests fast."""
    return sum(range(50))


def meter(gpu, nv=None, policy=SHORT):
    return nvml_meter(GPU, nv=nv or make_pynvml(gpu), policy=policy)


def test_counter_path_gives_joules_per_iteration():
    gpu = FakeGpu(power_w=300.0)
    reading = meter(gpu).measure(work, CPU, 1e-4)
    assert reading.method == "nvml_counter" and reading.valid and reading.reason is None
    assert reading.window_s >= SHORT.min_window_s
    assert reading.joules_per_iter == pytest.approx(reading.window_j / reading.iterations)
    # The counter publishes 300 W x 20 ms = 6 J steps: the window's energy is a whole number of steps, within one
    # step of power x window (two allowed: a busy machine can delay a counter read past its timestamp).
    assert reading.window_j / 6.0 == pytest.approx(round(reading.window_j / 6.0), abs=1e-6)
    assert abs(reading.window_j - 300.0 * reading.window_s) <= 12.0 + 1e-6
    assert reading.avg_power_w == pytest.approx(300.0, rel=0.25)
    assert reading.samples >= 2 and reading.telemetry["sm_clock_mhz"]["median"] == 1980
    assert reading.telemetry["reference_sm_clock_mhz"] == 1755


def test_unknown_call_time_is_calibrated_not_trusted():
    reading = meter(FakeGpu()).measure(work, CPU, 0.0)
    assert reading.joules_per_iter is not None and 1 <= reading.iterations < SHORT.max_iterations


def test_counter_not_advancing_in_a_short_window_is_null_with_reason():
    gpu = FakeGpu(counter_step_s=60.0)  # never steps within the test
    started = time.monotonic()
    reading = meter(gpu).measure(work, CPU, 1e-4)
    assert reading.joules_per_iter is None and reading.window_j is None and reading.avg_power_w is None
    assert "energy counter did not advance" in reading.reason
    # It kept looping past the minimum, up to the limit, waiting for a step, then gave up.
    assert SHORT.max_window_s <= reading.window_s < SHORT.max_window_s + 1.0
    assert time.monotonic() - started < 5


def test_counter_going_backwards_is_null_with_reason():
    nv = make_pynvml(FakeGpu())
    reads = iter(range(10**6))
    # The probe and the window's first read see 5 kJ; the driver reloads and every later read restarts near 0.
    nv.nvmlDeviceGetTotalEnergyConsumption.side_effect = lambda h: 5_000_000 if next(reads) < 2 else 10
    reading = nvml_meter(GPU, nv=nv, policy=WindowPolicy(min_window_s=0.01, max_window_s=0.01)).measure(
        work, CPU, 1e-4)
    assert reading.joules_per_iter is None and "went backwards" in reading.reason


def test_a_power_meter_on_the_averaged_power_refuses_to_subtract_a_wrapping():
    """nvmlDeviceGetPowerUsage is a 1 s running average on Ampere except GA100 and newer (nvml.h of NVML API 13,
    go-nvml 2f9e261, :6538-6540): integrated over a window, it lags the work by up to a second at each edge, so a
    short window of the wrapping alone subtracted from the calls' window means nothing. The window loops the bare
    call and says it does not match the timing."""
    nv = make_pynvml(FakeGpu(power_w=250.0, instant_field=False))
    nv.nvmlDeviceGetTotalEnergyConsumption.side_effect = pynvml.NVMLError_NotSupported()
    meter = nvml_meter(GPU, nv=nv, policy=SHORT)
    wrapped = energy.AsTimed(work, work, "the L2 flush alone")
    reading, mismatch = energy._metered(meter, work, CPU, 1e-4, "end_to_end", lambda fn: wrapped)
    assert mismatch is not None and "1 s average" in mismatch, mismatch
    assert reading.subtracted_what is None
    instant = make_pynvml(FakeGpu(power_w=250.0))  # the instant field: sampled power that follows the work
    instant.nvmlDeviceGetTotalEnergyConsumption.side_effect = pynvml.NVMLError_NotSupported()
    reading, mismatch = energy._metered(nvml_meter(GPU, nv=instant, policy=SHORT), work, CPU, 1e-4, "end_to_end",
                                        lambda fn: wrapped)
    assert mismatch is None and reading.subtracted_what == "the L2 flush alone"


def test_counter_unsupported_falls_back_to_power_sampling():
    nv = make_pynvml(FakeGpu(power_w=250.0))
    nv.nvmlDeviceGetTotalEnergyConsumption.side_effect = pynvml.NVMLError_NotSupported()
    reading = nvml_meter(GPU, nv=nv, policy=SHORT).measure(work, CPU, 1e-4)
    assert reading.method == "nvml_power"
    assert reading.reason.startswith("approximate: NVML total-energy counter not supported")
    assert reading.avg_power_w == pytest.approx(250.0)  # constant power integrates exactly
    assert reading.joules_per_iter == pytest.approx(250.0 * reading.window_s / reading.iterations)


def test_neither_counter_nor_power_means_no_meter_with_reason():
    nv = make_pynvml(FakeGpu())
    nv.nvmlDeviceGetTotalEnergyConsumption.side_effect = pynvml.NVMLError_NotSupported()
    nv.nvmlDeviceGetPowerUsage.side_effect = pynvml.NVMLError_NotSupported()
    with pytest.raises(MeterUnavailable, match="counter not supported.*power unreadable too"):
        nvml_meter(GPU, nv=nv)
    assert nv.nvmlShutdown.call_count == 1


def test_nvml_error_mid_window_gives_null_with_reason():
    nv = make_pynvml(FakeGpu())
    m = nvml_meter(GPU, nv=nv, policy=SHORT)
    reads = iter(range(10**6))

    def lost(h):
        if next(reads) >= 1:  # the window's first read works, the GPU is lost before the second
            raise pynvml.NVMLError_GpuIsLost()
        return 1000

    nv.nvmlDeviceGetTotalEnergyConsumption.side_effect = lost
    reading = m.measure(work, CPU, 1e-4)
    assert reading.joules_per_iter is None and reading.avg_power_w is None
    assert "failed mid-window (NVMLError_GpuIsLost (code 15))" in reading.reason


def test_an_error_in_the_measured_call_is_not_blamed_on_the_meter():
    import threading

    calls = iter(range(10**6))

    def crashes():
        if next(calls) == 100:
            raise RuntimeError("kernel crashed")

    with pytest.raises(RuntimeError, match="kernel crashed"):
        meter(FakeGpu()).measure(crashes, CPU, 1e-4)
    assert not any(t.name == "fp8bench-telemetry" for t in threading.enumerate())  # sampler stopped


def test_telemetry_error_mid_window_voids_the_window():
    nv = make_pynvml(FakeGpu())
    m = nvml_meter(GPU, nv=nv, policy=SHORT)
    calls = iter(range(10**6))

    def clock(h, t):
        if next(calls) >= 4:
            raise pynvml.NVMLError_Unknown()
        return 1980

    nv.nvmlDeviceGetClockInfo.side_effect = clock
    reading = m.measure(work, CPU, 1e-4)
    assert reading.joules_per_iter is None and "NVMLError_Unknown" in reading.reason


def test_throttle_bits_make_the_reading_invalid_but_keep_the_numbers():
    gpu = FakeGpu(reasons=pynvml.nvmlClocksEventReasonHwThermalSlowdown | pynvml.nvmlClocksEventReasonGpuIdle)
    reading = meter(gpu).measure(work, CPU, 1e-4)
    assert reading.joules_per_iter is not None
    assert not reading.valid
    assert reading.invalid_reasons == ("throttled: thermal slowdown (hardware) (hw_thermal_slowdown) during the "
                                       "energy window",)
    assert reading.telemetry["reasons"] == ["gpu_idle", "hw_thermal_slowdown"]


def test_low_clock_and_violation_growth_make_the_reading_invalid():
    gpu = FakeGpu(sm_clock_mhz=1200)
    m = meter(gpu)
    reading = m.measure(work, CPU, 1e-4)
    assert any("median SM clock 1200 MHz" in r for r in reading.invalid_reasons)

    gpu = FakeGpu()
    m = meter(gpu)

    def heat():
        policy = pynvml.NVML_PERF_POLICY_THERMAL
        gpu.violation_ns[policy] = gpu.violation_ns.get(policy, 0) + 10
        return work()

    reading = m.measure(heat, CPU, 1e-4)
    assert not reading.valid and "thermal limit" in reading.invalid_reasons[0]


def _power_capped_gpu():
    """An H100 at its power limit: the power-cap bit set and the power violation counter growing while it works."""
    gpu = FakeGpu(power_w=700.0, sm_clock_mhz=1710, reasons=pynvml.nvmlClocksEventReasonSwPowerCap)

    def capped_work():
        policy = pynvml.NVML_PERF_POLICY_POWER
        gpu.violation_ns[policy] = gpu.violation_ns.get(policy, 0) + 1000
        return work()

    return gpu, capped_work


def test_power_capping_is_recorded_and_the_window_stays_valid():
    gpu, capped_work = _power_capped_gpu()
    reading = meter(gpu).measure(capped_work, CPU, 1e-4)
    assert reading.valid and reading.invalid_reasons == () and reading.joules_per_iter is not None
    assert reading.telemetry["reasons"] == ["sw_power_cap"]
    assert len(reading.clock_notes) == 1 and reading.clock_notes[0].startswith("power-capped: clocks held by the "
                                                                               "power limit (sw_power_cap) for ")


def test_a_case_under_its_own_settings_keeps_the_locked_clock_as_the_throttle_reference():
    """Under --lock-clocks the locked clock read back is the throttle reference (runner: the meter is configured with
    it once); a case measured under a suite budget's shortened settings reconfigures the meter without it, and the
    reference must survive that reconfiguration and the one back to the run's settings."""
    settings = RunSettings(device="cpu")
    measurer = CaseMeasurer(settings, CPU)
    measurer.meter = configure_meter(meter(FakeGpu()), SHORT.min_window_s, 0.9, reference_clock_mhz=1500)
    shortened = settings.with_energy(window_s=0.3)
    with measurer._settings_for_case(shortened):
        assert measurer.meter.policy.min_window_s == 0.3  # the case's own settings reached the meter
        assert measurer.meter.reference_clock_mhz == 1500 and measurer.meter.source.reference_clock_mhz == 1500
    assert measurer.meter.policy.min_window_s == settings.energy.window_s
    assert measurer.meter.reference_clock_mhz == 1500 and measurer.meter.source.reference_clock_mhz == 1500


def test_strict_clocks_make_a_power_capped_window_invalid():
    gpu, capped_work = _power_capped_gpu()
    m = configure_meter(meter(gpu), SHORT.min_window_s, 0.9, strict_clocks=True)
    reading = m.measure(capped_work, CPU, 1e-4)
    assert not reading.valid and reading.invalid_reasons[0].startswith("throttled: power cap (sw_power_cap)")
    assert reading.clock_notes == ()


def test_named_window_around_arbitrary_code():
    m = meter(FakeGpu(power_w=200.0))
    with m.window("train_10_steps", CPU, iterations=10) as w:
        time.sleep(0.15)
    r = w.reading
    assert r.name == "train_10_steps" and r.iterations == 10 and r.window_s >= 0.15
    assert r.joules_per_iter == pytest.approx(r.window_j / 10)
    assert r.avg_power_w == pytest.approx(200.0, rel=0.35)  # 0.15 s is only ~7 counter steps of 20 ms
    with meter(FakeGpu(counter_step_s=60.0)).window("too_short", CPU) as w:
        pass
    assert w.reading.joules_per_iter is None and "did not advance" in w.reading.reason


def test_named_window_survives_an_nvml_error():
    nv = make_pynvml(FakeGpu())
    m = nvml_meter(GPU, nv=nv, policy=SHORT)
    with m.window("step", CPU) as w:
        nv.nvmlDeviceGetTotalEnergyConsumption.side_effect = pynvml.NVMLError_GpuIsLost()
    assert w.reading.joules_per_iter is None and "NVMLError_GpuIsLost" in w.reading.reason


def test_idle_baseline_and_subtraction():
    m = meter(FakeGpu(power_w=80.0))
    idle = m.idle(CPU, 0.2)
    assert idle.name == "idle" and idle.avg_power_w == pytest.approx(80.0, rel=0.25)
    r = EnergyReading("nvml_counter", 2.0, 400.0, 1.0, 200, window_j=400.0).with_idle(100.0)
    assert r.idle_power_w == 100.0
    assert r.joules_above_idle_per_iter == pytest.approx(2.0 - 100.0 * 1.0 / 200)  # 1.5 J above idle


def test_a_failed_idle_baseline_is_stated_next_to_a_good_reading():
    idle = meter(FakeGpu(counter_step_s=60.0)).idle(CPU, 0.05)  # too short for the counter: no baseline
    assert idle.avg_power_w is None
    pipeline = Pipeline(end_to_end=work, phases={}, output=work)
    reading = measure_case_energy(meter(FakeGpu()), pipeline, CPU, 1e-4, {}, False, idle)
    assert reading.joules_per_iter is not None and reading.joules_above_idle_per_iter is None
    assert "no idle baseline: nvml_counter: energy counter did not advance" in reading.reason


def test_per_phase_energy_loops_each_phase_alone():
    calls = {"quantize": 0, "gemm": 0, "e2e": 0}

    def count(name):
        def call():
            calls[name] += 1
            return work()
        return call

    pipeline = Pipeline(end_to_end=count("e2e"), phases={"quantize": count("quantize"), "gemm": count("gemm")},
                        output=work)
    gpu = FakeGpu(reasons=0)
    m = meter(gpu)
    reading = measure_case_energy(m, pipeline, CPU, 1e-4, {"quantize": 1e-4, "gemm": 1e-4}, True, None)
    assert set(reading.phases) == {"quantize", "gemm"}
    for name, phase in reading.phases.items():
        assert phase["name"] == name and phase["iterations"] == calls[name] > 0
        assert phase["joules_per_iter"] is not None and "looped alone" in phase["method_note"]
    assert reading.iterations == calls["e2e"]


def test_window_policy_rejects_bad_values():
    with pytest.raises(ValueError, match="energy window must be positive seconds, got 0"):
        WindowPolicy(min_window_s=0)
    with pytest.raises(ValueError, match="max energy window 1 s is shorter than the minimum 2 s"):
        WindowPolicy(min_window_s=2, max_window_s=1)
    with pytest.raises(ValueError, match="needs an energy counter or a power-reporting telemetry source"):
        WindowMeter("x")


# -- the runner with these meters ----------------------------------------------------------------------------------

SETTINGS = RunSettings(device="cpu",
                       timing=TimingSettings(budget_s=10,
                                             policy=SamplingPolicy(min_samples=3, min_time_s=0.0, max_time_s=0.02),
                                             warmup_s=0.0),
                       energy=EnergySettings(window_s=0.1))


def _case():
    return expand_cases([("gemm", ["64x64x64"])], ["fp32"], ["torch"], SETTINGS)[0]


def _measurer_with(meter_, monkeypatch, settings=SETTINGS):
    monkeypatch.setattr(energy, "_FACTORIES", [lambda device: meter_])
    return CaseMeasurer(settings, CPU)


def test_runner_marks_a_throttled_case_invalid(monkeypatch):
    gpu = FakeGpu(reasons=pynvml.nvmlClocksEventReasonSwThermalSlowdown)
    record = _measurer_with(meter(gpu), monkeypatch).measure(_case())
    assert record.status == "invalid" and record.valid is False
    assert "thermal slowdown (software)" in record.reason
    assert record.efficiency.energy_j is not None and record.samples.median_s is not None  # numbers kept
    assert record.telemetry.energy["reasons"] == ["sw_thermal_slowdown"]
    assert record.telemetry.timing["reasons"] == ["sw_thermal_slowdown"]
    assert "during the timed samples" in record.reason and "during the energy window" in record.reason


def test_runner_records_power_capping_without_invalidating(monkeypatch):
    gpu, _ = _power_capped_gpu()
    record = _measurer_with(meter(gpu), monkeypatch).measure(_case())
    assert record.status == "ok" and record.valid is True and record.reason is None
    assert record.telemetry.energy["reasons"] == record.telemetry.timing["reasons"] == ["sw_power_cap"]
    assert any(n.startswith("power-capped: clocks held by the power limit") for n in record.notes)


def test_runner_with_strict_clocks_marks_power_capping_invalid(monkeypatch):
    gpu, _ = _power_capped_gpu()
    strict = dataclasses.replace(SETTINGS, clocks=ClockSettings(strict=True))
    record = _measurer_with(meter(gpu), monkeypatch, strict).measure(_case())
    assert record.status == "invalid" and record.valid is False
    assert "power cap (sw_power_cap)" in record.reason and "--strict-clocks" in record.reason


def _power_capped_under_the_floor():
    """A large FP8 GEMM on an H100 at its 700 W limit: the driver trims the SM clock to 1410 MHz, 80% of the default
    application clock (1755 MHz) and under the 90% floor, with only the power-cap bit set."""
    return FakeGpu(power_w=700.0, sm_clock_mhz=1410, reasons=pynvml.nvmlClocksEventReasonSwPowerCap)


def test_runner_keeps_a_case_valid_whose_clock_drop_the_power_cap_alone_explains(monkeypatch):
    record = _measurer_with(meter(_power_capped_under_the_floor()), monkeypatch).measure(_case())
    assert (record.status, record.reason) == ("ok", None)
    assert record.valid is True and record.samples.sm_clock_mhz == 1410
    note = next(n for n in record.notes if n.startswith("power-capped:") and "during the energy window" in n)
    assert "median SM clock 1410 MHz is 80% of the reference 1755 MHz, under the 90% floor" in note


def test_runner_still_invalidates_a_clock_drop_the_power_cap_does_not_explain(monkeypatch):
    thermal = FakeGpu(sm_clock_mhz=1410, reasons=pynvml.nvmlClocksEventReasonSwPowerCap
                      | pynvml.nvmlClocksEventReasonHwThermalSlowdown)
    record = _measurer_with(meter(thermal), monkeypatch).measure(_case())
    assert record.status == "invalid" and "thermal slowdown (hardware)" in record.reason
    assert "median SM clock 1410 MHz" in record.reason
    unexplained = FakeGpu(sm_clock_mhz=1410)  # no reason bit at all
    record = _measurer_with(meter(unexplained), monkeypatch).measure(_case())
    assert record.status == "invalid" and "median SM clock 1410 MHz" in record.reason
    strict = dataclasses.replace(SETTINGS, clocks=ClockSettings(strict=True))
    record = _measurer_with(meter(_power_capped_under_the_floor()), monkeypatch, strict).measure(_case())
    assert record.status == "invalid" and "power cap (sw_power_cap)" in record.reason
    assert "median SM clock 1410 MHz" in record.reason


def test_a_no_energy_run_checks_clocks_and_reasons_while_timing(monkeypatch):
    """``--no-energy`` runs no energy window, but the timed samples are still watched: a thermal slowdown during
    them invalidates the case, and the median SM clock is recorded."""
    no_energy = SETTINGS.with_energy(enabled=False)
    hot = FakeGpu(sm_clock_mhz=1410, reasons=pynvml.nvmlClocksEventReasonHwThermalSlowdown)
    record = _measurer_with(meter(hot), monkeypatch, no_energy).measure(_case())
    assert record.status == "invalid" and record.valid is False
    assert ("throttled: thermal slowdown (hardware) (hw_thermal_slowdown) during the timed samples"
            in record.reason)
    assert record.energy.to_json() == {"reason": "energy metering disabled"} and record.efficiency.energy_j is None
    assert record.samples.sm_clock_mhz == 1410

    clean = _measurer_with(meter(FakeGpu()), monkeypatch, no_energy).measure(_case())
    assert (clean.status, clean.samples.sm_clock_mhz) == ("ok", 1980)
    timing = clean.telemetry.timing
    assert timing["samples"] >= 2 and timing["sm_clock_mhz"]["median"] == 1980
    assert timing["reference_sm_clock_mhz"] == 1755 and timing["reasons"] == []


def test_without_device_telemetry_the_record_says_why_and_invents_no_clock():
    settings = SETTINGS.with_energy(enabled=False)
    record = CaseMeasurer(settings, CPU).measure(_case())
    assert record.status == "ok" and record.samples.sm_clock_mhz is None
    assert record.telemetry.timing["reason"].startswith("not sampled: ")


def test_runner_continues_after_an_nvml_error(monkeypatch):
    nv = make_pynvml(FakeGpu())
    m = nvml_meter(GPU, nv=nv, policy=SHORT)
    nv.nvmlDeviceGetTotalEnergyConsumption.side_effect = pynvml.NVMLError_GpuIsLost()
    record = _measurer_with(m, monkeypatch).measure(_case())
    assert record.status == "ok" and record.samples.median_s is not None and record.numerics
    assert record.efficiency.energy_j is None and record.efficiency.tflops_per_w is None
    assert "NVMLError_GpuIsLost" in record.energy.reason


def test_runner_reports_energy_tflops_per_watt_idle_and_phases(monkeypatch):
    settings = RunSettings(device="cpu",
                           timing=TimingSettings(budget_s=10, policy=SETTINGS.timing.policy, warmup_s=0.0),
                           energy=EnergySettings(window_s=0.1, idle_baseline_s=0.1, phases=True))
    record = _measurer_with(meter(FakeGpu(power_w=300.0)), monkeypatch, settings).measure(_case())
    assert record.status == "ok" and record.efficiency.energy_j > 0
    assert record.efficiency.tflops_per_w == pytest.approx(record.throughput.flops / record.efficiency.energy_j / 1e12)
    assert record.energy.idle_power_w == pytest.approx(300.0, rel=0.3)
    assert record.energy.joules_above_idle_per_iter is not None
    assert set(record.energy.phases) == set(record.samples.phases)


@pytest.mark.slow  # measures this CPU's ceilings once (~6 s on 2 busy cores)
def test_on_this_cpu_every_record_has_null_energy_with_reason(tmp_path):
    """No RAPL, no NVML here: joules are null and say why, in measured and skipped records alike."""
    assert isinstance(meter_for(CPU), NullMeter)
    cases = expand_cases([("gemm", ["64x64x64"])], ["fp32", "mxfp8"], ["torch"], SETTINGS)
    out = run_cases(cases, SETTINGS, CPU, run_file=tmp_path / "run.json")
    assert not out.interrupted and len(out.records) == 2
    assert {r.status for r in out.records} == {"ok", "skipped"}
    for r in out.records:
        assert r.efficiency.energy_j is None and r.efficiency.tflops_per_w is None
        assert "RAPL /sys/class/powercap absent" in r.energy.reason


def test_no_meter_on_cuda_without_driver_says_why():
    m = meter_for(GPU)
    assert isinstance(m, NullMeter) and "NVML could not start" in m.reason


# -- RAPL -----------------------------------------------------------------------------------------------------------

def _rapl_tree(root, packages=((1000, 262143328850),)):
    for i, (energy_uj, max_uj) in enumerate(packages):
        d = root / f"intel-rapl:{i}"
        d.mkdir(parents=True)
        (d / "name").write_text(f"package-{i}\n")
        (d / "energy_uj").write_text(f"{energy_uj}\n")
        (d / "max_energy_range_uj").write_text(f"{max_uj}\n")
        sub = root / f"intel-rapl:{i}:0"  # a sub-domain (cores): part of the package, not added again
        sub.mkdir()
        (sub / "energy_uj").write_text("999999999\n")
    return root


def test_rapl_sums_packages_and_corrects_wraparound(tmp_path):
    root = _rapl_tree(tmp_path / "powercap", [(1_000_000, 10_000_000), (2_000_000, 10_000_000)])
    counter = RaplCounter(root)
    assert [d.name for d in counter.domains] == ["package-0", "package-1"]
    assert counter.read_j() == pytest.approx(3.0)
    (root / "intel-rapl:0" / "energy_uj").write_text("9000000\n")
    assert counter.read_j() == pytest.approx(11.0)
    (root / "intel-rapl:0" / "energy_uj").write_text("500000\n")  # wrapped past 10 J
    assert counter.read_j() == pytest.approx(12.5)


def test_rapl_meter_measures_a_window(tmp_path):
    root = _rapl_tree(tmp_path / "powercap")
    path = root / "intel-rapl:0" / "energy_uj"
    reads = iter(range(10**6))

    def advancing():  # the package burns 1 J between the window's counter reads
        path.write_text(f"{1000 + 1_000_000 * next(reads)}\n")
        return work()

    m = rapl_meter(root, WindowPolicy(min_window_s=0.01, max_window_s=0.5))
    reading = m.measure(advancing, CPU, 1e-4)
    assert reading.method == "rapl" and reading.window_j > 0 and "package-0" in reading.reason
    assert reading.joules_per_iter == pytest.approx(reading.window_j / reading.iterations)


def test_rapl_absent_or_unreadable_is_unavailable_with_reason(tmp_path):
    with pytest.raises(RaplUnavailable, match="absent"):
        RaplCounter(tmp_path / "nope")
    with pytest.raises(MeterUnavailable, match="absent"):
        rapl_meter(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RaplUnavailable, match="no RAPL package domain"):
        RaplCounter(tmp_path / "empty")


def test_rapl_unreadable_counter_is_unavailable_with_reason(tmp_path):
    root = _rapl_tree(tmp_path / "locked")
    counter = root / "intel-rapl:0" / "energy_uj"
    counter.chmod(0)
    try:
        counter.read_text()
    except PermissionError:
        with pytest.raises(RaplUnavailable, match="not readable by this user"):
            RaplCounter(root)
    else:
        pytest.skip("running as root: file modes cannot make the counter unreadable")


# -- run options ----------------------------------------------------------------------------------------------------

def _run_settings(argv, overrides=None):
    import argparse

    from fp8bench.commands import run as run_command
    from fp8bench.commands import run_flags

    parser = argparse.ArgumentParser()
    run_flags.add_arguments(parser)
    return run_command._settings(parser.parse_args(argv), overrides or {})


def test_energy_flags_reach_the_run_settings():
    s = _run_settings(["--energy-window", "2.5", "--idle-baseline", "3", "--cooldown", "10", "--energy-phases",
                       "--clock-floor", "0.8"])
    e = s.energy
    assert (e.enabled, e.window_s, e.idle_baseline_s, e.cooldown_s, e.phases, s.clocks.floor) == (
        True, 2.5, 3.0, 10.0, True, 0.8)
    defaults = _run_settings([]).energy
    assert (defaults.enabled, defaults.window_s, defaults.idle_baseline_s, defaults.cooldown_s) == (
        True, 1.0, 0.0, 0.0)
    assert _run_settings(["--no-energy"]).energy.enabled is False
    assert _run_settings([]).clocks.strict is False and _run_settings(["--strict-clocks"]).clocks.strict is True
    assert _run_settings([], {"energy_window_s": 4, "cooldown_s": 1}).energy.window_s == 4.0  # from a suite file
    with pytest.raises(ValueError, match="clock floor .* got 1.2"):
        _run_settings(["--clock-floor", "1.2"])
    with pytest.raises(ValueError, match="cooldown_s must be finite seconds >= 0, got -1"):
        _run_settings(["--cooldown", "-1"])


# -- on a real GPU (skipped without CUDA; never run on the CPU-only development machines) -------------------------

@pytest.mark.gpu
def test_real_nvml_counter_meters_a_gemm_loop():
    import torch

    pytest.importorskip("pynvml")
    device = Device("cuda", 0)
    m = meter_for(device)
    if isinstance(m, NullMeter):
        pytest.skip(f"no NVML meter on this GPU runner: {m.reason}")
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    reading = m.measure(lambda: a @ a, device, 0.0)
    assert reading.method in ("nvml_counter", "nvml_power")
    assert reading.window_s >= 1.0 and reading.iterations > 0
    assert reading.joules_per_iter is not None and reading.joules_per_iter > 0, reading.reason
    assert 10 < reading.avg_power_w < 2000  # a loaded datacenter or desktop GPU, in watts
    assert reading.telemetry["samples"] >= 2 and reading.telemetry["sm_clock_mhz"]["median"] > 0


PRIVATE_ENERGY_NAME = __import__("re").compile(
    r"from fp8bench\.energy(?:\.\w+)? import [^\n]*?\b(_[a-z]\w*)"
    r"|\b(?:meters|nvml|telemetry|windows|rapl)\.(_[a-z]\w*)")


def private_energy_names(text: str) -> list[str]:
    """Private names of the energy package a module outside it reaches for."""
    return [a or b for a, b in PRIVATE_ENERGY_NAME.findall(text)]


def test_other_packages_use_only_public_names_of_the_energy_package():
    from pathlib import Path

    package = Path(energy.__file__).resolve().parent.parent
    assert private_energy_names("from fp8bench.energy.meters import _x\nmeters._y(d)") == ["_x", "_y"]
    used = {str(p.relative_to(package)): private_energy_names(p.read_text()) for p in package.rglob("*.py")
            if p.parent.name != "energy"}
    assert {path: names for path, names in used.items() if names} == {}
