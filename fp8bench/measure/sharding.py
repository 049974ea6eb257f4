"""Sharding a run across devices: one worker process per device, one run file (``fp8bench run --devices``).

A node with eight GPUs measures a sweep eight times faster when each GPU measures its own share of the cases. How
fp8bench does it, and why:

* **One process per device.** Each worker is a separate Python process with its own CUDA context, so one GPU's
  kernels, allocator and clocks never share a process with another's, and a worker that dies (a segfaulting kernel,
  the out-of-memory killer, ``kill -9``) takes only its own case with it. Processes start with ``multiprocessing``'s
  *spawn* method: a CUDA context does not survive ``fork``, and spawn gives every worker a fresh interpreter.
* **Pinning a GPU worker: ``torch.cuda.set_device(N)``, not ``CUDA_VISIBLE_DEVICES``.** Hiding the other GPUs would
  renumber the worker's GPU as ``cuda:0``, so its records would name the wrong device (or need rewriting) and every
  index-based lookup (device properties, the environment capture) would need remapping. With ``set_device`` a
  worker measures each case exactly as ``fp8bench run --device cuda:N`` does: the runner's per-case device guard
  (:meth:`fp8bench.core.devices.Device.guard`) already makes ``cuda:N`` current, NVML finds the GPU by UUID
  (:mod:`fp8bench.energy.nvml`), and ``set_device`` also covers library calls made outside a case. The cost: a library
  that ignores the current device can still open a context on ``cuda:0`` from every worker. Indices count the GPUs
  visible to ``fp8bench`` itself, so a ``CUDA_VISIBLE_DEVICES`` the user sets is respected as everywhere in torch.
* **CPU workers** (``--devices cpu,cpu``): the CPU is one device (torch has no ``cpu:N``), so each ``cpu`` in the
  list is one more worker on it. The cores this process may use are split into equal disjoint slices, each worker
  is pinned to its slice (``os.sched_setaffinity``) and runs as many torch threads as its slice has cores (or
  ``--threads``, at most that), so workers do not steal each other's cores. Records say ``cpu`` as a single run's do;
  the run header's ``workers`` list says which cores and threads measured which case.
* **Assignment is static, by shape**: the cases of one (workload, shape), every precision and backend, go to one
  worker, so the speedups of a shape (FP8 against BF16) compare kernels on one device, never one GPU's BF16 with
  another's FP8; the groups go round-robin over the workers in case order. The same case list on the same devices
  always puts a case on the same device (reproducible, comparable night to night). A sweep of one shape therefore
  runs on one worker: shard sweeps of many shapes (the suites). The in-order merge below waits at most for the
  groups before a finished one.
* **One run file and store, in case order.** Only the parent writes: workers send each finished record through a
  pipe, and the parent hands records to :class:`fp8bench.results.record_stream.RecordStream` in case order (a record
  that finishes early waits in memory for the cases before it). The run file and store get the same records, in the same
  order, with the same ``seq``, that one worker would have written; each record names the device that measured it.
* **A worker that dies** is seen through its process sentinel (``multiprocessing.connection.wait``): the case it
  was measuring becomes a ``failed`` record whose reason names the device, the process and the signal or exit code;
  a fresh worker takes the device's remaining cases. After :data:`MAX_CRASHES_IN_A_ROW` deaths without a finished
  case in between (a broken device), the device's remaining cases are recorded ``failed`` with the last reason.
* **Ctrl-C, SIGTERM, SIGHUP** reach the parent as ``KeyboardInterrupt`` (:mod:`fp8bench.measure.interrupts`); workers
  ignore them (a terminal's Ctrl-C reaches every process of its group) and are killed by the parent, which keeps
  every record that had finished, waiting or not, and marks the run ``interrupted``. Workers also ask Linux to kill
  them when the parent dies (:func:`fp8bench.measure.interrupts.die_with_parent`), so none outlives a killed run.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import torch

from fp8bench.core.cases import Case
from fp8bench.core.devices import Device, DeviceError, resolve_device
from fp8bench.core.records import Record
from fp8bench.core.shapes import label
from fp8bench.energy.meters import meter_for, not_metered
from fp8bench.hardware.environment import device_properties
from fp8bench.measure.blocking import unavailable_reason
from fp8bench.measure.runner import (
    RunOutcome,
    StreamedRun,
    case_profiler,
    case_record,
    new_run_id,
    run_header,
)
from fp8bench.measure.settings import RunSettings
from fp8bench.measure.timing import timing_mode_for
from fp8bench.results.record_stream import DiskFull, RecordStream

# A device whose worker died this many times with no finished case in between is given up on: a crashing kernel
# fails its own case, a broken device must not cost one worker start per remaining case.
MAX_CRASHES_IN_A_ROW = 3
# Seconds a worker gets to exit after the parent kills it.
JOIN_TIMEOUT_S = 10.0
ALL = "all"


@dataclass(frozen=True)
class WorkerSlot:
    """One worker: the device it measures on, and on the CPU the cores it is pinned to and its thread count."""

    index: int
    device: Device
    cpus: tuple[int, ...] | None = None
    threads: int | None = None

    def describe(self) -> dict[str, Any]:
        return {"worker": self.index, "device": str(self.device),
                "cpus": list(self.cpus) if self.cpus is not None else None, "threads": self.threads}


@dataclass(frozen=True)
class DevicePlan:
    """The workers of a sharded run, from ``--devices``."""

    spec: str  # normalized: "cuda:0,cuda:1" or "cpu,cpu"
    slots: tuple[WorkerSlot, ...]
    threads: int | None  # torch threads per CPU worker (None on GPUs: torch's own choice)

    @property
    def device(self) -> Device:
        """The first worker's device: the run header describes it (every device in a plan has the same model)."""
        return self.slots[0].device

    def shards(self, cases: list[Case]) -> list[list[int]]:
        """Case indices per worker: each (workload, shape) group whole, groups round-robin in case order."""
        out: list[list[int]] = [[] for _ in self.slots]
        groups: dict[tuple[str, str], int] = {}
        for i, case in enumerate(cases):
            group = groups.setdefault((case.workload, label(case.shape)), len(groups))
            out[group % len(self.slots)].append(i)
        return out


