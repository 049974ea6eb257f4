"""Energy meters: joules per iteration, or ``null`` with the reason when nothing can meter this device.

How a window is measured
------------------------
Energy counters are coarse in time. NVML's total-energy counter (millijoules) steps about every 100 ms; RAPL's
package counter (microjoules) is fresher but its power domain includes everything else on the socket. One GEMM takes
microseconds to milliseconds, far below either resolution, so a meter measures a *window*: it loops the case's
end-to-end call until the window lasts at least :attr:`WindowPolicy.min_window_s` (1 s, about ten counter updates,
by default), synchronizes the device at both edges, and divides the window's energy by the iterations. The
quantization error of one window is then about one counter step out of ten or more, and it shrinks as the window
grows. If the counter has not advanced by then, the window keeps going up to :attr:`WindowPolicy.max_window_s`; a
counter that never moves yields ``null`` with the reason, never 0. Code that cannot be looped (a whole training run)
is measured in a named window around it, :meth:`WindowMeter.window`; every window returns an
:class:`EnergyReading` (joules, seconds, average watts, telemetry samples, method).

What a window runs
------------------
A window meters the call as the timed samples ran it, so that joules per call belong to the timed figure. Where the
samples ran the bare call (warm L2, eager or one CUDA-graph replay), the window loops it. Where each sample wrapped
it (``fp8bench.measure.timing``: an L2 flush before the call; ``fp8bench.measure.blocking``: the call queued behind
a spin kernel that holds the stream, then released), the timer hands the window an :class:`AsTimed`: the call
wrapped as a sample wrapped it, and the wrapping alone. The meter loops the wrapped call, then loops the wrapping
alone in a window of its own, sized as any window and until its counter moved (:meth:`WindowMeter.measure_as_timed`;
replayed only as many times as the calls, a 35 us flush behind a millisecond GEMM would last under one counter
period), and reports the difference per call: the flush's energy, or the spin's and the flush's, is subtracted, as
the samples' events leave them out. The record keeps what was subtracted (``energy.subtracted_what``,
``subtracted_j``, ``subtracted_s``, ``subtracted_iterations``), and the difference's error bound adds both windows'
(:func:`fp8bench.energy.windows.difference_bound`). Assumption: the flush alone costs what a flush before a call
costs. It may not: in a timed sample the last L2's worth of dirty lines is written back during the call, in the
flush-alone loop during the next flush, so about one L2 of HBM writes per call moves between the two windows
(negligible beside a millisecond GEMM, perhaps ~10 % of a 20 us call). Nor do the two windows synchronize as often
per call: each chunk lasts about as long whatever it loops, so the wrapping's window, whose calls are b seconds
against the wrapped call's a, meets roughly a / b times fewer chunk edges per call, and the idle energy at those
edges does not cancel in the difference. It is estimated under 0.1 % of the difference and is not in its bound.
The windows are sized (:func:`difference_share`) as if a wrapped call and a wrapping alone drew the same power;
that errs one way only: a wrapping drawing more power than the call leaves the windows too short, and the record's
bound, computed from the joules metered, then reports over the target; a wrapping drawing less is conservative.
``energy.matches_timing`` is
``true`` for such a window; it is ``false``, with the reason, only where the window could not run the call as timed
(a timer that offers no :class:`AsTimed`, a meter that cannot subtract: one without a counter whose power is the
one-second average, ``WindowMeter.subtract_refusal``; a held call that gave up in the window):
:func:`timing_mismatch`.

Methods, best first
-------------------
* ``nvml_counter``: the GPU's total-energy counter (Volta and newer). Exact to the counter's step.
* ``nvml_power``: where the counter is unsupported, board power sampled in a background thread and integrated over
  the window: the instantaneous reading (``NVML_FI_DEV_POWER_INSTANT``) where the driver answers it, else
  ``nvmlDeviceGetPowerUsage``, a one-second running average on Ampere (except GA100) and newer. Approximate either
  way: power between samples is interpolated, an averaged reading smooths bursts and lags the work, and even
  instantaneous readings cover only part of the runtime (:mod:`fp8bench.energy.windows`). Marked as approximate in
  the reading's ``reason``.
* ``rapl``: the CPU package counters under ``/sys/class/powercap`` (:mod:`fp8bench.energy.rapl`), where readable.
* ``none``: no meter; joules are ``null`` and ``reason`` says why.

Every window also samples telemetry (:mod:`fp8bench.energy.telemetry`) where the device has it; a window during which
the device throttled keeps its numbers but is marked ``valid: false`` with the reasons. Power capping alone, and the
clock drop it causes, is the normal state of a GPU at full load: it is recorded in ``clock_notes`` and invalidates
only with ``--strict-clocks``. The same rule watches the case's timed samples: the runner opens a
:class:`~fp8bench.energy.telemetry.TelemetryWindow` on the meter's :attr:`WindowMeter.source`. An idle baseline (power
with nothing running, measured once before the cases) can be subtracted; the raw figure stays the headline and the
above-idle figure is reported beside it.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from fp8bench.core.devices import Device
from fp8bench.energy.rapl import POWERCAP, RaplCounter, RaplUnavailable
from fp8bench.energy.telemetry import (
    DEFAULT_INTERVAL_S,
    ENERGY_WINDOW,
    Sample,
    TelemetrySampler,
    TelemetrySource,
    ThrottlePolicy,
    counter_growth,
    describe_error,
    integrate_power_j,
    judge,
    summarize,
)
from fp8bench.energy.windows import (
    COOLDOWN_MARGIN_C,
    COOLDOWN_POLL_S,
    MAX_COOLDOWN_S,
    NVML_SENSOR_SCOPE,
    QUANTIZATION_ONLY,
    UpdatePeriod,
    difference_bound,
    error_bound,
    measure_update_period,
    sized_window_s,
)

if TYPE_CHECKING:  # a pipeline is only called here
    from fp8bench.core.pipeline import Pipeline

T = TypeVar("T")

# Wrapped calls, and wrappings alone, timed before a subtracted pair of windows to size them
# (:func:`difference_share`): the median of this many.
SHARE_CALLS = 3


@dataclass(frozen=True)
class EnergyReading:
    """One named measurement window. Joules and watts are ``None`` when the meter could not measure.

    ``joules_per_iter`` is the window's energy divided by ``iterations``; ``window_j`` and ``window_s`` are the whole
    window's joules and seconds; ``avg_power_w`` is ``window_j / window_s``; ``samples`` counts telemetry samples.
    """

    method: str  # nvml_counter | nvml_power | rapl | none
    joules_per_iter: float | None
    avg_power_w: float | None
    window_s: float | None
    iterations: int
    reason: str | None = None  # why joules are missing or approximate
    telemetry: dict[str, Any] = field(default_factory=dict)
    valid: bool = True
    invalid_reasons: tuple[str, ...] = ()
    name: str = "end_to_end"
    window_j: float | None = None
    samples: int = 0
    idle_power_w: float | None = None  # baseline measured before the run, if asked for
    joules_above_idle_per_iter: float | None = None  # joules_per_iter minus idle power x time per iteration
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)  # per-phase readings, each phase looped alone
    clock_notes: tuple[str, ...] = ()  # limiters seen that do not invalidate (power capping, unless strict)
    # The counter's measured update period (s) and the bound of this window's relative quantization error it gives
    # (a fraction; fp8bench.energy.windows). ``None`` where the window was not sized (no counter, period unseen).
    counter_update_s: float | None = None
    error_bound: float | None = None
    bound_scope: str | None = None  # what error_bound covers, and what it leaves out (fp8bench.energy.windows)
    start_temperature_c: int | None = None  # the GPU's temperature as the window began (degrees C)
    cooldown_s: float = 0.0  # seconds waited before the window for the GPU to cool (fp8bench.energy.windows)
    # Whether the window ran the calls as the timed samples did (same mode, same L2 state); ``None``: not compared.
    # Where it did not, ``reason`` says how it differs (:func:`timing_mismatch`).
    matches_timing: bool | None = None
    # A window that subtracted the samples' wrapping of each call (module docstring, "What a window runs"): what
    # the subtracted window ran, its joules and its seconds. ``window_j`` and ``window_s`` stay the wrapped calls';
    # ``joules_per_iter``, ``avg_power_w`` and ``error_bound`` are the difference's.
    subtracted_what: str | None = None
    subtracted_j: float | None = None
    subtracted_s: float | None = None
    subtracted_iterations: int | None = None  # times the subtracted window ran the wrapping alone
    # Counter changes the subtracted window saw at its chunk edges: a lower bound of the steps it spanned (a
    # window within one step reads no energy).
    subtracted_counter_changes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def call_s(self) -> float | None:
        """Seconds per metered call: the window's per call, less the subtracted window's per wrapping."""
        if not self.window_s or not self.iterations:
            return None
        wrapping_s = (self.subtracted_s or 0.0) / self.subtracted_iterations if self.subtracted_iterations else 0.0
        return self.window_s / self.iterations - wrapping_s

    def with_idle(self, idle_w: float | None) -> EnergyReading:
        """This reading with an idle baseline (watts) subtracted and reported beside the raw figure."""
        call_s = self.call_s
        if idle_w is None or self.joules_per_iter is None or call_s is None:
            return replace(self, idle_power_w=idle_w)
        above = self.joules_per_iter - idle_w * call_s
        return replace(self, idle_power_w=idle_w, joules_above_idle_per_iter=above)


@dataclass(frozen=True)
class AsTimed:
    """One call as the timed samples ran it (module docstring, "What a window runs"): ``call`` runs it wrapped as
    each sample wrapped it, ``wrapping`` runs the same wrapping with no call in it, and ``what`` says in words what
    ``wrapping`` runs. ``wrapping`` is looped after ``call``'s window, so it may use what that window saw."""

    call: Callable[[], Any]
    wrapping: Callable[[], Any]
    what: str


