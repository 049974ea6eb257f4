"""The plan of a run: each case's expected wall time, and the total, before anything is measured.

A case's wall time is the sum of what the runner does for it (:mod:`fp8bench.measure.runner`), each part modelled
from the run's settings and one number, the seconds ``t`` of one end-to-end call:

* a refused case (backend, precision, shape or memory rule) costs :data:`REFUSED_S`;
* a case whose ``min_samples + warmup_iters`` calls exceed its budget is skipped as over budget after a probe:
  two calls of the probe shape (:data:`fp8bench.measure.runner.PROBE_FLOPS_LEVELS`, the smallest), nothing more;
* otherwise: the probe where the shape is big enough to have one; **warm-up**, ``max(warmup_iters,
  ceil(warmup_s / t))`` calls, on a CPU at most ``warmup_iters + 1`` (calls settle by then); **samples** of the
  end-to-end call and of each phase (:func:`sampled_s`), the
  end-to-end ones within half the case budget and all of them within the budget; **setup**, about one call
  (:data:`SETUP_CALLS`) beside a fixed part; **numerics**, about one more call (:data:`NUMERICS_CALLS`) and, once
  per shape, the FP64 reference; the **energy** window where a meter exists (:func:`energy_window_s`, and
  one per phase with ``energy_phases``; twice as many on a GPU whose samples flush the L2 or hold the stream, the
  wrapping being metered alone too); and :data:`CASE_BOOKKEEPING_S` of book-keeping.

Without history, ``t`` is modelled as ``max(flops / (ceiling * efficiency), bytes / (bandwidth / 2)) + floor``:
the ceilings are the device table's (GPUs) or the CPU's cached measured ones (:func:`fp8bench.hardware.peaks.
cached_cpu_ceilings`; :data:`DEFAULT_CPU_CEILINGS` when none is cached), the efficiencies are
:data:`EFFICIENCY`, the floor :data:`CALL_FLOOR_S`. A case's phases are not known before its pipeline is built:
a float GEMM has one (its end-to-end call), a scaled GEMM two (quantize and GEMM) and any other workload three,
splitting ``t`` evenly.

With history (``history``: earlier records of the same case key on a device of the same name, read from the store
by :func:`case_history`), the case's expected wall time is the median of its last :data:`HISTORY_RUNS` recorded
wall times (``timing.case_wall_s``), and ``t`` and the phases are the latest record's medians. The estimate under
other settings (a suite budget's shortened ones, :mod:`fp8bench.measure.budget`) is that wall time scaled by the
model's ratio between the two settings.

The error of both estimates on this project's CPU is measured in docs/method.md ("Planning a run").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fp8bench.core.cases import Case
from fp8bench.core.devices import Device
from fp8bench.core.noise import HostLoad
from fp8bench.core.plugins import BACKENDS, WORKLOADS
from fp8bench.core.precisions import ScaledRecipe
from fp8bench.core.shapes import label
from fp8bench.energy.meters import EnergyMeter, WindowMeter
from fp8bench.energy.windows import sized_window_s
from fp8bench.hardware.peaks import cached_cpu_ceilings, peak_key, table_peak
from fp8bench.measure.harness_cost import Step
from fp8bench.measure.runner import END_TO_END_BUDGET_SHARE, PROBE_FLOPS_LEVELS, case_record, warmup_may_settle
from fp8bench.measure.settings import EnergySettings, RunSettings
from fp8bench.measure.timing import SamplingPolicy

if TYPE_CHECKING:
    from fp8bench.results.store import Store

# Seconds of a case refused before running (a rule checked, a skipped record written).
REFUSED_S = 0.005
# The per-case constants below are the recorded harness split (``Record.harness``) of a cold run of the 200 cases of
# scripts/plan_check_suite.yaml on this project's 2-core CPU at load 1.9 (``python scripts/plan_accuracy.py --suite
# scripts/plan_check_suite.yaml --calibrate`` prints the recorded mean of each step beside the model's). The load
# stretches them (``CostModel.stretch``).
# Book-keeping per measured case: the record's assembly, seconds (recorded mean 1.3 ms).
CASE_BOOKKEEPING_S = 0.0013
# Setup per measured case: the inputs (cached per shape) and the pipeline's build, which quantizes the weights a
# scaled recipe holds: a fixed part plus about one call's work (recorded: 0.6 ms median at sub-millisecond calls,
# 15 ms beside a 14 ms FP8 call at 1024^3).
CASE_SETUP_S = 0.0005
SETUP_CALLS = 1.0
# Numerics per measured case: the comparisons with the FP64 reference and between outputs, and the cast statistics: a
# fixed part plus about one call's work (the fresh output is the first warm-up call's where the call is
# deterministic; recorded: 0.7 ms median at sub-millisecond calls, 9-10 ms beside a 14 ms call).
NUMERICS_FIXED_S = 0.0006
NUMERICS_CALLS = 1.0
# Streaming each record to the run file and the store, seconds (the run header's ``harness.stream_s`` over its
# cases: 0.58 s for 200).
RECORD_WRITE_S = 0.003
# Host time of the sampling loop per sample (the timer, the stop rules), seconds (recorded: the ``sampling`` step over
# the samples taken, 5.4 us).
SAMPLE_LOOP_S = 6e-6
# The least seconds one call takes whatever its size: Python dispatch and kernel launches.
CALL_FLOOR_S = {"cpu": 2e-5, "cuda": 1e-5}
# Fraction of the ceiling a case's call reaches. Float GEMMs run near their matmul ceiling; scaled (FP8/FP4) recipes
# add quantization passes, and on a CPU run FP8 on slow paths (docs/findings-cpu.md, "Backends": 6x slower than BF16
# at 128x128x256 on one CPU, per-tensor E4M3 x E4M3 about 2000x slower on another) or emulate it: far under the
# ceiling.
EFFICIENCY = {("cpu", "float"): 0.5, ("cpu", "scaled"): 0.05, ("cuda", "float"): 0.6, ("cuda", "scaled"): 0.4}
# A CPU whose ceilings were never measured here (TFLOP/s, TB/s): a 2-core cloud machine of this project's CI
# (AMD EPYC, torch 2.13: 0.22 TFLOP/s FP32, 0.96 BF16, 0.083 TB/s, fp8bench.hardware.peaks), BF16 taken at the FP32
# rate because CPUs without BF16 instructions run it no faster. The run that follows measures and caches the real
# ones, so a second plan uses those (the cold plan's error is in docs/method.md).
DEFAULT_CPU_CEILINGS = {"fp32": 0.2, "bf16": 0.2, "mem_bw": 0.05}
# A GPU missing from the device table (TFLOP/s, TB/s).
DEFAULT_GPU_PEAKS = {"compute": 100.0, "mem_bw": 1.0}
# The FP64 reference runs at this fraction of the FP32 rate (once per workload and shape).
FP64_SLOWDOWN = 4.0
# How far between its least sampled time (min_samples, min_time_s) and its most (max_time_s, max_samples) a timed
# function is expected to sample: the noise target stops quiet cases at the least, noisy ones run to the most (the
# calibration run, see CASE_BOOKKEEPING_S, sampled about a tenth of the way on a quiet CPU; under load the model
# samples to the most).
UNREACHED_SHARE = 0.15
# NVML's energy counter updates about every 100 ms (docs/energy.md): the period a window is sized from.
ASSUMED_COUNTER_PERIOD_S = 0.1
# Recorded wall times of a case whose median is its expected wall time.
HISTORY_RUNS = 3


@dataclass(frozen=True)
class History:
    """What earlier runs of one case on a device of the same name recorded: wall times (newest first, seconds),
    and the newest record's end-to-end median and phase medians (seconds)."""

    wall_s: tuple[float, ...]
    call_s: float | None = None
    phases_s: tuple[float, ...] = ()

    @property
    def expected_wall_s(self) -> float:
        return float(statistics.median(self.wall_s[:HISTORY_RUNS]))


