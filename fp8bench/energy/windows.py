"""Energy windows sized to the measurement: long enough that the counter's steps cost under 1 % of the reading.

A cumulative energy counter (NVML's total-energy counter, RAPL) is published in steps: its value is the energy up to
its last update, every ``P`` seconds. A window reads it at its start and at its end, and each reading lags the
truth by up to one period, so the window's energy is off by at most one period's worth: at a steady power ``p`` the
error is under ``P * p`` out of ``W * p``, a relative error under **P / W** (plus the counter's unit, 1 mJ for NVML,
1 uJ for RAPL, over the window's joules). To keep it under a target ``e`` the window must last ``W >= P / e``:
100 periods for 1 %. NVIDIA does not document ``P`` (about 100 ms has been observed, 10 to 100 ms reported:
``shared/reference/nvml_and_peaks.md``), so it is measured, not assumed: the counter is read in a tight loop until
it has changed :data:`PERIOD_TICKS` times, and ``P`` is the median time between changes (:func:`measure_update_period`,
once per meter and run). The call's own time sets how many calls the window loops (the window is whole calls, so a
call longer than ``P / e`` makes the window one call, with a smaller bound).

The window is capped (``max_window_s``, 10 s by default): where ``P / e`` is longer, the window stops at the cap and
the record says so, with the larger bound it reached. Each energy figure carries its bound
(``energy.error_bound``, a fraction) and the period it was derived from (``energy.counter_update_s``). Zeus sizes its
windows itself the same way, from the counter's behaviour rather than a fixed length.

Two ways to the window's joules, two kinds of error. ``nvml_counter`` (and ``rapl``) read an *energy counter* at the
window's edges: the bound above is its error. ``nvml_power``, where the GPU has no counter, *integrates power*
sampled every 50 ms by default (``WindowPolicy.telemetry_interval_s``; trapezoids between samples,
``fp8bench.energy.telemetry.integrate_power_j``), and the power it
integrates is the instantaneous reading (field ``NVML_FI_DEV_POWER_INSTANT``) wherever the driver answers it; only
where it does not is it ``nvmlDeviceGetPowerUsage``, which on Ampere (except GA100) and newer is a one-second
running average (the window's telemetry says which, in ``power_source``). Its error is then sampling, not
quantization: power that changes between two samples is interpolated, not seen, and an averaged reading
also lags the work by up to a second at each edge. Neither has a bound that this module can state from a window's
length, so such a window carries none (``energy.error_bound`` is ``null``).

Windows that subtract. Where the timed samples wrapped each call (an L2 flush before it, a hold around it), the
meter loops the call wrapped so in one window and the wrapping alone in another, each sized as above and run until
its counter moved, and reports the difference per call (:mod:`fp8bench.energy.meters`, "What a window runs"). Each
window's quantization error is bounded as above; the difference's absolute error is at most the sum of the two, so
with ``j_a = J_a / N_a`` and ``j_b = J_b / N_b`` per call its relative bound is
``(bound_a * j_a + bound_b * j_b) / (j_a - j_b)`` (:func:`difference_bound`): large where the wrapping costs most of
the energy, which the record then shows rather than hides.

What the bound leaves out. It covers the counter's quantization only. The sensor behind NVML's power and energy
readings samples only part of the runtime on A100 and H100 (about 25 %, Yang, Adamek & Armour, *Accurate and
Convenient Energy Measurements for GPUs*, SC24): a power that changes faster than the sensor's cycle can bias a
window beyond this bound, and no window length removes that bias. Each NVML reading says so in
``energy.bound_scope``. A measured period is floored at :data:`PERIOD_FLOOR_S`, the fastest update ever reported: a
counter that seems to change at every read (a driver interpolating between sensor updates would look so) would
otherwise buy a bound no sensor supports.

Heat. A GPU that has just run a 10 s full-power window is hotter, leaks more power and may clock lower in the
next window, so back-to-back windows would make a case's energy depend on the case before it. Each window therefore
records its start temperature (``energy.start_temperature_c``) and, on devices that report one, first waits (up to
:data:`MAX_COOLDOWN_S`) until the temperature is within :data:`COOLDOWN_MARGIN_C` of the one the meter found before
the first case, as zeus's profiler cools down before its windows; the wait is recorded (``energy.cooldown_s``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

# The quantization error a window is sized for: 1 %.
ERROR_TARGET = 0.01
# Counter changes observed to estimate its update period, and how long to wait for them (seconds): 4 intervals at
# the ~100 ms period NVML is observed to have take ~0.5 s.
PERIOD_TICKS = 5
PERIOD_PROBE_MAX_S = 2.0
# The shortest update period a bound may assume (seconds): the fastest NVML counter update reported, about 10 ms
# (gpuopenanalytics/pynvml PR #18; shared/reference/nvml_and_peaks.md). Shorter measured periods are floored.
PERIOD_FLOOR_S = 0.01
# Cooling between windows: back within this many degrees C of the temperature found before the first case, waiting
# at most MAX_COOLDOWN_S seconds, reading the temperature every COOLDOWN_POLL_S seconds.
COOLDOWN_MARGIN_C = 5
MAX_COOLDOWN_S = 30.0
COOLDOWN_POLL_S = 1.0
# What a counter's error bound covers (module docstring, "What the bound leaves out").
QUANTIZATION_ONLY = "counter quantization only"
NVML_SENSOR_SCOPE = (f"{QUANTIZATION_ONLY}; the NVML power sensor samples about 25% of runtime on A100/H100 (Yang "
                     "et al., SC24), so power that varies faster than its cycle can bias the figure beyond this "
                     "bound")


@dataclass(frozen=True)
class UpdatePeriod:
    """A counter's measured update period (seconds), or ``None`` with the reason it was not seen to change."""

    seconds: float | None
    changes: int
    reason: str | None = None


