"""Telemetry sampling through a window, power integration, the throttle rule and its verdicts."""

import itertools
import threading
import time

import pytest

from fp8bench.core.throttle import only_power_capped
from fp8bench.energy.telemetry import (
    TIMED_SAMPLES,
    PowerSource,
    Sample,
    TelemetrySampler,
    TelemetrySource,
    TelemetryWindow,
    ThrottlePolicy,
    integrate_power_j,
    summarize,
)


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


def test_a_window_whose_samples_hold_two_powers_says_mixed():
    """The instant field for some samples and the 1 s average for others: the window's power is neither."""
    instant, usage = PowerSource.INSTANT, PowerSource.USAGE
    mixed = [Sample(0.0, power_w=600.0, power_source=instant), Sample(0.1, power_w=None),
             Sample(0.2, power_w=410.0, power_source=usage)]
    assert summarize(mixed, _names)["power_source"] == "mixed"
    assert summarize(mixed[:2], _names)["power_source"] == instant.value
    assert summarize([Sample(0.0)], _names)["power_source"] is None


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
    assert policy.observe(summary, 1755, {"power": 800_000_000, "thermal": 0}) == [
        "power-capped: clocks held by the power limit (sw_power_cap) for 800.0 ms of the energy window; recorded, "
        "not invalidating (--strict-clocks invalidates it)"]
    assert policy.observe(_summary(), 1755, {"power": 0, "thermal": 0}) == []
    # Still invalid when something else slowed the clocks in the same window.
    assert policy.assess(_summary(["sw_power_cap", "hw_thermal_slowdown"]), 1755) != []


def test_a_clock_drop_the_power_cap_alone_explains_is_recorded_not_invalid():
    """The same H100 at its power limit with its clock trimmed to 1410 MHz (80% of 1755, under the 90% floor):
    power capping is the only limiter seen, so the drop is the board's steady state, recorded with its fraction."""
    policy = ThrottlePolicy()
    capped = _summary(["sw_power_cap", "gpu_idle"], sm_median=1410)
    assert policy.assess(capped, 1755, where=TIMED_SAMPLES) == []
    assert policy.observe(capped, 1755, where=TIMED_SAMPLES) == [
        "power-capped: clocks held by the power limit (sw_power_cap) during the timed samples; median SM clock "
        "1410 MHz is 80% of the reference 1755 MHz, under the 90% floor: a drop the power limit alone explains; "
        "recorded, not invalidating (--strict-clocks invalidates it)"]
    # The counter alone says power capping too, and a deeper drop is let stand the same way.
    deep = _summary(sm_median=1200)
    assert policy.assess(deep, 1755, {"power": 10**6, "thermal": 0}) == []
    assert "is 68% of the reference 1755 MHz" in policy.observe(deep, 1755, {"power": 10**6, "thermal": 0})[0]


def test_a_clock_drop_with_another_limiter_or_none_still_invalidates():
    policy = ThrottlePolicy()
    clock = "throttled: median SM clock 1410 MHz during the energy window is under 90% of the reference 1755 MHz"
    assert policy.assess(_summary(sm_median=1410), 1755) == [clock]  # nothing explains it
    both = policy.assess(_summary(["sw_power_cap", "hw_slowdown"], sm_median=1410), 1755)
    assert both == ["throttled: hardware slowdown (hw_slowdown) during the energy window", clock]
    heat = policy.assess(_summary(["sw_power_cap"], sm_median=1410), 1755, {"power": 10**6, "thermal": 10**6})
    assert clock in heat and any("thermal limit" in r for r in heat)
    # Even a thermal bit the policy is told to ignore means the power cap is not the drop's only cause.
    ignoring = ThrottlePolicy(ignored_reasons=("sw_thermal_slowdown",))
    assert ignoring.assess(_summary(["sw_power_cap", "sw_thermal_slowdown"], sm_median=1410), 1755) == [clock]
    assert policy.observe(_summary(["sw_power_cap", "hw_slowdown"], sm_median=1410), 1755)[0] == (
        "power-capped: clocks held by the power limit (sw_power_cap) during the energy window; recorded, not "
        "invalidating (--strict-clocks invalidates it)")  # the drop is not put down to the power cap


def test_strict_clocks_keep_the_clock_floor_for_power_capped_windows():
    strict = ThrottlePolicy(power_cap_invalid=True)
    assert strict.assess(_summary(["sw_power_cap"], sm_median=1410), 1755) == [
        "throttled: power cap (sw_power_cap) during the energy window (--strict-clocks)",
        "throttled: median SM clock 1410 MHz during the energy window is under 90% of the reference 1755 MHz"]
    assert strict.observe(_summary(["sw_power_cap"], sm_median=1410), 1755) == []


