"""The command that reproduces a record: ``fp8bench run`` with the flags that define its case and its settings.

A record is one case (workload x shape x precision x backend x device) measured under the run's settings (time
budget, sampling policy, threads, seed, FP8 format and accumulation, delayed-scaling options, phases, L2 flushing,
CUDA graphs, energy window). :func:`repro_command` writes those back as ``fp8bench run`` flags, one case, so that
pasting it into a shell measures the same case the same way (on whatever machine the shell is on). A collective
measured by several ranks on one node is started with ``torchrun --nproc-per-node N -m fp8bench run`` and the
record's device kind (``cuda``: each rank takes its own GPU, cuda:LOCAL_RANK; ``cpu``), not the GPU of the rank whose
record it is; a run over several nodes needs a rendezvous on each node, which no single command gives, so it gets
none, as does one that did not record its ranks per node.

The command is stored in each record (``repro``) as the run writes it, for people reading the run file. Nothing
fp8bench shows is ever that stored text: a run file or store can come from anyone (a pull request's head side
writes its own records in CI), and a stored ``fp8bench run ...; touch X`` pasted from a report would run both. Every
command shown to be pasted (gate reports, pull-request comments, ``changes --json``, bisect issue bodies, the
dashboard) is derived again from the record's typed fields and its run's settings (:func:`repro_of`), and each
field must have the form the command line itself accepts (a registered name, a device, integer shape values, finite
numbers) before it is quoted: a field that does not raises :class:`UnsafeField` naming the field (never echoing
its value), and displays then show :func:`no_command`, a shell comment, instead of a command. A quoted command is
never rewritten after quoting.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from fp8bench.core.records import Record, fields_of
from fp8bench.core.run_header import RunHeader, header_of

# Sampling policy keys of the run settings -> the `fp8bench run` flag that sets each.
POLICY_FLAGS = (("min_samples", "--min-samples"), ("target_rse", "--target-rse"), ("max_time_s", "--max-time"))
# Settings written only where the run changed them from the default a run gets without the flag (the default
# beside each), so that commands stay short and bisect's probes of commits before the flag existed still parse them;
# a test keeps these defaults equal to fp8bench.measure.settings' (core stays free of the layers above it).
CHANGED_FLAGS = (("throttle_threshold", "--throttle-threshold", 0.75),
                 ("throttle_recovery_s", "--throttle-recovery-delay", 0.05),
                 ("energy_error_target", "--energy-error", 0.01))
# Plain run settings -> flag (values written as they are).
VALUE_FLAGS = (("budget_s", "--budget"), ("threads", "--threads"), ("seed", "--seed"),
               ("amax_history_len", "--amax-history-len"), ("amax_compute_algo", "--amax-compute-algo"),
               ("margin", "--margin"), ("energy_window_s", "--energy-window"), ("idle_baseline_s", "--idle-baseline"),
               ("cooldown_s", "--cooldown"), ("clock_floor", "--clock-floor"), ("lock_clocks", "--lock-clocks"))
# Switches: (setting, the value that needs the flag, flag).
SWITCHES = (("phases", False, "--no-phases"), ("flush_l2", False, "--no-l2-flush"),
            ("cuda_graph", True, "--cuda-graph"), ("energy", False, "--no-energy"),
            ("energy_phases", True, "--energy-phases"), ("strict_clocks", True, "--strict-clocks"),
            ("blocked_stream", True, "--blocked-stream"))


# What a field may hold to become part of a command: the forms the command line accepts, and no other character.
# Registered names (workloads, precisions, backends, formats, profilers, amax algorithms; plugins' names too).
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*\Z")
_DEVICE = re.compile(r"(auto|cpu|cuda(:[0-9]+)?)\Z")
_SHAPE = re.compile(r"[a-z_][a-z0-9_]*=[A-Za-z0-9_.+-]+(,[a-z_][a-z0-9_]*=[A-Za-z0-9_.+-]+)*\Z")


class NoCommand(ValueError):
    """No command reproduces the record; the message says why (for :func:`no_command`)."""


class UnsafeField(NoCommand):
    """A record field that does not have the form its flag takes, so no command is made of it. The message names
    the field and the accepted form, never the value (which may hold terminal escapes or shell syntax)."""


def _checked(field: str, value: Any, pattern: re.Pattern[str], accepted: str) -> str:
    if not isinstance(value, str) or not pattern.match(value):
        raise UnsafeField(f"field {field!r} is not {accepted}")
    return value


def shape_text(shape: Mapping[str, Any] | str) -> str:
    """``m=256,n=256,k=256``: the ``key=value`` form ``--shape`` takes for every workload (a store's shape column
    already holds it). :class:`UnsafeField` for anything but lowercase keys and numbers or names as values."""
    if not isinstance(shape, str):
        shape = ",".join(f"{k}={v}" for k, v in shape.items())
    return _checked("shape", shape, _SHAPE, "key=value pairs of numbers or names")


def _number(field: str, value: Any) -> str:
    """A setting's value as its flag takes it: a finite number, or a registered name (``--amax-compute-algo``)."""
    if isinstance(value, bool):
        raise UnsafeField(f"field {field!r} is not a number")
    if isinstance(value, (int, float)) and math.isfinite(value):
        return format(value, "g") if isinstance(value, float) else str(value)
    return _checked(field, value, _NAME, "a finite number or a name")


