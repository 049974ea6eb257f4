"""The rounds of a sequential A/B (``fp8bench ab --budget``): both sides' workers take turns, and after each round
from the first look on the gate judges every case by the confidence sequence of
:mod:`fp8bench.analysis.gate.sequential`; the rounds stop when every case is decided, at the round limit, or when
another round would not fit in the budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from fp8bench.analysis.gate.config import GateConfig
from fp8bench.analysis.gate.decision import CaseResult
from fp8bench.analysis.gate.report import GateReport, SequentialInfo, build_report
from fp8bench.analysis.gate.sequential import METHOD, SequentialConfig, finish, judge, undecided
from fp8bench.analysis.gate.sides import Side, collect_side
from fp8bench.orchestration.ab import AbError, SideSpec, Worker, ab_info, round_order
from fp8bench.results.ingest import load_side


@dataclass
class RoundsSoFar:
    """What a sequential run has measured: the round files of each side and the time they took."""

    folder: Path
    rounds: int = 0
    started: float = 0.0
    round_seconds: list[float] | None = None

    def file(self, side: str, r: int) -> Path:
        return self.folder / side / f"r{r:03d}.json"

    def sides(self) -> tuple[Side, Side]:
        return (collect_side(load_side(str(self.folder / "base"))),
                collect_side(load_side(str(self.folder / "head"))))


def check_folder(folder: Path, force: bool) -> None:
    """Refuse round files of an earlier run in ``folder`` unless ``force``; they would be read as this run's."""
    for side in ("base", "head"):
        old = sorted((folder / side).glob("r*.json"))
        if old and not force:
            raise AbError(f"{folder / side} already holds round files ({old[0].name}, ...); give another --out "
                          "or --force")
        for path in old:
            path.unlink()


def run_sequential(workers: dict[str, Worker], run_args: Sequence[str], folder: Path, seq: SequentialConfig,
                   config: GateConfig, on_round: Callable[[int, str], None] | None = None,
                   on_look: Callable[[int, list[str]], None] | None = None, round_timeout_s: float | None = None,
                   clock: Callable[[], float] = time.monotonic) -> GateReport:
    """Interleaved rounds (ABBA) with a look after each from ``seq.min_rounds`` on; stops when every case is
    decided, at ``seq.max_rounds``, or when another round would not fit in ``seq.budget_s`` (judged by the mean
    round time so far). Returns the gate report with a ``sequential`` section."""
    config = replace(config, paired=True)
    for side in ("base", "head"):
        (folder / side).mkdir(parents=True, exist_ok=True)
    state = RoundsSoFar(folder, 0, clock(), [])
    assert state.round_seconds is not None
    frozen: dict[str, CaseResult] = {}
    results: list[CaseResult] = []
    stopped = "budget"
    while True:
        began = clock()
        r = state.rounds
        for name in round_order(r):
            workers[name].run(run_args, state.file(name, r), round_timeout_s, f"{name} round {r + 1}", True)
            if on_round:
                on_round(r, name)
        state.rounds += 1
        state.round_seconds.append(clock() - began)
        if state.rounds >= seq.min_rounds:
            base, cand = state.sides()
            results = judge(base, cand, config, seq, state.rounds, frozen)
            open_cases = undecided(results)
            if on_look:
                on_look(state.rounds, open_cases)
            if not open_cases:
                stopped = "all decided"
                break
        if seq.max_rounds is not None and state.rounds >= seq.max_rounds:
            stopped = "max rounds"
            break
        spent = clock() - state.started
        if spent + float(np.mean(state.round_seconds)) > seq.budget_s:
            stopped = "budget"
            break
    base, cand = state.sides()
    if state.rounds < seq.min_rounds:  # the budget ended before the first look: judge what there is
        results = judge(base, cand, config, seq, state.rounds, frozen)
    report = build_report(base, cand, config, results=finish(results),
                          notes=[f"sequential: {state.rounds} round(s) in {clock() - state.started:.0f} s of a "
                                 f"{seq.budget_s:g} s budget; stopped: {stopped}"])
    return replace(report, sequential=SequentialInfo(
        METHOD, seq.budget_s, seq.min_rounds, seq.max_rounds, seq.design_rounds, state.rounds, stopped,
        round(clock() - state.started, 3), [round(s, 3) for s in state.round_seconds]))


def run_sequential_ab(base: SideSpec, head: SideSpec, run_args: Sequence[str], folder: Path,
                      seq: SequentialConfig, config: GateConfig | None = None, force: bool = False,
                      on_round: Callable[[int, str], None] | None = None,
                      on_look: Callable[[int, list[str]], None] | None = None, stderr: Any = None,
                      round_timeout_s: float | None = None) -> GateReport:
    """``fp8bench ab --budget``: both sides' workers, :func:`run_sequential`, and the A/B section of the report."""
    check_folder(folder, force)
    workers: dict[str, Worker] = {}
    try:
        for spec in (base, head):
            workers[spec.name] = Worker(spec, stderr=stderr)
        report = run_sequential(workers, run_args, folder, seq, config or GateConfig(), on_round, on_look,
                                round_timeout_s)
    finally:
        for w in workers.values():
            w.close()
    assert report.sequential is not None
    dirs = {name: folder / name for name in ("base", "head")}
    return replace(report, ab=ab_info(base, head, report.sequential.rounds, run_args, dirs, round_timeout_s, workers))
