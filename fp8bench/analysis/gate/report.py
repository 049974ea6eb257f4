"""The gate's report: every case's result, the config, and what the sides were; JSON only where it is written.

:class:`GateReport` is what :func:`gate` and the A/B orchestration return and what the Markdown renderer, the
commands and bisect read. The overall verdict, the exit code, the counts and the regressed cases are derived from
the cases each time they are asked for, never stored beside them, so a report whose cases change (a rerun merged in,
:func:`merge_rerun`) cannot disagree with itself. Sections that an A/B run adds are typed too: :class:`AbInfo` (the
two checkouts, their rounds and environments), :class:`SequentialInfo` (a sequential A/B's rounds and why it
stopped) and :class:`RerunInfo` (the rounds that reran inconclusive cases).

:meth:`GateReport.to_json` gives the shape every fp8bench version has written (report.json, ``--json``, the store's
``gate_reports`` table), key for key; :meth:`GateReport.from_json` reads any of them back, a field an old report
predates taking its default and a section this version does not know kept as it was read (``extra``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime, timezone
from typing import Any

import numpy as np

from fp8bench.analysis.gate.config import DEFAULT_CONFIG, GateConfig, GateError
from fp8bench.analysis.gate.decision import (
    COMPARED,
    NOISY_ADVICE,
    REGRESSING,
    VERDICT_ORDER,
    CaseResult,
    FirstLook,
    Verdict,
    compare_sides,
    exit_code_for,
    overall_verdict,
)
from fp8bench.analysis.gate.sides import RAW, Side, check_finished, collect_side, same_runs


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``data`` that are fields of the dataclass ``cls`` (a newer writer's extra keys dropped)."""
    return {f.name: data[f.name] for f in fields(cls) if f.name in data}


@dataclass(frozen=True)
class RerunInfo:
    """The rounds that measured again the cases the first rounds left inconclusive (comma-separated run ids)."""

    base_run_id: str
    cand_run_id: str


@dataclass(frozen=True)
class SequentialInfo:
    """How a sequential A/B (``fp8bench ab --budget``) ran: its design, the rounds it took (seconds each) and why
    it stopped ("all decided", "max rounds" or "budget")."""

    method: str
    budget_s: float
    min_rounds: int
    max_rounds: int | None
    design_rounds: int
    rounds: int
    stopped: str
    elapsed_s: float
    round_seconds: list[float]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SequentialInfo:
        defaults = {"method": "confidence sequence", "budget_s": 0.0, "min_rounds": 0, "max_rounds": None,
                    "design_rounds": 0, "rounds": 0, "stopped": "", "elapsed_s": 0.0, "round_seconds": []}
        return cls(**{**defaults, **_known(cls, data)})


