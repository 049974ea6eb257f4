"""`fp8bench run`: measure cases into a table, a run file and store rows."""

from __future__ import annotations

import argparse
import functools
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fp8bench.commands import run_plan
from fp8bench.commands.common import (
    BAD_INPUT,
    EXIT_CASE_FAILED,
    EXIT_DISK_FULL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    INTERRUPTED,
    ExitCodes,
    StepProgress,
    UsageError,
    add_json_flag,
    add_store_flags,
    add_table_flag,
    default_results_dir,
    print_json,
    table_console,
)
from fp8bench.core.units import fraction_arg, percent_arg

if TYPE_CHECKING:
    from rich.console import Console

    from fp8bench.core.cases import Case
    from fp8bench.core.devices import Device
    from fp8bench.core.noise import HostLoad
    from fp8bench.hardware.distributed import LaunchEnv
    from fp8bench.measure.budget import SuiteBudget
    from fp8bench.measure.runner import RunOutcome, RunSettings
    from fp8bench.measure.sharding import DevicePlan
    from fp8bench.measure.timing import Timer, TimingMode

DESCRIPTION = """Measure every combination of workload x shape x precision x backend on one device.

examples:
  fp8bench run --suite smoke
  fp8bench run --workload gemm --shape 4096x4096x4096 --precision bf16 fp8_tensorwise fp8_rowwise
  fp8bench run --shape 1024x1024x1024 --precision all --backend torch emulated --budget 10   # with the reference
  fp8bench run --device cuda:1 --shape 2048x2048x2048 --precision bf16 fp8_rowwise --cuda-graph   # no launch gaps
  fp8bench run --suite llm --devices all      # one worker process per GPU, one run file (docs/devices.md)

Unsupported combinations are recorded as skipped with the reason. The table shows the end-to-end time
(quantization included) and the pre-quantized GEMM time, the speedup of each against the baseline precision,
the phase split, and numerics against an FP64 reference. The last stdout line is one JSON object.

Under torchrun (`torchrun --nproc-per-node N -m fp8bench run --workload collective ...`) every rank measures on its
own device (auto/cuda: cuda:LOCAL_RANK; NCCL between GPUs, gloo on the CPU) in step with the others, each sample
the slowest rank's time, and rank 0 alone writes the table, the run file and the store (docs/distributed.md).

--out never replaces an existing file unless --force, and never anything that is not a regular file (a device,
a FIFO, a symbolic link, a folder). SIGTERM and SIGHUP stop a run like Ctrl-C."""
EXIT_CODES = ExitCodes((
    (EXIT_OK, "every case ok or skipped (a skipped case carries its reason)"),
    (EXIT_CASE_FAILED, "a case failed or came out invalid (NaN/Inf output, throttled device)"),
    (EXIT_USAGE, BAD_INPUT + "; nothing is measured"),
    (EXIT_DISK_FULL, "the disk filled: the run stopped, status 'failed: disk full'; the run file keeps every record "
                     "written before, the last one is retried once"),
    (EXIT_INTERRUPTED, INTERRUPTED + " in the run file and the store"),
))
DOC = "docs/method.md"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--suite", help="a built-in suite name (see `fp8bench list suites`) or a path to a YAML file")
    p.add_argument("--workload", nargs="+", default=None,
                   help="workload name(s) (default: gemm); each runs its own default shape unless --shape is given")
    p.add_argument("--shape", nargs="+", default=None,
                   help="shape(s) for every workload named: MxNxK or m=..,n=..,k=.. for gemm (B is N x K), "
                        "key=value,... or a preset for the others (default: each workload's own, see "
                        "`fp8bench list workloads`)")
    p.add_argument("--shape-set", default=None, help="a named shape set instead of --shape (see `list shape-sets`)")
    p.add_argument("--precision", nargs="+", default=None,
                   help="precision names or 'all' (default: all). See `fp8bench list precisions`")
    p.add_argument("--backend", nargs="+", default=None,
                   help="backend names or 'all' (default: torch, the vendor kernels; add emulated for the reference). See `fp8bench list backends`")
    p.add_argument("--baseline", default="bf16", help="precision the speedups are relative to (default bf16)")
    p.add_argument("--device", default="auto", help="auto (default: cuda:0 if present, else cpu), cpu, cuda, cuda:N")
    p.add_argument("--devices", default=None, metavar="LIST",
                   help="shard the cases across devices, one worker process pinned to each: 'all' (every GPU), "
                        "cuda:0,cuda:1,... or cpu,cpu (each cpu one more CPU worker on its own cores); one run "
                        "file and store rows in case order; a worker that dies fails its case, not the run "
                        "(docs/devices.md)")
    p.add_argument("--budget", type=float, default=None, help="wall-clock seconds per case (default 30)")
    p.add_argument("--fp8-format", default=None, choices=["e4m3", "e5m2", "hybrid"],
                   help="FP8 element format: e4m3, e5m2, or hybrid (E4M3 forward, E5M2 gradients). Default: e4m3, "
                        "except fp8_delayed on a workload that trains: hybrid (Transformer Engine's DelayedScaling)")
    p.add_argument("--fast-accum", nargs="+", choices=["on", "off"], default=["on"],
                   help="FP8 forward-GEMM accumulation: on (fast accumulation in the forward GEMM, full precision in "
                        "the gradient GEMMs: torchao's and Transformer Engine's default), off (full precision "
                        "everywhere); give both to sweep (default: on)")
    p.add_argument("--amax-history-len", type=int, default=None,
                   help="delayed scaling: amax history length in iterations (default 1024, as TE's DelayedScaling)")
    p.add_argument("--amax-compute-algo", choices=["max", "most_recent"], default=None,
                   help="delayed scaling: scale from the max of the history or its most recent amax (default max, "
                        "as TE)")
    p.add_argument("--margin", type=int, default=None,
                   help="delayed scaling: headroom in powers of two (default 0, as TE)")
    p.add_argument("--min-samples", type=int, default=None, help="minimum timed samples per function (default 10)")
    p.add_argument("--max-noise", dest="target_rse", type=percent_arg("--max-noise"), default=None,
                   metavar="PERCENT",
                   help="stop sampling once the median's relative standard error is under this many percent "
                        "(default 0.5, as nvbench's --max-noise)")
    p.add_argument("--target-rse", dest="target_rse", type=fraction_arg("--target-rse"), default=None,
                   metavar="FRACTION", help="the same target as a fraction (0.005) or a percentage (0.5%%)")
    p.add_argument("--max-time", type=float, default=None, help="most measured seconds per timed function")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's choice)")
    p.add_argument("--seed", type=int, default=0, help="input generator seed (default 0)")
    p.add_argument("--no-phases", action="store_true", help="time only the end-to-end call")
    p.add_argument("--no-l2-flush", action="store_true", help="CUDA: keep the L2 warm between samples")
    p.add_argument("--cuda-graph", action="store_true",
                   help="CUDA: capture each call (end to end, and each phase) in a CUDA graph after warm-up and time "
                        "its replays: kernels back to back, without the launch gaps of eager calls. A call that "
                        "cannot be captured (it synchronizes with the host, say) is skipped with the reason. Records "
                        "say timing_mode cuda_graph and are never compared with eager ones (docs/timing-modes.md)")
    p.add_argument("--blocked-stream", action="store_true",
                   help="CUDA: time each eager call queued behind a spin kernel that holds the stream, then "
                        "released at once: kernels back to back without launch gaps, and nothing captured (needs "
                        "Triton). A call that synchronizes with the host cannot be held: its case is timed with "
                        "cuda_events and says why; on the CPU the host clock times every case. Records say "
                        "timing_mode blocked_stream and are never compared with eager ones (docs/timing-modes.md)")
    p.add_argument("--lock-clocks", choices=("base", "max"), default=None,
                   help="CUDA: lock the GPU's SM clock for the run through NVML (base: the clock the board sustains "
                        "within its power limit; max: the maximum SM clock), undone when the run ends, on Ctrl-C and "
                        "at exit after an error; needs root. Recorded in the run header (clock_lock) and as the clock "
                        "policy of the comparability key (docs/timing-modes.md)")
    p.add_argument("--throttle-threshold", type=fraction_arg("--throttle-threshold"), default=None,
                   help="CUDA: a timed sample after which the SM clock reads under this fraction of the reference "
                        "clock is discarded and timed again after a recovery delay (75%% or 0.75, nvbench's "
                        "default; 0 turns the check off)")
    p.add_argument("--throttle-recovery-delay", type=float, default=None,
                   help="seconds to wait before retaking a discarded sample, doubling while discards repeat "
                        "(default 0.05, nvbench's)")
    p.add_argument("--no-energy", action="store_true",
                   help="skip the energy window of each case (clocks and throttle reasons are still watched "
                        "through the timed samples)")
    p.add_argument("--energy-window", type=float, default=None,
                   help="minimum seconds per energy window (default 1: ~10 updates of NVML's ~100 ms counter)")
    p.add_argument("--energy-error", type=fraction_arg("--energy-error"), default=None,
                   help="size each energy window from the counter's measured update period so its quantization "
                        "error stays under this fraction (default 1%%; the bound is recorded with each figure, "
                        "docs/energy.md); 0 keeps every window at --energy-window")
    p.add_argument("--energy-phases", action="store_true",
                   help="also meter each phase looped alone (quantize, gemm, ...), stated as such in the record")
    p.add_argument("--idle-baseline", type=float, default=None, metavar="SECONDS",
                   help="measure idle power this long before the cases; report energy above idle beside the raw")
    p.add_argument("--cooldown", type=float, default=None, metavar="SECONDS",
                   help="pause this long before each case after the first (lets the device cool)")
    p.add_argument("--clock-floor", type=fraction_arg("--clock-floor"), default=None,
                   help="the timed samples or an energy window whose median SM clock is under this fraction of the "
                        "default clock are throttled, unless power capping alone explains the drop (90%% or 0.9, "
                        "the default; docs/energy.md)")
    p.add_argument("--strict-clocks", action="store_true",
                   help="also mark a case invalid when the GPU held its clocks at the power limit, and for any "
                        "clock under the floor whatever its cause (by default power capping, the normal state of a "
                        "large GEMM, and the clock drop it causes are recorded in the telemetry and notes; thermal "
                        "or hardware slowdown always invalidates)")
    p.add_argument("--profile", nargs="?", const="torch", default=None, metavar="MODE",
                   help="after each case's measurement, profile one more pass of its phases (never inside a timed "
                        "sample): torch (the default of a bare --profile) writes a torch.profiler trace per case to "
                        "RESULTS/runs/RUN_ID.profile/ (open it in https://ui.perfetto.dev) and keeps its top ops in "
                        "the record; nvtx emits NVTX ranges inside cudaProfilerStart/Stop (CUDA) for an outside "
                        "profiler; nsys prints the `nsys profile` command that reruns one case (docs/profiling.md)")
    p.add_argument("--out", type=Path, default=None, help="run file path (default RESULTS/runs/RUN_ID.json)")
    p.add_argument("--force", action="store_true", help="let --out replace an existing run file")
    run_plan.add_arguments(p)
    add_store_flags(p)
    p.add_argument("--no-store", action="store_true", help="write the run file only")
    add_table_flag(p)
    add_json_flag(p)