class EnergyMeter(Protocol):
    method: str

    def measure(self, fn: Callable[[], Any], device: Device, seconds_per_call: float,
                name: str = "end_to_end") -> EnergyReading:
        """Run ``fn`` in a window long enough for this meter and return the reading (``name`` labels it)."""
        ...


class MeterUnavailable(RuntimeError):
    """A meter factory applies to the device but cannot meter it; the message is the reason."""


class NullMeter:
    """The meter of a device nothing can meter: a reading with no joules and the reason."""

    method = "none"

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def measure(self, fn: Callable[[], Any], device: Device, seconds_per_call: float,
                name: str = "end_to_end") -> EnergyReading:
        return EnergyReading(self.method, None, None, None, 0, self.reason, name=name)

    def measure_as_timed(self, as_timed: AsTimed, device: Device, name: str = "end_to_end") -> EnergyReading:
        return self.measure(as_timed.call, device, 0.0, name)

    def idle(self, device: Device, seconds: float) -> EnergyReading:
        return EnergyReading(self.method, None, None, None, 0, self.reason, name="idle")


@dataclass(frozen=True)
class WindowPolicy:
    """How long an energy window runs (seconds) and how often telemetry is sampled in it."""

    min_window_s: float = 1.0  # about ten NVML counter updates at the observed ~100 ms period
    max_window_s: float = 10.0  # keep looping this long at most while waiting for the counter to move
    max_iterations: int = 10_000_000  # guards against a zero or wildly wrong per-call estimate
    telemetry_interval_s: float = DEFAULT_INTERVAL_S
    # Size each window from the counter's update period so its quantization error stays under this fraction
    # (fp8bench.energy.windows); ``None``: every window lasts ``min_window_s``.
    error_target: float | None = None

    def __post_init__(self) -> None:
        if not self.min_window_s > 0:
            raise ValueError(f"energy window must be positive seconds, got {self.min_window_s}")
        if self.max_window_s < self.min_window_s:
            raise ValueError(f"max energy window {self.max_window_s} s is shorter than the minimum "
                             f"{self.min_window_s} s")
        if self.max_iterations < 1:
            raise ValueError(f"max iterations must be >= 1, got {self.max_iterations}")


