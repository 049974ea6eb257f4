"""The acceptance check of a device: can fp8bench's numbers be trusted on it?

A new GPU runner (or a new driver, CUDA or torch on an old one) is checked once before its numbers count. Every
check measures through the same runner, timers, peak table, quantizers and energy meter the benchmarks use, and
compares the result with an expectation that does not come from the thing being checked:

* ``gemm_peak`` (GPU): a square BF16 and FP8 (tensorwise) GEMM of 8192 (halved until it fits in free memory), run
  by the runner on the ``torch`` backend, reaches at least :data:`PEAK_FRACTION` of the device table's dense peak
  (:mod:`fp8bench.hardware.peaks`) and not more than :data:`PEAK_CEILING`. FP8 is judged on its GEMM phase (operands
  already quantized): the table's peak is a kernel rate. Below: a slow kernel, a wrong library, clocks held low, or
  a timer that over-counts. Above: a timer that under-counts, or a wrong table row.
* ``cpu_ceiling`` (CPU): the CPU has no datasheet; fp8bench measures its ceilings (best of a few large matmuls and a
  large copy). The runner's BF16 GEMM at the ceiling's own size must land within the same band of the ceiling just
  measured, which checks the runner's timing and the ceiling against each other. The ceilings measured here replace
  the results folder's cached ones when the machine is quiet (:mod:`fp8bench.hardware.peaks`), so later runs'
  percentages of peak use them.
* ``timer_vs_wall``: the device timer (CUDA events; ``perf_counter_ns`` on the CPU) and the wall clock
  (``time.time``) time the same long loop of GEMMs (:data:`TIMER_LOOP_S`); they must agree within
  :data:`TIMER_TOLERANCE`. Events recorded on another device's stream read about zero; a wrong unit reads 1000x off.
* ``sqnr``: every FP8 recipe, in E4M3 and E5M2, through the ``torch`` backend (the ``emulated`` reference where
  ``torch`` refuses the recipe on this device, and the table says so): the measured SQNR against the FP64 reference
  is within :data:`SQNR_TOLERANCE_DB` of :func:`fp8bench.numerics.predicted_sqnr.predict_gemm_sqnr`. A scale in the
  wrong layout or a wrong output dtype reads many dB off.
* ``energy`` (GPU): NVML's total-energy counter advances over a loaded window, and the energy per iteration it gives
  agrees within :data:`ENERGY_TOLERANCE` with the average of the NVML power samples times the time per iteration.
* ``backend``: every available backend runs its smallest case (GEMM 128x128x128 in BF16 and FP8 tensorwise) or
  refuses it with a reason; a failure, a non-finite output or a budget overrun fails the check.
* ``claims``: every statement the code makes of a GPU that was checked only against fakes
  (:mod:`fp8bench.measure.claims`) turns into a verdict: its own probe, or the check above that confirms it. A
  failed claim fails the selfcheck; its row names the figures not to trust on this device.

On the CPU the GPU-only checks are listed as ``needs a GPU``, never as passed. Each check's cases are ordinary
records in the run file; the verdicts go into its ``run`` header under ``selfcheck``.
"""

from __future__ import annotations

import math
import statistics
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

import torch

from fp8bench.core.cases import Case
from fp8bench.core.devices import Device
from fp8bench.core.noise import HostLoad, host_load
from fp8bench.core.peak_table import table_peak
from fp8bench.core.pipeline import BuildContext, Pipeline
from fp8bench.core.plugins import BACKENDS, WORKLOADS, load_all
from fp8bench.core.precisions import (
    PRECISIONS,
    Fp8Recipe,
    Precision,
    RunOptions,
    ScaledRecipe,
    resolve_precision,
)
from fp8bench.core.records import Record
from fp8bench.core.shapes import Shape, label
from fp8bench.energy.meters import EnergyMeter, EnergyReading, NullMeter, configure_meter, meter_for
from fp8bench.hardware.peaks import CEILING_N, Peaks, peak_key
from fp8bench.measure.claims import CLAIMS, Claim, Outcome, ProbeContext, describe, run_probe
from fp8bench.measure.runner import CaseMeasurer, StreamedRun, new_run_id, run_header
from fp8bench.measure.settings import ClockSettings, EnergySettings, RunSettings, TimingSettings
from fp8bench.measure.timing import SamplingPolicy, Timer, timer_for
from fp8bench.numerics.predicted_sqnr import predict_gemm_sqnr
from fp8bench.results.record_stream import DiskFull, RecordStream