@dataclass(frozen=True)
class Parts:
    """The modelled seconds of one case, by the runner's step (:class:`fp8bench.measure.harness_cost.Step`, the
    steps a record's harness split names too); a step not given takes none."""

    seconds: Mapping[Step, float] = field(default_factory=dict)

    def __getitem__(self, step: Step) -> float:
        return self.seconds.get(step, 0.0)

    @property
    def total(self) -> float:
        return sum(self.seconds.values())

    def to_dict(self) -> dict[str, float]:
        return {step.value: self[step] for step in Step}


@dataclass(frozen=True)
class CaseEstimate:
    """One case's expected wall time (seconds), where the figure comes from (``model`` or ``history``), what the
    case is expected to end as (``measured``, or the skip reason), the modelled call and the parts."""

    case: Case
    seconds: float
    source: str
    expect: str
    call_s: float | None
    parts: Parts
    history_runs: int = 0
    refused: bool = False  # the runner's own rules refuse the case before running it

    def to_dict(self) -> dict[str, Any]:
        return {"case": self.case.describe(), "workload": self.case.workload, "shape": dict(self.case.shape),
                "precision": self.case.precision.name, "backend": self.case.backend, "expected_s": self.seconds,
                "source": self.source, "history_runs": self.history_runs, "expect": self.expect,
                "call_s": self.call_s, "parts_s": self.parts.to_dict()}