class WindowMeter:
    """A meter built from a cumulative energy counter and/or a telemetry source.

    ``counter()`` returns cumulative joules (any origin); without a counter, the window's energy is integrated from
    the power in the telemetry samples. ``violations()`` returns cumulative throttle counters (nanoseconds) whose
    growth over a window also marks it throttled. ``decode`` names the bits of a telemetry reasons mask.
    """

    def __init__(self, method: str, *, counter: Callable[[], float] | None = None,
                 telemetry: Callable[[], Sample] | None = None,
                 violations: Callable[[], dict[str, int | None]] | None = None,
                 decode: Callable[[int], list[str]] = lambda mask: [f"0x{mask:x}"],
                 reference_clock_mhz: int | None = None, note: str | None = None,
                 policy: WindowPolicy | None = None, throttle: ThrottlePolicy | None = None,
                 close: Callable[[], None] | None = None, counter_unit_j: float = 0.0,
                 bound_scope: str = QUANTIZATION_ONLY, subtract_refusal: str | None = None) -> None:
        if counter is None and telemetry is None:
            raise ValueError("a window meter needs an energy counter or a power-reporting telemetry source")
        self.method, self.counter, self.telemetry, self.violations = method, counter, telemetry, violations
        self.decode, self.reference_clock_mhz, self.note = decode, reference_clock_mhz, note
        # The device's telemetry, also watched by the runner through the timed samples (``None``: none here).
        self.source = (TelemetrySource(telemetry, decode, reference_clock_mhz, violations)
                       if telemetry is not None else None)
        self.policy, self.throttle = policy or WindowPolicy(), throttle or ThrottlePolicy()
        self._close = close
        self.counter_unit_j = counter_unit_j  # the counter's unit, joules (NVML: 1 mJ)
        self.update_period: UpdatePeriod | None = None  # measured on the first sized window
        self.bound_scope = bound_scope
        # Why this meter cannot subtract a wrapping window (``None``: it can): see :func:`nvml_meter`.
        self.subtract_refusal = subtract_refusal
        self.sleep: Callable[[float], None] = time.sleep  # the cooldown's wait (seconds)
        # The temperature found before the first case (degrees C): what a window waits to cool back towards.
        self.cool_c = self._temperature()

    def _temperature(self) -> int | None:
        """The device's temperature now (degrees C), ``None`` without telemetry or when it cannot be read."""
        if self.telemetry is None:
            return None
        try:
            return self.telemetry().temperature_c
        except Exception:  # a failed read costs the cooldown, never the window (which reports its own errors)
            return None

    def cool_down(self) -> float:
        """Wait until the device is within :data:`COOLDOWN_MARGIN_C` of :attr:`cool_c`, at most
        :data:`MAX_COOLDOWN_S`; returns the seconds waited (module docstring of fp8bench.energy.windows)."""
        waited = 0.0
        while self.cool_c is not None and waited < MAX_COOLDOWN_S:
            now = self._temperature()
            if now is None or now <= self.cool_c + COOLDOWN_MARGIN_C:
                break
            self.sleep(COOLDOWN_POLL_S)
            waited += COOLDOWN_POLL_S
        return waited

    def window_s(self, tighten: float = 1.0) -> float:
        """The minimum length (seconds) of the next looped window: sized from the counter's update period where
        the policy asks for an error target (fp8bench.energy.windows), else the policy's minimum. ``tighten`` (a
        fraction in (0, 1]) sizes it for the target times that fraction: a window that will be subtracted from."""
        p = self.policy
        if p.error_target is None or self.counter is None:
            return p.min_window_s
        if self.update_period is None:
            counter = self.counter
            try:
                self.update_period = measure_update_period(counter)
            except Exception as exc:  # a failing counter costs the sizing; the window itself will report it
                self.update_period = UpdatePeriod(None, 0, f"counter unreadable: {describe_error(exc)}")
        if self.update_period.seconds is None:
            return p.min_window_s
        return sized_window_s(self.update_period.seconds, p.min_window_s, p.max_window_s, p.error_target * tighten)

    def _bounded(self, reading: EnergyReading) -> EnergyReading:
        """``reading`` with its quantization error bound, and a reason when the bound misses the target."""
        period = self.update_period.seconds if self.update_period is not None else None
        if self.policy.error_target is None or self.counter is None:
            return reading
        if period is None:
            why = self.update_period.reason if self.update_period is not None else "not measured"
            return replace(reading, reason="; ".join(filter(None, [reading.reason, f"window not sized to an error "
                                                                    f"bound: {why}"])))
        bound = error_bound(period, reading.window_s, reading.window_j, self.counter_unit_j)
        reading = replace(reading, counter_update_s=period, error_bound=bound, bound_scope=self.bound_scope)
        floored = self.update_period.reason if self.update_period is not None else None
        if floored:
            reading = replace(reading, reason="; ".join(filter(None, [reading.reason, floored])))
        capped = (reading.window_s or 0.0) >= self.policy.max_window_s  # else it lasted period / target at least
        if bound is not None and bound > self.policy.error_target and capped:
            reading = replace(reading, reason="; ".join(filter(None, [reading.reason, (
                f"quantization error up to {bound:.1%}: the counter updates every {period * 1e3:.3g} ms and the "
                f"window lasted {reading.window_s:.3g} s (capped at {self.policy.max_window_s:g} s)")])))
        return reading

    def close(self) -> None:
        if self._close is not None:
            self._close()
            self._close = None

    def _chunk(self, fn: Callable[[], Any], device: Device, seconds_per_call: float,
               window_s: float | None = None) -> int:
        """Calls per chunk: about a quarter of the minimum window, so the loop checks the clock a few times."""
        if not seconds_per_call > 0:  # unknown: time one synchronized call
            seconds_per_call = _time_one(fn, device)
        calls = math.ceil((window_s or self.policy.min_window_s) / 4 / seconds_per_call)
        return max(1, min(calls, self.policy.max_iterations))

    def measure(self, fn: Callable[[], Any], device: Device, seconds_per_call: float,
                name: str = "end_to_end") -> EnergyReading:
        """Loop ``fn`` for at least the policy's minimum window and return joules per call.

        Never raises for a meter failure: a counter or telemetry error mid-window yields ``joules_per_iter=None``
        with the reason. Errors raised by ``fn`` itself propagate. ``fn`` runs with ``device`` current (its device
        guard), so work that names no device lands on the metered GPU.
        """
        return self._looped(fn, device, seconds_per_call, name)[0]

    def measure_as_timed(self, as_timed: AsTimed, device: Device, name: str = "end_to_end") -> EnergyReading:
        """Joules per call of ``as_timed.call`` less ``as_timed.wrapping`` (module docstring, "What a window
        runs"): the wrapped call looped as :meth:`measure` loops a call, then the wrapping alone looped in a window
        of its own, as long and until its counter moved, and the difference per call. Both windows are sized for
        the target times :func:`difference_share` of wrapped calls and wrappings timed here, so that the
        difference's bound meets the target. Errors raised by either propagate, as in :meth:`measure`."""
        with device.guard():  # the median of a few: one call may be slowed by a lazy start or the host
            call_s = statistics.median(_time_one(as_timed.call, device) for _ in range(SHARE_CALLS))
            wrapping_s = statistics.median(_time_one(as_timed.wrapping, device) for _ in range(SHARE_CALLS))
        tighten = difference_share(call_s, wrapping_s)
        reading, _ = self._looped(as_timed.call, device, call_s, name, tighten)
        if reading.window_j is None:  # nothing to subtract from: the reason is the reading's own
            return replace(reading, subtracted_what=as_timed.what)
        wrapping, changes = self._looped(as_timed.wrapping, device, wrapping_s, name, tighten)
        return replace(subtract(reading, wrapping, as_timed.what, self.policy.error_target),
                       subtracted_counter_changes=changes)

    def _looped(self, fn: Callable[[], Any], device: Device, seconds_per_call: float, name: str,
                tighten: float = 1.0) -> tuple[EnergyReading, int]:
        """One window of ``fn``, until it is long enough and its counter moved (:meth:`_loop`), sized for the
        target times ``tighten`` (:meth:`window_s`). Returns the reading and how many of its chunk edges saw the
        counter change."""
        window = self.window_s(tighten)  # before the span: sizing reads the counter in a loop of its own
        cooled = self.cool_down()  # the previous window's heat must not enter this one
        span = _Span(self, device)
        made: list[int] = []
        with device.guard():
            chunk = self._chunk(fn, device, seconds_per_call, window)
            try:
                span.begin()
                self._loop(fn, span, chunk, window, made)
                span.end()
            except _MeterError as exc:  # a meter failure costs this window's energy, never the case or the run
                span.error = exc.__cause__
            finally:
                span.stop()
        return replace(self._bounded(span.reading(name, sum(made))), cooldown_s=cooled), span.changes

    def _loop(self, fn: Callable[[], Any], span: _Span, chunk: int, window: float, made: list[int]) -> None:
        """Chunks of ``chunk`` calls until the window has lasted ``window`` seconds and its counter moved, or its
        cap; appends the calls each chunk made to ``made``."""
        while sum(made) < self.policy.max_iterations:
            made.append(self._run_chunk(fn, chunk, span.t0))
            elapsed, moved = span.mark()
            if elapsed >= self.policy.max_window_s or (elapsed >= window and moved):
                break

    def _run_chunk(self, fn: Callable[[], Any], calls: int, t0: float) -> int:
        """Call ``fn`` up to ``calls`` times, stopping once the window has lasted its cap in wall time (seconds
        since ``t0``, ``perf_counter``): the chunk is sized from the timed device seconds per call, and a
        host-bound call takes longer than that on the host. Returns the calls made."""
        cap = t0 + self.policy.max_window_s
        for made in range(1, calls + 1):
            fn()
            if time.perf_counter() >= cap:
                return made
        return calls

    @contextlib.contextmanager
    def window(self, name: str, device: Device, iterations: int = 1) -> Iterator[WindowHandle]:
        """A named window around arbitrary code (a whole training run, say), not looped by the meter::

            with meter.window("train_100_steps", device, iterations=100) as w:
                ...
            w.reading.joules_per_iter

        The code must itself last many counter updates (seconds); a shorter block reads ``null`` with the reason.
        """
        span = _Span(self, device)
        handle = WindowHandle()
        try:
            span.begin()
        except _MeterError as exc:
            span.error = exc.__cause__
        try:
            with device.guard():
                yield handle
            if span.error is None:
                try:
                    span.mark()
                    span.end()
                except _MeterError as exc:
                    span.error = exc.__cause__
        finally:
            span.stop()
        handle.reading = span.reading(name, iterations)

    def _window_joules(self, e0: float | None, e1: float | None, samples: list[Sample], t0: float, t1: float,
                       window_s: float) -> tuple[float | None, str | None]:
        if self.counter is not None and e0 is not None and e1 is not None:
            if e1 < e0:
                return None, (f"{self.method}: energy counter went backwards ({e0:.3f} J -> {e1:.3f} J; driver "
                              f"reloaded or counter wrapped)")
            if e1 == e0:
                return None, (f"{self.method}: energy counter did not advance in a {window_s:.3g} s window "
                              f"(it updates only every ~100 ms; window limit {self.policy.max_window_s:g} s)")
            return e1 - e0, self.note
        joules = integrate_power_j(samples, t0, t1)
        if joules is None:
            return None, f"{self.method}: fewer than two power samples in a {window_s:.3g} s window"
        return joules, self.note

    def idle(self, device: Device, seconds: float) -> EnergyReading:
        """Average power (W) over ``seconds`` with nothing running: the idle baseline, in ``avg_power_w``."""
        with self.window("idle", device) as w:
            time.sleep(seconds)
        assert w.reading is not None
        # Idle clocks are low by design: the throttle rule describes loaded windows and does not apply here.
        return replace(w.reading, joules_per_iter=None, iterations=0, valid=True, invalid_reasons=(), clock_notes=())


