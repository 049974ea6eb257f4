"""The command that reproduces a record: ``fp8bench run`` with the flags that define its case and its settings.

A record is one case (workload x shape x precision x backend x device) measured under the run's settings (time
budget, sampling policy, threads, seed, FP8 format and accumulation, delayed-scaling options, phases, L2 flushing,
CUDA graphs, energy window). :func:`repro_command` writes those back as ``fp8bench run`` flags, one case, so that
pasting it into a shell measures the same case the same way (on whatever machine the shell is on). A collective
measured by several ranks is started with ``torchrun --nproc-per-node N -m fp8bench run``.

The command is stored in each record (``repro``) as the run writes it; records of older run files and stores
have none, and readers derive it from the record and its run's settings (:func:`repro_of`), which give the same
text.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

# Sampling policy keys of the run settings -> the `fp8bench run` flag that sets each.
POLICY_FLAGS = (("min_samples", "--min-samples"), ("target_rse", "--target-rse"), ("max_time_s", "--max-time"))
# Plain run settings -> flag (values written as they are).
VALUE_FLAGS = (("budget_s", "--budget"), ("threads", "--threads"), ("seed", "--seed"),
               ("amax_history_len", "--amax-history-len"), ("amax_compute_algo", "--amax-compute-algo"),
               ("margin", "--margin"), ("energy_window_s", "--energy-window"), ("idle_baseline_s", "--idle-baseline"),
               ("cooldown_s", "--cooldown"), ("clock_floor", "--clock-floor"))
# Switches: (setting, the value that needs the flag, flag).
SWITCHES = (("phases", False, "--no-phases"), ("flush_l2", False, "--no-l2-flush"), ("cuda_graph", True, "--cuda-graph"),
            ("energy", False, "--no-energy"), ("energy_phases", True, "--energy-phases"),
            ("strict_clocks", True, "--strict-clocks"))


def shape_text(shape: Mapping[str, Any] | str) -> str:
    """``m=256,n=256,k=256``: the ``key=value`` form ``--shape`` takes for every workload (a store's shape column
    already holds it)."""
    if isinstance(shape, str):
        return shape
    return ",".join(f"{k}={v}" for k, v in shape.items())


def _number(value: Any) -> str:
    return format(value, "g") if isinstance(value, float) else str(value)


def repro_argv(record: Mapping[str, Any], settings: Mapping[str, Any] | None, world_size: int = 1) -> list[str]:
    """The argument vector (``fp8bench run ...`` or ``torchrun ... -m fp8bench run ...``) of one record."""
    settings = settings or {}
    argv = ["fp8bench", "run"] if world_size <= 1 else ["torchrun", "--nproc-per-node", str(world_size), "-m",
                                                        "fp8bench", "run"]
    argv += ["--workload", str(record["workload"]), "--shape", shape_text(record.get("shape") or {}),
             "--precision", str(record["precision"]), "--backend", str(record["backend"]),
             "--device", str(record.get("device") or settings.get("device") or "auto")]
    policy = settings.get("policy") or {}
    for key, flag in POLICY_FLAGS:
        if policy.get(key) is not None:
            argv += [flag, _number(policy[key])]
    for key, flag in VALUE_FLAGS:
        if settings.get(key) is not None:
            argv += [flag, _number(settings[key])]
    # The format as the run asked for it: none asked means each recipe's default, which the record's format is.
    fmt = settings.get("fp8_format") if "fp8_format" in settings else record.get("fp8_format")
    if fmt:
        argv += ["--fp8-format", str(fmt)]
    if record.get("accumulation"):
        argv += ["--fast-accum", "off" if record["accumulation"] == "full" else "on"]
    for key, needs, flag in SWITCHES:
        if key in settings and bool(settings[key]) == needs:
            argv.append(flag)
    if settings.get("profile"):
        argv += ["--profile", str(settings["profile"])]
    return argv


def repro_command(record: Mapping[str, Any], settings: Mapping[str, Any] | None, world_size: int = 1) -> str:
    """:func:`repro_argv` as one shell-quoted line."""
    return shlex.join(repro_argv(record, settings, world_size))


def world_size_of(record: Mapping[str, Any], run: Mapping[str, Any]) -> int:
    """Ranks that measured a record (1 unless a distributed run says otherwise)."""
    for source in (record, run, run.get("distributed") or {}):
        value = source.get("world_size") if isinstance(source, Mapping) else None
        if isinstance(value, int) and value > 1:
            return value
    return 1


def repro_of(record: Mapping[str, Any], run: Mapping[str, Any] | None) -> str:
    """A record's stored command, or the one derived from it and its run (records written before it was stored)."""
    stored = record.get("repro")
    if isinstance(stored, str) and stored:
        return stored
    run = run or {}
    return repro_command(record, run.get("settings"), world_size_of(record, run))


# Columns of a store's record frame that the command is made of.
FRAME_COLUMNS = ("workload", "shape", "precision", "backend", "device", "fp8_format", "accumulation", "run_id")


def frame_commands(records: Any, headers: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The command of each row of a store's record frame (its typed columns), with ``headers`` mapping run ids to
    run headers (their settings): the same text :func:`repro_of` gives for the stored record."""
    out = []
    for row in records[list(FRAME_COLUMNS)].to_dict("records"):
        row = {k: (None if v != v else v) for k, v in row.items()}  # NaN -> None
        out.append(repro_of(row, headers.get(row["run_id"]) or {}))
    return out
