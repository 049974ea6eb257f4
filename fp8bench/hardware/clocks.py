"""Clocks under control: a GPU's SM clock locked for a run, and every timed sample taken at a clock worth timing.

A GPU's SM clock moves with its power and temperature (:mod:`fp8bench.energy.telemetry`), so two runs of one kernel can
differ by the clock alone. nvbench controls this twice, and fp8bench follows it:

**Locking** (``fp8bench run --lock-clocks base|max``, nvbench's ``--lock-gpu-clocks``): the driver pins the SM clock
for the run with ``nvmlDeviceSetGpuLockedClocks(handle, min_mhz, max_mhz)``, undone by
``nvmlDeviceResetGpuLockedClocks(handle)``. ``base`` passes ``NVML_CLOCK_LIMIT_ID_TDP`` for both bounds (nvbench's
``clock_rate::base``; nvml.h of NVML API 13, go-nvml 2f9e261, :8913 says only "Lock clock to TDP": that this is the
base clock, the one the board sustains within its power limit, is an assumption, which is why it is read back); ``max``
locks both bounds to the maximum SM clock, ``nvmlDeviceGetMaxClockInfo(handle, NVML_CLOCK_SM)`` (nvbench locks its
default clock rate, CUDA's ``cudaDevAttrClockRate``, the peak clock). Locking needs root and a Volta or newer GPU; NVML
refuses otherwise (``NVMLError_NoPermission``, ``NVMLError_NotSupported``), and so does fp8bench, before any case runs,
naming the cause. The lock is undone when the run ends: normally, on Ctrl-C, SIGTERM or SIGHUP (the command line
turns them into an interrupt that unwinds through :class:`ClockLock`), on an error, and at interpreter exit
(``atexit``) should anything skip the unwinding. A ``SIGKILL`` cannot be caught: ``nvidia-smi -rgc`` (as root)
undoes a lock left behind. The lock is recorded in the run's environment (``clock_lock``). The lock keeps its NVML
session open until the reset, which needs it. All three names exist in nvidia-ml-py 12.535.77, the oldest release
fp8bench allows (its recorded surface, ``tests/data/pynvml``).

**The reference clock under a lock.** Every throttle check of a locked run compares with the locked clock, not the
device's default one: under ``base`` (about 0.8 x boost on an H100 SXM) the default clock would make every sample
look throttled. NVML has no getter for the locked range, and ``nvmlDeviceGetClockInfo`` returns only the current
clock (nvml.h), which on an idle GPU is its idle clock (``nvmlClocksEventReasonGpuIdle``, "GPU is idle"): a
reference read then would sit so low that no throttled sample ever fell under it. So:

* under ``max`` the reference is the lock's target, the MHz value passed to the driver;
* under ``base`` the target is symbolic (the TDP clock, whose MHz NVML does not report), so the clock is read back
  *under load*: :func:`busy` queues :data:`READBACK_LOAD_S` seconds of GEMMs and :data:`READBACK_READS` readings
  are taken while they run. A reading counts only if the load was still running once it was taken (the stream
  had not drained: how much work the driver queues ahead is its own, so a load may end early; loose support from
  nvbench ``blocking_kernel.cuh`` :65-67 at 078919b, whose caveat concerns work queued behind a blocked stream), since
  an idle GPU need not say so: the GpuIdle bit "may be removed in a later release" (nvml.h :3319-3322). Readings whose
  reasons mask says the GPU was idle or slowed down by a limiter (:data:`fp8bench.energy.telemetry.THROTTLE_REASONS`,
  the power cap included: the TDP clock is the one the board holds within its power limit) are not the locked clock
  either, nor is one under :data:`THROTTLE_THRESHOLD` of the median of the others (a reading with no reason that the
  loaded ones contradict); the median of those left is the reference. Where none is
  left (or no load could run), the run falls back to the device's own reference clock and ``reference_source`` says
  why; its samples are then judged against the higher default clock, which errs towards flagging a throttle, never
  towards missing one.

Both record ``read_back_mhz`` (the loaded reading), ``reference_mhz`` and ``reference_source``; under ``max`` a
loaded reading under :data:`THROTTLE_THRESHOLD` of the target adds ``read_back_note`` (the lock did not hold the
clock there: its samples will show it).

**Per-sample clock check** (:class:`ClockCheckedTimer`, nvbench's throttle detection in ``measure_cold``): after
each timed sample the SM clock and board power are read through NVML (two driver calls, outside the sample). A
sample taken while the SM clock is under ``threshold`` of the reference clock is discarded, the timer waits a
recovery delay, and the call is timed again, unless the sample's clocks event reasons say the board was at its
power limit and nothing else held it (the one power-cap rule, :func:`fp8bench.core.throttle.power_cap_alone`):
a power-capped clock is the board's legitimate state under that kernel, so the sample is kept with its clock,
never retaken after an idle pause that would let the clock recover (retaking it would keep only optimistic samples
on boards whose capped clock is under 75 %, such as L4 or H100 PCIe). Thermal and hardware slowdowns, and drops
with no reason bit, are retaken as nvbench does. nvbench's defaults are the starting point: a threshold of 75 % of the
default clock (``--throttle-threshold``, "Default is 75") and a recovery delay of 0.05 s
(``--throttle-recovery-delay``, "Default is 0.05 seconds"), both from nvbench ``docs/cli_help.md``; like nvbench,
the delay doubles while discards repeat. After :data:`MAX_CONSECUTIVE_DISCARDS` discards in a row the sample is
kept and the check stops for the rest of the end-to-end samples (or of the phases, which follow them): a device that
stays throttled is the throttle rule's to judge (:mod:`fp8bench.energy.telemetry`; the case is then ``invalid``), not a
reason to spend the case's budget waiting. The record keeps the clock and power beside every kept sample and the count
of discarded ones. nvbench reads the clock with a GPU timer kernel over the sample; NVML's reading is a snapshot taken
right after it.
"""