@dataclass
class CostModel:
    """The cost model of one device (module docstring). ``ceilings``: TFLOP/s per peak key and ``mem_bw`` in TB/s;
    ``meter``: the device's energy meter; ``history``: by case key."""

    device: Device
    ceilings: dict[str, float]
    meter: EnergyMeter | None = None
    history: dict[str, History] = field(default_factory=dict)
    ceilings_cached: bool = True  # False: the CPU's ceilings will be measured in the run (CEILINGS_S)
    load: HostLoad | None = None  # the host's load when planning (fp8bench.core.noise.host_load)

    @property
    def stretch(self) -> float:
        """How much longer a CPU's work per call or per case takes under the planning-time load: runnable processes
        per CPU, at least 1 (the scheduler shares the cores among them). A GPU's calls run on the device: 1."""
        if self.device.is_cuda or self.load is None:
            return 1.0
        return max(1.0, self.load.load_1m / self.load.cpus)

    def call_s(self, case: Case) -> float:
        """Modelled seconds of one end-to-end call of ``case`` (no history)."""
        workload = WORKLOADS.get(case.workload)
        kind = "cuda" if self.device.is_cuda else "cpu"
        scaled = isinstance(case.precision, ScaledRecipe)
        compute = self._compute(case) * EFFICIENCY[(kind, "scaled" if scaled else "float")] * 1e12
        bandwidth = self.ceilings["mem_bw"] * 1e12 / 2
        flops = workload.flops(case.shape) or 0
        nbytes = workload.min_bytes(case.shape, case.precision) or 0
        return max(flops / compute, nbytes / bandwidth) + CALL_FLOOR_S[kind]

    def _compute(self, case: Case) -> float:
        key = peak_key(case.precision)
        if key in self.ceilings:
            return self.ceilings[key]
        if self.device.is_cuda:
            return self.ceilings.get("compute", DEFAULT_GPU_PEAKS["compute"])
        return self.ceilings["fp32" if key in ("fp32", "tf32") else "bf16"]

    def phase_calls_s(self, case: Case, call_s: float) -> tuple[float, ...]:
        """The phases timed besides the end-to-end call, seconds each (module docstring)."""
        hist = self.history.get(case_key_of(case, self.device))
        if hist is not None and hist.phases_s:
            return hist.phases_s
        if case.workload != "gemm":
            return (call_s / 3,) * 3
        return (call_s / 2,) * 2 if isinstance(case.precision, ScaledRecipe) else ()

    def estimate(self, case: Case, settings: RunSettings, first_of_shape: bool = False,
                 base: RunSettings | None = None) -> CaseEstimate:
        """Expected wall time of ``case`` under ``settings``; ``first_of_shape``: it computes its shape's FP64
        reference; ``base``: the settings its history was recorded under (default ``settings``)."""
        refused = self.refusal(case)
        if refused is not None:
            return CaseEstimate(case, REFUSED_S, "model", f"skipped: {refused}", None,
                                Parts({Step.BOOKKEEPING: REFUSED_S}), refused=True)
        hist = self.history.get(case_key_of(case, self.device))
        call = hist.call_s if hist is not None and hist.call_s else self.call_s(case)
        expect, parts = self.parts(case, call, settings, first_of_shape)
        if hist is None:
            return CaseEstimate(case, parts.total, "model", expect, call, parts)
        base_parts = self.parts(case, call, base or settings, first_of_shape)[1]
        scale = parts.total / base_parts.total if base_parts.total > 0 else 1.0
        return CaseEstimate(case, hist.expected_wall_s * scale, "history", expect, call, parts,
                            len(hist.wall_s[:HISTORY_RUNS]))

    def refusal(self, case: Case) -> str | None:
        """Why the runner will refuse ``case`` before running it (its own rules, no measuring), or ``None``."""
        backend, workload = BACKENDS.get(case.backend), WORKLOADS.get(case.workload)
        return (backend.unsupported_reason(case.workload, case.precision, self.device)
                or workload.shape_reason(case.shape, case.precision)
                or workload.memory_reason(case.shape, case.precision, self.device))

    def parts(self, case: Case, call_s: float, settings: RunSettings, first_of_shape: bool) -> tuple[str, Parts]:
        """What ``case`` is expected to end as, and its parts, with one call taking ``call_s``."""
        s, metering = settings.timing, settings.energy
        workload = WORKLOADS.get(case.workload)
        probe = 0.0
        probe_shape = workload.probe_shape(case.shape, PROBE_FLOPS_LEVELS[0])
        if probe_shape is not None:  # a warm-up and a timed call of the probe shape, and its inputs
            probe = 2 * call_s * (workload.flops(probe_shape) or 0) / max(workload.flops(case.shape) or 1, 1)
            probe += CASE_BOOKKEEPING_S
        needed = s.policy.min_samples + s.warmup_iters
        if call_s * needed > s.budget_s:
            return (f"skipped: over budget (one call ~{call_s:.3g} s)",
                    Parts({Step.PROBE: probe, Step.BOOKKEEPING: REFUSED_S}))
        # Warm-up and sampling stop on wall-clock rules (warmup_s, min_time_s, max_time_s): the load changes how many
        # calls fit in them more than how long they take; under load the spread target is out of reach, so each
        # timed function samples to its most. Everything else is work per call or per case that the load stretches.
        unreached = 1.0 if self.stretch > 1 else UNREACHED_SHARE
        warmup_calls = max(s.warmup_iters, math.ceil(s.warmup_s / call_s))
        if warmup_may_settle(self.device):  # CPU calls settle a call after warmup_iters (runner.WARMUP_SETTLED)
            warmup_calls = min(warmup_calls, s.warmup_iters + 1)
        warmup = warmup_calls * call_s
        e2e = sampled_s(call_s, s.policy, s.budget_s * END_TO_END_BUDGET_SHARE, unreached)
        left = max(0.0, s.budget_s - warmup - e2e)
        phases = 0.0
        if s.phases:
            for phase_s in self.phase_calls_s(case, call_s):
                phases += sampled_s(phase_s, s.policy, left - phases, unreached)
        numerics = NUMERICS_CALLS * call_s + NUMERICS_FIXED_S
        if first_of_shape:
            numerics += self.reference_s(case)
        n_windows = 1 + (len(self.phase_calls_s(case, call_s)) if metering.phases else 0)
        # Samples that wrap each call (an L2 flush, a hold) double the windows: the wrapping alone is metered in a
        # window of its own, sized like any window (fp8bench.energy.meters, "What a window runs"); both are sized
        # for a tighter bound than one window alone, so this is a lower estimate where the wrapping dominates.
        n_windows *= 2 if self.device.is_cuda and (s.flush_l2 or s.blocked_stream) else 1
        energy = energy_window_s(self.meter, metering) * n_windows if metering.enabled else 0.0
        k = self.stretch
        return "measured", Parts({Step.PROBE: probe * k, Step.SETUP: (CASE_SETUP_S + SETUP_CALLS * call_s) * k,
                                  Step.WARMUP: warmup, Step.SAMPLING: e2e + phases, Step.NUMERICS: numerics * k,
                                  Step.ENERGY: energy,
                                  Step.BOOKKEEPING: (CASE_BOOKKEEPING_S + RECORD_WRITE_S) * k})

    def reference_s(self, case: Case) -> float:
        """The FP64 reference of the case's shape, seconds (at the FP32 ceiling over :data:`FP64_SLOWDOWN`)."""
        flops = WORKLOADS.get(case.workload).flops(case.shape) or 0
        fp32 = self.ceilings.get("fp32", self.ceilings.get("compute", DEFAULT_GPU_PEAKS["compute"]))
        return flops * FP64_SLOWDOWN / (fp32 * 1e12)