def test_older_files_invalidated_by_a_power_capped_clock_drop_read_as_power_capped():
    """Before the rule let a power-capped clock drop stand, such windows were invalid by the clock floor, their
    power capping said in a note (or, before the power-cap rule, in a reason of the same window)."""
    clock = "throttled: median SM clock 1410 MHz is under 90% of the reference 1755 MHz"
    note = "power-capped: clocks held by the power limit (sw_power_cap) during the window; recorded, not invalidating"
    assert only_power_capped([clock], [note])
    assert only_power_capped(["throttled: power cap (sw_power_cap) during the energy window", clock])
    assert only_power_capped([f"phase gemm: {clock}"], [f"phase gemm: {note}"])
    assert not only_power_capped([clock])  # not capped: the clock floor stands
    assert not only_power_capped([f"phase gemm: {clock}"], [note])  # capped in another window
    assert not only_power_capped([clock, "throttled: hardware slowdown (hw_slowdown) during the energy window"],
                                 [note])
    assert not only_power_capped([], [note])


def test_strict_clocks_invalidates_power_capping():
    strict = ThrottlePolicy(power_cap_invalid=True)
    assert strict.assess(_summary(["sw_power_cap"]), 1755) == [
        "throttled: power cap (sw_power_cap) during the energy window (--strict-clocks)"]
    assert strict.assess(_summary(), 1755, {"power": 10**6, "thermal": 0}) == [
        "throttled: clocks held by the power cap for 1.0 ms of the energy window (NVML violation counter, "
        "--strict-clocks)"]
    assert strict.observe(_summary(["sw_power_cap"]), 1755, None) == []  # said once, as the invalid reason


def test_violation_counter_growth_invalidates_without_a_bit():
    reasons = ThrottlePolicy().assess(_summary(), 1755, {"power": 0, "thermal": 25_000_000})
    assert reasons == ["throttled: clocks held by the thermal limit for 25.0 ms of the energy window (NVML violation "
                       "counter)"]
    # The bit and the counter describe one event: reported once.
    strict = ThrottlePolicy(power_cap_invalid=True)
    assert len(strict.assess(_summary(["sw_power_cap"]), 1755, {"power": 10**6})) == 1


def test_clock_under_floor_invalidates():
    assert ThrottlePolicy().assess(_summary(sm_median=1600), 1755) == []  # 91% of the reference
    reasons = ThrottlePolicy().assess(_summary(sm_median=1500), 1755)
    assert reasons == ["throttled: median SM clock 1500 MHz during the energy window is under 90% of the reference "
                       "1755 MHz"]
    assert ThrottlePolicy(clock_floor=0.8).assess(_summary(sm_median=1500), 1755) == []
    assert ThrottlePolicy().assess(_summary(sm_median=1500), None) == []  # no reference: no clock rule


def test_policy_rejects_bad_values():
    with pytest.raises(ValueError, match="clock floor .* got 1.5"):
        ThrottlePolicy(clock_floor=1.5)
    with pytest.raises(ValueError, match=r"unknown throttle reason\(s\) \['hot'\]; accepted: "):
        ThrottlePolicy(ignored_reasons=("hot",))


# -- a window of timed samples ------------------------------------------------------------------------------------

def test_window_watches_its_stretch_and_judges_it_with_the_rule():
    clock = iter(range(10**6))
    violations = {"power": 0, "thermal": 0}

    def read():
        return Sample(t=time.perf_counter(), sm_clock_mhz=1900, reasons_mask=0x40 if next(clock) == 3 else 0x1)

    source = TelemetrySource(read, _names, reference_clock_mhz=1755, violations=lambda: dict(violations))
    with TelemetryWindow(source, interval_s=0.005) as window:
        window.take()  # a snapshot between two timed samples joins the background ones
        time.sleep(0.05)
        violations["thermal"] += 2_000_000
    verdict = window.verdict(ThrottlePolicy())
    assert verdict.telemetry["samples"] >= 4 and verdict.sm_clock_mhz == 1900
    assert verdict.telemetry["reference_sm_clock_mhz"] == 1755
    assert verdict.invalid_reasons == (
        "throttled: thermal slowdown (hardware) (hw_thermal_slowdown) during the timed samples",
        "throttled: clocks held by the thermal limit for 2.0 ms of the timed samples (NVML violation counter)")
    assert not any(t.name == "fp8bench-telemetry" for t in threading.enumerate())


def test_window_without_a_source_or_with_a_failing_one_says_why():
    nothing = TelemetryWindow(None, absent_reason="no NVML here")
    with nothing:
        pass
    assert nothing.verdict(ThrottlePolicy()).telemetry == {"reason": "not sampled: no NVML here"}
    assert nothing.verdict(ThrottlePolicy()).sm_clock_mhz is None

    def lost():
        raise RuntimeError("gpu fell off the bus")

    with TelemetryWindow(TelemetrySource(lambda: Sample(0.0), violations=lost)) as failing:
        pass
    verdict = failing.verdict(ThrottlePolicy())
    assert verdict.telemetry == {"reason": "telemetry lost during the timed samples: RuntimeError: gpu fell off the "
                                           "bus"}
    assert verdict.invalid_reasons == ()