def _plan(args: argparse.Namespace) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    """Cases, settings overrides and the spec (for the run header) from a suite and/or flags."""
    from fp8bench.core.plugins import BACKENDS, WORKLOADS, load_all
    from fp8bench.core.precisions import PRECISIONS
    from fp8bench.measure.suites import load_suite
    from fp8bench.workloads.shape_sets import shape_set

    load_all()

    def names(values: list[str] | None, registry_names: list[str], default: list[str]) -> list[str]:
        if not values:
            return default
        return list(registry_names) if values == ["all"] else values

    overrides: dict[str, Any] = {}
    if args.suite:
        if args.workload or args.shape or args.shape_set:
            raise UsageError("--suite chooses the cases; drop --workload/--shape/--shape-set, or drop --suite")
        suite = load_suite(args.suite)
        overrides.update(suite.settings)
        entries = [(e.workload, e.shapes, names(args.precision, PRECISIONS.names(), e.precisions),
                    names(args.backend, BACKENDS.names(), e.backends)) for e in suite.entries]
        spec: dict[str, Any] = {"suite": suite.name, "suite_path": suite.path}
    else:
        shapes = shape_set(args.shape_set) if args.shape_set else args.shape
        entries = [(w, shapes or [WORKLOADS.get(w).default_shape],
                    names(args.precision, PRECISIONS.names(), PRECISIONS.names()),
                    names(args.backend, BACKENDS.names(), ["torch"])) for w in (args.workload or ["gemm"])]
        spec = {"suite": None}
    spec["entries"] = [{"workload": w, "shapes": s, "precisions": p, "backends": b} for w, s, p, b in entries]
    if args.suite:
        for entry, suite_entry in zip(spec["entries"], suite.entries, strict=True):
            entry["priority"] = suite_entry.priority
    return entries, overrides, spec


