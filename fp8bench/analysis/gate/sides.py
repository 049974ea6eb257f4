"""One side of a comparison: its runs turned into per-case samples.

Each side is one run or several interleaved *rounds* (``fp8bench ab``). With rounds, a case's samples are its
per-round medians: drift of the machine (clocks, neighbours, thermals) then shows up as round-to-round spread that
both sides share, instead of hiding inside one long run. The rounds remember their index (``SideCase.by_round``), so
that when both sides' round ``i`` ran back to back (*paired* rounds) the comparison can be made round by round. With a
single run per side the raw samples are used, and the report says that they are treated as independent, which they
are not quite. For another metric than time (energy, SQNR) each record holds one value, so a side's samples are one
value per run.

A case that a side could not measure keeps the status and reason of its first record that failed, was skipped, ran
under an interpreter (:data:`INTERPRETED`: Triton on the CPU, whose timings are never compared) or lacks the gated
metric (:data:`NO_VALUE`: no energy meter, no SQNR). Rounds of one side that disagree on a case's comparability key
are remembered (``key_conflict``): such a case is never compared.

What a side refuses (a harness error, never a pass): a timing sample that is not a finite positive number of seconds
(the file and case are named), and a run that did not finish (status ``interrupted``, ``running`` or
``failed: ...``; :func:`check_finished`) unless ``--allow-partial``: its absent cases would read as removed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fp8bench.analysis.gate.config import GateError
from fp8bench.analysis.gate.metrics import metric_value
from fp8bench.analysis.selection import timings_count
from fp8bench.core.comparability import ComparabilityKey, comparability_key
from fp8bench.core.noise import HostLoad, run_load
from fp8bench.core.records import case_key, load_record
from fp8bench.core.repro import repro_of
from fp8bench.core.run_header import payload_header
from fp8bench.results.runfile import check_seconds

# Statuses a side's case takes when it has nothing to compare: it ran under an interpreter (Triton on the CPU),
# whose timings are never compared, or its record lacks the gated metric (no energy meter, no SQNR).
INTERPRETED = "interpreted"
NO_VALUE = "no value"

# A side of one run is compared on its raw samples (each case's timed calls), a side of rounds on per-round medians.
RAW = "raw samples"


@dataclass
class SideCase:
    """A case as one side measured it, over all of that side's runs."""

    case: str
    key: ComparabilityKey
    precision: str | None = None
    samples: list[float] = field(default_factory=list)
    by_round: dict[int, float] = field(default_factory=dict)  # run index -> that round's median
    status: str = "ok"
    reason: str | None = None
    key_conflict: dict[str, tuple[Any, Any]] | None = None  # rounds of one side disagree on the key
    repro: str | None = None  # the command that measures this case again (fp8bench.core.repro)


@dataclass
class Side:
    run_ids: list[str]
    git_commit: str | None
    cases: dict[str, SideCase]
    sample_unit: str  # "round medians" | "raw samples"
    loaded: dict[str, HostLoad] = field(default_factory=dict)  # run id -> its load, for runs started overloaded


def origin_of(payload: dict[str, Any]) -> str:
    """Where a run payload came from, for messages: its file (set by :func:`fp8bench.results.ingest.load_side`) or
    run id."""
    return str(payload.get("origin") or f"run {payload['run'].get('run_id')}")


FINISHED_STATUSES = ("complete",)


def check_finished(payloads: Sequence[dict[str, Any]], side: str) -> None:
    """Refuse runs that did not finish: their absent cases would read as removed and pass."""
    for payload in payloads:
        run = payload_header(payload)
        status = run.status
        if status is None or status in FINISHED_STATUSES:
            continue  # a file from before statuses were written cannot say; its cases speak for themselves
        done = f" after {run.n_records} of {run.n_cases} cases" if run.n_records is not None and run.n_cases else ""
        raise GateError(f"the {side} {origin_of(payload)} did not finish (status {status!r}{done}); the cases it "
                        "lacks cannot be judged. Rerun it, or pass --allow-partial to gate the cases it has")


def collect_side(payloads: Sequence[dict[str, Any]], metric: str = "median_s") -> Side:
    """Per-case samples of one side: per-round medians with >= 2 runs, else the single run's raw samples.
    Raises :class:`fp8bench.results.runfile.RunFileError` on a timing value that is not finite positive seconds
    (payloads read from files were checked on reading; a store's were not).

    For another ``metric`` than time each record holds one value (energy per iteration, SQNR), so the samples are
    one value per run.
    """
    if not payloads:
        raise GateError("a side of the comparison has no runs")
    rounds = len(payloads) >= 2
    cases: dict[str, SideCase] = {}
    headers = [payload_header(p) for p in payloads]
    for index, payload in enumerate(payloads):
        run = headers[index]
        origin = origin_of(payload)
        for stored in payload["records"]:
            record = load_record(stored, payload["schema_version"])
            name = case_key(record)
            key = comparability_key(record, run)
            entry = cases.setdefault(name, SideCase(name, key, record.precision, repro=repro_of(record, run)))
            if key != entry.key and entry.key_conflict is None:
                entry.key_conflict = entry.key.differences(key)
            if record.interpreted:  # an interpreter's timings (if any were kept) are never compared
                if entry.status == "ok":
                    entry.status, entry.reason = INTERPRETED, "interpreted: not timed"
                continue
            if not timings_count(record, run):
                if entry.status == "ok":
                    entry.status, entry.reason = record.status, record.reason
                continue
            if metric != "median_s":
                value = metric_value(record, metric)
                if value is None:
                    if entry.status == "ok":
                        entry.status, entry.reason = NO_VALUE, f"no {metric} in the record"
                    continue
                entry.samples.append(value)
                entry.by_round[index] = value
            elif rounds:
                if record.samples.median_s is not None:
                    median = check_seconds(record.samples.median_s, f"{origin}: case {name}: median_s")
                    entry.samples.append(median)
                    entry.by_round[index] = median
            else:
                samples = record.samples.samples_s or []
                if not isinstance(samples, list):
                    raise GateError(f"{origin}: case {name}: samples_s must be a list of seconds, got "
                                    f"{type(samples).__name__}")
                entry.samples.extend(check_seconds(v, f"{origin}: case {name}: sample {i}")
                                     for i, v in enumerate(samples))
    commits = {h.git.commit for h in headers}
    unit = ("round medians" if rounds else RAW) if metric == "median_s" else "one value per run"
    loads = {p["run"]["run_id"]: run_load(h) for p, h in zip(payloads, headers, strict=True)}
    return Side([p["run"]["run_id"] for p in payloads], commits.pop() if len(commits) == 1 else None, cases, unit,
                {run_id: load for run_id, load in loads.items() if load is not None and load.overloaded})


def same_runs(base: Side, cand: Side) -> list[str]:
    """Run ids on both sides of a comparison (``gate A A``)."""
    return [r for r in base.run_ids if r in set(cand.run_ids)]
