"""Bisection of a performance regression: from "it got slower between these commits" to "this commit did it".

Given a known good and a known bad commit of a git repository and the cases to measure (``fp8bench run``
arguments), each probed commit is checked out into its own worktree, built (``--setup``), and measured against the
good commit with the sequential A/B rounds of ``fp8bench ab --budget`` (:mod:`fp8bench.analysis.gate.sequential`):
rounds are added until the gate decides, so a quiet step costs a few rounds and a noisy one gets more. The search is
binary over the commits between good and bad along the first-parent line, as ``git bisect`` does:

* the bad commit is measured first; unless the gate confirms it ``slower`` than good, there is nothing to bisect
  (exit 0 when it is the ``same``, 2 when undecided);
* a probe the gate calls ``slower`` moves the bad end to it; ``same`` or ``faster`` moves the good end;
* a probe still undecided after its step budget is measured once more with twice the budget ("inconclusive
  steps get more rounds before a decision"); if it stays undecided it is set aside like an untestable commit;
* a commit whose setup fails, whose code cannot be imported, or whose rounds fail is skipped, as ``git bisect
  skip`` does, and the next probe is the untested commit nearest the middle;
* the search ends when no untested commit is left between the ends: the first bad commit is the bad end when its
  predecessor was measured good, otherwise the answer is the range of commits that could not be told apart.

One environment serves every probe: the worker of each side imports ``fp8bench`` (and the ``package-dir``
packages of the commit's ``pyproject.toml``) from that side's worktree, into this Python with the dependencies
installed here (:mod:`fp8bench.orchestration.ab`). So a probe needs no virtual environment of its own; the default
``--setup`` only byte-compiles the checkout (a syntax error is "does not build"). That assumes the probed commits run
with the dependencies installed here; a range that changes them needs a ``--setup`` that installs them. A repository of
custom kernels (not fp8bench itself) is bisected the same way with ``--plugin MODULE``: both sides load that module
from their own worktree (``FP8BENCH_PLUGINS``, ``PYTHONPATH``), and fp8bench is the installed one.

The evidence (every probe's verdict, ratio, interval, rounds and time) is written to ``bisect.json`` beside its
round files and, for ``changes`` and the dashboard, to ``RESULTS/bisects/`` (:func:`save_evidence`). The finding's
issue body and its plain table are renderers: :mod:`fp8bench.render.bisect_markdown` and
:mod:`fp8bench.render.bisect_table`.

This module is the search and its evidence; checking commits out, building them and running their rounds is
:mod:`fp8bench.orchestration.bisect_probes`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fp8bench.analysis.gate.decision import Verdict
from fp8bench.analysis.gate.report import GateReport
from fp8bench.core.run_header import payload_header
from fp8bench.exit_codes import EXIT_INCONCLUSIVE, EXIT_PASS, EXIT_REGRESSION
from fp8bench.results.runfile_reader import read_run_header

# Outcomes of one probe. "skip": it could not be measured (does not build, does not import, a round failed).
SLOWER, SAME, UNDECIDED, SKIP = "slower", "same", "undecided", "skip"
# A probe undecided after its step budget is measured once more with this multiple of it.
RETRY_BUDGET_MULTIPLE = 2.0
BISECTS_FOLDER = "bisects"


class BisectError(RuntimeError):
    """The bisection cannot run (bad commits, not a git repository, the good side cannot be measured)."""


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str


@dataclass(frozen=True)
class Probe:
    """One measurement of a commit against good."""

    commit: str
    subject: str
    outcome: str  # slower | same | undecided | skip
    ratio: float | None = None  # geometric mean of per-round ratios, the slowest case's
    ci_low: float | None = None
    ci_high: float | None = None
    rounds: int = 0
    seconds: float = 0.0
    reason: str | None = None
    case: str | None = None  # the case the ratio belongs to
    folder: str | None = None  # its round files and gate report


# (commit, step budget in seconds, attempt number from 1) -> the probe's outcome
Measure = Callable[[Commit, float, int], Probe]


@dataclass
class BisectResult:
    good: Commit
    bad: Commit
    commits: list[Commit]  # between good (excluded) and bad (included), oldest first
    probes: list[Probe] = field(default_factory=list)
    first_bad: Commit | None = None
    suspects: list[Commit] = field(default_factory=list)  # when the range could not be narrowed to one commit
    verdict: str = "inconclusive"  # regression | pass | inconclusive
    exit_code: int = EXIT_INCONCLUSIVE
    reason: str = ""
    seconds: float = 0.0

    @property
    def rounds(self) -> int:
        return sum(p.rounds for p in self.probes)

    def evidence(self) -> Probe | None:
        """The probe that shows the first bad commit slower (its last measurement)."""
        if self.first_bad is None:
            return None
        mine = [p for p in self.probes if p.commit == self.first_bad.sha and p.outcome == SLOWER]
        return mine[-1] if mine else None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["rounds"] = self.rounds
        return out


def _next_probe(lo: int, hi: int, tested: set[int]) -> int | None:
    """The untested index strictly between ``lo`` and ``hi`` nearest their middle (lower first), or None."""
    open_ = [i for i in range(lo + 1, hi) if i not in tested]
    if not open_:
        return None
    middle = (lo + hi) / 2
    return min(open_, key=lambda i: (abs(i - middle), i))


def _measure_until_decided(measure: Measure, commit: Commit, step_budget_s: float,
                           on_probe: Callable[[Probe], None] | None, probes: list[Probe]) -> Probe:
    probe = measure(commit, step_budget_s, 1)
    probes.append(probe)
    if on_probe:
        on_probe(probe)
    if probe.outcome == UNDECIDED:
        probe = measure(commit, step_budget_s * RETRY_BUDGET_MULTIPLE, 2)
        probes.append(probe)
        if on_probe:
            on_probe(probe)
    return probe


def bisect(good: Commit, bad: Commit, commits: Sequence[Commit], measure: Measure, step_budget_s: float,
           on_probe: Callable[[Probe], None] | None = None,
           clock: Callable[[], float] = time.monotonic) -> BisectResult:
    """Search ``commits`` (after good, up to bad, oldest first) for the first one ``measure`` finds slower."""
    started = clock()
    result = BisectResult(good, bad, list(commits))
    n = len(commits)
    first = _measure_until_decided(measure, commits[-1], step_budget_s, on_probe, result.probes)
    if first.outcome != SLOWER:
        result.verdict, result.exit_code = ("pass", EXIT_PASS) if first.outcome == SAME else (
            "inconclusive", EXIT_INCONCLUSIVE)
        result.reason = {SAME: "the bad commit is not slower than the good one beyond the threshold: nothing to "
                               "bisect",
                         SKIP: f"the bad commit could not be measured: {first.reason}",
                         }.get(first.outcome, f"the bad commit is not shown slower ({first.reason})")
        result.seconds = clock() - started
        return result
    lo, hi = -1, n - 1  # lo: last known good index (-1 is the good commit itself), hi: first known bad
    untestable: set[int] = set()
    while True:
        index = _next_probe(lo, hi, untestable)
        if index is None:
            break
        probe = _measure_until_decided(measure, commits[index], step_budget_s, on_probe, result.probes)
        if probe.outcome == SLOWER:
            hi = index
        elif probe.outcome == SAME:
            lo = index
        else:
            untestable.add(index)
    between = [commits[i] for i in range(lo + 1, hi + 1)]
    if len(between) == 1:
        result.first_bad, result.verdict, result.exit_code = commits[hi], "regression", EXIT_REGRESSION
        result.reason = f"{commits[hi].sha[:12]} is the first commit the gate finds slower than good"
    else:
        result.suspects, result.verdict, result.exit_code = between, "inconclusive", EXIT_INCONCLUSIVE
        result.reason = (f"the first slower commit is one of {len(between)}: "
                         f"{', '.join(c.sha[:12] for c in between)} (the others between could not be measured or "
                         "decided)")
    result.seconds = clock() - started
    return result


# A probe is the same as good when every case it compared is one of these.
_PASSING = frozenset({Verdict.SAME, Verdict.FASTER, Verdict.NEW, Verdict.REMOVED, Verdict.NOT_MEASURED})


def probe_from_report(commit: Commit, report: GateReport, seconds: float, folder: str | None) -> Probe:
    """A probe's outcome from its sequential gate report: slower if any case is slower (or broke), same when every
    compared case is same or faster, undecided otherwise; the ratio shown is the slowest case's."""
    cases = report.cases
    rounds = report.sequential.rounds if report.sequential else 0
    compared = [c for c in cases if c.ratio is not None]
    worst = max(compared, key=lambda c: c.ratio or 0.0) if compared else None
    verdicts = {c.verdict for c in cases}
    if verdicts & {Verdict.SLOWER, Verdict.BROKEN, Verdict.MISSING}:
        outcome = SLOWER
        worst = next((c for c in cases if c.verdict is Verdict.SLOWER), worst)
    elif compared and verdicts <= _PASSING:
        outcome = SAME
    else:
        outcome = UNDECIDED
    if worst is None:
        return Probe(commit.sha, commit.subject, outcome, rounds=rounds, seconds=seconds, reason=report.verdict,
                     folder=folder)
    return Probe(commit.sha, commit.subject, outcome, worst.ratio, worst.ci_low, worst.ci_high, rounds, seconds,
                 worst.reason or report.verdict, worst.case, folder)