def _settings(args: argparse.Namespace, overrides: dict[str, Any]) -> RunSettings:
    from fp8bench.measure.runner import RunSettings
    from fp8bench.measure.timing import SamplingPolicy

    policy_fields: dict[str, Any] = {k: overrides[k] for k in ("min_samples", "min_time_s", "max_time_s", "target_rse",
                                               "max_samples") if k in overrides}
    for flag, key in (("min_samples", "min_samples"), ("target_rse", "target_rse"), ("max_time", "max_time_s")):
        if getattr(args, flag) is not None:
            policy_fields[key] = getattr(args, flag)
    budget = args.budget if args.budget is not None else overrides.get("budget_s", 30.0)
    return RunSettings(device=args.device, budget_s=float(budget), policy=SamplingPolicy(**policy_fields),
                       warmup_s=float(overrides.get("warmup_s", 0.05)), seed=args.seed,
                       threads=args.threads if args.threads is not None else overrides.get("threads"),
                       fp8_format=args.fp8_format, amax_history_len=args.amax_history_len, margin=args.margin,
                       fast_accum=tuple(dict.fromkeys(v == "on" for v in args.fast_accum)),
                       amax_compute_algo=args.amax_compute_algo,
                       flush_l2=not args.no_l2_flush, cuda_graph=args.cuda_graph, phases=not args.no_phases,
                       blocked_stream=args.blocked_stream, lock_clocks=args.lock_clocks,
                       **_throttle_settings(args),
                       profile=args.profile,
                       **_energy_settings(args, overrides))