# A vendor GEMM this large is compute-bound and should run well above half the dense datasheet peak; under half
# means something is wrong. The bar is deliberately loose: it catches broken setups, not tuning gaps.
PEAK_FRACTION = 0.5
# Datasheet peaks are quoted at the boost clock; a sustained GEMM above them means the timer or the table is
# wrong. The margin leaves room for the table's rounding and for boards that hold clocks above the quoted boost.
PEAK_CEILING = 1.15
# CUDA events and the host clock time the same loop: they differ by the launch of the first kernel and the final
# synchronize (tens of microseconds), far under 5 % of a one-second loop.
TIMER_TOLERANCE = 0.05
TIMER_LOOP_S = 1.0
TIMER_REPEATS = 3
# The prediction matches the shared quantizers within 0.05 dB on the CPU; 2 dB leaves room for a GPU kernel's own
# accumulation (fast FP8 accumulation is not in the prediction) and is still a third of one mantissa bit (6 dB).
SQNR_TOLERANCE_DB = 2.0
# The counter steps about every 100 ms (3 % of a 3 s window); NVML power is a ~1 s running average on Ampere and
# newer, so a 1 s warm-up lets it settle on the load before the window opens. 20 % leaves room for power that still
# wobbles at a steady load, and catches a counter or power reading that is wrong for the board.
ENERGY_TOLERANCE = 0.20
ENERGY_WINDOW_S = 3.0
ENERGY_WARMUP_S = 1.0

CHECKS = ("gemm_peak", "cpu_ceiling", "timer_vs_wall", "sqnr", "energy", "backend", "claims")  # in the order they run
PEAK_PRECISIONS = ("bf16", "fp8_tensorwise")
BACKEND_PRECISIONS = ("bf16", "fp8_tensorwise")
SQNR_FORMATS = ("e4m3", "e5m2")  # hybrid is E4M3 in a GEMM's forward pass
# The square GEMM the peak check tries first, and the smallest it accepts.
GEMM_SIZE = 8192
MIN_GEMM_SIZE = 1024
# Bytes per element of a square n x n x n GEMM case at its peak: FP32 sources (2 x 4), the FP64 reference with
# its FP64 operand copies while it is computed (3 x 8), BF16 copies, FP8 operands, casts' FP32 temporaries and the
# output (about 8 more): 40 n^2, and the case must fit in FREE_MEMORY_SHARE of the free memory.
GEMM_BYTES_PER_ELEMENT = 40
FREE_MEMORY_SHARE = 0.8


class Verdict(str, Enum):
    """A check's outcome; only PASS, FAIL and ERROR are verdicts on the device, and only FAIL and ERROR fail."""

    PASS = "PASS"
    FAIL = "FAIL"
    ERROR = "ERROR"  # the check itself broke: a harness error, not a verdict on the device
    NEEDS_GPU = "needs a GPU"
    NOT_RUN = "not run"  # e.g. a backend unavailable here (the reason says why)


@dataclass(frozen=True)
class CheckResult:
    check: str  # gemm_peak, cpu_ceiling, timer_vs_wall, sqnr, energy, backend
    subject: str  # what was checked: a precision, a recipe/format, a backend
    verdict: Verdict
    detail: str  # the measurement against its expectation, in words
    measured: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "verdict": self.verdict.value}


@dataclass(frozen=True)
class Probe:
    """What the checks measure through: the real timer, clock, meter and peaks of a device (:func:`probe_for`), or
    stand-ins with the same interfaces in tests."""

    device: Device  # where tensors live
    device_name: str  # the peak table's key on a GPU
    gpu: bool  # run the GPU checks
    timer: Timer  # device time of one call, seconds (CUDA events on a GPU)
    wall_clock: Callable[[], float]  # seconds
    meter: EnergyMeter  # NVML on a GPU
    peaks: Peaks | None = None  # for the records' percent of peak (and the CPU's measured ceilings)
    free_memory_bytes: int | None = None


def probe_for(device: Device, results_dir: Path | None = None) -> Probe:
    """The real probe of ``device``. On the CPU, the ceilings are measured afresh (this is a check), and written to
    ``results_dir``'s cache when the machine is quiet, so that later runs' percentages of peak use them."""
    name = device.name()
    free = int(torch.cuda.mem_get_info(device.torch)[0]) if device.is_cuda else None
    meter = meter_for(device) if device.is_cuda else NullMeter("energy is checked through NVML, on GPUs")
    return Probe(device, name, device.is_cuda, timer_for(device, flush_l2=True), time.time, meter,
                 Peaks(device, name, cache_dir=results_dir, refresh=True), free)