def plan_devices(spec: str, threads: int | None = None, cpus: list[int] | None = None) -> DevicePlan:
    """Parse ``--devices``: ``all`` (every visible CUDA device), or a comma-separated list of ``cuda:N`` (each at
    most once) or of ``cpu`` (each one more CPU worker). Raises :class:`fp8bench.core.devices.DeviceError` naming the
    bad value and what is accepted. ``cpus``: the cores to split among CPU workers (default: this process's)."""
    text = spec.strip().lower()
    if text == ALL:
        if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
            raise DeviceError(f"--devices {spec}: no CUDA device on this machine (torch {torch.__version__}, "
                              f"built with CUDA {torch.version.cuda}); give CPU workers instead: --devices cpu,cpu")
        devices = [Device("cuda", i) for i in range(torch.cuda.device_count())]
    else:
        items = [item.strip() for item in text.split(",")]
        if not items or any(not item for item in items):
            raise DeviceError(f"--devices {spec!r}: give a comma-separated list such as cuda:0,cuda:1 or cpu,cpu, "
                              "or 'all'")
        if "auto" in items:
            raise DeviceError(f"--devices {spec!r}: name each device (cpu, cuda:N) or give 'all'; 'auto' is for "
                              "--device")
        devices = [resolve_device(item) for item in items]
    kinds = {d.kind for d in devices}
    if len(kinds) > 1:
        raise DeviceError(f"--devices {spec!r} mixes the CPU and GPUs; a run measures one kind of device: run each "
                          "separately")
    if devices[0].is_cuda:
        return _gpu_plan(spec, devices, threads)
    return _cpu_plan(len(devices), threads, sorted(cpus if cpus is not None else os.sched_getaffinity(0)))


def _gpu_plan(spec: str, devices: list[Device], threads: int | None) -> DevicePlan:
    seen = [str(d) for d in devices]
    twice = sorted({d for d in seen if seen.count(d) > 1})
    if twice:
        raise DeviceError(f"--devices {spec!r} names {', '.join(twice)} more than once; two workers on one GPU "
                          "would time each other's kernels")
    names = {str(d): d.name() for d in devices}
    if len(set(names.values())) > 1:
        listed = ", ".join(f"{d} is {n}" for d, n in names.items())
        raise DeviceError(f"--devices {spec!r}: the GPUs differ ({listed}); a run describes one device model: "
                          "run each model separately")
    # torch's own CPU thread count unless --threads: a GPU case's host work is small, and the settings stay those
    # of a single-GPU run, so their records stay comparable.
    return DevicePlan(",".join(seen), tuple(WorkerSlot(i, d, None, threads) for i, d in enumerate(devices)), None)


