"""Profiles on demand: a trace of one case's phases, for the case that looks wrong.

A benchmark's numbers say *that* a case is slow; a profile says *where*. ``fp8bench run --profile`` adds one
**profiled pass** to every measured case, taken **after** its timed samples, numerics and energy window, so that
the profiler's overhead (hooks on every operator, kernel-activity buffers) never enters a timed sample: the record's
figures are exactly those of a run without ``--profile``.

The pass calls the pipeline's end-to-end function and then each phase (``quantize``, ``gemm``, ``epilogue``;
``forward``, ``backward``, ``optimizer``...; :mod:`fp8bench.core.pipeline`) in the runner's order, a few rounds
(:func:`profile_iterations`, after one round the profiler warms up on and does not record), each call inside a
range named ``fp8bench/<phase>``. Calls are eager, also in a run timed as CUDA-graph replays. Modes
(``--profile MODE``; a bare ``--profile`` is ``torch``):

``torch``
    ``torch.profiler`` records the pass (CPU operators; on CUDA also the kernels, through CUPTI), each call inside a
    ``record_function`` range, and writes a Chrome trace-event JSON file (``export_chrome_trace``) per case:
    ``RESULTS/runs/RUN_ID.profile/SEQ-CASE.pt.trace.json`` beside the run file. Perfetto (https://ui.perfetto.dev,
    "Open trace file") and ``chrome://tracing`` open it. The record keeps the trace's path and the operators (CPU)
    or kernels (CUDA) with the most *self* time: time inside the op itself, not in the ops it calls
    (``key_averages()``), in seconds summed over the pass, with their call counts.
``nvtx``
    The same pass without ``torch.profiler``: on CUDA each call is an NVTX range (``torch.cuda.nvtx``) and the pass is
    bracketed by ``cudaProfilerStart``/``cudaProfilerStop`` (``torch.cuda.profiler``), so that an external profiler
    started with ``--capture-range=cudaProfilerApi`` records only the pass. The CPU has neither, so on the CPU the
    pass runs without them and the record says so.
``nsys``
    No pass: the record keeps, and the run prints, the Nsight Systems command line that reruns exactly this case
    (its workload, shape, precision and FP8 settings, backend, device, seed and sampling flags) under ``nsys profile``
    with the ``nvtx`` mode (:func:`nsys_command`). Nsight Systems and torch.profiler both drive CUPTI, so one
    process uses one of them.

On CUDA the ``torch`` mode also opens NVTX ranges, so a trace taken by an outside tool shows the phases too.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from fp8bench.core.cases import Case
from fp8bench.core.devices import Device
from fp8bench.core.pipeline import Pipeline, first_line
from fp8bench.core.records import Record, case_key
from fp8bench.core.repro import repro_argv
from fp8bench.measure.settings import RunSettings, profile_mode
from fp8bench.paths import TRACE_SUFFIX

RANGE_PREFIX = "fp8bench/"  # every range of the profiled pass: fp8bench/end_to_end, fp8bench/quantize, ...
END_TO_END = "end_to_end"
# Calls of each function in the pass: the first one after sampling can still differ (allocator, caches), three show
# whether it does; fewer when the calls are slow (PROFILE_BUDGET_S).
PROFILE_ITERATIONS = 3
# The most seconds of recorded calls (by the record's medians) one pass spends, beyond a first recorded round that
# always runs (and the warm-up round before it).
PROFILE_BUDGET_S = 5.0
TOP_OPS = 10  # operators or kernels kept in the record, by self time
# Nsight Systems' profile switches (User Guide, "CLI Profile Command Switch Options",
# https://docs.nvidia.com/nsight-systems/UserGuide/index.html): trace CUDA API and kernels, NVTX ranges and OS
# runtime calls; record only between cudaProfilerStart and cudaProfilerStop, and end the capture at the stop.
NSYS_PROFILE_FLAGS = ("--trace=cuda,nvtx,osrt", "--capture-range=cudaProfilerApi", "--capture-range-end=stop",
                      "--force-overwrite=true")


def case_stem(seq: int, case: Case) -> str:
    """A file name for one case of a run: its position and its description, in characters safe on any file system
    (``003-gemm-m-64-n-64-k-64-fp8_rowwise-torch``)."""
    return f"{seq:03d}-" + re.sub(r"[^A-Za-z0-9_.]+", "-", case.describe()).strip("-")


def profile_iterations(call_s: float) -> int:
    """Iterations of the pass whose calls take ``call_s`` seconds per iteration: :data:`PROFILE_ITERATIONS`, or as
    many as fit :data:`PROFILE_BUDGET_S`, and at least one."""
    if call_s <= 0:
        return PROFILE_ITERATIONS
    return max(1, min(PROFILE_ITERATIONS, int(PROFILE_BUDGET_S // call_s)))


@dataclass(frozen=True)
class TopOp:
    """One operator (CPU) or kernel (CUDA) of a profile: its self time summed over the pass, seconds, and calls."""

    name: str
    self_s: float
    calls: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "self_s": self.self_s, "calls": self.calls}


def top_ops(averages: Any, on_device: bool, n: int = TOP_OPS) -> list[TopOp]:
    """The ``n`` entries of ``prof.key_averages()`` with the most self time (device time on CUDA: the kernels;
    CPU time otherwise), the pass's own ranges left out. Profiler times are microseconds; these are seconds."""
    out = []
    for avg in averages:
        if str(avg.key).startswith((RANGE_PREFIX, "ProfilerStep")):  # the pass's own ranges, not operators
            continue
        self_us = float(avg.self_device_time_total if on_device else avg.self_cpu_time_total)
        if self_us > 0:
            out.append(TopOp(str(avg.key), self_us * 1e-6, int(avg.count)))
    return sorted(out, key=lambda op: op.self_s, reverse=True)[:n]