def sampled_s(call_s: float, policy: SamplingPolicy, cap_s: float, unreached: float = UNREACHED_SHARE) -> float:
    """Expected seconds of sampling one function whose call takes ``call_s``, never past ``cap_s``: the least the
    stop rules allow, plus ``unreached`` of the way to the most, plus the loop's own time per sample."""
    if cap_s <= 0:
        return 0.0
    least = min(max(policy.min_samples * call_s, policy.min_time_s), policy.max_samples * call_s)
    most = max(least, min(policy.max_time_s, policy.max_samples * call_s))
    seconds = min(least + unreached * (most - least), max(cap_s, policy.min_samples * call_s))
    return seconds + seconds / call_s * SAMPLE_LOOP_S


def energy_window_s(meter: EnergyMeter | None, s: EnergySettings) -> float:
    """Seconds of one energy window under ``s``: none without a window meter; else sized to the error target from
    :data:`ASSUMED_COUNTER_PERIOD_S`, between the minimum window and the meter's cap (fp8bench.energy.windows)."""
    if not isinstance(meter, WindowMeter):
        return 0.0
    cap = max(meter.policy.max_window_s, s.window_s)
    if s.error_target is None:
        return s.window_s
    return sized_window_s(ASSUMED_COUNTER_PERIOD_S, s.window_s, cap, s.error_target)