@dataclass(frozen=True)
class SelfcheckConfig:
    """Sizes and sampling of the checks; tests shrink them, users should not need to."""

    gemm_size: int = GEMM_SIZE
    min_gemm_size: int = MIN_GEMM_SIZE
    loop_gemm_size: int | None = None  # GEMM looped by the timer and energy checks (default 4096 GPU, 1024 CPU)
    # K = 2048 on both: B's scale 2**-5.5 is no power of two (MX's shared exponents see that). The CPU's shape is
    # small because torch's CPU FP8 kernels can be slow for some layouts; 131072 outputs still pin SQNR to ~0.05 dB.
    sqnr_shape: tuple[int, int, int] | None = None  # default: 2048^3 on a GPU, 256x512x2048 on the CPU
    smallest_shape: tuple[int, int, int] = (128, 128, 128)  # whole 128-blocks for every recipe
    backends: tuple[str, ...] | None = None  # None: every registered backend
    checks: tuple[str, ...] | None = None  # None: every check (see CHECKS)
    budget_s: float = 60.0  # per case; the Triton interpreter needs ~15 s for a 128^3 case on a busy 2-core CPU
    policy: SamplingPolicy = field(default_factory=SamplingPolicy)  # the peak cases
    light_policy: SamplingPolicy = field(default_factory=lambda: SamplingPolicy(
        min_samples=3, min_time_s=0.0, target_rse=0.05, max_samples=10, max_time_s=0.2))  # numerics and smoke cases
    timer_loop_s: float = TIMER_LOOP_S
    energy_window_s: float = ENERGY_WINDOW_S
    energy_warmup_s: float = ENERGY_WARMUP_S

    def __post_init__(self) -> None:
        if not 0 < self.min_gemm_size <= self.gemm_size:
            raise ValueError(f"GEMM sizes must satisfy 0 < min ({self.min_gemm_size}) <= start ({self.gemm_size})")
        for name in ("budget_s", "timer_loop_s", "energy_window_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive seconds, got {getattr(self, name)}")
        unknown = sorted(set(self.checks or ()) - set(CHECKS))
        if unknown:
            raise ValueError(f"unknown check(s) {', '.join(unknown)}; accepted: {', '.join(CHECKS)}")


def largest_square_gemm(free_bytes: int | None, start: int = GEMM_SIZE, floor: int = MIN_GEMM_SIZE) -> int | None:
    """The largest of ``start, start/2, ...`` (not under ``floor``) whose case fits in the free memory (bytes);
    ``None`` when not even ``floor`` fits. Unknown free memory (``None``) takes ``start``."""
    n = start
    while n >= floor:
        if free_bytes is None or GEMM_BYTES_PER_ELEMENT * n * n <= FREE_MEMORY_SHARE * free_bytes:
            return n
        n //= 2
    return None


# --- verdicts on measurements (pure functions) -------------------------------------------------------------------


def judge_peak(tflops: float | None, peak_tflops: float | None, what: str,
               under_load: str | None = None) -> tuple[Verdict, str]:
    """``tflops`` against ``peak_tflops``: PASS inside the band :data:`PEAK_FRACTION`..:data:`PEAK_CEILING`.
    ``under_load``: the host's load when either was measured (``HostLoad.describe()``), when above its CPU count:
    other processes then take cores from the rate, its ceiling or both, so a failure names the load as its cause
    rather than the timer or the table."""
    if tflops is None:
        return Verdict.FAIL, f"{what}: no throughput measured"
    if not peak_tflops:
        return Verdict.FAIL, f"{what}: {tflops:.4g} TFLOP/s, but no dense peak to judge it by"
    share = tflops / peak_tflops
    text = f"{what}: {tflops:.4g} TFLOP/s = {share:.0%} of {peak_tflops:.4g}"
    loaded = (f"; measured at {under_load}: the load is the likely cause, run again on a quiet machine"
              if under_load else "")
    if share < PEAK_FRACTION:
        return Verdict.FAIL, f"{text}, under the {PEAK_FRACTION:.0%} floor{loaded}"
    if share > PEAK_CEILING:
        return Verdict.FAIL, f"{text}, above the peak itself" + (loaded or " (timer or table wrong)")
    return Verdict.PASS, f"{text} (band {PEAK_FRACTION:.0%}..{PEAK_CEILING:.0%})"