@dataclass
class WindowHandle:
    """What :meth:`WindowMeter.window` yields; ``reading`` is set when the block ends."""

    reading: EnergyReading | None = None


class _Span:
    """The edges of one window: synchronize, sample telemetry, read the counters at the start and at each mark."""

    def __init__(self, meter: WindowMeter, device: Device) -> None:
        self.meter, self.device = meter, device
        self.sampler = (TelemetrySampler(meter.telemetry, meter.policy.telemetry_interval_s)
                        if meter.telemetry else None)
        self.samples: list[Sample] = []
        self.error: BaseException | None = None
        self.e0: float | None = None
        self.e1: float | None = None
        self.v0: dict[str, int | None] | None = None
        self.v1: dict[str, int | None] | None = None
        self.changes = 0  # chunk edges at which the counter had changed since the previous edge
        self.t0 = self.t1 = time.perf_counter()

    def begin(self) -> None:
        self.device.synchronize()
        if self.sampler:
            self.sampler.start()
        self.v0 = _read(self.meter.violations)
        self.e0 = self.e1 = _read(self.meter.counter)
        self.t0 = self.t1 = time.perf_counter()

    def mark(self) -> tuple[float, bool]:
        """Synchronize and read the counter: (seconds since the start, whether the counter moved)."""
        self.device.synchronize()
        self.t1 = time.perf_counter()
        last, self.e1 = self.e1, _read(self.meter.counter)
        self.changes += last is not None and self.e1 is not None and self.e1 != last
        return self.t1 - self.t0, (self.e1 is None or self.e0 is None or self.e1 != self.e0)

    def end(self) -> None:
        self.v1 = _read(self.meter.violations)

    def stop(self) -> None:
        if self.sampler:
            self.samples = self.sampler.stop()
            self.error = self.error or self.sampler.error

    def reading(self, name: str, iterations: int) -> EnergyReading:
        m = self.meter
        window_s = self.t1 - self.t0
        telemetry = summarize(self.samples, m.decode) if self.samples else {}
        base = EnergyReading(m.method, None, None, window_s, iterations, None, telemetry, name=name,
                             samples=len(self.samples),
                             start_temperature_c=self.samples[0].temperature_c if self.samples else None)
        if self.error is not None:
            return replace(base, reason=f"{m.method}: energy meter failed mid-window ({describe_error(self.error)}); "
                                        f"energy not reported for this window")
        window_j, reason = m._window_joules(self.e0, self.e1, self.samples, self.t0, self.t1, window_s)
        if m.source is not None:
            verdict = judge(self.samples, counter_growth(self.v0, self.v1), m.source, m.throttle, ENERGY_WINDOW)
            base = replace(base, telemetry=verdict.telemetry, valid=not verdict.invalid_reasons,
                           invalid_reasons=verdict.invalid_reasons, clock_notes=verdict.notes)
        base = replace(base, reason=reason)
        if window_j is None or not iterations or not window_s > 0:
            return base
        return replace(base, joules_per_iter=window_j / iterations, avg_power_w=window_j / window_s,
                       window_j=window_j)