def case_key_of(case: Case, device: Device) -> str:
    """The store's case key of ``case`` on ``device`` (fp8bench.core.records.case_key): the key of the record the
    runner would write."""
    return case_record(case, device, 0, "skipped").case_key


def device_ceilings(device: Device, device_name: str, cache_dir: Path | None) -> dict[str, float]:
    """The ceilings the model divides by: the device table's for a GPU, the CPU's cached measured ones, else the
    defaults (module docstring)."""
    if device.is_cuda:
        out = {key: peak.value for key in ("fp32", "tf32", "bf16", "fp16", "fp8", "mxfp8")
               if (peak := table_peak(device_name, key)) is not None}
        bandwidth = table_peak(device_name, "mem_bw")
        return {**DEFAULT_GPU_PEAKS, **out, "mem_bw": bandwidth.value if bandwidth else DEFAULT_GPU_PEAKS["mem_bw"]}
    cached = cached_cpu_ceilings(cache_dir) or {}
    return {k: float(cached.get(k) or v) for k, v in DEFAULT_CPU_CEILINGS.items()}


@dataclass(frozen=True)
class Plan:
    """The estimates of a run's cases in run order, and the run's own fixed cost (seconds)."""

    estimates: list[CaseEstimate]
    fixed_s: float

    @property
    def total_s(self) -> float:
        return self.fixed_s + sum(e.seconds for e in self.estimates)

    def to_dict(self) -> dict[str, Any]:
        sources = [e.source for e in self.estimates]
        return {"total_s": self.total_s, "fixed_s": self.fixed_s, "n_cases": len(self.estimates),
                "from_history": sources.count("history"), "from_model": sources.count("model"),
                "cases": [e.to_dict() for e in self.estimates]}


