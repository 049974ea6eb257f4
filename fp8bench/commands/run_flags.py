"""`fp8bench run` on the command line: its description, exit codes and flags, which build its ``--help``
without loading what the verb runs; :func:`execute` hands the parsed flags to :mod:`fp8bench.commands.run`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fp8bench.commands.verb_interface import (
    BAD_INPUT,
    EXIT_CASE_FAILED,
    EXIT_DISK_FULL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    INTERRUPTED,
    ExitCodes,
    add_json_flag,
    add_store_flags,
    add_table_flag,
)
from fp8bench.core.units import fraction_arg, percent_arg

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


def _add_plan_arguments(p: argparse.ArgumentParser) -> None:
    """The run order, `--plan` and the wall budget (the plan itself: :mod:`fp8bench.commands.run_plan`)."""
    p.add_argument("--plan", action="store_true",
                   help="measure nothing: print each case's expected wall time and the total, from the harness's "
                        "cost model and the store's earlier runs of the same case on this device (docs/method.md, "
                        "'Planning a run'); with --wall-budget, what the budget would shorten and skip")
    p.add_argument("--wall-budget", default=None, metavar="DURATION",
                   help="fit the whole run into this wall time (90s, 45m, 6h): fewer samples, shorter energy "
                        "windows, then phases dropped, then the lowest-priority cases skipped ('skipped: suite "
                        "budget'), each with the reason in its record; the run header says whether the budget was "
                        "reached. Give it a few minutes under an outer job timeout")
    p.add_argument("--priority", nargs="+", default=None, metavar="FIELD=VALUE",
                   help="run cases matching these terms first, in the order given (workload=, shape=, precision=, "
                        "backend=), then by each suite entry's 'priority' (higher first), then in suite order")


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
                   help="backend names or 'all' (default: torch, the vendor kernels; add emulated for the "
                        "reference). See `fp8bench list backends`")
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
                        "at exit after an error; needs root; one device (not with --devices). Recorded in the run "
                        "header (clock_lock) and as the clock policy of the comparability key (docs/timing-modes.md)")
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
    _add_plan_arguments(p)
    add_store_flags(p)
    p.add_argument("--no-store", action="store_true", help="write the run file only")
    add_table_flag(p)
    add_json_flag(p)


def execute(args: argparse.Namespace) -> int:
    # Imported only now: the action loads torch, the workloads and the store at its top, which
    # `fp8bench run --help` must not wait for.
    from fp8bench.commands import run

    return run.execute(args)