def _time_one(fn: Callable[[], Any], device: Device) -> float:
    """Seconds one synchronized call of ``fn`` takes (at least 1 ns)."""
    device.synchronize()
    t = time.perf_counter()
    fn()
    device.synchronize()
    return max(time.perf_counter() - t, 1e-9)


def difference_share(call_s: float, wrapping_s: float) -> float:
    """The fraction of the error target each window of a difference is sized for (seconds of one wrapped call and
    of one wrapping alone): two windows each within ``e`` bound ``j_a - j_b`` within ``e * (j_a + j_b) / (j_a -
    j_b)`` (:func:`fp8bench.energy.windows.difference_bound`), so each is sized for ``(a - b) / (a + b)`` of the
    target. Assumption: a wrapped call and a wrapping alone draw about the same power, so their joules go as
    their seconds (a wrapping drawing more leaves the windows too short, which the record's bound shows; one
    drawing less is conservative: module docstring). Floored at 1 %: a wrapping as long as the call gives windows at
    their cap, whose bound the record then reports over the target."""
    if not call_s > wrapping_s:
        return 0.01
    return max((call_s - wrapping_s) / (call_s + wrapping_s), 0.01)


class _MeterError(Exception):
    """A meter read failed (the original error is ``__cause__``); errors from the measured call are not wrapped."""


