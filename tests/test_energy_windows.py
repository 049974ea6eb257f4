"""Energy windows sized to the measurement (fp8bench/energy/windows.py): a counter's update period measured, the
window long enough for a 1 % quantization error, the bound recorded with each energy figure.

The counters are fakes: a simulated one driven by a simulated clock (exact), and the fake NVML's, which steps every
``counter_step_s`` of real time (tests/fake_nvml.py). No GPU's counter has been measured here.
"""

from __future__ import annotations

import time

import pytest
import test_cuda_timing
from fake_nvml import FakeGpu, make_pynvml
from test_cuda_timing import GPU1, POLICY

from fp8bench.core.devices import Device
from fp8bench.energy import meters as energy
from fp8bench.energy.meters import WindowMeter, WindowPolicy, nvml_meter
from fp8bench.energy.windows import (
    COOLDOWN_MARGIN_C,
    ERROR_TARGET,
    PERIOD_FLOOR_S,
    error_bound,
    measure_update_period,
    sized_window_s,
)
from fp8bench.measure.runner import CaseMeasurer, RunSettings

fake_cuda, chain = test_cuda_timing.fake_cuda, test_cuda_timing.chain  # fixtures, shared


class SteppedCounter:
    """A counter published every ``period_s`` of a simulated clock that advances ``read_s`` per read."""

    def __init__(self, period_s: float, watts: float = 300.0, read_s: float = 1e-4) -> None:
        self.now, self.period_s, self.watts, self.read_s = 0.0, period_s, watts, read_s

    def clock(self) -> float:
        return self.now

    def __call__(self) -> float:
        self.now += self.read_s
        return int(self.now / self.period_s) * self.period_s * self.watts


def test_update_period_is_measured_from_the_counters_changes():
    counter = SteppedCounter(0.1)
    period = measure_update_period(counter, counter.clock)
    assert period.seconds == pytest.approx(0.1, abs=2e-4) and period.changes == 5
    still = measure_update_period(lambda: 42.0, SteppedCounter(1.0).clock, max_s=0.0)
    assert still.seconds is None and "too few to measure its update period" in still.reason


def test_window_is_sized_for_one_percent_and_capped():
    assert ERROR_TARGET == 0.01
    assert sized_window_s(0.1, min_s=1.0, max_s=20.0) == pytest.approx(10.0)  # 100 periods
    assert sized_window_s(0.02, min_s=1.0, max_s=10.0) == pytest.approx(2.0)
    assert sized_window_s(0.001, min_s=1.0, max_s=10.0) == 1.0  # the minimum still holds
    assert sized_window_s(0.5, min_s=1.0, max_s=10.0) == 10.0  # capped: the bound will say 5 %
    assert error_bound(0.1, 10.0, 3000.0, unit_j=1e-3) == pytest.approx(0.01 + 1e-3 / 3000)
    assert error_bound(None, 1.0, 1.0) is None
    with pytest.raises(ValueError, match="energy error target must be a fraction in"):
        sized_window_s(0.1, 1.0, 10.0, target=0.0)


def meter_on(gpu: FakeGpu, **policy) -> WindowMeter:
    return nvml_meter(Device("cuda", 0), nv=make_pynvml(gpu), policy=WindowPolicy(**policy))


def test_a_sized_window_records_its_bound_under_the_target():
    gpu = FakeGpu(counter_step_s=0.012)  # above the period floor
    # The fake counter steps in real time: on a loaded machine its period reads longer (polls come late), and the
    # window grows with it. A cap far above any such reading keeps the check about the sizing rule, not the load.
    meter = meter_on(gpu, min_window_s=0.01, max_window_s=60.0, error_target=0.01)
    # A call that takes real time: an empty one runs the loop into its iteration cap before a sized window ends.
    reading = meter.measure(lambda: time.sleep(1e-4), Device("cpu"), 1e-4)
    period = reading.counter_update_s
    assert period is not None and reading.window_s >= period / 0.01  # 100 periods at least
    assert reading.error_bound == pytest.approx(period / reading.window_s + 1e-3 / reading.window_j)
    assert reading.error_bound <= 0.01 + 1e-3 / reading.window_j
    assert reading.joules_per_iter is not None and reading.reason is None


def test_a_capped_window_says_how_large_its_error_can_be():
    gpu = FakeGpu(counter_step_s=0.005)
    meter = meter_on(gpu, min_window_s=0.01, max_window_s=0.1, error_target=0.01)
    reading = meter.measure(lambda: None, Device("cpu"), 1e-4)
    assert reading.error_bound is not None and reading.error_bound > 0.01
    assert "quantization error up to" in reading.reason and "(capped at 0.1 s)" in reading.reason