def _cpu_plan(n: int, threads: int | None, cpus: list[int]) -> DevicePlan:
    per = len(cpus) // n
    if per == 0:
        raise DeviceError(f"--devices asks for {n} CPU workers, but this process may use {len(cpus)} core(s); "
                          f"give at most {len(cpus)}")
    if threads is not None and threads > per:
        raise DeviceError(f"--threads {threads} with {n} CPU workers on {len(cpus)} core(s): each worker has {per} "
                          f"core(s); give --threads {per} or fewer, or fewer workers")
    per_worker = threads or per
    slots = tuple(WorkerSlot(i, Device("cpu"), tuple(cpus[i * per:(i + 1) * per]), per_worker) for i in range(n))
    return DevicePlan(",".join(["cpu"] * n), slots, per_worker)


# -- the worker process ------------------------------------------------------------------------------------------

def _pin(slot: WorkerSlot) -> dict[str, Any]:
    """Bind this process to its slot (its GPU made current, or its CPU cores and thread count); returns what the
    process then has, as the run header's ``pinned`` (read back, not assumed)."""
    if slot.device.is_cuda:
        torch.cuda.set_device(slot.device.cuda_index)
    if slot.cpus is not None:
        os.sched_setaffinity(0, slot.cpus)
    if slot.threads is not None:
        torch.set_num_threads(slot.threads)
    return {"pid": os.getpid(), "cpus": sorted(os.sched_getaffinity(0)), "threads": torch.get_num_threads(),
            "cuda_current": torch.cuda.current_device() if slot.device.is_cuda else None}


def _worker_main(conn: Connection, slot: WorkerSlot, settings: RunSettings, shard: list[tuple[int, Case]],
                 device_name: str, results_dir: Path | None, profiler: Any, parent_pid: int) -> None:
    """Measure ``shard`` (``(seq, case)`` pairs) on ``slot``'s device, sending ``("start", seq)`` before and
    ``("record", seq, record)`` after each case, after ``("pinned", what _pin read back)`` once set up, or
    ``("setup_failed", reason)`` when it cannot be."""
    from fp8bench.core.plugins import load_all
    from fp8bench.hardware.peaks import Peaks
    from fp8bench.measure.interrupts import HANDLED, die_with_parent
    from fp8bench.measure.runner import CaseMeasurer

    # The parent decides when a worker stops: a terminal's Ctrl-C, or a SIGTERM sent to the process group, reaches
    # every worker too, and must not turn a worker's case into a crash before the parent has kept what finished.
    for signum in (signal.SIGINT, *HANDLED):
        signal.signal(signum, signal.SIG_IGN)
    die_with_parent(parent_pid, signal.SIGKILL)
    try:
        pinned = _pin(slot)
        load_all()
        measurer = CaseMeasurer(settings, slot.device, Peaks(slot.device, device_name, results_dir),
                                profiler=profiler)
        conn.send(("pinned", pinned))
    except Exception as exc:  # reported as the reason of every case of this worker, never lost
        conn.send(("setup_failed", f"worker for {slot.device} could not start: {type(exc).__name__}: {exc}"))
        conn.close()
        return
    for i, (seq, case) in enumerate(shard):
        if settings.energy.cooldown_s and i > 0:
            time.sleep(settings.energy.cooldown_s)
        conn.send(("start", seq))
        conn.send(("record", seq, measurer.measure(case, seq=seq).to_dict()))
    conn.close()


# -- the parent ----------------------------------------------------------------------------------------------------

@dataclass
class _Worker:
    """The parent's view of one slot's worker: its process and pipe, and the cases it still owes."""

    slot: WorkerSlot
    pending: deque[int]  # case indices not yet recorded, in the order the worker measures them
    process: Any = None  # multiprocessing's SpawnProcess
    conn: Connection | None = None
    current: int | None = None  # the case being measured (its "start" came, its record not yet)
    crashes_in_a_row: int = 0
    pids: list[int] = field(default_factory=list)
    deaths: list[str] = field(default_factory=list)
    pinned: list[dict[str, Any]] = field(default_factory=list)  # what each of its processes read back after pinning

    def alive(self) -> bool:
        return self.process is not None and self.conn is not None