def _read(source: Callable[[], T] | None) -> T | None:
    if source is None:
        return None
    try:
        return source()
    except Exception as exc:
        raise _MeterError() from exc


def configure_meter(meter: EnergyMeter, min_window_s: float, clock_floor: float,
                    strict_clocks: bool = False, error_target: float | None = None,
                    reference_clock_mhz: int | None = None) -> EnergyMeter:
    """Apply a run's minimum window length (seconds), clock floor (fraction), ``--strict-clocks`` (power capping
    invalidates), energy error target (a fraction: windows sized to it, fp8bench.energy.windows) and, under a clock
    lock, the locked clock read back (MHz) as the reference clock to a window meter; others pass through."""
    if isinstance(meter, WindowMeter) and reference_clock_mhz:
        meter.reference_clock_mhz = reference_clock_mhz
        if meter.source is not None:
            meter.source = replace(meter.source, reference_clock_mhz=reference_clock_mhz)
    if isinstance(meter, WindowMeter):
        meter.policy = replace(meter.policy, min_window_s=min_window_s,
                               max_window_s=max(meter.policy.max_window_s, min_window_s), error_target=error_target)
        meter.throttle = replace(meter.throttle, clock_floor=clock_floor, power_cap_invalid=strict_clocks)
    return meter


def idle_baseline(meter: EnergyMeter, device: Device, seconds: float) -> EnergyReading | None:
    """Idle power over ``seconds`` (``None`` when not asked for, i.e. ``seconds <= 0``)."""
    if seconds <= 0:
        return None
    idle = getattr(meter, "idle", None)
    if idle is None:
        return EnergyReading(meter.method, None, None, None, 0, f"{meter.method}: meter has no idle baseline",
                             name="idle")
    return idle(device, seconds)


# What a per-phase reading means: the runner loops each phase closure alone, on the state the previous phase left
# (for example ``gemm`` on operands that are already quantized), exactly as the phase timings are taken.
PHASE_ENERGY_METHOD = "each phase looped alone on the state left by the previous phase"


def subtract(reading: EnergyReading, wrapping: EnergyReading, what: str, target: float | None) -> EnergyReading:
    """``reading`` (a window of wrapped calls) less ``wrapping`` (a window of the wrapping alone, looped as long as
    its own counter needed), per call: ``J_a / N_a - J_b / N_b``, with the average power and the error bound of the
    difference (module docstring, "What a window runs"). The wrapping's window's throttling invalidates the
    reading too; a difference that is not positive gives ``null`` joules with the reason."""
    invalid = (*reading.invalid_reasons, *(f"subtracted window: {r}" for r in wrapping.invalid_reasons))
    notes = (*reading.clock_notes, *(f"subtracted window: {n}" for n in wrapping.clock_notes))
    out = replace(reading, joules_per_iter=None, avg_power_w=None, error_bound=None, subtracted_what=what,
                  subtracted_j=wrapping.window_j, subtracted_s=wrapping.window_s,
                  subtracted_iterations=wrapping.iterations, valid=not invalid, invalid_reasons=invalid,
                  clock_notes=notes)
    if reading.joules_per_iter is None or wrapping.joules_per_iter is None:
        return replace(out, reason=_joined(reading.reason, f"the window of {what} read no energy: {wrapping.reason}"))
    joules = reading.joules_per_iter - wrapping.joules_per_iter
    if not joules > 0:
        return replace(out, reason=_joined(reading.reason, (
            f"a wrapped call read {reading.joules_per_iter:.4g} J and {what} {wrapping.joules_per_iter:.4g} J: no "
            "energy is left to the call above the counter's resolution")))
    seconds = out.call_s
    bound = difference_bound(reading.error_bound, reading.joules_per_iter, wrapping.error_bound,
                             wrapping.joules_per_iter)
    reason = reading.reason
    if bound is not None and target is not None and bound > target:
        reason = _joined(reason, f"quantization error up to {bound:.1%} after subtracting {what} "
                                 f"({wrapping.joules_per_iter:.3g} J of {reading.joules_per_iter:.3g} J per call)")
    return replace(out, joules_per_iter=joules, avg_power_w=joules / seconds if seconds and seconds > 0 else None,
                   error_bound=bound, reason=reason)