@dataclass(frozen=True)
class AbInfo:
    """What an A/B report adds: the two checkouts, the rounds, the arguments each round ran, each side's extra
    environment (names only: values masked), whether each checkout had uncommitted changes (``None``: unknown),
    the round time limit (seconds), the fp8bench package each worker loaded and the git refs given by name."""

    base_root: str = ""
    head_root: str = ""
    rounds: int | None = None
    run_args: list[str] = field(default_factory=list)
    base_env: dict[str, str] = field(default_factory=dict)
    head_env: dict[str, str] = field(default_factory=dict)
    dirty: dict[str, bool | None] = field(default_factory=dict)
    round_timeout_s: float | None = None
    worker_packages: dict[str, str] = field(default_factory=dict)
    refs: dict[str, str] | None = None  # side -> git ref, set by the command once the checkouts are made

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if self.refs is None:
            del out["refs"]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AbInfo:
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class GateReport:
    """The whole gate outcome. ``*_run_ids`` are each side's runs (one per round); ``git_commit`` is the
    candidate's; ``*_sample_unit`` says what a sample is ("round medians", "raw samples", "one value per run");
    ``*_loaded_runs`` are the runs that started with the host overloaded; ``repro`` maps each regressed case to
    the command that measures it again (``None``: none could be written)."""

    cases: tuple[CaseResult, ...]
    config: GateConfig
    base_run_ids: tuple[str, ...]
    cand_run_ids: tuple[str, ...]
    git_commit: str | None = None
    base_git_commit: str | None = None
    base_sample_unit: str = RAW
    cand_sample_unit: str = RAW
    notes: tuple[str, ...] = ()
    base_loaded_runs: tuple[str, ...] = ()
    cand_loaded_runs: tuple[str, ...] = ()
    repro: dict[str, str | None] = field(default_factory=dict)
    report_id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    created_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat())
    rerun: RerunInfo | None = None
    sequential: SequentialInfo | None = None
    ab: AbInfo | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # sections of a stored report this version does not know

    @property
    def verdict(self) -> str:
        """The overall verdict word: pass, regression, inconclusive or noisy (:func:`overall_verdict`)."""
        return overall_verdict(self.cases)

    @property
    def exit_code(self) -> int:
        return exit_code_for(self.cases, self.config.fail_on)

    @property
    def counts(self) -> dict[Verdict, int]:
        """How many cases have each verdict, every verdict listed, in :data:`VERDICT_ORDER`."""
        return {v: sum(c.verdict is v for c in self.cases) for v in VERDICT_ORDER}

    @property
    def slower_cases(self) -> list[str]:
        """The cases that regressed (slower, worse, broken or missing), in the report's order."""
        return [c.case for c in self.cases if c.verdict in REGRESSING]

    @property
    def compared_any(self) -> bool:
        return any(c.verdict in COMPARED for c in self.cases)

    @property
    def unchecked_pass(self) -> bool:
        """``--fail-on regression`` and no case compared: the job passes although the gate checked nothing."""
        return self.config.fail_on == "regression" and not self.compared_any

    def case(self, name: str) -> CaseResult:
        """The result of the case named ``name``; a :class:`KeyError` naming it otherwise."""
        for c in self.cases:
            if c.case == name:
                return c
        raise KeyError(f"no case {name!r} in report {self.report_id}")

    def to_json(self) -> dict[str, Any]:
        """The report as report.json, ``--json`` and the store hold it."""
        out = {"report_id": self.report_id, "created_at": self.created_at,
               "base_run_id": ",".join(self.base_run_ids), "cand_run_id": ",".join(self.cand_run_ids),
               "git_commit": self.git_commit, "base_git_commit": self.base_git_commit,
               "verdict": self.verdict, "exit_code": self.exit_code,
               "rounds": {"base": len(self.base_run_ids), "cand": len(self.cand_run_ids)},
               "sample_unit": {"base": self.base_sample_unit, "cand": self.cand_sample_unit},
               "config": self.config.to_json(), "counts": {v.value: n for v, n in self.counts.items()},
               "cases": [c.to_json() for c in self.cases], "notes": list(self.notes),
               # Which runs started under load: a note says how many, this says which (a long A/B has hundreds).
               "loaded_runs": {"base": list(self.base_loaded_runs), "candidate": list(self.cand_loaded_runs)},
               "slower_cases": self.slower_cases,
               # How to measure each regressed case again, on its own: the candidate's command for it.
               "repro": dict(self.repro)}
        if self.rerun is not None:
            out["rerun"] = {**asdict(self.rerun), "cases": [c.case for c in self.cases if c.rerun]}
        if self.sequential is not None:
            out["sequential"] = asdict(self.sequential)
        if self.ab is not None:
            out["ab"] = self.ab.to_json()
        return {**out, **self.extra}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GateReport:
        """A report as any fp8bench version wrote it (report.json, ``--json``, the store's ``data`` column).
        Derived values (verdict, exit code, counts, slower cases) are recomputed from the cases."""
        sample_unit, loaded = data.get("sample_unit") or {}, data.get("loaded_runs") or {}
        rerun, sequential, ab = data.get("rerun"), data.get("sequential"), data.get("ab")
        return cls(
            cases=tuple(CaseResult.from_json(c) for c in data["cases"]),
            config=GateConfig.from_json(data.get("config") or {}),
            base_run_ids=_run_ids(data.get("base_run_id")), cand_run_ids=_run_ids(data.get("cand_run_id")),
            git_commit=data.get("git_commit"), base_git_commit=data.get("base_git_commit"),
            base_sample_unit=sample_unit.get("base", RAW), cand_sample_unit=sample_unit.get("cand", RAW),
            notes=tuple(data.get("notes") or ()), base_loaded_runs=tuple(loaded.get("base") or ()),
            cand_loaded_runs=tuple(loaded.get("candidate") or ()), repro=dict(data.get("repro") or {}),
            report_id=data.get("report_id") or uuid.uuid4().hex[:16], created_at=data.get("created_at") or "",
            rerun=RerunInfo(rerun.get("base_run_id", ""), rerun.get("cand_run_id", "")) if rerun else None,
            sequential=SequentialInfo.from_json(sequential) if sequential else None,
            ab=AbInfo.from_json(ab) if ab else None,
            extra={k: v for k, v in data.items() if k not in _WRITTEN})


# The keys GateReport.to_json writes, derived ones included; from_json keeps any other key as it was read.
_WRITTEN = frozenset({"report_id", "created_at", "base_run_id", "cand_run_id", "git_commit", "base_git_commit",
                      "verdict", "exit_code", "rounds", "sample_unit", "config", "counts", "cases", "notes",
                      "loaded_runs", "slower_cases", "repro", "rerun", "sequential", "ab"})


