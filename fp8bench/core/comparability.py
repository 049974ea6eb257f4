"""When two measurements of a case may be compared at all: the comparability key.

A timing ratio only means something if both sides ran the same case on the same kind of machine under the same
software and power regime. A 5% "regression" between an H100 at 700 W and one capped at 500 W, or between torch
2.5 and 2.6, says nothing about the kernel change under review. The key is built from stable fields only:

* device name (``run.device.name``: the GPU model, or the CPU model on a CPU run);
* NVIDIA driver major version and CUDA driver version (``run.gpu``; absent on a CPU run, then ``None``);
* CUDA runtime torch was built with and the torch version (``run.software``);
* power limit in watts and clock policy (``run.gpu``: a locked-clock run and a boost-clock run differ by design);
* the case itself (workload, shape, precision with its FP8 format, device kind) and its backend;
* the scale factors the library ran with, where it states them (``scale_format``: Transformer Engine's
  Float8CurrentScaling and Float8BlockScaling can round scales to powers of two; see
  :data:`fp8bench.core.records.SCALE_FORMATS`). A record that states none (every other backend, and TE records written
  before it was stated, whose block scaling most likely ran TE's power-of-two default) keys ``None``; TE records
  stating ``fp32`` therefore never share a key with those older ones, and no other record's key changes;
* a definition hash: SHA-256 of everything that defines what is timed apart from the kernel's code (the case, its
  delayed-scaling settings if any, the run settings that change the measured region: L2 flushing, the input seed and
  the CPU thread count, the timing mode when it is ``cuda_graph`` or ``blocked_stream``, and for a distributed run the
  number of ranks and of ranks per node, from the run header's ``spec.distributed``).

Graph replays and eager calls measure different things (a replay has no launch gaps; see
:mod:`fp8bench.measure.timing`), so a ``cuda_graph`` (or ``blocked_stream``) record never shares a key with an eager
one: its case names the mode (:func:`fp8bench.core.records.case_key`) and the mode enters its definition hash. Both
happen only for graph records: the key of every eager record, and of every record written before the mode was recorded
(all eager), is unchanged, so keys already in a store stay valid.

Fields such as the host name, the git commit, the date or the sampling policy are deliberately left out: the gate
compares commits, possibly on different runners of one pool, and a sampling policy changes how many samples are
taken, not what one sample means.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from fp8bench.core.records import SEPARATE_TIMING_MODES, Record, case_key, full_accum_variant
from fp8bench.core.run_header import RunHeader, header_of

# Run settings that change what one sample measures (see the module docstring).
DEFINITION_SETTINGS = ("flush_l2", "seed", "threads")


@dataclass(frozen=True)
class ComparabilityKey:
    device_name: str | None
    driver_major: str | None
    cuda_driver: str | None
    cuda_runtime: str | None
    torch: str | None
    power_limit_w: float | None
    clock_policy: str | None
    case: str
    backend: str
    definition_hash: str
    scale_format: str | None = None

    def differences(self, other: ComparabilityKey) -> dict[str, tuple[Any, Any]]:
        """Fields that differ, as ``name -> (self's value, other's value)``."""
        mine, theirs = asdict(self), asdict(other)
        return {k: (mine[k], theirs[k]) for k in mine if mine[k] != theirs[k]}

    def to_dict(self) -> dict[str, Any]:
        """The fields, without those added later while they are unset: keys made before a field existed keep
        their text (:func:`key_string`, stored in the store's ``comparability_key`` column)."""
        return {k: v for k, v in asdict(self).items() if not (k in _ADDED_FIELDS and v is None)}


# Fields added to the key after keys were first stored, left out of its text while unset (ComparabilityKey.to_dict).
_ADDED_FIELDS = ("scale_format",)


def describe_differences(differences: dict[str, tuple[Any, Any]]) -> str:
    """``torch (2.13.0 -> 2.14.0), definition_hash``: each differing field with its two values (``unrecorded`` for a
    value a record does not state), the hash by name only."""
    def shown(value: Any) -> str:
        return "unrecorded" if value is None else str(value)

    return ", ".join(k if k == "definition_hash" else f"{k} ({shown(a)} -> {shown(b)})"
                     for k, (a, b) in differences.items())


def _driver_major(version: Any) -> str | None:
    """``"550.54.15"`` -> ``"550"``: minor driver updates keep kernel timings, a new major branch may not."""
    if version in (None, ""):
        return None
    return str(version).split(".", 1)[0]


def definition_hash(record: Record, run: RunHeader | Mapping[str, Any]) -> str:
    """SHA-256 (first 16 hex digits) of the case definition and the settings that change the timed region."""
    header = header_of(run)
    definition: dict[str, object] = {
        "workload": record.workload, "shape": record.shape, "precision": record.precision,
        "fp8_format": record.fp8_format, "backend": record.backend,
        "settings": {k: header.setting(k) for k in DEFINITION_SETTINGS},
        # A pytest-benchmark case may carry its own definition (e.g. a parametrization that is not a shape).
        "case_definition": (record.extra or {}).get("case_definition"),
    }
    if full_accum_variant(record):
        # Full-precision accumulation runs another kernel. Only the non-default mode enters the hash, so keys of
        # records made before accumulation was recorded (all in the default mode) stay what they were.
        definition["accumulation"] = "full"
    if record.delayed_scaling:  # history, amax algorithm and margin change what a delayed case computes
        definition["delayed_scaling"] = record.delayed_scaling.to_json()
    if record.timing_mode in SEPARATE_TIMING_MODES:  # only then: eager hashes stay as they were (module docstring)
        definition["timing_mode"] = record.timing_mode
    distributed = header.distributed
    if distributed:  # only then, as above: ranks and their spread over nodes change what a sample is
        definition["distributed"] = {k: distributed.get(k) for k in ("world_size", "ranks_per_node")}
    text = json.dumps(definition, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def comparability_key(record: Record, run: RunHeader | Mapping[str, Any]) -> ComparabilityKey:
    """The key of one record (a stored one: :func:`fp8bench.core.records.load_record`) in the run whose header is
    ``run`` (a reader of many records loads it once: :func:`fp8bench.core.run_header.load_header`). Missing GPU
    fields read as ``None``."""
    header = header_of(run)
    gpu, power = header.gpu, header.gpu.power_limit_w
    return ComparabilityKey(
        device_name=header.device.name,
        driver_major=_driver_major(gpu.driver_version),
        cuda_driver=None if gpu.cuda_driver_version is None else str(gpu.cuda_driver_version),
        cuda_runtime=header.software.cuda_runtime,
        torch=header.software.torch,
        power_limit_w=None if power is None else round(float(power), 1),
        clock_policy=gpu.clock_policy,
        case=case_key(record),
        backend=record.backend,
        definition_hash=definition_hash(record, header),
        scale_format=record.scale_format,
    )


def key_string(key: ComparabilityKey) -> str:
    """A compact, stable text form (for a store column or a log line)."""
    return hashlib.sha256(json.dumps(key.to_dict(), sort_keys=True, default=str).encode()).hexdigest()[:24]
