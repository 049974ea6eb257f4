"""Device telemetry through a measurement window, and the rule that decides whether the window can be trusted.

A GPU does not run at one speed. Its SM clock boosts while power and temperature allow and drops when they do not:
the driver lowers clocks to stay under the power limit (*power cap*), when the die gets hot (*thermal slowdown*), or
when the board asks it to (*hardware slowdown*, *power brake*). A number measured during such a slowdown describes
the cooling and the power limit of that machine at that moment, not the kernel, so fp8bench samples the device in a
background thread through every energy window and marks the measurement ``valid: false`` when

* a thermal, hardware-slowdown, power-brake, board-limit or reliability reason bit was set in any sample,
* the cumulative thermal violation counter grew during the window (it catches a throttle that fell between two
  snapshots), or
* the median SM clock sat below a fraction (:attr:`ThrottlePolicy.clock_floor`, 0.9 by default) of the reference
  clock (the default application clock, else the maximum SM clock).

Power capping is different. A large FP8 GEMM on an H100 draws the board's whole power limit and the driver trims
clocks to stay under it: the power-cap bit and the power violation counter are the normal state of that kernel at
full load, and the number measured is what the kernel does on that board. Power capping alone is therefore
recorded (the reason bit in the telemetry and a ``power-capped: ...`` note with the time held) and leaves the
window valid, unless the run asks for clocks free of every limiter (``fp8bench run --strict-clocks``,
:attr:`ThrottlePolicy.power_cap_invalid`). A power-capped window whose median clock fell under the floor is
invalid by the clock rule all the same.

Idle, application-clock and display bits are not throttling: the loop's gaps between kernels set ``gpu_idle``, and
a clock locked by the operator is policy, recorded in the environment.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

# Sampling period of the background thread, seconds. NVML's power and clock readings refresh no faster than about
# every 20-100 ms, so faster polling only burns a CPU core the benchmark may need.
DEFAULT_INTERVAL_S = 0.05

# Reason bits (names from :data:`fp8bench.nvml.REASON_BITS`) that make a window invalid, with the words used in
# the record's reasons.
THROTTLE_REASONS = {
    "sw_thermal_slowdown": "thermal slowdown (software)",
    "hw_thermal_slowdown": "thermal slowdown (hardware)",
    "hw_slowdown": "hardware slowdown",
    "hw_power_brake_slowdown": "external power brake",
    "sw_power_cap": "power cap",
    "board_limit": "board limit",
    "reliability": "reliability limit",
}


@dataclass(frozen=True)
class Sample:
    """One telemetry snapshot taken at ``t`` (``time.perf_counter`` seconds). Fields a device cannot report are
    ``None``. Clocks in MHz, temperature in degrees C, power in watts."""

    t: float
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    reasons_mask: int | None = None


class TelemetrySampler:
    """Calls ``read()`` every ``interval_s`` seconds in a daemon thread between :meth:`start` and :meth:`stop`.

    One sample is taken synchronously at each edge, so even a window shorter than the interval has two. A ``read``
    that raises ends the sampling and is kept in :attr:`error` (the window's caller decides what it costs).
    """

    def __init__(self, read: Callable[[], Sample], interval_s: float = DEFAULT_INTERVAL_S) -> None:
        if not interval_s > 0:
            raise ValueError(f"telemetry interval must be positive seconds, got {interval_s}")
        self.read, self.interval_s = read, interval_s
        self.samples: list[Sample] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def _take(self) -> None:
        if self.error is not None:
            return
        try:
            sample = self.read()
        except Exception as exc:  # kept for the caller: an NVML error mid-window voids the window, not the run
            self.error = exc
            self._stop.set()
            return
        with self._lock:
            self.samples.append(sample)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._take()

    def start(self) -> TelemetrySampler:
        self._take()
        self._thread = threading.Thread(target=self._loop, name="fp8bench-telemetry", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[Sample]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.error is None:
            self._take()
        return list(self.samples)

    def __enter__(self) -> TelemetrySampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _stats(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"min": min(values), "median": statistics.median(values), "mean": statistics.fmean(values),
            "max": max(values)}


def summarize(samples: list[Sample], decode: Callable[[int], list[str]]) -> dict[str, Any]:
    """What a window's samples say: clock, temperature and power ranges, and every reason bit seen in any sample."""
    def col(name: str) -> list[float]:
        return [v for v in (getattr(s, name) for s in samples) if v is not None]

    mask = 0
    for m in col("reasons_mask"):
        mask |= int(m)
    temps = col("temperature_c")
    return {
        "samples": len(samples),
        "span_s": samples[-1].t - samples[0].t if len(samples) > 1 else 0.0,
        "sm_clock_mhz": _stats(col("sm_clock_mhz")),
        "mem_clock_mhz": _stats(col("mem_clock_mhz")),
        "temperature_c": ({"start": temps[0], "max": max(temps), "end": temps[-1]} if temps else None),
        "power_w": _stats(col("power_w")),
        "reasons_mask": mask if col("reasons_mask") else None,
        "reasons": decode(mask) if mask else [],
    }


def integrate_power_j(samples: list[Sample], t0: float, t1: float) -> float | None:
    """Joules from power samples over ``[t0, t1]`` by the trapezoid rule, holding the edge samples flat to the
    window's edges. ``None`` with fewer than two power samples: one reading cannot describe a window."""
    points = [(s.t, s.power_w) for s in samples if s.power_w is not None]
    if len(points) < 2 or not t1 > t0:
        return None
    points.sort()
    # Hold the first and last readings out to the window's edges so the whole window is covered.
    points = [(t0, points[0][1]), *[(t, p) for t, p in points if t0 < t < t1], (t1, points[-1][1])]
    return sum((tb - ta) * (pa + pb) / 2 for (ta, pa), (tb, pb) in pairwise(points))


POWER_CAP = "sw_power_cap"
STRICT_FLAG = "--strict-clocks"


@dataclass(frozen=True)
class ThrottlePolicy:
    """When a window counts as throttled. ``clock_floor`` is a fraction of the reference SM clock;
    ``power_cap_invalid`` (``--strict-clocks``) makes power capping invalidate a window too."""

    clock_floor: float = 0.9
    power_cap_invalid: bool = False
    ignored_reasons: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not 0 <= self.clock_floor <= 1:
            raise ValueError(f"clock floor must be a fraction of the reference clock in [0, 1], got {self.clock_floor}")
        unknown = set(self.ignored_reasons) - set(THROTTLE_REASONS)
        if unknown:
            raise ValueError(f"unknown throttle reason(s) {sorted(unknown)}; accepted: {sorted(THROTTLE_REASONS)}")

    def assess(self, summary: dict[str, Any], reference_clock_mhz: int | None,
               violations_ns: dict[str, int | None] | None = None) -> list[str]:
        """Reasons this window is throttled (empty when it is clean). ``violations_ns`` is the growth of the
        cumulative power/thermal violation counters over the window, in nanoseconds."""
        reasons = []
        ignored = set(self.ignored_reasons) | (set() if self.power_cap_invalid else {POWER_CAP})
        strict = f" ({STRICT_FLAG})"
        for bit in summary.get("reasons", []):
            if bit in THROTTLE_REASONS and bit not in ignored:
                reasons.append(f"throttled: {THROTTLE_REASONS[bit]} ({bit}) during the energy window"
                               + (strict if bit == POWER_CAP else ""))
        for key, grown in (violations_ns or {}).items():
            if grown and grown > 0 and not (key == "power" and POWER_CAP in ignored):
                what = "power cap" if key == "power" else "thermal limit"
                if not any(what in r for r in reasons):
                    reasons.append(f"throttled: clocks held by the {what} for {grown / 1e6:.1f} ms of the window "
                                   f"(NVML violation counter{', ' + STRICT_FLAG if key == 'power' else ''})")
        sm = summary.get("sm_clock_mhz")
        if sm and reference_clock_mhz and sm["median"] < self.clock_floor * reference_clock_mhz:
            reasons.append(f"throttled: median SM clock {sm['median']:.0f} MHz is under {self.clock_floor:.0%} of "
                           f"the reference {reference_clock_mhz} MHz")
        return reasons

    def observe(self, summary: dict[str, Any], violations_ns: dict[str, int | None] | None = None) -> list[str]:
        """What the window saw that does not invalidate it under this policy: power capping (the reason bit, or
        growth of the power violation counter, in nanoseconds), described for the record's notes."""
        if self.power_cap_invalid:
            return []
        held = (violations_ns or {}).get("power") or 0
        if POWER_CAP not in summary.get("reasons", []) and held <= 0:
            return []
        how = f" for {held / 1e6:.1f} ms of the window" if held > 0 else " during the window"
        bit = f" ({POWER_CAP})" if POWER_CAP in summary.get("reasons", []) else ""
        return [f"power-capped: clocks held by the power limit{bit}{how}; recorded, not invalidating "
                f"({STRICT_FLAG} invalidates it)"]


def only_power_capped(invalid_reasons: list[str]) -> bool:
    """Whether a window was invalidated by power capping alone, as fp8bench versions before the power-cap rule
    (and runs with ``--strict-clocks``) word it. Lets readers of older run files apply today's rule."""
    return bool(invalid_reasons) and all(
        r.startswith(("throttled: power cap (sw_power_cap)", "throttled: clocks held by the power cap "))
        for r in invalid_reasons)