from __future__ import annotations

import atexit
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fp8bench.core.throttle import THROTTLE_REASONS, power_cap_alone
from fp8bench.energy.nvml import FieldReadFailed, NvmlDevice, decode_reasons
from fp8bench.energy.telemetry import PowerSource, Sample, power_source_of

LOCK_POLICIES = ("base", "max")
# nvbench's defaults (module docstring): 75 % of the default clock, 0.05 s to recover.
THROTTLE_THRESHOLD = 0.75
RECOVERY_DELAY_S = 0.05
# The recovery delay doubles with each discard in a row (nvbench grows its delay while throttling repeats); a
# sample is kept after this many discards in a row (0.05 + 0.1 + 0.2 s of waiting at the default delay).
MAX_CONSECUTIVE_DISCARDS = 3
# Reading the locked clock back under load (module docstring): seconds of GEMMs queued, readings taken while they
# run, and the wait between readings. That NVML's clock readings refresh at least every 50 ms (the spacing below)
# is an assumption: nvml.h gives no refresh period for nvmlDeviceGetClockInfo; the clock_refresh probe
# (fp8bench.measure.claims) tests it under load.
READBACK_LOAD_S = 0.5
READBACK_READS = 5
READBACK_SPACING_S = 0.05
# Reason bits that say a reading is not the locked clock: the GPU idled, or a limiter held it down.
NOT_LOCKED_CLOCK = frozenset({"gpu_idle", *THROTTLE_REASONS})


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


class ClockLockRefused(ValueError):
    """The clocks cannot be locked here; the message says why and what would work."""