def repro_argv(record: Record | Mapping[str, Any], settings: Mapping[str, Any] | None,
               world_size: int = 1, ranks_per_node: int | None = None) -> list[str]:
    """The argument vector (``fp8bench run ...`` or ``torchrun ... -m fp8bench run ...``) of one record (typed, or a
    store frame's row of the :data:`FRAME_COLUMNS`) measured by ``world_size`` ranks, ``ranks_per_node`` of them on
    each node (``None``: not recorded, taken as one node), each value checked for the form its flag takes
    (:class:`UnsafeField` when one is not; :class:`NoCommand` for a run over several nodes)."""
    settings = settings or {}
    workload, shape, precision, backend, device, fp8_format, accumulation = fields_of(
        record, "workload", "shape", "precision", "backend", "device", "fp8_format", "accumulation")
    argv = ["fp8bench", "run"]
    if world_size > 1:
        if ranks_per_node is None:
            raise NoCommand(f"measured by {world_size} ranks, and the run did not record how many were on each node")
        if ranks_per_node < world_size:
            raise NoCommand(f"measured by {world_size} ranks over several nodes ({ranks_per_node} each): start "
                            f"torchrun on each node with a rendezvous")
        argv = ["torchrun", "--nproc-per-node", str(int(world_size)), "-m", "fp8bench", "run"]
        # The device kind, not rank 0's own GPU: under torchrun ``cuda`` gives each rank cuda:LOCAL_RANK.
        device = "cuda" if isinstance(device, str) and device.startswith("cuda") else device
    names = "a registered name"
    argv += ["--workload", _checked("workload", workload, _NAME, names),
             "--shape", shape_text(shape or {}),
             "--precision", _checked("precision", precision, _NAME, names),
             "--backend", _checked("backend", backend, _NAME, names),
             "--device", _checked("device", device or settings.get("device") or "auto", _DEVICE,
                                  "a device (auto, cpu, cuda, cuda:N)")]
    policy = settings.get("policy") or {}
    for key, flag in POLICY_FLAGS:
        if policy.get(key) is not None:
            argv += [flag, _number(key, policy[key])]
    for key, flag in VALUE_FLAGS:
        if settings.get(key) is not None:
            argv += [flag, _number(key, settings[key])]
    for key, flag, default in CHANGED_FLAGS:
        if key in settings and settings[key] != default:  # energy_error_target null: --energy-error 0
            argv += [flag, _number(key, settings[key] or 0)]
    # The format as the run asked for it: none asked means each recipe's default, which the record's format is.
    fmt = settings.get("fp8_format") if "fp8_format" in settings else fp8_format
    if fmt:
        argv += ["--fp8-format", _checked("fp8_format", fmt, _NAME, names)]
    if accumulation:
        argv += ["--fast-accum", "off" if accumulation == "full" else "on"]
    for key, needs, flag in SWITCHES:
        if key in settings and bool(settings[key]) == needs:
            argv.append(flag)
    if settings.get("profile"):
        argv += ["--profile", _checked("profile", settings["profile"], _NAME, names)]
    return argv


def repro_command(record: Record | Mapping[str, Any], settings: Mapping[str, Any] | None, world_size: int = 1,
                  ranks_per_node: int | None = None) -> str:
    """:func:`repro_argv` as one shell-quoted line."""
    return shell_line(repro_argv(record, settings, world_size, ranks_per_node))


def ranks_of(record: Record | Mapping[str, Any], run: RunHeader | Mapping[str, Any] | None) -> tuple[int, int | None]:
    """Ranks that measured a record, and how many of them were on each node (``None``: not recorded): the record's
    own ``world_size`` where it holds one, else its run's (the header's ``spec.distributed``; 1 unless the run was
    under torchrun)."""
    header = header_of(run)
    value = record.get("world_size") if isinstance(record, Mapping) else None
    if isinstance(value, int) and not isinstance(value, bool) and value > 1:
        return value, header.ranks_per_node if header.world_size == value else None
    return header.world_size, header.ranks_per_node


def no_command(reason: str) -> str:
    """What a display shows in place of a command it cannot make: a shell comment, harmless if pasted."""
    return f"# no command: {reason}"


def repro_of(record: Record | Mapping[str, Any], run: RunHeader | Mapping[str, Any] | None) -> str:
    """The command that measures ``record`` again, derived from its typed fields and its run's settings (the
    stored ``repro`` text is never used: see the module docstring); :func:`no_command` when a field is unsafe."""
    header = header_of(run)
    try:
        return repro_command(record, header.settings, *ranks_of(record, header))
    except NoCommand as exc:
        return no_command(str(exc))


def shell_line(argv: Sequence[str]) -> str:
    """``argv`` as one shell-quoted line; :class:`UnsafeField` when an argument holds a control character (a
    terminal would act on it even inside quotes)."""
    for arg in argv:
        if re.search(r"[\x00-\x1f\x7f-\x9f]", arg):
            raise UnsafeField("an argument holds a control character")
    return shlex.join(argv)


# Columns of a store's record frame that the command is made of.
FRAME_COLUMNS = ("workload", "shape", "precision", "backend", "device", "fp8_format", "accumulation", "run_id")


def frame_commands(records: Any, headers: Mapping[str, RunHeader | Mapping[str, Any]]) -> list[str]:
    """The command of each row of a store's record frame (its typed columns), with ``headers`` mapping run ids to
    run headers (their settings): the same text :func:`repro_of` gives for the stored record."""
    out, typed = [], {run_id: header_of(header) for run_id, header in headers.items()}
    for row in records[list(FRAME_COLUMNS)].to_dict("records"):
        row = {k: (None if v != v else v) for k, v in row.items()}  # NaN -> None
        out.append(repro_of(row, typed.get(row["run_id"])))
    return out
