"""`fp8bench converge`: train the decoder in BF16 and each FP8 recipe and compare the loss curves."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

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
    default_results_dir,
    print_json,
)
from fp8bench.core.units import fraction_arg

NAME = "converge"
HELP = "convergence check: FP8 and 4-bit loss curves against BF16 on the same model and data"
DESCRIPTION = """Train the same GPT-style decoder (same initial weights, same synthetic batches) for N steps in
BF16 and in each FP8 or 4-bit (nvfp4, mxfp4) recipe, and compare every loss curve with BF16's: final and largest
relative gap, and a
divergence flag (NaN/Inf, a gap over --diverge-gap, or a loss spike). A negative control with FP8 scaling
disabled (fp8_unscaled) runs too, to show the check fails when training breaks. Each curve is stored as a
record (workload transformer_step, per-step losses in extra.losses).

examples:
  fp8bench converge --steps 200
  fp8bench converge --steps 50 --precision bf16 fp8_rowwise --backend torch
  fp8bench converge --shape tiny,seq=32 --fp8-format hybrid --no-control
  fp8bench converge --steps 40 --precision nvfp4 mxfp4 --stochastic-rounding off --rht on"""
EXIT_CODES = ExitCodes((
    (EXIT_OK, "no FP8 recipe diverged, and the negative control was flagged"),
    (EXIT_CASE_FAILED, "a recipe diverged, or the negative control was not flagged"),
    (EXIT_USAGE, BAD_INPUT),
    (EXIT_DISK_FULL, "the disk filled: the curves written before are kept in the run file"),
    (EXIT_INTERRUPTED, INTERRUPTED + " (finished curves)"),
))
DOC = "docs/workloads.md"

DEFAULT_PRECISIONS = ["bf16", "fp8_tensorwise", "fp8_delayed", "fp8_rowwise", "fp8_blockwise", "mxfp8", "nvfp4",
                      "mxfp4"]
ON_OFF = {"on": True, "off": False}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shape", default="tiny", help="transformer_step shape or preset (default tiny)")
    p.add_argument("--steps", type=int, default=200, help="training steps per curve (default 200)")
    p.add_argument("--precision", nargs="+", default=None,
                   help=f"precisions to train (default: {' '.join(DEFAULT_PRECISIONS)}); bf16 is always included")
    p.add_argument("--backend", default="emulated",
                   help="backend whose layers train: emulated (default; any recipe, any device) or torch (native "
                        "FP8 GEMMs; on the CPU only rowwise is fast)")
    p.add_argument("--fp8-format", default=None, choices=["e4m3", "e5m2", "hybrid"],
                   help="FP8 element format (default: each recipe's; fp8_delayed trains in hybrid, TE's default)")
    p.add_argument("--stochastic-rounding", choices=sorted(ON_OFF), default=None,
                   help="4-bit recipes: round gradients stochastically (default: each recipe's; nvfp4 on, as TE's "
                        "NVFP4BlockScaling, mxfp4 off); FP8 recipes are unaffected")
    p.add_argument("--rht", choices=sorted(ON_OFF), default=None,
                   help="4-bit recipes: 16x16 random Hadamard transform of the wgrad GEMM's operands (default: "
                        "each recipe's; nvfp4 on, mxfp4 off); FP8 recipes are unaffected")
    p.add_argument("--no-control", action="store_true", help="skip the fp8_unscaled negative control")
    p.add_argument("--window", type=int, default=10, help="smoothing window in steps (default 10)")
    p.add_argument("--tolerance", type=fraction_arg("--tolerance"), default=0.05,
                   help="final relative gap counted as ok: 5%% or 0.05 (default 5%%)")
    p.add_argument("--diverge-gap", type=fraction_arg("--diverge-gap"), default=0.25,
                   help="relative gap flagged as diverged: 25%% or 0.25 (default 25%%)")
    p.add_argument("--stats-every", type=int, default=25, help="sample FP8 cast statistics every N steps (0: off)")
    p.add_argument("--seed", type=int, default=0, help="weights and data seed (default 0)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch")
    p.add_argument("--out", type=Path, default=None, help="run file path (default RESULTS/runs/RUN_ID.json)")
    p.add_argument("--force", action="store_true", help="let --out replace an existing run file")
    add_store_flags(p)
    p.add_argument("--no-store", action="store_true", help="write the run file only")
    add_json_flag(p)


def execute(args: argparse.Namespace) -> int:
    import torch
    from rich.console import Console
    from rich.table import Table

    from fp8bench.core.devices import resolve_device
    from fp8bench.core.plugins import WORKLOADS, load_all
    from fp8bench.measure.convergence import (
        BASELINE,
        BROKEN,
        ConvergenceSettings,
        assess,
        baseline_verdict,
        curve_record,
        train_curve,
    )
    from fp8bench.measure.runner import RunSettings, new_run_id, run_header
    from fp8bench.numerics.recipes import PRECISIONS, Fp8Recipe, fp4_settings, resolve_precision
    from fp8bench.results.runfile import check_writable
    from fp8bench.results.store import open_store
    from fp8bench.results.stream import STATUS_DISK_FULL, DiskFull, RecordStream
    from fp8bench.workloads.transformer_step import LAYER_CONVERTERS

    load_all()
    try:
        settings = ConvergenceSettings(steps=args.steps, window=min(args.window, max(args.steps, 1)),
                                       tolerance=args.tolerance, diverge_gap=args.diverge_gap,
                                       stats_every=args.stats_every, seed=args.seed)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.backend not in LAYER_CONVERTERS:
        raise UsageError(f"backend {args.backend!r} cannot train the decoder; accepted: {', '.join(LAYER_CONVERTERS)}")
    shape = WORKLOADS.get("transformer_step").parse_shape(args.shape)
    names = [BASELINE, *[p for p in (args.precision or DEFAULT_PRECISIONS) if p != BASELINE]]
    sr, rht = (None if v is None else ON_OFF[v] for v in (args.stochastic_rounding, args.rht))

    def resolve(name: str) -> Any:
        if getattr(PRECISIONS.get(name), "is_fp4", False):  # E2M1 elements: --fp8-format is for the FP8 recipes
            return resolve_precision(name, None, trains=True, stochastic_rounding=sr, rht=rht)
        return resolve_precision(name, args.fp8_format, trains=True)

    try:
        precisions = [resolve(n) for n in names]
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    device = resolve_device(args.device)
    run_settings = RunSettings(device=args.device, seed=args.seed, fp8_format=args.fp8_format, threads=args.threads)
    if args.threads:
        torch.set_num_threads(args.threads)

    results_dir = args.results_dir or default_results_dir()
    run_id = new_run_id()
    run_file = args.out or results_dir / "runs" / f"{run_id}.json"
    check_writable(run_file, overwrite=args.force)
    spec = {"suite": None, "mode": "convergence", "shape": args.shape, "steps": args.steps, "backend": args.backend,
            "precisions": names, "control": not args.no_control}
    header = run_header(run_id, device, args.device, run_settings, spec)
    store = None if args.no_store else open_store(args.store or results_dir)
    err = Console(stderr=True)
    try:
        stream = RecordStream(run_file, header, store)
    except DiskFull as exc:
        err.print(f"fp8bench converge: error: disk full: {exc}; nothing was trained", markup=False,
                  soft_wrap=True)
        return EXIT_DISK_FULL
    todo: list[Any] = [*precisions, *([] if args.no_control else [BROKEN])]
    records: list[dict[str, Any]] = []
    baseline = None
    interrupted, disk_full = False, False
    progress = StepProgress("converge", args.steps * len(todo), err, enabled=not args.json)
    with progress:
        try:
            for seq, precision in enumerate(todo):
                name = precision if isinstance(precision, str) else precision.name
                progress.start(f"curve {seq + 1} of {len(todo)}: {name} on {args.backend}")
                before = progress.done
                try:
                    with device.guard():  # the model, its optimizer and every synchronize act on this GPU
                        curve = train_curve(shape, precision, args.backend, device, settings,
                                            on_step=lambda _step, _loss: progress.advance())
                except Exception as exc:  # one recipe failing to train must not cost the others
                    err.print(f"[red]{name} failed:[/] {type(exc).__name__}: {exc}")
                    records.append({"precision": name, "status": "failed",
                                    "reason": f"{type(exc).__name__}: {exc}"})
                    continue
                finally:  # a curve that stopped early (a non-finite loss) or failed leaves its steps behind
                    progress.advance(before + args.steps - progress.done)
                verdict = (baseline_verdict(curve, settings) if baseline is None
                           else assess(curve, baseline, settings))
                if baseline is None:
                    baseline = curve
                fmt = precision.format_label if isinstance(precision, Fp8Recipe) else (
                    "e4m3" if name == BROKEN else None)
                record = curve_record(curve, verdict, shape, device, settings, seq, fmt,
                                      fp4_settings(precision) if isinstance(precision, Fp8Recipe) else None)
                records.append(record)
                stream.add(record)
        except KeyboardInterrupt:
            interrupted = True
        except DiskFull:
            disk_full = True
    stream.finish(status=STATUS_DISK_FULL if disk_full else "interrupted" if interrupted else "complete",
                  n_records=len(stream.records))
    store_errors = stream.store_errors

    rows = [_row(r) for r in records]
    control = next((r for r in rows if r["precision"] == BROKEN), None)
    diverged = [r["precision"] for r in rows if r["verdict"] in ("diverged", "failed") and r["precision"] != BROKEN]
    control_flagged = control is None or control["verdict"] == "diverged"
    summary = {"run_id": run_id, "run_file": str(run_file), "store": getattr(store, "url", None),
               "device": str(device), "backend": args.backend, "steps": args.steps, "shape": shape,
               "curves": rows, "diverged": diverged, "control_flagged": control_flagged if control else None,
               "interrupted": interrupted, "store_errors": store_errors}
    if not args.json:
        table = Table(title=f"convergence {run_id}: {args.steps} steps on {device}, backend {args.backend}")
        for col in ("precision", "final loss", "final gap", "largest gap (step)", "verdict", "step ms", "tokens/s"):
            table.add_column(col, justify="left" if col in ("precision", "verdict") else "right")
        for r in rows:
            table.add_row(r["precision"], _fmt(r["final_loss"], ".4f"), _pct(r["final_gap"]),
                          f"{_pct(r['max_gap'])} ({r['max_gap_step'] if r['max_gap_step'] is not None else '-'})",
                          r["verdict"] + (f": {r['reasons'][0]}" if r["reasons"] else ""),
                          _fmt(r["step_ms"], ".1f"), _fmt(r["tokens_per_s"], ".0f"))
        Console(width=max(Console().width, 160)).print(table)
        if control and not control_flagged:
            err.print(f"[red]the negative control was not flagged after {args.steps} steps:[/] the check did not show "
                      "it can fail here; without scaling the loss leaves BF16's only after many steps (the default "
                      "200 show it on the tiny shape): run more steps, or pass --no-control for a short run")
    print_json(summary)
    if disk_full:
        err.print(f"fp8bench converge: error: disk full ({stream.disk_error}); the curves written before are in "
                  f"{run_file}", markup=False, soft_wrap=True)
        return EXIT_DISK_FULL
    if interrupted:
        return EXIT_INTERRUPTED
    return EXIT_CASE_FAILED if diverged or not control_flagged else EXIT_OK


def _row(record: dict[str, Any]) -> dict[str, Any]:
    if record.get("status") == "failed" and "extra" not in record:
        return {"precision": record["precision"], "verdict": "failed", "final_loss": None, "final_gap": None,
                "max_gap": None, "max_gap_step": None, "reasons": [record["reason"]], "step_ms": None,
                "tokens_per_s": None}
    conv = record["extra"]["convergence"]
    return {"precision": record["precision"], "verdict": conv["verdict"], "final_loss": conv["final_loss"],
            "final_gap": conv["final_gap"], "max_gap": conv["max_gap"], "max_gap_step": conv["max_gap_step"],
            "reasons": conv["reasons"], "step_ms": 1e3 * record["median_s"] if record["median_s"] else None,
            "tokens_per_s": record["extra"]["tokens_per_s"]}


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.2%}"