class ClockLock:
    """``--lock-clocks``: locks the SM clock of one NVML device on ``__enter__`` and resets it on ``__exit__`` or at
    interpreter exit, whichever comes first. ``nv`` is the ``pynvml`` module, ``handle`` the device's handle."""

    def __init__(self, nv: Any, handle: Any, policy: str, close: Callable[[], None] | None = None,
                 load: Callable[[], Callable[[], None]] | None = None,
                 pause: Callable[[float], None] = time.sleep) -> None:
        if policy not in LOCK_POLICIES:
            raise ValueError(f"--lock-clocks {policy!r}; accepted: {', '.join(LOCK_POLICIES)}")
        self.nv, self.handle, self.policy, self._close = nv, handle, policy, close
        # ``load()`` starts GPU work and returns the function that waits for it (:func:`busy`); ``None``: no load
        # can run, so nothing is read back. ``pause`` waits between readings (seconds).
        self.load, self.pause = load, pause
        self.locked = False
        self.setting: dict[str, Any] = {}
        # The reference every throttle check of the run compares with (MHz; None: the device's own reference),
        # chosen as the module docstring says.
        self.clock_mhz: int | None = None

    def _bounds(self) -> tuple[int, int, dict[str, Any]]:
        nv = self.nv
        if self.policy == "base":
            tdp = int(nv.NVML_CLOCK_LIMIT_ID_TDP)
            return tdp, tdp, {"policy": "base", "min_mhz": "tdp", "max_mhz": "tdp"}
        top = int(nv.nvmlDeviceGetMaxClockInfo(self.handle, nv.NVML_CLOCK_SM))
        return top, top, {"policy": "max", "min_mhz": top, "max_mhz": top}

    def __enter__(self) -> ClockLock:
        nv = self.nv
        held = False
        try:
            low, high, self.setting = self._bounds()
            nv.nvmlDeviceSetGpuLockedClocks(self.handle, low, high)
            held = True
        except nv.NVMLError_NoPermission as exc:
            raise ClockLockRefused(f"--lock-clocks {self.policy}: locking GPU clocks needs root (NVML: no "
                                   "permission); run as root (sudo), or drop --lock-clocks") from exc
        except nv.NVMLError_NotSupported as exc:
            raise ClockLockRefused(f"--lock-clocks {self.policy}: this GPU cannot lock its clocks (NVML: not "
                                   "supported; locking needs a Volta or newer GPU); drop --lock-clocks") from exc
        except nv.NVMLError as exc:
            raise ClockLockRefused(f"--lock-clocks {self.policy}: NVML refused to lock the clocks: "
                                   f"{type(exc).__name__}") from exc
        finally:
            # A refused lock releases its NVML session here; a held one keeps it, for the reset.
            if not held and self._close is not None:
                self._close()
        self.locked = True
        atexit.register(self.reset)  # should the unwinding below be skipped (an exit from a thread, say)
        try:
            self.clock_mhz, chosen = self._reference()
        except BaseException:
            self.reset()  # the caller never reaches its ``with`` body, nor its reset
            raise
        self.setting.update(chosen)
        return self

    def _reference(self) -> tuple[int | None, dict[str, Any]]:
        """The run's reference SM clock under the lock (MHz; ``None``: the device's own) and what the environment
        records about it (module docstring)."""
        read_back, rejected = self._read_back()
        chosen: dict[str, Any] = {"read_back_mhz": read_back}
        if self.policy == "max":
            target = int(self.setting["max_mhz"])
            held = read_back is not None and read_back >= THROTTLE_THRESHOLD * target
            if not held and (read_back is not None or rejected):
                seen = "; ".join(filter(None, [rejected, f"median {read_back} MHz" if read_back else None]))
                chosen["read_back_note"] = f"the {target} MHz lock did not hold the clock under load ({seen})"
            return target, {**chosen, "reference_mhz": target, "reference_source": "lock target"}
        if read_back is None:
            why = rejected or ("no load could run to read the locked clock under" if self.load is None
                               else "NVML reported no SM clock under load")
            return None, {**chosen, "reference_mhz": None,
                          "reference_source": f"device default: the base clock was not read back ({why})"}
        source = "read back under load" + (f" ({rejected} left out)" if rejected else "")
        return read_back, {**chosen, "reference_mhz": read_back, "reference_source": source}

    def _read_back(self) -> tuple[int | None, str | None]:
        """The median SM clock (MHz) of the readings taken under load that show the locked clock, and a description
        of those that did not (``None`` if none was rejected); ``(None, None)`` without a load."""
        if self.load is None:
            return None, None
        samples, drained = self._loaded_samples()
        kept, rejected = [], [f"{drained} after the load drained"] if drained else []
        for s in samples:
            flags = sorted(set(decode_reasons(int(s.reasons_mask or 0))) & NOT_LOCKED_CLOCK)
            if s.sm_clock_mhz and not flags:
                kept.append(s.sm_clock_mhz)
            elif s.sm_clock_mhz:
                rejected.append(f"{s.sm_clock_mhz} MHz with {'+'.join(flags)}")
        median = statistics.median(kept) if kept else None
        low = [c for c in kept if median is not None and c < THROTTLE_THRESHOLD * median]
        rejected += [f"{c} MHz far under the median of the others" for c in low]
        kept = [c for c in kept if c not in low]
        median = statistics.median(kept) if kept else None
        return (int(median) if median is not None else None), ("readings " + ", ".join(rejected)) if rejected else None

    def _loaded_samples(self) -> tuple[list[Sample], int]:
        """The readings taken while the load still ran, and how many were taken after it drained (module
        docstring). A load whose waiter has no ``running()`` (one that cannot tell) keeps every reading."""
        assert self.load is not None
        device = NvmlDevice(self.nv, self.handle, "clock lock")  # reads only; the lock's session stays its own
        wait = self.load()
        running: Callable[[], bool] | None = getattr(wait, "running", None)
        samples: list[Sample] = []
        drained = 0
        try:
            for _ in range(READBACK_READS):
                keep_busy: Callable[[float], None] | None = getattr(wait, "keep_busy", None)
                if keep_busy is not None:
                    keep_busy(READBACK_SPACING_S)  # the queue may hold less than the load asked for
                self.pause(READBACK_SPACING_S)
                sample = device.sample()
                if running is not None and not running():  # the reading may have come after the last GEMM
                    drained += 1
                    continue
                samples.append(sample)
        except (self.nv.NVMLError, FieldReadFailed):
            pass  # what was read so far decides
        finally:
            wait()
        return samples, drained

    def reset(self) -> None:
        """Undo the lock (once; later calls do nothing)."""
        if not self.locked:
            return
        self.locked = False
        atexit.unregister(self.reset)
        try:
            self.nv.nvmlDeviceResetGpuLockedClocks(self.handle)
        finally:
            if self._close is not None:
                self._close()

    def __exit__(self, *exc: object) -> None:
        self.reset()

    def environment(self) -> dict[str, Any]:
        """What the run's environment records under ``clock_lock``."""
        return {**self.setting, "locked": self.locked, "via": "nvmlDeviceSetGpuLockedClocks"}