def _run_ids(joined: str | None) -> tuple[str, ...]:
    """A side's run ids from the report's comma-separated field."""
    return tuple(joined.split(",")) if joined else ()


def _load_note(side_name: str, side: Side) -> str:
    """One note for all the runs of a side that started under load: one run by its id, many by their count and
    the range of their load (each run's id and load stay in the JSON report)."""
    loads = list(side.loaded.values())
    if len(loads) == 1:
        [(run_id, load)] = side.loaded.items()
        return f"the {side_name} run {run_id} started at {load.describe()}: its timings are noisy"
    averages = sorted(load.load_1m for load in loads)
    cpus = sorted({load.cpus for load in loads})
    where = (f"load average {averages[0]:.2f}" if averages[0] == averages[-1]
             else f"load average {averages[0]:.2f} to {averages[-1]:.2f}")
    return (f"{len(loads)} of {len(side.run_ids)} {side_name} runs started at {where} on "
            f"{'/'.join(map(str, cpus))} CPU(s): their timings are noisy (loaded_runs in the JSON report)")



def build_report(base: Side, cand: Side, config: GateConfig = DEFAULT_CONFIG,
                 results: Sequence[CaseResult] | None = None, notes: Sequence[str] = ()) -> GateReport:
    """The whole gate outcome: ``results`` (by default :func:`compare_sides` of the two sides) with the notes a
    reader needs to trust them."""
    cases = tuple(compare_sides(base, cand, config) if results is None else results)
    all_notes = list(notes)
    if RAW in (base.sample_unit, cand.sample_unit):
        all_notes.append("one run per side: raw samples of one run are treated as independent, which overstates "
                         "confidence; interleaved rounds (`fp8bench ab`) are the reliable method")
    if not any(c.verdict in COMPARED for c in cases):
        all_notes.append("no case could be compared")
    for side_name, side in (("base", base), ("candidate", cand)):
        if side.loaded:
            all_notes.append(_load_note(side_name, side))
    if any(c.verdict is Verdict.NOISY for c in cases):
        all_notes.append(f"noisy: a difference within the noise of one side is not called a regression; "
                         f"{NOISY_ADVICE}")
    shared = same_runs(base, cand)
    if shared:
        all_notes.append(SAME_RUN_NOTE.format(runs=", ".join(shared)))
    return GateReport(cases, config, tuple(base.run_ids), tuple(cand.run_ids), cand.git_commit, base.git_commit,
                      base.sample_unit, cand.sample_unit, tuple(all_notes), tuple(sorted(base.loaded)),
                      tuple(sorted(cand.loaded)),
                      {c.case: cand.cases[c.case].repro for c in cases
                       if c.verdict in REGRESSING and c.case in cand.cases})


SAME_RUN_NOTE = ("base and candidate share run(s) {runs}: those cases are compared with themselves, so the verdict "
                 "says nothing about a change (for an A/A noise check, measure the same code twice)")


def gate(base_payloads: Sequence[dict[str, Any]], cand_payloads: Sequence[dict[str, Any]],
         config: GateConfig = DEFAULT_CONFIG) -> GateReport:
    """Compare run payloads of the base and the candidate; returns the report. Raises :class:`GateError` on
    input it cannot judge (see :mod:`fp8bench.analysis.gate.sides`)."""
    if not config.allow_partial:
        check_finished(base_payloads, "base")
        check_finished(cand_payloads, "candidate")
    return build_report(collect_side(base_payloads, config.metric), collect_side(cand_payloads, config.metric), config)


def merge_rerun(first: GateReport, rerun: GateReport) -> GateReport:
    """Take the rerun's verdicts for the cases the first report left inconclusive (each is rerun once only); the
    first report's config and notes stay. A case the rerun finds regressed gets the rerun's command to measure it
    again, as one regressed at the first look has the first's."""
    again = {c.case: c for c in rerun.cases}
    cases = tuple(replace(again[c.case], rerun=True, first=FirstLook(c.verdict, c.reason, c.ratio, c.ci_low,
                                                                    c.ci_high))
                  if c.verdict is Verdict.INCONCLUSIVE and c.case in again else c for c in first.cases)
    repro = {**first.repro, **{c.case: rerun.repro[c.case] for c in cases if c.rerun and c.case in rerun.repro}}
    return replace(first, cases=cases, repro=repro,
                   rerun=RerunInfo(",".join(rerun.base_run_ids), ",".join(rerun.cand_run_ids)))


def aa_noise_of(report: GateReport) -> float:
    """The A/A noise of a runner from an A/A gate report: the median over compared cases of ``|ratio - 1|``."""
    deviations = [abs(c.ratio - 1) for c in report.cases if c.ratio is not None]
    if not deviations:
        raise GateError("the A/A report has no compared case to estimate noise from")
    return float(np.median(deviations))