def _joined(*parts: str | None) -> str | None:
    return "; ".join(filter(None, parts)) or None


def _metered(meter: EnergyMeter, fn: Callable[[], Any], device: Device, seconds_per_call: float, name: str,
             as_timed: Callable[[Callable[[], Any]], AsTimed | None] | None) -> tuple[EnergyReading, str | None]:
    """``fn``'s reading, run as timed where ``as_timed`` wraps it and the meter can subtract; else looped bare,
    with the reason it does not run as timed (``None``: bare is as timed)."""
    wrapped = as_timed(fn) if as_timed is not None else None
    if wrapped is None:
        return meter.measure(fn, device, seconds_per_call, name=name), None
    measure_as_timed = getattr(meter, "measure_as_timed", None)
    refusal = getattr(meter, "subtract_refusal", None)
    if measure_as_timed is None or refusal:
        return meter.measure(fn, device, seconds_per_call, name=name), (
            f"energy window differs from the timed samples: the {meter.method} meter cannot subtract {wrapped.what}"
            + (f" ({refusal})" if refusal else "") + ", so its window loops the bare call")
    return measure_as_timed(wrapped, device, name=name), None


def measure_case_energy(meter: EnergyMeter, pipeline: Pipeline, device: Device, seconds_per_call: float,
                        phase_seconds: dict[str, float], per_phase: bool, idle: EnergyReading | None,
                        mismatch: str | None = None,
                        as_timed: Callable[[Callable[[], Any]], AsTimed | None] | None = None) -> EnergyReading:
    """The end-to-end reading of one case, plus one reading per phase when ``per_phase`` (see
    :data:`PHASE_ENERGY_METHOD`). A throttled phase window makes the whole case's reading invalid. ``as_timed``
    wraps a call as the timed samples ran it (``None`` for a call that runs bare: module docstring, "What a window
    runs"); ``mismatch`` says how the window differs from the timed samples where it cannot run them so
    (:func:`timing_mismatch`; ``None``: it runs what was timed)."""
    idle_w = idle.avg_power_w if idle is not None else None
    reading, unmatched = _metered(meter, pipeline.end_to_end, device, seconds_per_call, "end_to_end", as_timed)
    reading = reading.with_idle(idle_w)
    mismatch = mismatch or unmatched
    reading = replace(reading, matches_timing=mismatch is None, reason=_joined(reading.reason, mismatch))
    if idle is not None and idle.avg_power_w is None and reading.joules_per_iter is not None:
        reading = replace(reading, reason="; ".join(filter(None, [reading.reason, f"no idle baseline: {idle.reason}"])))
    if not per_phase or not pipeline.phases:
        return reading
    phases: dict[str, dict[str, Any]] = {}
    invalid, notes = list(reading.invalid_reasons), list(reading.clock_notes)
    for name, fn in pipeline.phases.items():
        phase = _metered(meter, fn, device, phase_seconds.get(name, 0.0), name, as_timed)[0].with_idle(idle_w)
        phases[name] = {**phase.to_dict(), "method_note": PHASE_ENERGY_METHOD}
        invalid += [f"phase {name}: {r}" for r in phase.invalid_reasons]
        notes += [f"phase {name}: {n}" for n in phase.clock_notes]
    return replace(reading, phases=phases, valid=not invalid, invalid_reasons=tuple(invalid),
                   clock_notes=tuple(notes))


def timing_mismatch(timing_mode: str, l2_flushed: bool) -> str | None:
    """How an energy window that loops the bare call back to back (a CUDA graph's replays where the samples
    replayed one) differs from the timed samples taken in ``timing_mode`` (``fp8bench.measure.timing.TimingMode``
    values) with or without an L2 flush before each; ``None`` where it runs what was timed. Only for a window that
    could not run the call as timed (module docstring, "What a window runs"): joules per call then describe the
    window's calls, not the timed figure's, and the record says so rather than pair them silently."""
    parts = []
    if timing_mode == "blocked_stream":
        parts.append("the timed samples queued calls behind a held stream (no launch gaps); the window runs them "
                     "eagerly, launch gaps included")
    if l2_flushed:
        parts.append("the timed samples each began with a flushed L2; the window's calls run back to back with a "
                     "warm L2")
    return "energy window differs from the timed samples: " + "; ".join(parts) if parts else None


def not_metered(meter: EnergyMeter, status: str) -> dict[str, Any]:
    """The ``energy`` field of a record whose case never reached an energy window (skipped or failed)."""
    why = getattr(meter, "reason", None)
    return {"method": meter.method, "joules_per_iter": None,
            "reason": f"case {status}: no energy window ran" + (f"; {why}" if why else "")}


