import time

import pytest

from fp8bench.measure.timing import CpuTimer, Samples, SamplingPolicy, l2_flush_bytes, sample


class FixedTimer:
    """A timer whose samples come from a list: the sampling rules are tested on known data."""

    def __init__(self, values):
        self.values = list(values)

    def time(self, fn):
        fn()
        return self.values.pop(0) if len(self.values) > 1 else self.values[0]


def far() -> float:
    return time.monotonic() + 60


def test_cpu_timer_measures_a_sleep():
    t = CpuTimer().time(lambda: time.sleep(0.02))
    assert 0.02 <= t < 0.5


def test_stops_at_target_after_minimum_samples_and_time():
    policy = SamplingPolicy(min_samples=10, min_time_s=0.0, target_rse=0.01)
    result = sample(lambda: None, FixedTimer([1.0] * 100), policy, far())
    assert result.stopped_by == "target" and result.n == 10 and result.target_reached
    assert result.median_s == 1.0 and result.iqr_s == 0.0


def test_noisy_samples_run_to_max_samples():
    values = [1.0, 2.0] * 200
    policy = SamplingPolicy(min_samples=10, min_time_s=0.0, target_rse=0.001, max_samples=40, max_time_s=1e9)
    result = sample(lambda: None, FixedTimer(values), policy, far())
    assert result.stopped_by == "max_samples" and result.n == 40 and not result.target_reached


def test_max_time_caps_measured_time():
    policy = SamplingPolicy(min_samples=3, min_time_s=0.0, target_rse=1e-6, max_time_s=5.0)
    result = sample(lambda: None, FixedTimer([1.0, 2.0] * 50), policy, far())
    assert result.stopped_by == "max_time" and result.n == 4  # 1+2+1+2 s reaches 5 s


def test_deadline_stops_sampling_and_flags_over_budget():
    policy = SamplingPolicy(min_samples=10)
    result = sample(lambda: time.sleep(0.01), CpuTimer(), policy, time.monotonic() + 0.035)
    assert result.stopped_by == "budget" and result.over_budget and 1 <= result.n < 10


def test_summary_statistics():
    s = Samples([1.0, 2.0, 3.0, 4.0, 100.0], stopped_by="target", min_samples=3)
    assert s.median_s == 3.0
    assert s.iqr_s == 2.0
    assert s.rsd == pytest.approx(1.98262, rel=1e-4)
    # Robust sigma = IQR / 1.349; standard error of the median = 1.2533 sigma / sqrt(n).
    assert s.median_rse == pytest.approx(1.2533 * (2.0 / 1.349) / 5**0.5 / 3.0, rel=1e-3)


def test_policy_validation_and_l2_flush_size():
    with pytest.raises(ValueError, match="min_samples must be >= 3"):
        SamplingPolicy(min_samples=2)
    with pytest.raises(ValueError, match="max_samples"):
        SamplingPolicy(min_samples=10, max_samples=5)
    assert l2_flush_bytes(50 * 2**20) == 100 * 2**20  # H100: 50 MB L2 -> 100 MB buffer
    with pytest.raises(ValueError):
        l2_flush_bytes(0)