# The run's own work around its cases: the process's start (torch's import), the cases' expansion, the environment's
# capture and the final header: the calibration run's wall time less its cases' walls, its records' streaming and its
# ceilings, 2.5 s on a 2-core CPU.
RUN_FIXED_S = 2.5
# Measuring a CPU's ceilings where none is cached (fp8bench.hardware.peaks: best of 5 of two 2048^3 matmuls and a
# copy): the run header's ``harness.ceilings_s``, 0.8-1.8 s on a 2-core CPU at load 1-2.
CEILINGS_S = 1.5


def plan_run(cases: Sequence[Case], settings: RunSettings, model: CostModel,
             per_case: Sequence[RunSettings] | None = None) -> Plan:
    """The plan of ``cases`` in order under ``settings`` (or ``per_case`` settings, one per case, history scaled
    from ``settings``)."""
    seen: set[tuple[str, str]] = set()
    estimates = []
    for i, case in enumerate(cases):
        shape_key = (case.workload, label(case.shape))
        first = shape_key not in seen
        seen.add(shape_key)
        s = per_case[i] if per_case is not None else settings
        estimates.append(model.estimate(case, s, first, base=settings))
    fixed = RUN_FIXED_S + (CEILINGS_S if not model.device.is_cuda and not model.ceilings_cached else 0.0)
    return Plan(estimates, fixed)


def case_history(store: Store, keys: Iterable[str], device_name: str) -> dict[str, History]:
    """Earlier records of the case ``keys`` on a device named ``device_name`` that recorded their wall time, newest
    first, read from ``store`` (:class:`History` per key)."""
    import sqlalchemy as sa

    from fp8bench.results.store import records_table as R
    from fp8bench.results.store import runs_table
    from fp8bench.results.store.queries import record_json

    wanted = list(dict.fromkeys(keys))
    rows: list[Any] = []
    with store.engine.connect() as conn:
        for start in range(0, len(wanted), 500):
            stmt = (sa.select(R.c.id, R.c.case_key).select_from(R.join(runs_table, runs_table.c.run_id == R.c.run_id))
                    .where(R.c.case_key.in_(wanted[start:start + 500]), R.c.device_name == device_name)
                    .order_by(runs_table.c.started_at.desc(), R.c.id.desc()))
            rows += conn.execute(stmt).all()
    newest: dict[str, list[int]] = {}
    for record_id, key in rows:
        ids = newest.setdefault(key, [])
        if len(ids) < HISTORY_RUNS:
            ids.append(int(record_id))
    data = record_json(store, [i for ids in newest.values() for i in ids])
    out = {}
    for key, ids in newest.items():
        history = _history([data[i] for i in ids if i in data])
        if history is not None:
            out[key] = history
    return out


def _history(records: list[dict[str, Any]]) -> History | None:
    walls = tuple(float(w) for r in records if isinstance(w := (r.get("timing") or {}).get("case_wall_s"),
                                                             (int, float)))
    if not walls:
        return None
    newest = records[0]
    median = newest.get("median_s")
    phases = newest.get("phases") or {}
    timed_phases = tuple(float(v) for k, v in phases.items() if isinstance(v, (int, float))
                         and not _same_as_end_to_end(newest, k))
    return History(walls, float(median) if isinstance(median, (int, float)) else None, timed_phases)


def _same_as_end_to_end(record: dict[str, Any], phase: str) -> bool:
    """Whether the record's phase was its end-to-end call (a one-phase pipeline, timed once)."""
    stats = (record.get("phase_stats") or {}).get(phase) or {}
    return len(record.get("phases") or {}) == 1 and stats.get("n") == record.get("n")