def test_fixed_windows_stay_as_they_were():
    reading = meter_on(FakeGpu(counter_step_s=0.005), min_window_s=0.05, max_window_s=1.0).measure(
        lambda: None, Device("cpu"), 1e-4)
    assert reading.error_bound is None and reading.counter_update_s is None


def test_the_runner_records_the_bound_with_the_energy_figure(fake_cuda, chain, monkeypatch):
    gpu = FakeGpu(counter_step_s=0.002)
    nv = make_pynvml(gpu)
    monkeypatch.setattr(energy, "_FACTORIES", [lambda device: energy.nvml_meter(device, nv=nv)])
    s = RunSettings(device="cuda:1", budget_s=30, policy=POLICY, warmup_s=0.0, energy=True, energy_window_s=0.01,
                    flush_l2=False)
    record = CaseMeasurer(s, GPU1).measure(chain())
    assert record.status == "ok", record.reason
    assert record.energy_j is not None and record.energy["method"] == "nvml_counter"
    assert record.energy["counter_update_s"] is not None
    assert record.energy["error_bound"] <= 0.01 + 1e-3 / record.energy["window_j"]


def test_a_host_bound_call_stops_at_the_window_cap_in_wall_time():
    """The timed (device) median says 0.1 ms a call while the host takes 10 ms: a chunk sized from the device time
    is 250 calls, 2.5 s of wall time, far past a 0.2 s cap. The cap holds in wall time: at most one call past it
    (a loaded machine only lengthens each sleep, so fewer calls fit)."""
    meter = meter_on(FakeGpu(counter_step_s=0.005), min_window_s=0.1, max_window_s=0.2)
    reading = meter.measure(lambda: time.sleep(0.01), Device("cpu"), 1e-4)
    assert reading.iterations <= 21


def test_a_counter_faster_than_any_reported_is_bounded_with_the_floor():
    """A counter that seems to change every millisecond (a driver interpolating between sensor updates would look
    so) must not buy a 0.1 % bound: the period is floored at the fastest update ever reported."""
    meter = meter_on(FakeGpu(counter_step_s=0.001), min_window_s=0.2, max_window_s=0.2, error_target=0.01)
    reading = meter.measure(lambda: time.sleep(1e-3), Device("cpu"), 1e-3)
    assert reading.counter_update_s >= PERIOD_FLOOR_S
    assert reading.error_bound >= PERIOD_FLOOR_S / reading.window_s


def test_the_bound_says_what_it_leaves_out_and_the_window_its_start_temperature():
    meter = meter_on(FakeGpu(counter_step_s=0.005, temperature_c=61), min_window_s=0.05, max_window_s=1.0,
                     error_target=0.05)
    reading = meter.measure(lambda: time.sleep(1e-3), Device("cpu"), 1e-3)
    assert getattr(reading, "start_temperature_c", None) == 61
    assert "25%" in (getattr(reading, "bound_scope", None) or "")


def test_a_hot_gpu_cools_down_before_its_window():
    """The previous window left the GPU 20 degrees over where the meter first found it: the next window waits
    (bounded) until it is back within the margin, so a case's energy does not depend on the case before it."""
    gpu = FakeGpu(counter_step_s=0.005, temperature_c=50)
    meter = meter_on(gpu, min_window_s=0.05, max_window_s=1.0)
    gpu.temperature_c = 70
    waited = []

    def cool(seconds):
        waited.append(seconds)
        gpu.temperature_c -= 5

    meter.sleep = cool
    reading = meter.measure(lambda: time.sleep(1e-3), Device("cpu"), 1e-3)
    assert waited and gpu.temperature_c <= 50 + COOLDOWN_MARGIN_C
    assert getattr(reading, "start_temperature_c", None) == gpu.temperature_c


def test_a_window_that_cannot_run_what_was_timed_says_how_it_differs(fake_cuda, chain, monkeypatch):
    """Cold-L2 timed samples, eager warm-L2 energy calls: the energy figure must not pass for the timed one's."""
    nv = make_pynvml(FakeGpu(counter_step_s=0.002))
    monkeypatch.setattr(energy, "_FACTORIES", [lambda device: energy.nvml_meter(device, nv=nv)])
    s = RunSettings(device="cuda:1", budget_s=30, policy=POLICY, warmup_s=0.0, energy=True, energy_window_s=0.01,
                    flush_l2=True)
    record = CaseMeasurer(s, GPU1).measure(chain())
    assert record.energy["matches_timing"] is False
    assert "warm L2" in record.energy["reason"]
