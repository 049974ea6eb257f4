"""A run's settings, grouped by what each part governs, each part checking its own values.

One run measures many cases under one :class:`RunSettings`. Its parts:

* :class:`RecipeSettings`: the scaling options applied to every recipe the run measures (FP8 format, delayed
  scaling's history, algorithm and margin) and the forward accumulation modes swept (``fast_accum``: each mode is a
  case of its own). :meth:`RecipeSettings.options` makes the :class:`fp8bench.core.precisions.RunOptions` that
  :func:`fp8bench.core.precisions.resolve_precision` applies to one recipe.
* :class:`TimingSettings`: how a case is timed: its wall-clock budget, the sampler's stopping rules
  (:class:`fp8bench.measure.timing.SamplingPolicy`), the warm-up, and the timing mode (L2 flush, CUDA-graph replay,
  a held stream) and whether each phase is timed besides the end-to-end call.
* :class:`EnergySettings`: whether and how energy is metered: the minimum window and the counter's quantization
  error it is sized for (:mod:`fp8bench.energy.windows`), windows per phase, an idle-power baseline, and a pause
  between cases that lets a GPU cool.
* :class:`ClockSettings`: which windows and samples the SM clock invalidates (the floor of a window's median clock,
  power capping, the per-sample throttle check) and the clock lock of the run (:mod:`fp8bench.hardware.clocks`).
* beside them the device, the seed, torch's CPU threads and the profiled pass (:data:`PROFILE_MODES`).

A bad value raises ``ValueError`` naming it and what is accepted, when the settings are made: before any case runs.

**The stored form.** A run file's header keeps the settings as one flat JSON object (``budget_s``, ``policy``,
``energy_window_s``, ``strict_clocks``...), the form every run file and store holds since the first schema, and the
form their readers (repro commands, comparability keys, run selection, suites) read. :data:`HEADER_KEYS` maps each
flat key to its part and field, once: :meth:`RunSettings.to_header` writes that form, :meth:`RunSettings.from_header`
reads it back, any key an older writer did not yet have taking its default.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from fp8bench.core.precisions import RunOptions
from fp8bench.hardware.clocks import LOCK_POLICIES, RECOVERY_DELAY_S, THROTTLE_THRESHOLD
from fp8bench.measure.timing import SamplingPolicy

PROFILE_MODES = ("torch", "nvtx", "nsys")  # fp8bench.measure.profiling says what each records
BARE_PROFILE_MODE = "torch"  # what a bare ``--profile`` means


def profile_mode(value: str | None) -> str | None:
    """``--profile``'s value checked: ``None`` (no profile) or one of :data:`PROFILE_MODES`; raises ``ValueError``
    naming the bad value and the accepted ones."""
    if value is None or value in PROFILE_MODES:
        return value
    raise ValueError(f"unknown --profile value {value!r}; accepted: {', '.join(PROFILE_MODES)} "
                     f"(a bare --profile is {BARE_PROFILE_MODE})")


def _seconds(name: str, value: float, positive: bool = False) -> None:
    """Every time a setting gives must be finite (a budget or a pause of inf would let one case hang the run)."""
    if not (math.isfinite(value) and (value > 0 if positive else value >= 0)):
        what = "positive, finite seconds" if positive else "finite seconds >= 0"
        raise ValueError(f"{name} must be {what}, got {value}")


def _fraction(name: str, value: float, what: str) -> None:
    if not 0 <= value <= 1:
        raise ValueError(f"{name} must be a fraction of {what} in [0, 1], got {value}")


@dataclass(frozen=True)
class RecipeSettings:
    """The run's options for every scaled recipe (``None``: each recipe's own setting, Transformer Engine's
    defaults for delayed scaling; :mod:`fp8bench.core.precisions`). ``fast_accum``: the forward accumulation modes
    swept, one case each (``True``: fast, the vendors' default)."""

    fp8_format: str | None = None
    fast_accum: tuple[bool, ...] = (True,)
    amax_history_len: int | None = None  # iterations
    margin: int | None = None  # powers of two of headroom
    amax_compute_algo: str | None = None

    def __post_init__(self) -> None:
        if not self.fast_accum or any(not isinstance(v, bool) for v in self.fast_accum):
            raise ValueError(f"fast_accum must list one or more of True/False, got {self.fast_accum!r}")
        self.options(self.fast_accum[0], trains=False)  # RunOptions checks the format, history, algorithm, margin

    def options(self, fast_accum: bool, trains: bool) -> RunOptions:
        """The options one recipe takes in one case: the forward accumulation mode ``fast_accum`` (one of
        :attr:`fast_accum`) on a workload that ``trains`` (has a backward pass) or not."""
        return RunOptions(fp8_format=self.fp8_format, amax_history_len=self.amax_history_len, margin=self.margin,
                          fast_accum=fast_accum, amax_compute_algo=self.amax_compute_algo, trains=trains)


@dataclass(frozen=True)
class TimingSettings:
    """How each case is timed (:mod:`fp8bench.measure.timing`, :mod:`fp8bench.measure.runner`)."""

    budget_s: float = 30.0  # wall-clock budget per case, seconds
    policy: SamplingPolicy = field(default_factory=SamplingPolicy)
    # Warm-up: at least ``warmup_iters`` calls, then on the CPU until two calls in a row agree or ``warmup_s``
    # seconds have passed (fp8bench.measure.runner.WARMUP_SETTLED); on a GPU until ``warmup_s`` has passed.
    warmup_s: float = 0.05
    warmup_iters: int = 2
    flush_l2: bool = True  # CUDA: the L2 cache flushed before each sample
    cuda_graph: bool = False  # CUDA: replays of a CUDA graph of each call timed instead of eager calls
    blocked_stream: bool = False  # CUDA: eager calls timed queued behind a held stream (fp8bench.measure.blocking)
    phases: bool = True  # each phase timed besides the end-to-end call

    def __post_init__(self) -> None:
        _seconds("budget", self.budget_s, positive=True)
        _seconds("warmup_s", self.warmup_s)
        if isinstance(self.warmup_iters, bool) or not isinstance(self.warmup_iters, int) or self.warmup_iters < 0:
            raise ValueError(f"warmup_iters must be a whole number of calls >= 0, got {self.warmup_iters!r}")


@dataclass(frozen=True)
class EnergySettings:
    """Whether and how energy is metered (:mod:`fp8bench.energy.meters`, :mod:`fp8bench.energy.windows`)."""

    enabled: bool = True
    window_s: float = 1.0  # minimum window, seconds: ~10 updates of NVML's ~100 ms counter
    # Windows are sized so the counter's quantization error stays under this fraction (None: fixed windows of
    # window_s).
    error_target: float | None = 0.01
    phases: bool = False  # each phase also metered looped alone
    idle_baseline_s: float = 0.0  # >0: idle power measured this long before the cases, energy reported above it
    cooldown_s: float = 0.0  # pause before each case after the first, seconds (a GPU cools between windows)

    def __post_init__(self) -> None:
        _seconds("energy window", self.window_s, positive=True)
        _seconds("idle_baseline_s", self.idle_baseline_s)
        _seconds("cooldown_s", self.cooldown_s)
        if self.error_target is not None and not 0 < self.error_target < 1:
            raise ValueError(f"energy error target must be a fraction in (0, 1), got {self.error_target}")


@dataclass(frozen=True)
class ClockSettings:
    """What the SM clock invalidates, and the run's clock lock (:mod:`fp8bench.hardware.clocks`,
    :mod:`fp8bench.energy.telemetry`)."""

    floor: float = 0.9  # a window whose median SM clock is under this fraction of the reference is throttled
    strict: bool = False  # power capping invalidates a window too (by default it is recorded, not invalidating)
    lock: str | None = None  # base | max: the GPU's SM clock locked for the run
    # A timed sample under this fraction of the reference SM clock is discarded and retaken after the recovery
    # delay, seconds (nvbench's defaults). 0 turns the per-sample check off.
    throttle_threshold: float = THROTTLE_THRESHOLD
    throttle_recovery_s: float = RECOVERY_DELAY_S

    def __post_init__(self) -> None:
        _fraction("clock floor", self.floor, "the reference clock")
        _fraction("throttle threshold", self.throttle_threshold, "the reference clock")
        _seconds("throttle recovery delay", self.throttle_recovery_s)
        if self.lock is not None and self.lock not in LOCK_POLICIES:
            raise ValueError(f"--lock-clocks {self.lock!r}; accepted: {', '.join(LOCK_POLICIES)}")


@dataclass(frozen=True)
class RunSettings:
    """Everything a run measures its cases under: the device, the seed, torch's CPU threads (``None``: torch's own
    count), the parts (module docstring) and the profiled pass (``None``: none; :mod:`fp8bench.measure.profiling`)."""

    device: str = "auto"
    seed: int = 0
    threads: int | None = None
    recipe: RecipeSettings = field(default_factory=RecipeSettings)
    timing: TimingSettings = field(default_factory=TimingSettings)
    energy: EnergySettings = field(default_factory=EnergySettings)
    clocks: ClockSettings = field(default_factory=ClockSettings)
    profile: str | None = None

    def __post_init__(self) -> None:
        # Only positive here: settings read from a header (another machine's run) may name more threads than this
        # machine has; a run on this machine checks its own bound (threads_here).
        if self.threads is not None and (isinstance(self.threads, bool) or not isinstance(self.threads, int)
                                         or self.threads < 1):
            raise ValueError(f"threads must be a whole number of at least 1, got {self.threads!r}")
        profile_mode(self.profile)

    def threads_here(self) -> int | None:
        """:attr:`threads` for a run on this machine: ``ValueError`` naming the value where it is more than this
        machine's CPUs (the run would oversubscribe them)."""
        cpus = os.cpu_count() or 1
        if self.threads is not None and self.threads > cpus:
            raise ValueError(f"threads must be between 1 and this machine's {cpus} CPUs, got {self.threads}")
        return self.threads

    def with_timing(self, **changes: Any) -> RunSettings:
        """A copy with fields of :attr:`timing` changed (``budget_s=...``)."""
        return replace(self, timing=replace(self.timing, **changes))

    def with_energy(self, **changes: Any) -> RunSettings:
        """A copy with fields of :attr:`energy` changed (``error_target=None``)."""
        return replace(self, energy=replace(self.energy, **changes))

    def to_header(self) -> dict[str, Any]:
        """The stored form (module docstring): one flat object of plain values (``fast_accum`` a tuple, a JSON list)."""
        out: dict[str, Any] = {}
        for key, (part, name) in HEADER_KEYS.items():
            value = getattr(getattr(self, part), name) if part else getattr(self, name)
            out[key] = asdict(value) if isinstance(value, SamplingPolicy) else value
        return out

    @classmethod
    def from_header(cls, stored: Mapping[str, Any]) -> RunSettings:
        """The settings a run header stored (:meth:`to_header`'s form, of any release): a key it lacks takes its
        default, a key this release does not know is left out. Raises ``ValueError`` on a bad value."""
        given: dict[str, dict[str, Any]] = {}
        for key, (part, name) in HEADER_KEYS.items():
            if key in stored:
                given.setdefault(part, {})[name] = stored[key]
        timing = dict(given.get("timing", {}))
        policy = timing.pop("policy", None)
        if policy is not None:
            known = {f.name for f in fields(SamplingPolicy)}
            timing["policy"] = SamplingPolicy(**{k: v for k, v in policy.items() if k in known})
        recipe = dict(given.get("recipe", {}))
        if "fast_accum" in recipe:
            recipe["fast_accum"] = tuple(recipe["fast_accum"])
        return cls(**given.get("", {}), recipe=RecipeSettings(**recipe), timing=TimingSettings(**timing),
                   energy=EnergySettings(**given.get("energy", {})), clocks=ClockSettings(**given.get("clocks", {})))


# The stored form's keys, in the order run files have always written them: key -> (part, field); part "" is a
# field of RunSettings itself.
HEADER_KEYS: dict[str, tuple[str, str]] = {
    "device": ("", "device"), "budget_s": ("timing", "budget_s"), "policy": ("timing", "policy"),
    "warmup_s": ("timing", "warmup_s"), "warmup_iters": ("timing", "warmup_iters"), "seed": ("", "seed"),
    "threads": ("", "threads"), "fp8_format": ("recipe", "fp8_format"), "fast_accum": ("recipe", "fast_accum"),
    "amax_history_len": ("recipe", "amax_history_len"), "margin": ("recipe", "margin"),
    "amax_compute_algo": ("recipe", "amax_compute_algo"), "flush_l2": ("timing", "flush_l2"),
    "cuda_graph": ("timing", "cuda_graph"), "blocked_stream": ("timing", "blocked_stream"),
    "phases": ("timing", "phases"), "energy": ("energy", "enabled"), "energy_window_s": ("energy", "window_s"),
    "energy_error_target": ("energy", "error_target"), "energy_phases": ("energy", "phases"),
    "idle_baseline_s": ("energy", "idle_baseline_s"), "cooldown_s": ("energy", "cooldown_s"),
    "clock_floor": ("clocks", "floor"), "strict_clocks": ("clocks", "strict"), "profile": ("", "profile"),
    "lock_clocks": ("clocks", "lock"), "throttle_threshold": ("clocks", "throttle_threshold"),
    "throttle_recovery_s": ("clocks", "throttle_recovery_s"),
}
