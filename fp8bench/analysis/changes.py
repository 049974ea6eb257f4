"""Change points: the commits at which a case's nightly measurements stepped up or down, and whether it is real.

A nightly history is one series per case and environment (the comparability key: same device model, driver,
CUDA, torch, power and clock regime, same case definition), ordered by commit along a branch
(:mod:`fp8bench.core.commits`). Several runs of one commit are reduced to their median, so each commit is one point.

Detection has two stages, as in the CI analyses of MongoDB and Netflix (segment first, then keep what is large and
significant):

1. **Segmentation** with PELT (Killick, Fearnhead and Eckley 2012, through the ``ruptures`` library): the series
   is cut where the mean of ``log(value)`` changes, so a step is a ratio whatever the case's scale. PELT minimizes
   the within-segment squared error plus a penalty per cut; the penalty is ``penalty x sigma^2 x log(n)`` (a BIC
   form), with the noise ``sigma`` estimated robustly from the median absolute difference of consecutive points
   (``MAD / 0.6745 / sqrt(2)``: steps barely move it, unlike the standard deviation). Segments are at least
   ``min_size`` commits long: one slow night is an outlier, not a change.
2. **Filtering** of each cut: the ratio of the medians after and before it, with a bootstrap interval and one-sided
   Mann-Whitney p-values (:func:`fp8bench.analysis.stats.compare_samples`, the gate's own arithmetic). A change is kept
   when it is at least ``threshold`` (5% by default, the gate's T), its interval excludes 1, and its p-value is
   under ``alpha``.

A change is **noisy** when most of the commits on either side of it were measured noisy (under load, or with a
spread over the noise band: :func:`fp8bench.core.noise.mostly_noisy`): it is listed, ranked after the confirmed
ones (:func:`rank_changes`), and never new (:func:`new_since`) nor an alert. A commit measured by both quiet and noisy
records takes its value from the quiet ones (:func:`mark_noisy` flags each record from its run's recorded load and
its spread).

A kept change is a **regression** when the metric got worse (time or energy up, SQNR or TFLOP/s down), an
**improvement** otherwise. A regression is **open** while the series' latest segment is still worse than the level
before the change by more than the threshold: a later fix closes it. Each change names the last commit before it
(last good) and the first commit after it (first bad): the culprit is in between, usually the latter.

The metrics it tracks and its settings (:class:`ChangeConfig`) live in :mod:`fp8bench.analysis.change_config`, which
loads no pandas, so the command line can offer them without loading the detector.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from fp8bench.analysis.change_config import DEFAULT_CONFIG, DEFAULT_METRICS, METRICS, ChangeConfig, Metric
from fp8bench.core.commits import commit_order
from fp8bench.core.noise import HostLoad, is_noisy, mostly_noisy, run_load

if TYPE_CHECKING:  # the store loads only when history is read
    from fp8bench.results.store import Store
    from fp8bench.results.store.queries import RecordFilter


# Columns a history needs (typed store columns; see fp8bench.results.store.columns).
HISTORY_COLUMNS = ("id", "run_id", "seq", "case_key", "comparability_key", "device_name", "device", "git_commit",
                   "git_branch", "commit_depth", "commit_time", "run_started_at")


@dataclass(frozen=True)
class Change:
    """One kept change point of one series."""

    case_key: str
    device: str
    branch: str | None
    metric: str
    kind: str  # regression | improvement
    open: bool  # a regression still in force at the latest commit
    size: float  # after / before - 1 (log metrics) or after - before (dB)
    ratio: float  # median after / median before
    ci_low: float  # bootstrap interval of the ratio
    ci_high: float
    p_value: float  # one-sided Mann-Whitney, in the direction of the change
    before: float  # median of the segment before
    after: float  # median of the segment after
    last_good_commit: str | None
    first_bad_commit: str | None
    position: int  # commit position (0 = oldest) of first_bad_commit on the branch
    first_bad_run: str  # first run measuring first_bad_commit
    first_bad_started_at: str | None
    n_before: int  # commits in the segment before
    n_after: int
    comparability_key: str
    noisy: bool = False  # most commits on one side of it were measured noisy: shown, never alerted

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def noise_sigma(y: np.ndarray) -> float:
    """Robust noise scale of a series with steps: MAD of consecutive differences / 0.6745 / sqrt(2)."""
    if y.size < 3:
        return 0.0
    diffs = np.diff(y)
    mad = float(np.median(np.abs(diffs - np.median(diffs))))
    return mad / 0.6745 / math.sqrt(2)


# Noise below which no timing history is taken to be: a timer's resolution can make a stretch of nights read
# identical, and a noise estimate of zero would let PELT cut between any two of them. 0.5% in log units.
SIGMA_FLOOR_LOG = 0.005
SIGMA_FLOOR_DB = 0.05


def segment(y: np.ndarray, config: ChangeConfig, log: bool = True) -> list[int]:
    """Indices where a new segment starts (PELT, least-squares cost, BIC-style penalty); empty for none."""
    import ruptures

    n = y.size
    if n < 2 * config.min_size:
        return []
    floor = SIGMA_FLOOR_LOG if log else SIGMA_FLOOR_DB
    sigma = max(noise_sigma(y), floor)
    pen = config.penalty * sigma * sigma * math.log(n)
    # The linear kernel's cost is the l2 cost (squared deviations from the segment mean); ruptures solves it with
    # PELT in C, where its Pelt(model="l2") evaluates every candidate cut in Python (a 333-commit series cost
    # seconds, and a nightly store has thousands of series).
    algo = ruptures.KernelCPD(kernel="linear", min_size=config.min_size).fit(y.reshape(-1, 1))
    ends = algo.predict(pen=pen)
    return [int(b) for b in ends[:-1]]  # ruptures ends the list with n


def _worse(metric: Metric, before: float, after: float) -> bool:
    return after > before if metric.lower_is_better else after < before


def _size(metric: Metric, before: float, after: float) -> float:
    return after / before - 1 if metric.ratio else after - before


def _per_commit(points: pd.DataFrame, metric: Metric) -> pd.DataFrame:
    """One row per commit position of a series: the median of its usable values (finite; positive for a ratio
    metric), the commit, its first run, when that run started, and whether it was measured only noisy (a commit
    with quiet records is valued by them alone). Sorted arrays, not a pandas grouping: this runs once per series and
    metric, thousands of times over a nightly store."""
    values = pd.to_numeric(points[metric.name], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    keep = ~np.isnan(values) & (values > 0 if metric.ratio else True)
    every_pos = points["position"].to_numpy()
    noisy = points["noisy"].astype(bool).to_numpy() if "noisy" in points else np.zeros(len(points), dtype=bool)
    # A commit with quiet records is valued by them alone; one measured only noisy keeps its records, flagged.
    keep &= ~noisy | ~np.isin(every_pos, every_pos[keep & ~noisy])
    pos, values, noisy = every_pos[keep], values[keep], noisy[keep]
    by_value = np.lexsort((values, pos))  # by position, then value: each commit's values in order
    first = np.argsort(pos, kind="stable")  # by position, rows of one commit in their order
    sorted_pos = pos[first]
    starts = np.flatnonzero(np.r_[True, sorted_pos[1:] != sorted_pos[:-1]]) if pos.size else np.zeros(0, int)
    counts = np.diff(np.r_[starts, pos.size])
    v = values[by_value]
    median = 0.5 * (v[starts + (counts - 1) // 2] + v[starts + counts // 2])
    started = points["run_started_at"].to_numpy(dtype=object)[keep]
    # The earliest start of each commit's runs; a missing start sorts last, so it is the minimum only when all are.
    text = np.array(["\uffff" if _text(t) is None else str(t) for t in started], dtype=str)
    earliest = text[np.lexsort((text, pos))][starts] if pos.size else text
    rows = first[starts]
    return pd.DataFrame({"value": median, "commit": points["git_commit"].to_numpy(dtype=object)[keep][rows],
                         "run_id": points["run_id"].to_numpy(dtype=object)[keep][rows],
                         "started": [None if t == "\uffff" else t for t in earliest],
                         "noisy": noisy[rows]},
                        index=pd.Index(sorted_pos[starts], name="position"))


def series_changes(points: pd.DataFrame, metric: Metric, config: ChangeConfig) -> list[Change]:
    """Changes of one series: ``points`` has one row per record of one comparability key on one branch, with
    ``position`` (commit order) and the metric column."""
    return _kept_changes(points, _per_commit(points, metric), metric, config)


def _kept_changes(points: pd.DataFrame, per_commit: pd.DataFrame, metric: Metric,
                  config: ChangeConfig) -> list[Change]:
    """:func:`series_changes` of a series whose per-commit values (:func:`_per_commit`) are already reduced."""
    if len(per_commit) < 2 * config.min_size:
        return []
    raw = per_commit["value"].to_numpy(dtype=float)
    y = np.log(raw) if metric.ratio else raw
    cuts = segment(y, config, metric.ratio)
    # Backward elimination: the weakest failing cut (highest p-value) is dropped and its two segments merged, then
    # the remaining cuts are tested again on the merged segments, until every remaining cut passes. Dropping one
    # at a time keeps a true step whose first test, between two short neighbouring segments, had too few points.
    # A cut's test reads only its two neighbouring segments, so after a drop only the two cuts beside it are tested
    # again: a long history with many cuts costs tests in proportion to its cuts, not their square.
    tested = [_test_cut(raw, cuts, i, metric, config) for i in range(len(cuts))]
    while True:
        failing = [(result[1], i) for i, result in enumerate(tested) if not result[4]]
        if not failing:
            break
        drop = max(failing)[1]
        del cuts[drop], tested[drop]
        for i in (drop - 1, drop):
            if 0 <= i < len(cuts):
                tested[i] = _test_cut(raw, cuts, i, metric, config)
    bounds = [0, *cuts, len(raw)]
    first = points.iloc[0]
    last_level = float(np.median(raw[bounds[-2]:]))
    limit = config.threshold if metric.ratio else config.threshold_db
    noisy = per_commit["noisy"].to_numpy(dtype=bool)
    out = []
    for i, (cut, result) in enumerate(zip(cuts, tested, strict=True)):
        est, p, b_med, a_med, _passed = result
        worse = _worse(metric, b_med, a_med)
        open_ = worse and _worse(metric, b_med, last_level) and abs(_size(metric, b_med, last_level)) >= limit
        row = per_commit.iloc[cut]
        out.append(Change(
            case_key=str(first["case_key"]), device=str(first["device_label"]),
            branch=None if pd.isna(first["git_branch"]) else str(first["git_branch"]), metric=metric.name,
            kind="regression" if worse else "improvement", open=bool(open_), size=float(_size(metric, b_med, a_med)),
            ratio=float(est.ratio), ci_low=float(est.ci_low), ci_high=float(est.ci_high), p_value=float(p),
            before=b_med, after=a_med, last_good_commit=_text(per_commit.iloc[cut - 1]["commit"]),
            first_bad_commit=_text(row["commit"]), position=int(per_commit.index[cut]),
            first_bad_run=str(row["run_id"]), first_bad_started_at=_text(row["started"]),
            n_before=cut - bounds[i], n_after=bounds[i + 2] - cut, comparability_key=str(first["comparability_key"]),
            noisy=mostly_noisy(noisy[bounds[i]:cut]) or mostly_noisy(noisy[cut:bounds[i + 2]])))
    return out


def _test_cut(raw: np.ndarray, cuts: list[int], i: int, metric: Metric,
              config: ChangeConfig) -> tuple[Any, float, float, float, bool]:
    """The ratio estimate, p-value and medians of cut ``i`` between its neighbouring cuts, and whether it passes:
    large enough, its interval excluding 1 and its p-value under alpha."""
    from fp8bench.analysis.stats import compare_samples

    bounds = [0, *cuts, len(raw)]
    before, after = raw[bounds[i]:bounds[i + 1]], raw[bounds[i + 1]:bounds[i + 2]]
    est = compare_samples(before.tolist(), after.tolist(), confidence=config.confidence)
    b_med, a_med = float(np.median(before)), float(np.median(after))
    large = abs(_size(metric, b_med, a_med)) >= (config.threshold if metric.ratio else config.threshold_db)
    up = a_med > b_med
    p = est.p_slower if up else est.p_faster
    clear = est.ci_low > 1 if up else est.ci_high < 1
    return est, p, b_med, a_med, bool(large and clear and p < config.alpha)


def _text(value: Any) -> str | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)


def _series(records: pd.DataFrame, config: ChangeConfig) -> Iterator[tuple[pd.DataFrame, Metric]]:
    """Each series of ``records`` (one comparability key on one branch, with its commit ``position``) and metric."""
    if records.empty:
        return
    frame = records.copy()
    frame["git_branch"] = frame["git_branch"].astype("object")
    frame["_branch"] = frame["git_branch"].fillna("")
    for _branch, on_branch in frame.groupby("_branch", sort=True):
        on_branch = on_branch.assign(position=commit_order(on_branch))
        for _key, series in on_branch.groupby("comparability_key", sort=True):
            for name in config.metrics:
                yield series, METRICS[name]


@dataclass(frozen=True)
class SearchedSeries:
    """One series searched for changes: its metric, its per-commit values (oldest commit first; their count is
    the series' length) and the changes kept."""

    metric: Metric
    values: np.ndarray
    changes: list[Change]


def search_series(records: pd.DataFrame, config: ChangeConfig = DEFAULT_CONFIG) -> Iterator[SearchedSeries]:
    """Each series of ``records`` (as :func:`find_changes` reads them) searched once. The search (PELT, then a
    bootstrap and a Mann-Whitney test per cut) is what ``changes`` spends its time on over a nightly store, so
    whoever needs the changes, the alerts and the history's depth reads them all from this one pass."""
    for series, metric in _series(records, config):
        per_commit = _per_commit(series, metric)
        yield SearchedSeries(metric, per_commit["value"].to_numpy(dtype=float),
                             _kept_changes(series, per_commit, metric, config))


def newest_first(changes: Sequence[Change]) -> list[Change]:
    """``changes`` by the start of their first bad commit's first run, then commit position, newest first."""
    return sorted(changes, key=lambda c: (c.first_bad_started_at or "", c.position), reverse=True)


def find_changes(records: pd.DataFrame, config: ChangeConfig = DEFAULT_CONFIG) -> list[Change]:
    """Every kept change of every series in ``records`` (speed-comparable records with :data:`HISTORY_COLUMNS`,
    ``device_label`` and the metric columns), newest first."""
    return newest_first([change for searched in search_series(records, config) for change in searched.changes])


@dataclass(frozen=True)
class HistoryDepth:
    """How much history change detection had: a series shorter than ``needed`` commits is never searched, so "no
    change found" says nothing about it."""

    series: int  # case histories (comparability key x branch x metric) in the records
    judged: int  # those with at least ``needed`` commits
    longest: int  # commits in the longest series
    needed: int  # ``min_size`` commits on each side of a change

    @property
    def enough(self) -> bool:
        """Whether at least one series was long enough to be searched."""
        return self.judged > 0


def history_depth(records: pd.DataFrame, config: ChangeConfig = DEFAULT_CONFIG) -> HistoryDepth:
    """The depth of the history :func:`find_changes` searches in ``records``."""
    return depth_of([len(_per_commit(series, metric)) for series, metric in _series(records, config)], config)


def depth_of(lengths: Sequence[int], config: ChangeConfig = DEFAULT_CONFIG) -> HistoryDepth:
    """The :class:`HistoryDepth` of series of these lengths (commits each)."""
    needed = 2 * config.min_size
    return HistoryDepth(series=len(lengths), judged=sum(n >= needed for n in lengths), longest=max(lengths, default=0),
                        needed=needed)


def changes_frame(changes: Sequence[Change]) -> pd.DataFrame:
    columns = list(Change.__dataclass_fields__)
    return pd.DataFrame([c.to_dict() for c in changes], columns=columns)


def new_since(changes: Sequence[Change], started_at: str) -> list[Change]:
    """Open regressions, not noisy, whose first bad commit was first measured after ``started_at`` (a run's
    start)."""
    return [c for c in changes if c.kind == "regression" and c.open and not c.noisy
            and (c.first_bad_started_at or "") > started_at]


def rank_changes(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` (:func:`changes_frame`) with the confirmed changes first and the noisy ones after, each group in
    its own order."""
    return frame.sort_values("noisy", kind="stable") if "noisy" in frame else frame


def mark_noisy(records: pd.DataFrame, loads: dict[str, HostLoad | None]) -> pd.DataFrame:
    """``records`` with ``noisy`` (:func:`fp8bench.core.noise.is_noisy`): its run (``run_id``, in ``loads``)
    started under load, or its spread (``iqr_s / median_s``) exceeds the noise band."""
    iqr = pd.to_numeric(records["iqr_s"], errors="coerce") if "iqr_s" in records else pd.Series(np.nan, records.index)
    spread = iqr / pd.to_numeric(records["median_s"], errors="coerce") if "median_s" in records else iqr * np.nan
    overloaded = {run_id: load is not None and load.overloaded for run_id, load in loads.items()}
    loaded = records["run_id"].map(lambda r: overloaded.get(r, False))
    flags = [is_noisy(None if pd.isna(s) else float(s), bool(lo)) for s, lo in zip(spread, loaded, strict=True)]
    return records.assign(noisy=flags)


def history_records(store: Store, flt: RecordFilter, metrics: Sequence[str] = DEFAULT_METRICS) -> pd.DataFrame:
    """The speed-comparable records of ``store`` under ``flt``, with the columns change detection reads, in run
    order."""
    from fp8bench.analysis.selection import speed_comparable_sql
    from fp8bench.results.store import queries as store_queries

    columns = tuple(dict.fromkeys([*HISTORY_COLUMNS, *metrics, "median_s", "iqr_s"]))
    records = store_queries.select_records(store, flt, columns, where=[speed_comparable_sql()])
    return mark_noisy(records, run_loads(store, records["run_id"].unique().tolist() if len(records) else []))


def run_loads(store: Store, run_ids: Sequence[str]) -> dict[str, HostLoad | None]:
    """The load each of ``run_ids`` recorded when it started (:func:`fp8bench.core.noise.run_load`)."""
    import sqlalchemy as sa

    from fp8bench.results.store import runs_table

    out: dict[str, HostLoad | None] = {}
    with store.engine.connect() as conn:
        for start in range(0, len(run_ids), 500):
            chunk = list(run_ids[start:start + 500])
            rows = conn.execute(sa.select(runs_table.c.run_id, runs_table.c.data)
                                .where(runs_table.c.run_id.in_(chunk))).all()
            out.update({run_id: run_load(data if isinstance(data, dict) else {}) for run_id, data in rows})
    return out