class _InOrder:
    """Hands records to the stream in case order; a record finished early waits for those before it."""

    def __init__(self, stream: RecordStream, on_record: Callable[[int, Record], None]) -> None:
        self.stream, self.on_record = stream, on_record
        self.waiting: dict[int, Record] = {}
        self.next = 0

    def add(self, seq: int, record: Record) -> None:
        self.waiting[seq] = record
        while self.next in self.waiting:
            self._keep(self.next)
            self.next += 1

    def _keep(self, seq: int) -> None:
        record = self.waiting.pop(seq)
        self.stream.add(record)  # may raise DiskFull, after the record is kept in memory and the store
        self.on_record(seq, record)

    def flush(self) -> None:
        """Keep every waiting record (a run that stops early leaves gaps, never loses a finished record)."""
        disk_full: DiskFull | None = None
        for seq in sorted(self.waiting):
            try:
                self._keep(seq)
            except DiskFull as exc:
                disk_full = exc
        if disk_full:
            raise disk_full


def crashed_record(case: Case, device: Device, seq: int, settings: RunSettings, reason: str) -> Record:
    """The ``failed`` record of a case its worker could not finish, with everything known without measuring. Its
    timing mode is the one the worker's measurer would have used (measure.runner.CaseMeasurer), so the case keeps
    its siblings' key: blocked_stream where it was asked for and nothing known here rules it out (the check a
    worker makes by holding an empty call cannot be made without the device)."""
    timing = settings.timing
    blocked = timing.blocked_stream and unavailable_reason(device) is None
    return case_record(case, device, seq, "failed", reason, energy=not_metered(meter_for(device), "failed"),
                       timing_mode=timing_mode_for(device, timing.cuda_graph, blocked).value,
                       l2_flushed=device.is_cuda and timing.flush_l2)


def _death(worker: _Worker) -> str:
    """How a worker process ended, in words: ``pid 123 was killed by SIGKILL`` or ``pid 123 exited with code 1``."""
    proc = worker.process
    code = proc.exitcode
    if code is not None and code < 0:
        try:
            how = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with code {code}"
    return f"the worker process for {worker.slot.device} (pid {proc.pid}) {how}"


class _Shards:
    """Starts, watches and restarts the workers of one run; records what each finishes or loses."""

    def __init__(self, plan: DevicePlan, cases: list[Case], settings: RunSettings, device_name: str,
                 results_dir: Path | None, merge: _InOrder, on_start: Callable[[int, Case], None] | None,
                 profiler: Any = None) -> None:
        self.cases, self.settings, self.device_name, self.results_dir = cases, settings, device_name, results_dir
        # fp8bench.measure.profiling.CaseProfiler or None: each case's profile is named by its seq.
        self.profiler = profiler
        self.merge, self.on_start = merge, on_start
        self.ctx = multiprocessing.get_context("spawn")
        self.workers = [_Worker(slot, deque(shard)) for slot, shard in zip(plan.slots, plan.shards(cases),
                                                                          strict=True)]

    def start(self, worker: _Worker) -> None:
        receiver, sender = self.ctx.Pipe(duplex=False)
        shard = [(seq, self.cases[seq]) for seq in worker.pending]
        worker.process = self.ctx.Process(
            target=_worker_main, name=f"fp8bench-worker-{worker.slot.index}", daemon=True,
            args=(sender, worker.slot, self.settings, shard, self.device_name, self.results_dir, self.profiler,
                  os.getpid()))
        worker.process.start()
        sender.close()  # the parent's copy: without it the pipe never reports EOF when the worker dies
        worker.conn, worker.current = receiver, None
        worker.pids.append(worker.process.pid)

    def run(self) -> None:
        for worker in self.workers:
            if worker.pending:
                self.start(worker)
        while True:
            live = [w for w in self.workers if w.alive()]
            if not live:
                return
            ready = wait([w.conn for w in live if w.conn is not None] + [w.process.sentinel for w in live])
            for worker in live:
                if worker.conn in ready or worker.process.sentinel in ready:
                    self._serve(worker)

    def _serve(self, worker: _Worker) -> None:
        """Take every message the worker has sent; when it has ended, settle what it still owed."""
        assert worker.conn is not None
        try:
            while worker.conn.poll():
                self._message(worker, worker.conn.recv())
        except (EOFError, OSError):
            pass  # the worker closed its end: finished, or died
        else:
            if worker.process.is_alive():
                return
        worker.process.join()
        worker.conn.close()
        worker.conn = None
        if worker.pending:
            self._lost(worker)

    def _message(self, worker: _Worker, message: tuple[Any, ...]) -> None:
        kind, payload = message[0], message[1]
        if kind == "start":
            worker.current = payload
            if self.on_start:
                self.on_start(payload, self.cases[payload])
        elif kind == "record":
            worker.pending.remove(payload)
            worker.current, worker.crashes_in_a_row = None, 0
            self.merge.add(payload, Record.from_dict(message[2]))  # the pipe carries the record's JSON fields
        elif kind == "pinned":
            worker.pinned.append(payload)
        elif kind == "setup_failed":
            self._fail_rest(worker, payload)

    def _lost(self, worker: _Worker) -> None:
        """The worker ended owing cases: fail the one it was measuring and restart it for the rest."""
        death = _death(worker)
        worker.deaths.append(death)
        worker.crashes_in_a_row += 1
        if worker.current is not None:
            seq = worker.current
            worker.pending.remove(seq)
            self._fail(worker, seq, f"{death} while measuring this case")
        if worker.crashes_in_a_row >= MAX_CRASHES_IN_A_ROW:
            self._fail_rest(worker, f"not measured: {worker.crashes_in_a_row} workers for {worker.slot.device} "
                                    f"died in a row with no case finished; the last: {death}")
        elif worker.pending:
            self.start(worker)

    def _fail(self, worker: _Worker, seq: int, reason: str) -> None:
        self.merge.add(seq, crashed_record(self.cases[seq], worker.slot.device, seq, self.settings, reason))

    def _fail_rest(self, worker: _Worker, reason: str) -> None:
        while worker.pending:
            self._fail(worker, worker.pending.popleft(), reason)

    def stop(self) -> None:
        """Kill every worker still running (they ignore SIGTERM: see :func:`_worker_main`) and reap it."""
        for worker in self.workers:
            if worker.process is not None and worker.process.is_alive():
                worker.process.kill()
        for worker in self.workers:
            if worker.process is not None:
                worker.process.join(JOIN_TIMEOUT_S)
            if worker.conn is not None:
                worker.conn.close()
                worker.conn = None

    def describe(self) -> list[dict[str, Any]]:
        """Each worker's slot (device, cores, threads), the pids it ran under and how each dead one died."""
        return [{**w.slot.describe(), "pids": w.pids, "pinned": w.pinned, "deaths": w.deaths} for w in self.workers]


