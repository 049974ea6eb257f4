"""Warm-up (fp8bench.measure.runner.CaseMeasurer._warm_up): at least ``warmup_iters`` calls, then until ``warmup_s``
has passed or two calls in a row agree within ``WARMUP_SETTLED``. The calls advance a fake clock by set durations,
so no test depends on this machine's speed or load."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fp8bench.core.devices import Device
from fp8bench.measure import runner
from fp8bench.measure.runner import WARMUP_SETTLED, CaseMeasurer
from fp8bench.measure.settings import EnergySettings, RunSettings, TimingSettings


class FakeClock:
    """``time.monotonic`` for the runner: each call of :meth:`call` advances it by the next duration."""

    def __init__(self, durations: Iterator[float]) -> None:
        self.now, self.durations, self.calls = 1000.0, durations, 0

    def monotonic(self) -> float:
        return self.now

    def call(self) -> None:
        self.now += next(self.durations)
        self.calls += 1


def warm_up(monkeypatch: pytest.MonkeyPatch, durations: Iterator[float], warmup_s: float) -> tuple[int, float]:
    clock = FakeClock(durations)
    monkeypatch.setattr(runner.time, "monotonic", clock.monotonic)
    settings = RunSettings(device="cpu", timing=TimingSettings(warmup_s=warmup_s, warmup_iters=2),
                           energy=EnergySettings(enabled=False))
    measurer = CaseMeasurer(settings, Device("cpu"))
    firsts: list[int] = []
    warm = measurer._warm_up(clock.call, deadline=clock.now + 1e6, after_first=lambda: firsts.append(clock.calls))
    assert firsts == [1]  # the output check's fresh output is the first call's
    return warm.calls, warm.seconds


def test_calls_that_agree_end_the_warm_up_long_before_warmup_s(monkeypatch):
    # A 14 ms call after a slower first one: the third call agrees with the second, so the warm-up ends there
    # instead of calling it until a 50 ms (here 10 s) floor has passed.
    calls, seconds = warm_up(monkeypatch, iter([0.030] + [0.014] * 10_000), warmup_s=10.0)
    assert calls == 3 and seconds == pytest.approx(0.058)


def test_calls_still_getting_faster_warm_up_until_they_agree(monkeypatch):
    # Each call 20 % faster than the one before until the sixth, then steady: the warm-up runs until two agree.
    durations = [0.1 * 0.8**i for i in range(6)]
    calls, _ = warm_up(monkeypatch, iter(durations + [durations[-1]] * 100), warmup_s=10.0)
    assert calls == 7


def test_warmup_s_still_ends_a_warm_up_whose_calls_never_agree(monkeypatch):
    # Alternating 10 ms and 20 ms calls never agree within WARMUP_SETTLED: warmup_s (0.1 s) ends it.
    calls, seconds = warm_up(monkeypatch, iter([0.010, 0.020] * 1000), warmup_s=0.1)
    assert 0.1 <= seconds <= 0.12 + 1e-9 and calls in (7, 8)  # the float sum of 7 calls may fall short of 0.1
    assert WARMUP_SETTLED < 0.5  # the alternation above is outside the tolerance


def test_calls_that_ramp_slowly_end_a_cpu_warm_up_once_two_agree(monkeypatch):
    # Known behaviour: each call 1 % faster than the one before agrees within WARMUP_SETTLED, so the CPU's warm-up
    # ends with its least calls (the second agrees with the first); a GPU, whose clock ramps like this, keeps
    # warmup_s (next test).
    calls, _ = warm_up(monkeypatch, iter([0.1 * 0.99**i for i in range(1000)]), warmup_s=10.0)
    assert calls == 2


def test_a_gpu_warm_up_keeps_warmup_s_even_when_its_calls_agree(monkeypatch):
    assert not runner.warmup_may_settle(Device("cuda", 0)) and runner.warmup_may_settle(Device("cpu"))
    monkeypatch.setattr(runner, "warmup_may_settle", lambda device: False)  # as on a CUDA device
    calls, seconds = warm_up(monkeypatch, iter([0.030] + [0.014] * 10_000), warmup_s=0.1)
    assert seconds >= 0.1 and calls == 6  # 30 ms + 5 x 14 ms: the first sum of calls past 0.1 s


@pytest.mark.parametrize(("durations", "warmup_s", "stopped_by"), [
    ([0.030] + [0.014] * 100, 10.0, "settled"),
    ([0.010, 0.020] * 100, 0.1, "warmup_s"),
    ([0.5, 0.5] + [0.014] * 100, 0.1, "warmup_iters"),
])
def test_the_record_says_what_ended_the_warm_up(monkeypatch, durations, warmup_s, stopped_by):
    clock = FakeClock(iter(durations))
    monkeypatch.setattr(runner.time, "monotonic", clock.monotonic)
    settings = RunSettings(device="cpu", timing=TimingSettings(warmup_s=warmup_s, warmup_iters=2),
                           energy=EnergySettings(enabled=False))
    measurer = CaseMeasurer(settings, Device("cpu"))
    warm = measurer._warm_up(clock.call, deadline=clock.now + 1e6, after_first=lambda: None)
    assert warm.stopped_by == stopped_by