@dataclass
class ClockCheckedTimer:
    """A timer whose samples are each followed by an SM clock and power reading; a sample under ``threshold`` of
    ``reference_clock_mhz`` is discarded and retaken after a recovery delay (module docstring). ``read`` takes one
    telemetry :class:`fp8bench.energy.telemetry.Sample`; ``sleep`` waits (seconds)."""

    inner: Any  # the device's Timer
    read: Callable[[], Sample]
    reference_clock_mhz: float
    threshold: float = THROTTLE_THRESHOLD
    recovery_delay_s: float = RECOVERY_DELAY_S
    sleep: Callable[[float], None] = field(default=lambda seconds: _sleep(seconds))  # _sleep, read at each call
    decode: Callable[[int], list[str]] = decode_reasons  # names the bits of a reasons mask
    sm_clock_mhz: list[float | None] = field(default_factory=list)  # beside each kept sample
    power_w: list[float | None] = field(default_factory=list)
    power_sources: list[PowerSource | None] = field(default_factory=list)  # which NVML power each kept sample holds
    discarded: int = 0
    gave_up: bool = False  # a sample was kept after MAX_CONSECUTIVE_DISCARDS: no more checks until take_record

    def __post_init__(self) -> None:
        if not 0 < self.threshold <= 1:
            raise ValueError(f"throttle threshold must be a fraction of the reference clock in (0, 1], got "
                             f"{self.threshold}")
        if not self.reference_clock_mhz > 0:
            raise ValueError(f"reference clock must be positive MHz, got {self.reference_clock_mhz}")

    @property
    def last_host_s(self) -> float | None:
        return getattr(self.inner, "last_host_s", None)

    def time(self, fn: Callable[[], Any]) -> float:
        delay = self.recovery_delay_s
        for attempt in range(MAX_CONSECUTIVE_DISCARDS + 1):
            seconds = self.inner.time(fn)
            state = self.read()  # right after the sample, outside it
            clock = state.sm_clock_mhz
            throttled = (clock is not None and clock < self.threshold * self.reference_clock_mhz
                         and not self._power_capped(state))
            if not throttled or self.gave_up or attempt == MAX_CONSECUTIVE_DISCARDS:
                self.gave_up = self.gave_up or throttled
                self.sm_clock_mhz.append(float(clock) if clock is not None else None)
                self.power_w.append(state.power_w)
                self.power_sources.append(state.power_source)
                return seconds
            self.discarded += 1  # taken at a throttled clock: let the device recover, and time the call again
            self.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable: the last attempt is always kept")

    def _power_capped(self, state: Sample) -> bool:
        """Whether the sample's reasons mask says its clock is the board at its power limit (the one power-cap
        rule, :func:`fp8bench.core.throttle.power_cap_alone`): such a sample is kept with its clock."""
        return state.reasons_mask is not None and power_cap_alone(self.decode(int(state.reasons_mask)))

    def take_record(self) -> dict[str, Any]:
        """The record's per-sample device state, and resets it for the next sampled function."""
        known = [c for c in self.sm_clock_mhz if c is not None]
        out = {"sample_sm_clock_mhz": list(self.sm_clock_mhz), "sample_power_w": list(self.power_w),
               "sample_power_source": power_source_of(self.power_sources),
               "discarded_samples": self.discarded, "kept_throttled": self.gave_up,
               "throttle_threshold": self.threshold,
               "reference_sm_clock_mhz": self.reference_clock_mhz,
               "median_sample_sm_clock_mhz": statistics.median(known) if known else None}
        self.sm_clock_mhz, self.power_w, self.power_sources, self.discarded, self.gave_up = [], [], [], 0, False
        return out