@contextlib.contextmanager
def phase_range(name: str, device: Device, torch_range: bool) -> Iterator[None]:
    """One call's range: a ``record_function`` (when ``torch.profiler`` records) and, on CUDA, an NVTX range."""
    with contextlib.ExitStack() as stack:
        if torch_range:
            stack.enter_context(torch.profiler.record_function(RANGE_PREFIX + name))
        if device.is_cuda:
            stack.enter_context(torch.cuda.nvtx.range(RANGE_PREFIX + name))
        yield


def profiled_calls(pipeline: Pipeline) -> dict[str, Callable[[], Any]]:
    """What the pass calls, in order: the end-to-end function, then each phase (a phase that *is* the end-to-end
    function, in a one-phase pipeline, is called again under its own name, so every phase has its range)."""
    return {END_TO_END: pipeline.end_to_end, **pipeline.phases}


def run_pass(pipeline: Pipeline, device: Device, iterations: int, torch_ranges: bool,
             step: Callable[[], Any] = lambda: None) -> None:
    """``iterations`` rounds of every profiled call, each in its range, the device synchronized and ``step`` called
    after each round."""
    calls = profiled_calls(pipeline)
    for _ in range(iterations):
        for name, fn in calls.items():
            with phase_range(name, device, torch_ranges):
                fn()
        device.synchronize()
        step()


# libkineto (torch.profiler's engine) prints "USDT: ... profiler_start" and "profiler_stop" marker lines on stderr
# for every profiled case. They are written at the highest severity of its logger (libkineto/src/Logger.h:
# VERBOSE, INFO, WARNING, ERROR, STAGE, USDT), above its errors, so no level drops them and keeps errors;
# KINETO_LOG_LEVEL, read when the profiler first starts, set past the last level silences the logger. A profile that
# fails is still reported in the record (its trace missing); a user who sets KINETO_LOG_LEVEL keeps their level.
KINETO_LOG_LEVEL_ENV = "KINETO_LOG_LEVEL"
KINETO_SILENT = "6"


def torch_profile(pipeline: Pipeline, device: Device, trace: Path, iterations: int) -> dict[str, Any]:
    """Record the pass with ``torch.profiler`` and write its Chrome trace to ``trace``; the record's profile."""
    from torch.profiler import ProfilerActivity, profile

    os.environ.setdefault(KINETO_LOG_LEVEL_ENV, KINETO_SILENT)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.is_cuda else [])
    trace.parent.mkdir(parents=True, exist_ok=True)
    # One warm-up round, recorded by nobody: the profiler's own start-up (CUPTI's initialization on CUDA, its
    # buffers) lands in the first round it watches, and would be read as the case's time.
    warmup = torch.profiler.schedule(wait=0, warmup=1, active=iterations, repeat=1)
    with profile(activities=activities, schedule=warmup) as prof:
        run_pass(pipeline, device, iterations + 1, torch_ranges=True, step=prof.step)
    prof.export_chrome_trace(str(trace))
    return {"tool": "torch.profiler", "trace": str(trace.resolve()),
            "self_time": "device" if device.is_cuda else "cpu",
            "top_ops": [op.to_dict() for op in top_ops(prof.key_averages(), device.is_cuda)]}