def judge_timer(pairs: list[tuple[float, float]], timer_name: str) -> tuple[Verdict, str]:
    """``pairs`` of (device-timer seconds, wall seconds) for the same loop."""
    worst = max(abs(dev - wall) / wall for dev, wall in pairs)
    dev, wall = pairs[0]
    text = f"{timer_name} {dev:.4g} s vs wall clock {wall:.4g} s; worst of {len(pairs)} loops differs by {worst:.2%}"
    return (Verdict.PASS if worst <= TIMER_TOLERANCE else Verdict.FAIL), f"{text} (limit {TIMER_TOLERANCE:.0%})"


def judge_sqnr(measured_db: float | None, predicted_db: float) -> tuple[Verdict, str]:
    if measured_db is None or not math.isfinite(measured_db):
        return Verdict.FAIL, f"no finite SQNR measured; predicted {predicted_db:.2f} dB"
    off = measured_db - predicted_db
    verdict = Verdict.PASS if abs(off) <= SQNR_TOLERANCE_DB else Verdict.FAIL
    return verdict, (f"{measured_db:.2f} dB, predicted {predicted_db:.2f} dB ({off:+.2f} dB; "
                     f"limit +-{SQNR_TOLERANCE_DB:g} dB)")


def judge_energy(reading: EnergyReading) -> tuple[Verdict, str, dict[str, Any]]:
    """The counter advanced (joules measured by ``nvml_counter``) and agrees with average power x time."""
    if reading.method != "nvml_counter":
        why = reading.reason or f"energy method is {reading.method}"
        return Verdict.FAIL, f"no NVML energy counter: {why}", {"method": reading.method}
    if reading.joules_per_iter is None or not reading.iterations or not reading.window_s:
        return Verdict.FAIL, f"energy counter gave nothing: {reading.reason}", {"method": reading.method}
    power = (reading.telemetry.get("power_w") or {}).get("mean")
    if not power:
        return Verdict.FAIL, "no NVML power samples in the window to compare the counter with", {}
    seconds_per_iter = reading.window_s / reading.iterations
    from_power = power * seconds_per_iter
    off = reading.joules_per_iter / from_power - 1
    measured = {"joules_per_iter": reading.joules_per_iter, "power_x_time_j": from_power, "mean_power_w": power,
                "window_s": reading.window_s, "iterations": reading.iterations, "valid": reading.valid,
                "invalid_reasons": list(reading.invalid_reasons)}
    text = (f"counter {reading.joules_per_iter:.4g} J/iter vs average power {power:.4g} W x {seconds_per_iter:.4g} s "
            f"= {from_power:.4g} J/iter ({off:+.1%}; limit +-{ENERGY_TOLERANCE:.0%}) over {reading.window_s:.2g} s")
    if reading.invalid_reasons:
        text += "; " + "; ".join(reading.invalid_reasons)
    return (Verdict.PASS if abs(off) <= ENERGY_TOLERANCE else Verdict.FAIL), text, measured


def judge_smallest_case(record: Record) -> tuple[bool, str]:
    """A backend's smallest case passes when it ran, or was refused with a reason (a budget overrun is no refusal)."""
    status, reason = record.status, record.reason or ""
    what = f"{record.precision}: {status}"
    if status == "ok":
        return True, what
    if status == "skipped" and reason and not reason.startswith("over budget"):
        return True, f"{what} ({reason})"
    return False, f"{what}" + (f" ({reason})" if reason else " with no reason")


def exit_verdict(results: list[CheckResult]) -> Verdict | None:
    """ERROR if any check broke, else FAIL if any failed, else ``None`` (every check that ran passed)."""
    verdicts = {r.verdict for r in results}
    for v in (Verdict.ERROR, Verdict.FAIL):
        if v in verdicts:
            return v
    return None


# --- the checks ------------------------------------------------------------------------------------------------


def _gemm_shape(dims: tuple[int, int, int]) -> Shape:
    return dict(zip(("m", "n", "k"), dims, strict=True))


