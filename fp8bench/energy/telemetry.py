"""Device telemetry through a measurement, and the rule that decides whether the measurement can be trusted.

A GPU does not run at one speed. Its SM clock boosts while power and temperature allow and drops when they do not:
the driver lowers clocks to stay under the power limit (*power cap*), when the die gets hot (*thermal slowdown*), or
when the board asks it to (*hardware slowdown*, *power brake*). A number measured during such a slowdown describes
the cooling and the power limit of that machine at that moment, not the kernel. fp8bench therefore watches two
stretches of every case, each through a background thread polling the device (:class:`TelemetrySampler`) and the
cumulative violation counters read at its edges:

* the **timed samples** (:class:`TelemetryWindow`, opened by the runner around the end-to-end and phase sampling,
  with or without energy metering); their median SM clock is the record's ``sm_clock_mhz``;
* each **energy window** (:mod:`fp8bench.energy.meters`).

One rule (:class:`ThrottlePolicy`, applied by :func:`judge`) marks either stretch ``valid: false`` when

* a thermal, hardware-slowdown, power-brake, board-limit or reliability reason bit was set in any sample,
* the cumulative thermal violation counter grew during it (a throttle that fell between two snapshots), or
* the median SM clock sat below a fraction (:attr:`ThrottlePolicy.clock_floor`, 0.9 by default) of the reference
  clock (the default application clock, else the maximum SM clock), unless power capping alone explains the drop.

Power capping is different. A large FP8 GEMM on an H100 draws the board's whole power limit and the driver trims
clocks to stay under it: the power-cap bit and the power violation counter are the normal state of that kernel at
full load, and the number measured is what the kernel does on that board (whose power limit is part of the
comparability key). Power capping is therefore recorded (the reason bit in the telemetry and a ``power-capped:
...`` note with the time held) and leaves the stretch valid, and so does the clock drop it causes, however deep:
a median clock under the floor in a stretch where the power-cap bit or counter was the only limiter seen is
recorded in that note with its fraction of the reference, not invalidated. nvbench, the reference for this rule,
checks no reason bits at all: it discards a sample only when the SM clock measured over it falls under 75% of the
device's default clock (``m_throttle_threshold{0.75f}``, nvbench/benchmark_base.cuh; ``has_throttled``,
nvbench/detail/gpu_frequency.cxx; the default clock is ``cudaDevAttrClockRate``, nvbench/device_info.cu), so it
keeps drops of up to a quarter, whatever caused them, while fp8bench's floor is a tenth. Thermal and hardware
slowdowns keep invalidating, with the clock drop they cause. ``fp8bench run --strict-clocks``
(:attr:`ThrottlePolicy.power_cap_invalid`) asks for clocks free of every limiter: power capping invalidates, and so does
any clock under the floor, whatever its cause.

Idle, application-clock and display bits are not throttling: the loop's gaps between kernels set ``gpu_idle``, and
a clock locked by the operator is policy, recorded in the environment.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from itertools import pairwise
from typing import Any

from fp8bench.core.throttle import POWER_CAP, THROTTLE_REASONS, power_cap_alone

# Sampling period of the background thread, seconds. That NVML's power and clock readings refresh no faster than
# this is an untested assumption (nvml.h gives no refresh period): faster polling would then only burn a CPU core.
# The clock_refresh probe of fp8bench.measure.claims checks the converse for the clock alone: that its reading
# refreshes at least this often under load.
DEFAULT_INTERVAL_S = 0.05

class PowerSource(str, Enum):
    """Which power a sample holds. NVML has two: the instantaneous reading (field ``NVML_FI_DEV_POWER_INSTANT``,
    186) and ``nvmlDeviceGetPowerUsage``, which on Ampere (except GA100) and newer is the average of the last
    second, and instantaneous only on older GPUs (NVML reference, ``nvmlDeviceGetPowerUsage``)."""

    INSTANT = "instant"
    USAGE = "power_usage (1 s average on Ampere except GA100 and newer)"


# The power source of a stretch whose samples hold more than one kind of power (an instant reading failed and the
# driver was then asked for the other, say): their power is neither the instant one nor the averaged one.
MIXED_POWER = "mixed"


def power_source_of(sources: Iterable[PowerSource | None]) -> str | None:
    """Which power a stretch of samples holds: the one source all of them share, :data:`MIXED_POWER` where they
    hold more than one, ``None`` where none holds a power."""
    seen = {s.value for s in sources if s is not None}
    return seen.pop() if len(seen) == 1 else (MIXED_POWER if seen else None)


@dataclass(frozen=True)
class Sample:
    """One telemetry snapshot taken at ``t`` (``time.perf_counter`` seconds). Fields a device cannot report are
    ``None``. Clocks in MHz, temperature in degrees C, power in watts, ``power_source`` says which power."""

    t: float
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    reasons_mask: int | None = None
    power_source: PowerSource | None = None


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

    def take(self) -> None:
        """Take one snapshot now (also from another thread than the sampler's)."""
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
            self.take()

    def start(self) -> TelemetrySampler:
        self.take()
        self._thread = threading.Thread(target=self._loop, name="fp8bench-telemetry", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[Sample]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.error is None:
            self.take()
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
        "power_source": power_source_of(s.power_source for s in samples),
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


STRICT_FLAG = "--strict-clocks"
# What a verdict's words name: the two stretches of a case that are watched.
TIMED_SAMPLES = "the timed samples"
ENERGY_WINDOW = "the energy window"
@dataclass(frozen=True)
class ThrottlePolicy:
    """When a window counts as throttled (module docstring). ``clock_floor`` is a fraction of the reference SM
    clock; ``power_cap_invalid`` (``--strict-clocks``) makes power capping invalidate a window too, and with it a
    clock drop that power capping explains."""

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
               violations_ns: dict[str, int | None] | None = None, where: str = ENERGY_WINDOW) -> list[str]:
        """Reasons this window is throttled (empty when it is clean). ``violations_ns`` is the growth of the
        cumulative power/thermal violation counters over the window, in nanoseconds; ``where`` names the window
        in the reasons."""
        reasons = []
        ignored = set(self.ignored_reasons) | (set() if self.power_cap_invalid else {POWER_CAP})
        strict = f" ({STRICT_FLAG})"
        for bit in summary.get("reasons", []):
            if bit in THROTTLE_REASONS and bit not in ignored:
                reasons.append(f"throttled: {THROTTLE_REASONS[bit]} ({bit}) during {where}"
                               + (strict if bit == POWER_CAP else ""))
        for key, grown in (violations_ns or {}).items():
            if grown and grown > 0 and not (key == "power" and POWER_CAP in ignored):
                what = "power cap" if key == "power" else "thermal limit"
                if not any(what in r for r in reasons):
                    reasons.append(f"throttled: clocks held by the {what} for {grown / 1e6:.1f} ms of {where} "
                                   f"(NVML violation counter{', ' + STRICT_FLAG if key == 'power' else ''})")
        median = self._clock_under_floor(summary, reference_clock_mhz)
        if median is not None and (self.power_cap_invalid or not self._power_cap_alone(summary, violations_ns)):
            reasons.append(f"throttled: median SM clock {median:.0f} MHz during {where} is under "
                           f"{self.clock_floor:.0%} of the reference {reference_clock_mhz} MHz")
        return reasons

    def observe(self, summary: dict[str, Any], reference_clock_mhz: int | None,
                violations_ns: dict[str, int | None] | None = None, where: str = ENERGY_WINDOW) -> list[str]:
        """What the window saw that does not invalidate it under this policy, for the record's notes: power
        capping (the reason bit, or growth of the power violation counter, in nanoseconds), and the clock drop it
        explains, with the clock's fraction of the reference."""
        if self.power_cap_invalid:
            return []
        held = (violations_ns or {}).get("power") or 0
        if POWER_CAP not in summary.get("reasons", []) and held <= 0:
            return []
        how = f" for {held / 1e6:.1f} ms of {where}" if held > 0 else f" during {where}"
        bit = f" ({POWER_CAP})" if POWER_CAP in summary.get("reasons", []) else ""
        note = f"power-capped: clocks held by the power limit{bit}{how}"
        median = self._clock_under_floor(summary, reference_clock_mhz)
        if median is not None and self._power_cap_alone(summary, violations_ns):
            assert reference_clock_mhz  # _clock_under_floor compares with it
            note += (f"; median SM clock {median:.0f} MHz is {median / reference_clock_mhz:.0%} of the reference "
                     f"{reference_clock_mhz} MHz, under the {self.clock_floor:.0%} floor: a drop the power limit "
                     f"alone explains")
        return [f"{note}; recorded, not invalidating ({STRICT_FLAG} invalidates it)"]

    def _clock_under_floor(self, summary: dict[str, Any], reference_clock_mhz: int | None) -> float | None:
        """The window's median SM clock (MHz) when it is under the floor, else ``None``."""
        sm = summary.get("sm_clock_mhz")
        if sm and reference_clock_mhz and sm["median"] < self.clock_floor * reference_clock_mhz:
            return float(sm["median"])
        return None

    @staticmethod
    def _power_cap_alone(summary: dict[str, Any], violations_ns: dict[str, int | None] | None) -> bool:
        """Whether power capping was seen (bit or counter) and no other limiter was: no thermal, hardware,
        power-brake, board or reliability bit, however the policy weighs them, and no thermal counter growth."""
        return power_cap_alone(summary.get("reasons", []), violations_ns)


@dataclass(frozen=True)
class TelemetrySource:
    """Where a device's telemetry comes from: ``read`` takes one :class:`Sample`; ``violations`` reads the
    cumulative throttle counters (nanoseconds held by the power and thermal limits, ``None`` per counter a device
    lacks); ``decode`` names the bits of a reasons mask; ``reference_clock_mhz`` is the SM clock a loaded device
    should hold (:meth:`fp8bench.energy.nvml.NvmlDevice.reference_sm_clock_mhz`)."""

    read: Callable[[], Sample]
    decode: Callable[[int], list[str]] = lambda mask: [f"0x{mask:x}"]
    reference_clock_mhz: int | None = None
    violations: Callable[[], dict[str, int | None]] | None = None


@dataclass(frozen=True)
class ThrottleVerdict:
    """What the throttle rule says about one window: its telemetry summary (with the reference clock), the reasons
    that invalidate it (empty: valid) and the notes of what it saw that does not."""

    telemetry: dict[str, Any]
    invalid_reasons: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def sm_clock_mhz(self) -> float | None:
        """The window's median SM clock in MHz (``None`` without clock readings)."""
        sm = self.telemetry.get("sm_clock_mhz")
        return float(sm["median"]) if sm else None


def judge(samples: list[Sample], growth_ns: dict[str, int | None], source: TelemetrySource, policy: ThrottlePolicy,
          where: str) -> ThrottleVerdict:
    """Apply ``policy`` to one window's ``samples`` and counter growth (nanoseconds): the one place the throttle
    rule meets a window, for the energy windows and the timed samples alike."""
    telemetry = summarize(samples, source.decode) if samples else {}
    if not telemetry:
        return ThrottleVerdict({})
    telemetry["reference_sm_clock_mhz"] = source.reference_clock_mhz
    return ThrottleVerdict(telemetry,
                           tuple(policy.assess(telemetry, source.reference_clock_mhz, growth_ns, where)),
                           tuple(policy.observe(telemetry, source.reference_clock_mhz, growth_ns, where)))


def counter_growth(before: dict[str, int | None] | None, after: dict[str, int | None] | None
                   ) -> dict[str, int | None]:
    """Growth of each cumulative counter between two readings (``None`` where either reading lacks it)."""
    if not before or not after:
        return {}
    return {k: (after[k] - b) if (b is not None and after.get(k) is not None) else None  # type: ignore[operator]
            for k, b in before.items()}


class TelemetryWindow:
    """A stretch of measurement watched through a device's telemetry without metering it: the timed samples of a
    case. Snapshots are taken in the background every ``interval_s`` seconds and at both edges
    (:class:`TelemetrySampler`), the violation counters are read at both edges, and :meth:`verdict` applies the
    throttle rule. Use it as a context manager around the timed code.

    Every snapshot carries its time (``Sample.t``, ``perf_counter`` seconds), so the snapshots of a window can be
    laid against the timed samples taken in it; :meth:`take` adds one snapshot now, which is how a caller can read
    the device between two timed samples as well as in the background. A read that fails ends the watching and
    is kept in :attr:`error`: the measurement stands, its telemetry says it was lost.
    """

    def __init__(self, source: TelemetrySource | None, interval_s: float = DEFAULT_INTERVAL_S,
                 absent_reason: str = "the device reports no telemetry") -> None:
        self.source, self.absent_reason = source, absent_reason  # no source: nothing is watched, and it says why
        self.sampler = TelemetrySampler(source.read if source else _no_read, interval_s)
        self.error: BaseException | None = None
        self._before: dict[str, int | None] | None = None
        self._after: dict[str, int | None] | None = None

    def _violations(self) -> dict[str, int | None] | None:
        if self.source is None or self.source.violations is None or self.error is not None:
            return None
        try:
            return self.source.violations()
        except Exception as exc:  # kept, as a failed read is: it costs the window's telemetry, never the case
            self.error = exc
            return None

    def take(self) -> None:
        """One snapshot now, into the window's samples."""
        if self.source is not None:
            self.sampler.take()

    def __enter__(self) -> TelemetryWindow:
        if self.source is not None:
            self._before = self._violations()
            self.sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.source is not None:
            self.sampler.stop()
            self._after = self._violations()
            self.error = self.error or self.sampler.error

    def verdict(self, policy: ThrottlePolicy, where: str = TIMED_SAMPLES) -> ThrottleVerdict:
        """The rule's verdict on the window; a window without telemetry, or whose telemetry failed, is judged on
        nothing and says why."""
        if self.source is None:
            return ThrottleVerdict({"reason": f"not sampled: {self.absent_reason}"})
        if self.error is not None:
            return ThrottleVerdict({"reason": f"telemetry lost during {where}: {describe_error(self.error)}"})
        return judge(self.sampler.samples, counter_growth(self._before, self._after), self.source, policy, where)


def _no_read() -> Sample:
    raise AssertionError("a window without a telemetry source never reads")


def describe_error(exc: BaseException) -> str:
    """An error's class and code (NVML errors) or message, without calling back into the failing library."""
    code = getattr(exc, "value", None)
    return type(exc).__name__ + (f" (code {code})" if isinstance(code, int) else f": {exc}" if str(exc) else "")