# -- evidence -------------------------------------------------------------------------------------------------------
def device_of(result: BisectResult) -> str:
    """The name of the device the probes measured on (from the first round file of the good side), or ``""``."""
    for p in result.probes:
        first_round = Path(p.folder) / "base" / "r000.json" if p.folder else None
        if first_round is not None and first_round.is_file():
            name = payload_header(read_run_header(first_round)).device.name
            return str(name) if name else ""
    return ""


def case_keys(result: BisectResult) -> list[str]:
    """The cases the probes measured (from their gate reports)."""
    keys: list[str] = []
    for p in result.probes:
        if p.folder and (Path(p.folder) / "report.json").is_file():
            report = GateReport.from_json(json.loads((Path(p.folder) / "report.json").read_text()))
            keys += [c.case for c in report.cases if c.case not in keys]
    return keys


def save_evidence(result: BisectResult, cases: Sequence[str], run_args: Sequence[str], results_dir: Path) -> Path:
    """Write the bisect to ``RESULTS/bisects/GOOD-BAD.json`` (one file per range, a later bisect replacing an
    earlier one): what ``changes`` and the dashboard read to name the bisected commit."""
    folder = results_dir / BISECTS_FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{result.good.sha[:12]}-{result.bad.sha[:12]}.json"
    payload = {"schema": 1, "cases": list(cases), "run_args": list(run_args), **result.to_dict()}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1, default=str))
    tmp.replace(path)
    return path