class Selfcheck:
    """Runs the checks on one probe, streaming every measured case to ``on_record`` (the run file)."""

    def __init__(self, probe: Probe, config: SelfcheckConfig | None = None,
                 on_record: Callable[[Record], None] = lambda record: None,
                 on_check: Callable[[str], None] = lambda name: None) -> None:
        load_all()
        self.probe, self.config = probe, config or SelfcheckConfig()
        self.on_record, self.on_check = on_record, on_check
        self.results: list[CheckResult] = []
        self._seq = 0
        c = self.config
        base = RunSettings(device=str(probe.device), timing=TimingSettings(budget_s=c.budget_s),
                           energy=EnergySettings(enabled=False))
        self._peak = CaseMeasurer(base.with_timing(policy=c.policy), probe.device, probe.peaks, timer=probe.timer)
        self._light = CaseMeasurer(base.with_timing(policy=c.light_policy, phases=False, warmup_iters=1),
                                   probe.device, probe.peaks, timer=probe.timer)
        self._loop: Pipeline | None = None

    def settings(self) -> dict[str, Any]:
        return {"config": asdict(self.config), "peak_fraction": PEAK_FRACTION, "peak_ceiling": PEAK_CEILING,
                "timer_tolerance": TIMER_TOLERANCE, "sqnr_tolerance_db": SQNR_TOLERANCE_DB,
                "energy_tolerance": ENERGY_TOLERANCE, "gpu": self.probe.gpu, "device_name": self.probe.device_name}

    def run(self) -> list[CheckResult]:
        """Every check in order. Ctrl-C propagates; the results so far stay in :attr:`results`."""
        gpu = self.probe.gpu
        steps: list[tuple[str, Callable[[], Iterator[CheckResult]]]] = [
            ("gemm_peak", self._gemm_peak if gpu else self._needs_gpu_peak),
            *([] if gpu else [("cpu_ceiling", self._cpu_ceiling)]),
            ("timer_vs_wall", self._timer_vs_wall),
            ("sqnr", self._sqnr),
            ("energy", self._energy if gpu else self._needs_gpu_energy),
            ("backend", self._backends),
            ("claims", self._claims),
        ]
        planned = planned_checks(self.probe, self.config)
        for name, step in steps:
            if name not in planned:
                continue
            self.on_check(name)
            started = time.monotonic()
            try:
                for result in step():
                    self.results.append(replace(result, seconds=round(time.monotonic() - started, 3)))
                    started = time.monotonic()
            except (KeyboardInterrupt, DiskFull):  # the run stops; its records so far are kept
                raise
            except Exception as exc:  # a broken check is a harness error, reported; the other checks still run
                where = traceback.extract_tb(exc.__traceback__)[-1]
                self.results.append(CheckResult(name, "-", Verdict.ERROR, f"{type(exc).__name__}: {exc} (at "
                                                f"{Path(where.filename).name}:{where.lineno})"))
        return self.results

    def _measure(self, measurer: CaseMeasurer, check: str, case: Case) -> Record:
        measured = measurer.measure(case, seq=self._seq)
        self._seq += 1
        record = replace(measured, extra={**measured.extra, "selfcheck": check})
        self.on_record(record)
        return record

    def _needs_gpu_peak(self) -> Iterator[CheckResult]:
        for p in PEAK_PRECISIONS:
            yield CheckResult("gemm_peak", p, Verdict.NEEDS_GPU,
                              "needs a GPU: the device table's dense peaks describe GPUs")

    def _needs_gpu_energy(self) -> Iterator[CheckResult]:
        yield CheckResult("energy", "nvml", Verdict.NEEDS_GPU, "needs a GPU: NVML's energy counter and power readings")

    def _gemm_peak(self) -> Iterator[CheckResult]:
        c = self.config
        n = largest_square_gemm(self.probe.free_memory_bytes, c.gemm_size, c.min_gemm_size)
        if n is None:
            free = self.probe.free_memory_bytes or 0
            for p in PEAK_PRECISIONS:
                yield CheckResult("gemm_peak", p, Verdict.FAIL, f"not even a {c.min_gemm_size}^3 GEMM fits in "
                                  f"{free / 2**30:.2f} GiB of free device memory")
            return
        for name in PEAK_PRECISIONS:
            precision = PRECISIONS.get(name)
            record = self._measure(self._peak, "gemm_peak", Case("gemm", _gemm_shape((n, n, n)), precision, "torch"))
            peak = table_peak(self.probe.device_name, peak_key(precision))
            fp8 = isinstance(precision, ScaledRecipe)
            tflops = record.throughput.prequant_tflops if fp8 else record.throughput.tflops
            measured = {"size": n, "tflops": tflops, "peak_tflops": peak.value if peak else None,
                        "peak_source": peak.source if peak else None, "status": record.status}
            if record.status != "ok":
                yield CheckResult("gemm_peak", name, Verdict.FAIL, f"{n}^3 GEMM {record.status}: "
                                  f"{record.reason}", measured)
                continue
            if peak is None:
                yield CheckResult("gemm_peak", name, Verdict.FAIL, f"no {peak_key(precision)} peak for "
                                  f"{self.probe.device_name!r} in the device table "
                                  "(fp8bench/core/data/device_peaks.json): add its row with a source", measured)
                continue
            what = f"{n}^3 " + ("GEMM phase (operands pre-quantized)" if fp8 else "GEMM")
            verdict, detail = judge_peak(tflops, peak.value, what)
            yield CheckResult("gemm_peak", name, verdict, detail, measured)

    def _cpu_ceiling(self) -> Iterator[CheckResult]:
        """The runner's BF16 GEMM at the ceiling's size against the ceiling measured now: the check reads the
        measured rates themselves, even under load (when runs get no ceiling, :meth:`Peaks.withheld`), and then
        names the load as the likely cause of a failure."""
        peaks = self.probe.peaks or Peaks(self.probe.device, self.probe.device_name, refresh=True)
        entry = peaks.cpu_ceilings()  # measured now (the probe's Peaks refreshes its cache)
        n = CEILING_N  # the size the ceiling was measured at
        record = self._measure(self._peak, "cpu_ceiling",
                               Case("gemm", _gemm_shape((n, n, n)), PRECISIONS.get("bf16"), "torch"))
        measured = {"bf16_ceiling_tflops": entry["bf16"], "fp32_ceiling_tflops": entry["fp32"],
                    "copy_tbps": entry["mem_bw"], "runner_tflops": record.throughput.tflops,
                    "load": entry.get("load"), "cached": bool(entry.get("cached") and peaks.cache_dir)}
        loads = [HostLoad.from_dict(entry.get("load")), host_load()]  # while the ceiling, then the GEMM, ran
        under_load = next((load.describe() for load in loads if load is not None and load.overloaded), None)
        where = (f"cached in {peaks.cache_dir} for later runs" if measured["cached"] else
                 "not cached: measured under load" if (entry.get("load") or {}).get("overloaded") else "not cached")
        ceilings = (f"measured ceilings: BF16 {entry['bf16']:.3g}, FP32 {entry['fp32']:.3g} TFLOP/s, copy "
                    f"{entry['mem_bw']:.3g} TB/s ({where})")
        if record.status != "ok":
            yield CheckResult("cpu_ceiling", "bf16", Verdict.FAIL, f"{ceilings}; the runner's {n}^3 BF16 GEMM "
                              f"{record.status}: {record.reason}", measured)
            return
        verdict, detail = judge_peak(record.throughput.tflops, entry["bf16"], f"runner's {n}^3 BF16 GEMM", under_load)
        yield CheckResult("cpu_ceiling", "bf16", verdict, f"{detail} (the measured BF16 ceiling); {ceilings}",
                          measured)

    def _loop_pipeline(self) -> Pipeline:
        """The BF16 GEMM the timer and energy checks loop (``torch`` backend)."""
        if self._loop is None:
            n = self.config.loop_gemm_size or (4096 if self.probe.gpu else 1024)
            shape = _gemm_shape((n, n, n))
            inputs = WORKLOADS.get("gemm").make_inputs(shape, self.probe.device, seed=0)
            ctx = BuildContext("gemm", shape, PRECISIONS.get("bf16"), self.probe.device, inputs)
            self._loop = BACKENDS.get("torch").build(ctx)
            self._loop.end_to_end()  # warm: handles, allocator
        return self._loop

    def _per_call_s(self, fn: Callable[[], Any]) -> float:
        """Median device seconds of three calls (one slow call must not shorten the loop tenfold)."""
        return max(statistics.median(self.probe.timer.time(fn) for _ in range(3)), 1e-9)

    def _timer_vs_wall(self) -> Iterator[CheckResult]:
        probe = self.probe
        fn = self._loop_pipeline().end_to_end
        calls = max(1, math.ceil(self.config.timer_loop_s / self._per_call_s(fn)))

        def loop() -> None:
            for _ in range(calls):
                fn()

        pairs = []
        for _ in range(TIMER_REPEATS):
            probe.device.synchronize()
            w0 = probe.wall_clock()
            device_s = probe.timer.time(loop)  # returns after the device finished (events synchronize)
            probe.device.synchronize()
            pairs.append((device_s, probe.wall_clock() - w0))
        timer_name = "CUDA events" if probe.gpu else type(probe.timer).__name__
        verdict, detail = judge_timer(pairs, timer_name)
        yield CheckResult("timer_vs_wall", "events" if probe.gpu else "cpu timer", verdict,
                          f"{detail}; {calls} calls of a BF16 GEMM",
                          {"pairs_s": pairs, "calls": calls, "timer": timer_name})

    def _sqnr(self) -> Iterator[CheckResult]:
        shape = _gemm_shape(self.config.sqnr_shape or ((2048, 2048, 2048) if self.probe.gpu else (256, 512, 2048)))
        recipes = [p for _, p in PRECISIONS.items() if isinstance(p, ScaledRecipe)]
        for recipe in recipes:
            # 4-bit recipes have one element format (E2M1): no FP8 format to sweep.
            for fmt in SQNR_FORMATS if isinstance(recipe, Fp8Recipe) else ("e4m3",):
                yield self._sqnr_one(resolve_precision(recipe.name, RunOptions(fp8_format=fmt)), shape)

    def _sqnr_one(self, recipe: Precision, shape: Shape) -> CheckResult:
        assert isinstance(recipe, ScaledRecipe)
        subject = f"{recipe.name}/{recipe.format_label}"
        predicted = predict_gemm_sqnr(recipe, shape)
        record = self._measure(self._light, "sqnr", Case("gemm", shape, recipe, "torch"))
        note = ""
        if record.status == "skipped":
            note = f"; on emulated because torch skipped it ({record.reason})"
            record = self._measure(self._light, "sqnr", Case("gemm", shape, recipe, "emulated"))
        measured = {"backend": record.backend, "shape": label(shape), "status": record.status,
                    "sqnr_db": record.numerics.sqnr_db, "predicted": predicted.to_dict()}
        if record.status != "ok":
            return CheckResult("sqnr", subject, Verdict.FAIL, f"{record.backend}: {record.status}: "
                               f"{record.reason}{note}", measured)
        verdict, detail = judge_sqnr(record.numerics.sqnr_db, predicted.sqnr_db)
        return CheckResult("sqnr", subject, verdict, f"{record.backend} {label(shape)}: {detail}{note}", measured)

    def _energy(self) -> Iterator[CheckResult]:
        probe = self.probe
        meter = configure_meter(probe.meter, self.config.energy_window_s, ClockSettings().floor)
        if meter.method == "none":
            yield CheckResult("energy", "nvml", Verdict.FAIL, f"no NVML meter: {getattr(meter, 'reason', '')}")
            return
        fn = self._loop_pipeline().end_to_end
        # Warm up so that NVML's one-second power average describes the load, not the idle before it.
        warm_until = time.monotonic() + self.config.energy_warmup_s
        while time.monotonic() < warm_until:
            fn()
        probe.device.synchronize()
        # Seconds per call 0: the meter times one synchronized call on the host clock it sizes its window by.
        reading = meter.measure(fn, probe.device, 0.0, name="selfcheck")
        verdict, detail, measured = judge_energy(reading)
        yield CheckResult("energy", meter.method, verdict, detail, measured)

    def _backends(self) -> Iterator[CheckResult]:
        shape = _gemm_shape(self.config.smallest_shape)
        names = self.config.backends or tuple(BACKENDS.names())
        for name in names:
            backend = BACKENDS.get(name)
            why = backend.availability(self.probe.device)
            if why:
                yield CheckResult("backend", name, Verdict.NOT_RUN, f"unavailable: {why}")
                continue
            outcomes = [judge_smallest_case(self._measure(self._light, "backend", Case(
                "gemm", shape, PRECISIONS.get(p), name))) for p in BACKEND_PRECISIONS]
            ok = all(passed for passed, _ in outcomes)
            yield CheckResult("backend", name, Verdict.PASS if ok else Verdict.FAIL,
                              f"gemm {label(shape)}: " + "; ".join(text for _, text in outcomes),
                              {"cases": [text for _, text in outcomes]})


    def _claims(self) -> Iterator[CheckResult]:
        ctx = ProbeContext(self.probe.device, lambda case: self._measure(self._light, "claims", case))
        for claim in CLAIMS:
            if not self.probe.gpu:
                how = f"unverified on any device ({claim.no_probe})" if claim.no_probe else f"would run {claim.how}"
                yield CheckResult("claims", claim.name, Verdict.NEEDS_GPU, f"{how}; until it holds, do not trust: "
                                  f"{claim.rests_on_it}", describe(claim))
            elif claim.probe is not None:
                result = run_probe(claim, ctx)
                yield CheckResult("claims", claim.name, _CLAIM_VERDICT[result.outcome],
                                  f"{result.outcome.value}: {result.figure}", {**describe(claim),
                                                                               "figure": result.figure})
            else:
                yield self._claim_by_check(claim)

    def _claim_by_check(self, claim: Claim) -> CheckResult:
        """A claim confirmed by another check (its verdict), or one no probe checks (not run, with the reason)."""
        if claim.no_probe:
            return CheckResult("claims", claim.name, Verdict.NOT_RUN, f"unverified: {claim.no_probe}",
                               describe(claim))
        verdicts = {r.verdict for r in self.results if r.check == claim.check}
        if not verdicts & {Verdict.PASS, Verdict.FAIL, Verdict.ERROR}:
            return CheckResult("claims", claim.name, Verdict.NOT_RUN, f"unverified: the `{claim.check}` check did "
                               f"not run (`--check {claim.check} claims`)", describe(claim))
        failed = verdicts & {Verdict.FAIL, Verdict.ERROR}
        return CheckResult("claims", claim.name, Verdict.FAIL if failed else Verdict.PASS,
                           f"{'failed' if failed else 'held'}: the `{claim.check}` check "
                           f"{'failed' if failed else 'passed'}" + (f"; do not trust {claim.rests_on_it}" if failed
                                                                     else ""), describe(claim))