def _throttle_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The per-sample clock check's settings the command line gives (the rest keep RunSettings' defaults)."""
    given = {"throttle_threshold": args.throttle_threshold, "throttle_recovery_s": args.throttle_recovery_delay}
    out = {k: v for k, v in given.items() if v is not None}
    if args.energy_error is not None:  # 0: fixed windows
        out["energy_error_target"] = args.energy_error or None
    return out


def _energy_settings(args: argparse.Namespace, overrides: dict[str, Any]) -> dict[str, Any]:
    """Energy options from flags, else from the suite's settings, else RunSettings' defaults."""
    out: dict[str, Any] = {"energy": not args.no_energy and overrides.get("energy", True),
                           "energy_phases": args.energy_phases or bool(overrides.get("energy_phases", False)),
                           "strict_clocks": args.strict_clocks or bool(overrides.get("strict_clocks", False))}
    for flag, key in (("energy_window", "energy_window_s"), ("idle_baseline", "idle_baseline_s"),
                      ("cooldown", "cooldown_s"), ("clock_floor", "clock_floor")):
        value = getattr(args, flag) if getattr(args, flag) is not None else overrides.get(key)
        if value is not None:
            out[key] = float(value)
    return out


def _kept(outcome: RunOutcome, run_file: Path) -> str:
    """Where the records of a run stopped by a full disk are (one clause for the error line)."""
    n = len(outcome.records)
    if outcome.run_file_complete:
        return f"all {n} measured record(s) are in {run_file} (status failed: disk full)"
    last = "the store" if outcome.store_url and not outcome.store_errors else "the JSON summary only"
    return f"{run_file} keeps the {n - 1} record(s) written before; the last one is in {last}"


def execute(args: argparse.Namespace) -> int:
    from fp8bench.measure.budget import process_age_s

    started = time.monotonic() - process_age_s()  # a wall budget counts from the process's start
    from fp8bench.analysis.report import summary_counts
    from fp8bench.core.devices import resolve_device
    from fp8bench.core.precisions import PRECISIONS
    from fp8bench.hardware import distributed
    from fp8bench.measure.lockstep import LockstepTimer
    from fp8bench.measure.runner import expand_cases, run_cases
    from fp8bench.measure.timing import timer_for, timing_mode_for

    launch = distributed.launch_env()
    entries, overrides, spec = _plan(args)
    settings = _settings(args, overrides)
    PRECISIONS.get(args.baseline)
    wall_budget = run_plan.wall_budget_s(args)
    cases, priorities = [], []
    for (workload, shapes, precisions, backends), entry in zip(entries, spec["entries"], strict=True):
        expanded = expand_cases([(workload, shapes)], precisions, backends, settings)
        cases += expanded
        priorities += [entry.get("priority", 0)] * len(expanded)
    cases = run_plan.ordered(cases, priorities, args)
    plan = _device_plan(args, launch)
    if (plan or launch) and wall_budget is not None:
        raise UsageError("--wall-budget fits one process's run; drop it with --devices or under torchrun")
    device = plan.device if plan else resolve_device(
        distributed.device_spec_for(args.device, launch) if launch else args.device)
    budget = None
    if args.plan or wall_budget is not None:
        results_dir = args.results_dir or default_results_dir()
        model = run_plan.cost_model(device, results_dir, args.store, args.no_store, cases)
        budget = run_plan.make_budget(wall_budget, cases, settings, model, started)
        if args.plan:
            from rich.console import Console

            return run_plan.show_plan(cases, settings, model, budget, args.json, Console())
    # Refuses --cuda-graph on the CPU (and with --blocked-stream), before any write.
    timing_mode = timing_mode_for(device, settings.cuda_graph, settings.blocked_stream)
    timer: Timer | None = None
    if launch:
        if settings.cuda_graph:
            raise UsageError("--cuda-graph is not supported under torchrun: each rank would capture and replay its "
                             "collectives on its own; drop --cuda-graph")
        distributed.init(device, distributed.collective_timeout_s(settings.budget_s))
        timer = LockstepTimer(timer_for(device, settings.flush_l2), device)
        spec["distributed"] = distributed.run_spec(launch, device)
        if not launch.is_main:  # the other ranks measure in step with rank 0 and write nothing
            try:
                outcome = run_cases(cases, settings, device, run_file=None, spec=spec, results_dir=None, timer=timer)
            finally:
                distributed.shutdown()
            counts = summary_counts(outcome.records)
            return EXIT_CASE_FAILED if counts["failed"] or counts["invalid"] else EXIT_OK
    try:
        return _measure_and_report(args, cases, settings, device, timing_mode, spec, timer, plan, budget)
    finally:
        if launch:
            distributed.shutdown()


def _device_plan(args: argparse.Namespace, launch: LaunchEnv | None) -> DevicePlan | None:
    """The workers of ``--devices`` (:mod:`fp8bench.measure.sharding`), or ``None`` for a run on one device."""
    if not args.devices:
        return None
    from fp8bench.measure.sharding import plan_devices

    if launch:
        raise UsageError("--devices starts a worker process per device; under torchrun every rank is already a "
                         "process on its own device: drop --devices")
    if args.device != "auto":
        raise UsageError("--device and --devices both name devices; give one of them")
    return plan_devices(args.devices, args.threads)


def _measure_and_report(args: argparse.Namespace, cases: list[Case], settings: RunSettings, device: Device,
                        timing_mode: TimingMode, spec: dict[str, Any], timer: Timer | None,
                        plan: DevicePlan | None = None, budget: SuiteBudget | None = None) -> int:
    """Measure ``cases`` (on ``plan``'s workers when sharded) and write the table, run file and store (a
    distributed run: on rank 0)."""
    from rich.console import Console

    from fp8bench.analysis.report import summary_counts
    from fp8bench.core.noise import host_load, overload_warning
    from fp8bench.measure.profiling import summary_rows
    from fp8bench.measure.runner import new_run_id
    from fp8bench.results.record_stream import DiskFull
    from fp8bench.results.runfile import check_writable

    results_dir = args.results_dir or default_results_dir()
    run_id = new_run_id()
    run_file = args.out or results_dir / "runs" / f"{run_id}.json"
    check_writable(run_file, overwrite=args.force)
    err = Console(stderr=True)
    load = host_load()
    warning = overload_warning(load)
    if warning:
        err.print(f"fp8bench run: warning: {warning}", markup=False, highlight=False, soft_wrap=True)
    try:
        outcome = measure(
            cases=cases, settings=settings, device=device, plan=plan, run_file=run_file, run_id=run_id, spec=spec,
            timer=timer, store=None if args.no_store else args.store or results_dir,
            # The results folder also caches the CPU's measured ceilings; `--no-store --out FILE` leaves it alone.
            results_dir=None if (args.no_store and args.out and not args.results_dir) else results_dir,
            console=err, show_progress=not args.json, budget=budget)
    except DiskFull as exc:  # before any case: the run file could not even be started
        err.print(f"fp8bench run: error: disk full: {exc}; nothing was measured", markup=False, soft_wrap=True)
        return EXIT_DISK_FULL
    counts = summary_counts(outcome.records)
    summary: dict[str, Any] = {
        "run_id": outcome.run_id, "run_file": str(run_file), "store": outcome.store_url,
        "device": plan.spec if plan else str(device), "timing_mode": timing_mode.value, "counts": counts,
        "n_cases": len(cases), "interrupted": outcome.interrupted, "interrupted_by": outcome.interrupted_by,
        "disk_full": outcome.disk_full, "run_file_complete": outcome.run_file_complete,
        "wall_s": round(outcome.wall_s, 3), "store_errors": outcome.store_errors,
        "load": load.to_dict() if load else None, "harness": outcome.harness}
    if outcome.wall_budget is not None:
        summary["wall_budget"] = outcome.wall_budget
    if settings.profile:
        summary["profiles"] = summary_rows(outcome.records)
    if args.json:
        print_json({**summary, "records": [r.to_dict() for r in outcome.records]})  # as the run file holds them
    else:
        render(outcome, summary, baseline=args.baseline, table=args.table, cuda_graph=settings.cuda_graph,
               load=load, err=err)
    return _exit_code(outcome, counts, run_file, err)


def measure(*, cases: list[Case], settings: RunSettings, device: Device, run_file: Path, run_id: str,
            spec: dict[str, Any], plan: DevicePlan | None = None, timer: Timer | None = None,
            store: str | Path | None = None, results_dir: Path | None = None, console: Console | None = None,
            show_progress: bool = True, budget: SuiteBudget | None = None) -> RunOutcome:
    """Measure ``cases`` on ``device`` (on ``plan``'s worker processes when given), streaming each record to
    ``run_file`` and ``store`` (a store URL or folder; ``None``: the run file only) under ``run_id``;
    ``results_dir`` caches the CPU's measured ceilings (``None``: not cached). Progress goes to ``console``
    (stderr) when ``show_progress``: a bar on a terminal, else a line per finished case with the count and the time
    left (:class:`StepProgress`). Raises :class:`fp8bench.results.record_stream.DiskFull` when the run file cannot
    even be started. ``budget``: the run's wall budget (one device only)."""
    from rich.console import Console

    from fp8bench.measure.runner import run_cases
    from fp8bench.measure.sharding import run_sharded
    from fp8bench.results.store import open_store

    opened = None if store is None else open_store(store)
    console = console or Console(stderr=True)
    progress = StepProgress("run", len(cases), console, enabled=show_progress, unit="cases")

    def finished(case: Case) -> None:
        progress.label = case.describe()  # the line names the case just measured, not the next one
        progress.advance()

    with progress:
        run = functools.partial(run_cases, budget=budget) if plan is None else functools.partial(run_sharded, plan=plan)
        return run(cases, settings, device, run_file=run_file, store=opened, spec=spec, results_dir=results_dir,
                   run_id=run_id, timer=timer,
                   on_start=lambda i, case: progress.start(case.describe(), announce=False),
                   on_record=lambda i, case, rec: finished(case))


def render(outcome: RunOutcome, summary: dict[str, Any], *, baseline: str,
           table: str, cuda_graph: bool, load: HostLoad | None, err: Console) -> None:
    """The run's table of ``outcome``'s records (speedups against ``baseline``; ``table``: the ``--table``
    layout), bandwidths, profiles and summary line on stdout; on ``err``, how an
    interrupted run or a failed store write left its records."""
    from rich.markup import escape

    from fp8bench.analysis.report import render_bandwidths, render_table

    console, compact = table_console(table)
    timed = ", timed as CUDA-graph replays" if cuda_graph else \
        ", timed on held streams (blocked_stream)" if summary.get("timing_mode") == "blocked_stream" else ""
    render_table(outcome.records, baseline, console,
                 title=f"run {outcome.run_id} on {summary['device']}{timed}", load=load, compact=compact)
    render_bandwidths(outcome.records, baseline, console)
    if "profiles" in summary:
        print_profiles(summary["profiles"], console)
    if outcome.interrupted:
        err.print(f"[yellow]interrupted ({outcome.interrupted_by}):[/] {len(outcome.records)} of "
                  f"{summary['n_cases']} cases kept in {outcome.run_file}")
    budget = summary.get("wall_budget")
    if budget and budget.get("reached"):
        err.print(f"wall budget of {budget['budget_s']:g} s reached (the full plan: {budget['planned_s']:.0f} s): "
                  f"{budget['shortened']} case(s) shortened, {budget['skipped']} skipped as 'suite budget'; "
                  "each record says how and why (extra.suite_budget)", markup=False, soft_wrap=True)
    for e in outcome.store_errors:
        err.print(f"[red]store write failed[/] ({escape(e)}); later records went to the run file only: "
                  f"`fp8bench ingest {outcome.run_file}`", soft_wrap=True)
    print_json(summary)


def _exit_code(outcome: RunOutcome, counts: dict[str, int], run_file: Path, err: Console) -> int:
    """The verb's exit code, after saying on ``err`` where a full disk left the records."""
    if outcome.disk_full:
        err.print(f"fp8bench run: error: disk full ({outcome.disk_full}); {_kept(outcome, run_file)}",
                  markup=False, highlight=False, soft_wrap=True)
        return EXIT_DISK_FULL
    if outcome.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_CASE_FAILED if counts["failed"] or counts["invalid"] else EXIT_OK


def print_profiles(rows: list[dict[str, Any]], console: Console) -> None:
    """One line per profiled case: its trace, or the command that profiles it under Nsight Systems."""
    for row in rows:
        where = row["trace"] or row["command"] or "not taken (see the record's notes)"
        console.print(f"profile {row['case']}: {where}", markup=False, highlight=False, soft_wrap=True)