def measure_update_period(counter: Callable[[], float], clock: Callable[[], float] = time.perf_counter,
                          max_s: float = PERIOD_PROBE_MAX_S, ticks: int = PERIOD_TICKS) -> UpdatePeriod:
    """Read ``counter`` in a tight loop until it has changed ``ticks`` times (or ``max_s`` passed); the period is
    the median time between changes, floored at :data:`PERIOD_FLOOR_S` (then ``reason`` says so). The first change
    only marks a start: the time to it is not a whole period."""
    start = clock()
    last = counter()
    stamps: list[float] = []
    while len(stamps) < ticks and clock() - start < max_s:
        value = counter()
        if value != last:
            stamps.append(clock())
            last = value
    if len(stamps) < 2:
        return UpdatePeriod(None, len(stamps), f"the counter changed {len(stamps)} time(s) in {max_s:g} s, too "
                                               "few to measure its update period")
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    measured = statistics.median(gaps)
    if measured < PERIOD_FLOOR_S:
        return UpdatePeriod(PERIOD_FLOOR_S, len(stamps), f"the counter changed every {measured * 1e3:.3g} ms, "
                                                          f"faster than any update reported: bounded with "
                                                          f"{PERIOD_FLOOR_S * 1e3:g} ms")
    return UpdatePeriod(measured, len(stamps))


def sized_window_s(period_s: float, min_s: float, max_s: float, target: float = ERROR_TARGET) -> float:
    """The window (seconds) whose quantization error is under ``target``: ``period / target``, at least ``min_s``
    and at most ``max_s``."""
    if not 0 < target < 1:
        raise ValueError(f"energy error target must be a fraction in (0, 1), got {target}")
    return min(max(period_s / target, min_s), max_s)


def error_bound(period_s: float | None, window_s: float | None, window_j: float | None,
                unit_j: float = 0.0) -> float | None:
    """Upper bound of a counter window's relative quantization error: ``period / window`` plus one counter unit
    over the window's joules (module docstring). ``None`` where any input is missing."""
    if period_s is None or not window_s or not window_j:
        return None
    return period_s / window_s + unit_j / window_j


def difference_bound(bound_a: float | None, joules_a: float | None, bound_b: float | None,
                     joules_b: float | None) -> float | None:
    """Upper bound of the relative quantization error of ``joules_a - joules_b`` (joules, per call: each window's
    joules over its own calls), two windows' readings each within its own relative ``bound``: their absolute errors add
    (module docstring, "Windows that subtract"). ``None`` where any input is missing or the difference is not
    positive."""
    if None in (bound_a, joules_a, bound_b, joules_b):
        return None
    assert bound_a is not None and joules_a is not None and bound_b is not None and joules_b is not None
    difference = joules_a - joules_b
    if not difference > 0:
        return None
    return (bound_a * joules_a + bound_b * joules_b) / difference