@dataclass(frozen=True)
class Load:
    """GPU work queued by :func:`busy`: call it to wait for the work; :meth:`running` says whether it still runs;
    :meth:`keep_busy` queues more. Assumed, not documented by torch or NVIDIA: a launch blocks the host once the
    driver's queue is full, so the queue may hold far less than was asked for and a load meant to last seconds may
    drain soon after the host stops launching (nvbench's ``blocking_kernel.cuh`` lines 65-67 at 078919b say only
    that the work that may be queued behind a blocked stream depends on the device and driver: loose support)."""

    stream: Any  # the torch.cuda.Stream the work was queued on
    synchronize: Callable[[], None]
    top_up: Callable[[float], None] = lambda _seconds: None

    def __call__(self) -> None:
        self.synchronize()

    def running(self) -> bool:
        """Whether the queued work has not finished: ``Stream.query()`` is ``False`` while work is pending.

        ``not query()`` after a reading proves the load was still pending then, not that NVML sampled its value after
        the load began: a stale refresh from before can come back. Assumed, not measured: the GpuIdle bit and the
        rule against readings under 0.75 x the median of the others (:data:`THROTTLE_THRESHOLD`) catch most of
        those in the lock's read-back; the selfcheck probes apply neither and say so."""
        return not self.stream.query()

    def keep_busy(self, seconds: float) -> None:
        """Queue about ``seconds`` more of the same work on the load's stream (assumed: a launch blocks while the
        driver's queue is full, so calling this between readings keeps the GPU loaded without flooding the host)."""
        self.top_up(seconds)


def busy(device: Any, seconds: float) -> Load:
    """Queue about ``seconds`` of 4096^3 BF16 GEMMs on ``device`` (timed from one call) and return the
    :class:`Load`, whose call waits for them: a GPU loaded while its clocks are read (a reading counts only while
    :meth:`Load.running`)."""
    import torch

    a = torch.randn(4096, 4096, device=device.torch, dtype=torch.bfloat16)
    a @ a
    device.synchronize()
    start = time.perf_counter()
    a @ a
    device.synchronize()
    call_s = max(time.perf_counter() - start, 1e-6)

    stream = torch.cuda.current_stream(device.torch)

    def top_up(more_s: float) -> None:
        with torch.cuda.stream(stream):  # the stream running() asks about, whatever is current when called
            for _ in range(max(1, math.ceil(more_s / call_s))):
                a @ a

    top_up(seconds)
    return Load(stream, device.synchronize, top_up)


def lock_clocks(device: Any, policy: str | None, nv: Any = None,
                load: Callable[[], Callable[[], None]] | None = None) -> ClockLock | None:
    """The entered :class:`ClockLock` of ``device`` under ``policy`` (``None``: no lock asked, nothing done), its
    reference clock read under ``load`` (default: :func:`busy` for :data:`READBACK_LOAD_S`). Raises
    :class:`ClockLockRefused` with the reason where it cannot lock, before anything is measured."""
    if policy is None:
        return None
    if policy not in LOCK_POLICIES:
        raise ClockLockRefused(f"--lock-clocks {policy!r}; accepted: {', '.join(LOCK_POLICIES)}")
    if not device.is_cuda:
        raise ClockLockRefused(f"--lock-clocks locks an NVIDIA GPU's clocks through NVML; this run is on {device} "
                               "(drop --lock-clocks)")
    from fp8bench.energy import nvml
    from fp8bench.energy.meters import cuda_uuid

    try:
        dev = nvml.open_device(device.index or 0, cuda_uuid(device), nv)  # by UUID: NVML ignores CUDA's order
    except nvml.NvmlUnavailable as exc:
        raise ClockLockRefused(f"--lock-clocks {policy}: {exc}") from exc
    load = load or (lambda: busy(device, READBACK_LOAD_S))
    return ClockLock(dev.nv, dev.handle, policy, close=dev.close, load=load).__enter__()


def locked_clock_policy(lock: ClockLock) -> str:
    """The run's clock policy (part of the comparability key) under a lock: ``locked:base`` or ``locked:<MHz>``."""
    return "locked:base" if lock.policy == "base" else f"locked:{lock.setting['max_mhz']}"