_CLAIM_VERDICT = {Outcome.HELD: Verdict.PASS, Outcome.FAILED: Verdict.FAIL, Outcome.NOT_APPLICABLE: Verdict.NOT_RUN}


# --- a whole selfcheck run with its run file -------------------------------------------------------------------


@dataclass
class SelfcheckOutcome:
    run_id: str
    results: list[CheckResult]
    records: list[Record]
    run_file: Path | None
    interrupted: bool
    wall_s: float
    disk_full: str | None = None  # what failed when the run file's disk filled; the run stopped there

    @property
    def verdict(self) -> Verdict | None:
        return exit_verdict(self.results)

    def summary(self) -> dict[str, Any]:
        counts = {v.value: sum(r.verdict is v for r in self.results) for v in Verdict}
        return {"run_id": self.run_id, "run_file": str(self.run_file) if self.run_file else None,
                "verdict": (self.verdict or Verdict.PASS).value if not self.interrupted else "interrupted",
                "counts": counts, "interrupted": self.interrupted, "disk_full": self.disk_full,
                "wall_s": round(self.wall_s, 3), "checks": [r.to_dict() for r in self.results]}


def planned_checks(probe: Probe, config: SelfcheckConfig) -> tuple[str, ...]:
    """The checks a selfcheck of ``probe`` runs, in order: those ``config`` selects, less the CPU ceiling check on
    a GPU (its peaks come from the table, checked by ``gemm_peak``)."""
    return tuple(c for c in CHECKS if not (c == "cpu_ceiling" and probe.gpu)
                 and (config.checks is None or c in config.checks))


