"""`fp8bench run`: measure cases into a table, a run file and store rows."""

from __future__ import annotations

import argparse
import functools
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from fp8bench.analysis.report import summary_counts
from fp8bench.commands import run_plan
from fp8bench.commands.console import StepProgress, table_console
from fp8bench.commands.verb_interface import (
    EXIT_CASE_FAILED,
    EXIT_DISK_FULL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    UsageError,
    default_results_dir,
    print_json,
)
from fp8bench.core.cases import Case
from fp8bench.core.devices import Device, resolve_device
from fp8bench.core.noise import HostLoad, host_load, overload_warning
from fp8bench.core.plugins import BACKENDS, WORKLOADS, load_all
from fp8bench.core.precisions import PRECISIONS
from fp8bench.hardware import distributed
from fp8bench.hardware.distributed import LaunchEnv
from fp8bench.measure.budget import SuiteBudget, process_age_s
from fp8bench.measure.lockstep import LockstepTimer
from fp8bench.measure.profiling import summary_rows
from fp8bench.measure.runner import RunOutcome, expand_cases, new_run_id, run_cases
from fp8bench.measure.settings import ClockSettings, EnergySettings, RecipeSettings, RunSettings, TimingSettings
from fp8bench.measure.sharding import DevicePlan, plan_devices, run_sharded
from fp8bench.measure.suites import load_suite
from fp8bench.measure.timing import SamplingPolicy, Timer, TimingMode, timer_for, timing_mode_for
from fp8bench.render.run_table import print_profiles, render_bandwidths, render_table
from fp8bench.results.record_stream import DiskFull
from fp8bench.results.runfile import check_writable
from fp8bench.results.store import open_store
from fp8bench.workloads.shape_sets import shape_set


def _plan(args: argparse.Namespace) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    """Cases, settings overrides and the spec (for the run header) from a suite and/or flags."""
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
    """The run's settings from its flags, else from the suite's ``overrides``, else the parts' defaults."""
    recipe = RecipeSettings(fp8_format=args.fp8_format,
                            fast_accum=tuple(dict.fromkeys(v == "on" for v in args.fast_accum)),
                            amax_history_len=args.amax_history_len, margin=args.margin,
                            amax_compute_algo=args.amax_compute_algo)
    return RunSettings(device=args.device, seed=args.seed,
                       threads=args.threads if args.threads is not None else overrides.get("threads"),
                       recipe=recipe, timing=_timing_settings(args, overrides),
                       energy=_energy_settings(args, overrides), clocks=_clock_settings(args, overrides),
                       profile=args.profile)


def _timing_settings(args: argparse.Namespace, overrides: dict[str, Any]) -> TimingSettings:
    policy_fields: dict[str, Any] = {k: overrides[k] for k in ("min_samples", "min_time_s", "max_time_s", "target_rse",
                                               "max_samples") if k in overrides}
    for flag, key in (("min_samples", "min_samples"), ("target_rse", "target_rse"), ("max_time", "max_time_s")):
        if getattr(args, flag) is not None:
            policy_fields[key] = getattr(args, flag)
    budget = args.budget if args.budget is not None else overrides.get("budget_s", 30.0)
    return TimingSettings(budget_s=float(budget), policy=SamplingPolicy(**policy_fields),
                          warmup_s=float(overrides.get("warmup_s", 0.05)), flush_l2=not args.no_l2_flush,
                          cuda_graph=args.cuda_graph, blocked_stream=args.blocked_stream, phases=not args.no_phases)


def _clock_settings(args: argparse.Namespace, overrides: dict[str, Any]) -> ClockSettings:
    """The clock options from flags, else from the suite's settings, else ClockSettings' defaults."""
    given: dict[str, Any] = {"lock": args.lock_clocks,
                             "strict": args.strict_clocks or bool(overrides.get("strict_clocks", False)),
                             "throttle_threshold": args.throttle_threshold,
                             "throttle_recovery_s": args.throttle_recovery_delay}
    floor = args.clock_floor if args.clock_floor is not None else overrides.get("clock_floor")
    given["floor"] = float(floor) if floor is not None else None
    return ClockSettings(**{k: v for k, v in given.items() if v is not None})


def _energy_settings(args: argparse.Namespace, overrides: dict[str, Any]) -> EnergySettings:
    """Energy options from flags, else from the suite's settings, else EnergySettings' defaults."""
    out: dict[str, Any] = {"enabled": not args.no_energy and overrides.get("energy", True),
                           "phases": args.energy_phases or bool(overrides.get("energy_phases", False))}
    for flag, key, name in (("energy_window", "energy_window_s", "window_s"),
                            ("idle_baseline", "idle_baseline_s", "idle_baseline_s"),
                            ("cooldown", "cooldown_s", "cooldown_s")):
        value = getattr(args, flag) if getattr(args, flag) is not None else overrides.get(key)
        if value is not None:
            out[name] = float(value)
    if args.energy_error is not None:  # 0: fixed windows
        out["error_target"] = args.energy_error or None
    return EnergySettings(**out)


def _kept(outcome: RunOutcome, run_file: Path) -> str:
    """Where the records of a run stopped by a full disk are (one clause for the error line)."""
    n = len(outcome.records)
    if outcome.run_file_complete:
        return f"all {n} measured record(s) are in {run_file} (status failed: disk full)"
    last = "the store" if outcome.store_url and not outcome.store_errors else "the JSON summary only"
    return f"{run_file} keeps the {n - 1} record(s) written before; the last one is in {last}"


def execute(args: argparse.Namespace) -> int:
    started = time.monotonic() - process_age_s()  # a wall budget counts from the process's start

    launch = distributed.launch_env()
    entries, overrides, spec = _plan(args)
    settings = _settings(args, overrides)
    settings.threads_here()  # more threads than this machine has CPUs is refused before anything runs
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
            return run_plan.show_plan(cases, settings, model, budget, args.json, Console())
    # Refuses --cuda-graph on the CPU (and with --blocked-stream), before any write.
    timing_mode = timing_mode_for(device, settings.timing.cuda_graph, settings.timing.blocked_stream)
    timer: Timer | None = None
    if launch:
        if settings.timing.cuda_graph:
            raise UsageError("--cuda-graph is not supported under torchrun: each rank would capture and replay its "
                             "collectives on its own; drop --cuda-graph")
        distributed.init(device, distributed.collective_timeout_s(settings.timing.budget_s))
        timer = LockstepTimer(timer_for(device, settings.timing.flush_l2), device)
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

    if launch:
        raise UsageError("--devices starts a worker process per device; under torchrun every rank is already a "
                         "process on its own device: drop --devices")
    if args.device != "auto":
        raise UsageError("--device and --devices both name devices; give one of them")
    if args.lock_clocks:
        raise UsageError("--lock-clocks locks the clock of one run's device, and the worker processes of --devices "
                         "lock none; lock each GPU's clocks with one run per device (--device cuda:N), or drop "
                         "--lock-clocks")
    return plan_devices(args.devices, args.threads)


def _measure_and_report(args: argparse.Namespace, cases: list[Case], settings: RunSettings, device: Device,
                        timing_mode: TimingMode, spec: dict[str, Any], timer: Timer | None,
                        plan: DevicePlan | None = None, budget: SuiteBudget | None = None) -> int:
    """Measure ``cases`` (on ``plan``'s workers when sharded) and write the table, run file and store (a
    distributed run: on rank 0)."""
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
        render(outcome, summary, baseline=args.baseline, table=args.table, cuda_graph=settings.timing.cuda_graph,
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
