"""Telemetry sampling through a window, power integration, and the throttle rule."""

import itertools
import threading
import time

import pytest

from fp8bench.telemetry import Sample, TelemetrySampler, ThrottlePolicy, integrate_power_j, summarize


def _names(mask):
    table = {0x1: "gpu_idle", 0x4: "sw_power_cap", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown"}
    return [n for bit, n in table.items() if mask & bit]


def test_sampler_samples_in_background_and_at_both_edges():
    counter = itertools.count()
    threads = set()

    def read():
        threads.add(threading.current_thread().name)
        return Sample(t=time.perf_counter(), sm_clock_mhz=next(counter))

    sampler = TelemetrySampler(read, interval_s=0.01)
    with sampler:
        time.sleep(0.15)
    samples = sampler.samples
    # Edges + background samples: two at least, typically ~15; a loaded machine may delay the thread a lot.
    assert len(samples) >= 3
    assert [s.sm_clock_mhz for s in samples] == list(range(len(samples)))
    assert "fp8bench-telemetry" in threads
    assert all(a.t <= b.t for a, b in itertools.pairwise(samples))


def test_sampler_keeps_the_error_and_stops():
    calls = itertools.count()

    def read():
        if next(calls) >= 2:
            raise RuntimeError("gpu fell off the bus")
        return Sample(t=time.perf_counter())

    sampler = TelemetrySampler(read, interval_s=0.005).start()
    time.sleep(0.05)
    samples = sampler.stop()
    assert len(samples) == 2
    assert isinstance(sampler.error, RuntimeError)


def test_sampler_rejects_bad_interval():
    with pytest.raises(ValueError, match="interval must be positive seconds, got 0"):
        TelemetrySampler(lambda: Sample(0.0), interval_s=0)


def test_summarize_ors_reason_bits_and_ranges():
    samples = [Sample(0.0, 1980, 2619, 50, 300.0, 0x0), Sample(0.1, 1700, 2619, 60, 400.0, 0x4),
               Sample(0.2, 1800, None, 58, 350.0, 0x1)]
    s = summarize(samples, _names)
    assert s["samples"] == 3 and s["span_s"] == pytest.approx(0.2)
    assert s["sm_clock_mhz"] == {"min": 1700, "median": 1800, "mean": pytest.approx(1826.67, abs=0.01), "max": 1980}
    assert s["mem_clock_mhz"]["median"] == 2619  # a missing reading is skipped, not counted as 0
    assert s["temperature_c"] == {"start": 50, "max": 60, "end": 58}
    assert s["reasons_mask"] == 0x5 and s["reasons"] == ["gpu_idle", "sw_power_cap"]


def test_integrate_constant_and_ramp_power():
    flat = [Sample(t, power_w=250.0) for t in (0.1, 0.5, 0.9)]
    # Edges held flat to the window: 250 W for 1 s.
    assert integrate_power_j(flat, 0.0, 1.0) == pytest.approx(250.0)
    ramp = [Sample(t / 10, power_w=100.0 + 100.0 * t / 10) for t in range(11)]
    assert integrate_power_j(ramp, 0.0, 1.0) == pytest.approx(150.0)  # trapezoids are exact on a line
    assert integrate_power_j([Sample(0.5, power_w=100.0)], 0.0, 1.0) is None
    assert integrate_power_j([Sample(0.5), Sample(0.6)], 0.0, 1.0) is None


def _summary(reasons=(), sm_median=1900):
    return {"reasons": list(reasons), "sm_clock_mhz": {"min": sm_median, "median": sm_median, "max": sm_median}}


def test_clean_window_is_valid():
    assert ThrottlePolicy().assess(_summary(["gpu_idle"]), 1755, {"power": 0, "thermal": 0}) == []


@pytest.mark.parametrize("bit,words", [("hw_thermal_slowdown", "thermal slowdown (hardware)"),
                                       ("sw_thermal_slowdown", "thermal slowdown (software)"),
                                       ("hw_slowdown", "hardware slowdown"),
                                       ("hw_power_brake_slowdown", "external power brake")])
def test_throttle_bits_invalidate(bit, words):
    reasons = ThrottlePolicy().assess(_summary([bit]), 1755)
    assert len(reasons) == 1 and words in reasons[0] and bit in reasons[0]


def test_power_cap_alone_is_recorded_not_invalid():
    """A large FP8 GEMM on an H100 runs at its power limit: the bit and the power violation counter are its normal
    state. The window stays valid; the observation says what was seen."""
    policy = ThrottlePolicy()
    summary = _summary(["sw_power_cap", "gpu_idle"], sm_median=1700)
    assert policy.assess(summary, 1755, {"power": 800_000_000, "thermal": 0}) == []
    assert policy.observe(summary, {"power": 800_000_000, "thermal": 0}) == [
        "power-capped: clocks held by the power limit (sw_power_cap) for 800.0 ms of the window; recorded, not "
        "invalidating (--strict-clocks invalidates it)"]
    assert policy.observe(_summary(), {"power": 0, "thermal": 0}) == []
    # Still invalid when something else slowed the clocks in the same window.
    assert policy.assess(_summary(["sw_power_cap", "hw_thermal_slowdown"]), 1755) != []
    assert policy.assess(_summary(["sw_power_cap"], sm_median=1400), 1755) != []  # clock under the floor


def test_strict_clocks_invalidates_power_capping():
    strict = ThrottlePolicy(power_cap_invalid=True)
    assert strict.assess(_summary(["sw_power_cap"]), 1755) == [
        "throttled: power cap (sw_power_cap) during the energy window (--strict-clocks)"]
    assert strict.assess(_summary(), 1755, {"power": 10**6, "thermal": 0}) == [
        "throttled: clocks held by the power cap for 1.0 ms of the window (NVML violation counter, --strict-clocks)"]
    assert strict.observe(_summary(["sw_power_cap"]), None) == []  # said once, as the invalid reason


def test_violation_counter_growth_invalidates_without_a_bit():
    reasons = ThrottlePolicy().assess(_summary(), 1755, {"power": 0, "thermal": 25_000_000})
    assert reasons == ["throttled: clocks held by the thermal limit for 25.0 ms of the window (NVML violation counter)"]
    # The bit and the counter describe one event: reported once.
    strict = ThrottlePolicy(power_cap_invalid=True)
    assert len(strict.assess(_summary(["sw_power_cap"]), 1755, {"power": 10**6})) == 1


def test_clock_under_floor_invalidates():
    assert ThrottlePolicy().assess(_summary(sm_median=1600), 1755) == []  # 91% of the reference
    reasons = ThrottlePolicy().assess(_summary(sm_median=1500), 1755)
    assert reasons == ["throttled: median SM clock 1500 MHz is under 90% of the reference 1755 MHz"]
    assert ThrottlePolicy(clock_floor=0.8).assess(_summary(sm_median=1500), 1755) == []
    assert ThrottlePolicy().assess(_summary(sm_median=1500), None) == []  # no reference: no clock rule


def test_policy_rejects_bad_values():
    with pytest.raises(ValueError, match="clock floor .* got 1.5"):
        ThrottlePolicy(clock_floor=1.5)
    with pytest.raises(ValueError, match=r"unknown throttle reason\(s\) \['hot'\]; accepted: "):
        ThrottlePolicy(ignored_reasons=("hot",))