def run_selfcheck(probe: Probe, config: SelfcheckConfig | None = None, run_file: Path | None = None,
                  on_check: Callable[[str], None] = lambda name: None, run_id: str | None = None) -> SelfcheckOutcome:
    """Run every check, writing each case's record to ``run_file`` as it finishes and the verdicts at the end.
    Ctrl-C ends the run early; the run file then keeps what was measured and says ``interrupted``. A full disk
    ends it too (status ``failed: disk full``, :mod:`fp8bench.results.record_stream`); a disk full before the first
    record raises :class:`fp8bench.results.record_stream.DiskFull`."""
    started = time.monotonic()
    run_id = run_id or new_run_id()
    check = Selfcheck(probe, config, on_check=on_check)
    settings = RunSettings(device=str(probe.device), timing=TimingSettings(budget_s=check.config.budget_s),
                           energy=EnergySettings(enabled=False))
    header = run_header(run_id, probe.device, str(probe.device), settings, {"selfcheck": check.settings()})
    run = StreamedRun(RecordStream(run_file, header, None), started)
    check.on_record = run.stream.add
    with run:
        check.run()
    outcome = SelfcheckOutcome(run_id, check.results, run.stream.records, run_file, run.interrupted,
                               time.monotonic() - started, run.stream.disk_error if run.disk_full else None)
    summary = outcome.summary()
    run.finish(selfcheck={k: v for k, v in summary.items() if k not in ("run_id", "run_file")})
    return outcome