def nvtx_profile(pipeline: Pipeline, device: Device, iterations: int) -> dict[str, Any]:
    """The pass with NVTX ranges inside a cudaProfilerStart/Stop bracket (CUDA), for an outside profiler."""
    if not device.is_cuda:
        run_pass(pipeline, device, iterations, torch_ranges=False)
        return {"tool": "nvtx", "note": f"NVTX ranges and cudaProfilerStart/Stop exist on CUDA only: the pass ran "
                                        f"on {device} without them"}
    torch.cuda.profiler.start()
    try:
        run_pass(pipeline, device, iterations, torch_ranges=False)
    finally:
        torch.cuda.profiler.stop()
    return {"tool": "nvtx"}


def rerun_argv(case: Case, settings: RunSettings, device: Device, out: Path) -> list[str]:
    """``fp8bench run`` arguments that measure exactly ``case`` again on ``device`` under every setting of the run
    (the record's reproducing command, :func:`fp8bench.core.repro.repro_argv`), with its profiled pass in ``nvtx``
    mode, writing only the run file ``out``. Energy needs a window of its own and the store would keep a profiled
    rerun as a measurement: both are left out."""
    fields = {**case.stored_fields(), "device": str(device)}
    header = {**settings.to_header(), "energy": False, "profile": None}
    return [*repro_argv(fields, header), "--no-store", "--profile", "nvtx", "--out", str(out), "--force"]


def nsys_command(case: Case, settings: RunSettings, device: Device, stem: Path) -> str:
    """The shell command that profiles ``case`` alone under Nsight Systems: the report is ``STEM.nsys-rep``, the
    rerun's run file ``STEM.run.json``."""
    return shlex.join(["nsys", "profile", *NSYS_PROFILE_FLAGS, f"--output={stem}",
                       *rerun_argv(case, settings, device, Path(f"{stem}.run.json"))])


class CaseProfiler:
    """Adds a profile to each measured record of a run: traces (or commands) under ``folder``, one per case."""

    def __init__(self, mode: str, folder: Path) -> None:
        profile_mode(mode)
        self.mode, self.folder = mode, folder

    def attach(self, record: Record, case: Case, pipeline: Pipeline, device: Device,
               settings: RunSettings) -> Record:
        """``record`` with ``extra["profile"]``; a profile that cannot be taken is a note, never a failed case."""
        stem = self.folder / case_stem(record.seq, case)
        if self.mode == "nsys":
            self.folder.mkdir(parents=True, exist_ok=True)  # where the command writes: it must exist before nsys runs
            info: dict[str, Any] = {"tool": "nsys", "command": nsys_command(case, settings, device, stem),
                                    "report": f"{stem}.nsys-rep"}
            return replace(record, extra={**record.extra, "profile": info})
        timed = record.samples
        call_s = (timed.median_s or 0.0) + sum(v for v in (timed.phases or {}).values() if v is not None)
        iterations = profile_iterations(call_s)
        started = time.monotonic()
        try:
            if self.mode == "torch":
                info = torch_profile(pipeline, device, Path(f"{stem}{TRACE_SUFFIX}"), iterations)
            else:
                info = nvtx_profile(pipeline, device, iterations)
        except Exception as exc:  # a profiler failure loses the profile, never the measurement
            return replace(record, notes=[*record.notes, f"profile not taken ({self.mode}): "
                                                          f"{type(exc).__name__}: {first_line(exc)}"])
        info.update(iterations=iterations, ranges=[RANGE_PREFIX + n for n in profiled_calls(pipeline)],
                    wall_s=time.monotonic() - started)
        return replace(record, extra={**record.extra, "profile": info})


def profile_of(record: Record) -> dict[str, Any]:
    """A record's profile (``extra.profile``), or an empty dict."""
    profile = (record.extra or {}).get("profile")
    return profile if isinstance(profile, dict) else {}


def summary_rows(records: Sequence[Record]) -> list[dict[str, Any]]:
    """One row per record with a profile, for the run's summary: its position, case key, and trace or command."""
    rows = []
    for r in records:
        profile = profile_of(r)
        if profile:
            rows.append({"seq": r.seq, "case": case_key(r), "tool": profile.get("tool"),
                         "trace": profile.get("trace"), "command": profile.get("command")})
    return rows