def meter_for(device: Device) -> EnergyMeter:
    """The best meter for ``device``, or a :class:`NullMeter` saying why there is none."""
    reasons = []
    for factory in _FACTORIES:
        try:
            meter = factory(device)
        except MeterUnavailable as exc:
            reasons.append(str(exc))
            continue
        if meter is not None:
            return meter
    if reasons:
        return NullMeter("; ".join(reasons))
    if device.is_cuda:
        return NullMeter("no NVML energy meter available (install the nvml extra: nvidia-ml-py)")
    return NullMeter("no CPU energy counter readable here (RAPL /sys/class/powercap absent or unreadable)")


def cuda_uuid(device: Device) -> str | None:
    """The CUDA device's UUID as torch reports it (NVML ignores ``CUDA_VISIBLE_DEVICES``, so match by UUID)."""
    import torch

    if not torch.cuda.is_available():
        return None
    uuid = getattr(torch.cuda.get_device_properties(device.index or 0), "uuid", None)
    return str(uuid) if uuid else None


def nvml_meter(device: Device, nv: Any = None, policy: WindowPolicy | None = None,
               throttle: ThrottlePolicy | None = None) -> WindowMeter:
    """The NVML meter for a CUDA device: the total-energy counter where supported, else power sampling.

    ``nv`` is the ``pynvml`` module (loaded when ``None``). Raises :class:`MeterUnavailable` with the reason when
    NVML cannot be used or the GPU reports neither energy nor power.
    """
    from fp8bench.energy import nvml

    try:
        dev = nvml.open_device(device.index or 0, cuda_uuid(device), nv)
    except nvml.NvmlUnavailable as exc:
        raise MeterUnavailable(str(exc)) from exc

    reference, _source = dev.reference_sm_clock_mhz()
    common: dict[str, Any] = {"telemetry": dev.sample, "violations": dev.violation_ns, "decode": nvml.decode_reasons,
                              "reference_clock_mhz": reference, "policy": policy, "throttle": throttle,
                              "close": dev.close}
    why = dev.energy_counter_reason()
    if why is None:
        return WindowMeter("nvml_counter", counter=lambda: dev.energy_mj() / 1000.0, counter_unit_j=1e-3,
                           bound_scope=NVML_SENSOR_SCOPE, **common)
    try:
        dev.power_w()
    except dev.nv.NVMLError as exc:
        dev.close()
        raise MeterUnavailable(f"{why}; NVML power unreadable too ({nvml.error_text(exc)})") from exc
    return WindowMeter("nvml_power", subtract_refusal=_averaged_power_refusal(dev), note=(
        f"approximate: {why}, so board power sampled every {(policy or WindowPolicy()).telemetry_interval_s:g} s "
        f"was integrated over the window (the instant power field where the driver has it, else "
        f"nvmlDeviceGetPowerUsage, a 1 s average on Ampere and newer: the window's telemetry names which)"),
        **common)


def _averaged_power_refusal(dev: Any) -> str | None:
    """Why a power-sampling meter on ``dev`` cannot subtract a wrapping window, ``None`` where it can: where the
    driver lacks the instant power field the samples hold ``nvmlDeviceGetPowerUsage``, a one-second running average
    on Ampere except GA100 and newer (nvml.h of NVML API 13, go-nvml 2f9e261, :6538-6540). Integrated, that lags
    the work by up to a second at each edge, so the difference of two windows, one of them short, means nothing.
    Refused for every GPU without the field: on older ones the reading is instantaneous, but the rule stays one."""
    from fp8bench.energy import nvml
    from fp8bench.energy.telemetry import PowerSource

    try:
        _, source = dev.instant_power()
    except (dev.nv.NVMLError, nvml.FieldReadFailed):
        source = None
    if source is PowerSource.INSTANT:
        return None
    return ("its power is nvmlDeviceGetPowerUsage, a 1 s average on Ampere except GA100 and newer, which lags the "
            "work by up to a second at each window edge")


def _nvml_factory(device: Device) -> EnergyMeter | None:
    return nvml_meter(device) if device.is_cuda else None


def _rapl_factory(device: Device) -> EnergyMeter | None:
    return None if device.is_cuda else rapl_meter()


def rapl_meter(root: Path = POWERCAP, policy: WindowPolicy | None = None) -> WindowMeter:
    """A window meter on the CPU packages' RAPL counters (:mod:`fp8bench.energy.rapl`); raises
    :class:`MeterUnavailable` with the reason where none is readable."""
    try:
        counter = RaplCounter(root)
    except RaplUnavailable as exc:
        raise MeterUnavailable(str(exc)) from exc
    names = ", ".join(f"{d.path.name} ({d.name})" for d in counter.domains)
    return WindowMeter("rapl", counter=counter.read_j, policy=policy, counter_unit_j=1e-6,
                       note=f"RAPL package energy of {names}: includes everything else running on the socket")


# The meters, best first. A factory returns ``None`` when it does not apply to a device and raises
# :class:`MeterUnavailable` when it applies but cannot meter it (the reason is kept).
_FACTORIES: tuple[Callable[[Device], EnergyMeter | None], ...] = (_nvml_factory, _rapl_factory)