def evidence_folder(store_target: str | Path | None) -> Path:
    """The results folder whose ``bisects/`` belong to a store: the folder a store target names, the folder of a
    SQLite file, else the default results folder (a database URL keeps its bisects there)."""
    from fp8bench.paths import default_results_dir

    if store_target:
        path = Path(str(store_target))
        if path.is_dir():
            return path
        if path.suffix in (".sqlite", ".db") or path.is_file():
            return path.parent
    return default_results_dir()


def load_evidence(results_dir: Path | None) -> list[dict[str, Any]]:
    """Every stored bisect under ``RESULTS/bisects/`` (unreadable files are left out)."""
    if results_dir is None or not (results_dir / BISECTS_FOLDER).is_dir():
        return []
    out = []
    for path in sorted((results_dir / BISECTS_FOLDER).glob("*.json")):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return out


def bisected_commit(evidence: Sequence[dict[str, Any]], case_key: str, last_good: str | None,
                    first_bad: str | None) -> dict[str, Any] | None:
    """The stored bisect of a change (same case, and its range is the change's: the bisect's good is the change's
    last good commit or its bad the change's first bad one), with a found first bad commit; newest wins."""
    found = None
    for item in evidence:
        if case_key not in item.get("cases", []) or not item.get("first_bad"):
            continue
        good, bad = (item.get("good") or {}).get("sha"), (item.get("bad") or {}).get("sha")
        if (last_good and good == last_good) or (first_bad and bad == first_bad):
            found = item
    return found