def run_sharded(cases: list[Case], settings: RunSettings, device: Device, *, plan: DevicePlan,
                run_file: Path | None, store: Any | None = None, spec: dict[str, Any] | None = None,
                results_dir: Path | None = None, on_record: Callable[[int, Case, Record], None] | None = None,
                on_start: Callable[[int, Case], None] | None = None, run_id: str | None = None,
                timer: Any = None) -> RunOutcome:
    """Measure ``cases`` on ``plan``'s workers, streaming records to ``run_file`` and ``store`` in case order: the
    sharded counterpart of :func:`fp8bench.measure.runner.run_cases`, with its arguments and outcome (``device`` is
    ``plan.device``, the one the run header describes; ``timer`` must be ``None``: each worker times with its own
    device's timer, and a distributed run's lockstep timer has no meaning across separate workers)."""
    if device != plan.device:
        raise ValueError(f"run_sharded: device {device} is not the plan's first device {plan.device}")
    if timer is not None:
        raise ValueError("run_sharded: workers time with their own device's timer; a shared timer cannot be given")
    settings = replace(settings, device=plan.spec, threads=plan.threads or settings.threads)
    run_id = run_id or new_run_id()
    started = time.monotonic()
    header = run_header(run_id, plan.device, plan.spec, settings, spec or {})
    header["devices"] = [device_properties(d) for d in dict.fromkeys(s.device for s in plan.slots)]
    if plan.threads:  # the header describes the CPU workers' threads, not the parent's (which measures nothing)
        for props in (header["device"], *header["devices"]):
            props["threads"] = plan.threads
    shards = plan.shards(cases)
    header["workers"] = [{**slot.describe(), "cases": shard} for slot, shard in zip(plan.slots, shards, strict=True)]
    run = StreamedRun(RecordStream(run_file, header, store), started)
    merge = _InOrder(run.stream, lambda seq, rec: on_record(seq, cases[seq], rec) if on_record else None)
    workers = _Shards(plan, cases, settings, header["device"]["name"], results_dir, merge, on_start,
                      case_profiler(settings, run_file, results_dir, run_id))
    with run:
        try:
            workers.run()
        finally:
            workers.stop()
    with run:  # the records finished out of order before the run stopped
        merge.flush()
    header["workers"] = [{**h, "pids": w["pids"], "pinned": w["pinned"], "deaths": w["deaths"]}
                         for h, w in zip(header["workers"], workers.describe(), strict=True)]
    run.finish(n_cases=len(cases), workers=header["workers"])
    return run.outcome(run_id, run_file, store)
