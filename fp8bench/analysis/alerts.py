"""Alerts: which regressions in a nightly history are worth waking someone for.

A change point (:mod:`fp8bench.analysis.changes`) says a series stepped; an **alert** says the step is confirmed, by one
of two rules, and records which:

* **consecutive nights**: the latest ``nights`` commits of the series (default 2) are each worse than the level
  before the change by more than the threshold. One slow night, or a step that later nights do not repeat, does
  not alert; as the PyTorch HUD marks a regression only after two consecutive violations;
* **bisect**: a stored ``fp8bench bisect`` of the change's range (:func:`fp8bench.analysis.bisect.bisected_commit`)
  named the first slower commit.

A change most of whose nights on either side were measured noisy (``Change.noisy``: under load, or spread over the
noise band) alerts by neither rule's nights; only a bisect confirms it.

A regression alert is **new since a run** when it alerts on the whole history but did not on the history up to
and including that run: the night it became confirmed. That is what a nightly job asks ("did anything become an
alert tonight?"), and it holds however many nights the change needed to be detected and confirmed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from fp8bench.analysis.bisect import bisected_commit
from fp8bench.analysis.change_config import DEFAULT_CONFIG, ChangeConfig, Metric
from fp8bench.analysis.changes import (
    Change,
    HistoryDepth,
    depth_of,
    newest_first,
    search_series,
)

CONSECUTIVE_NIGHTS, BISECT = "consecutive nights", "bisect"


@dataclass(frozen=True)
class AlertRule:
    """How a regression is confirmed: ``nights`` consecutive latest nights beyond the threshold (0: every open
    regression alerts at once, the detector alone)."""

    nights: int = 2

    def __post_init__(self) -> None:
        if self.nights < 0:
            raise ValueError(f"alert nights must be >= 0, got {self.nights}")


@dataclass(frozen=True)
class Alert:
    change: Change
    rule: str  # consecutive nights | bisect
    detail: str  # the rule as applied: "last 2 nights +31%, +29% over the level before"
    bisect: dict[str, Any] | None = None  # the stored bisect that confirmed or located it

    @property
    def ident(self) -> tuple[str, str, str | None, str]:
        c = self.change
        return c.comparability_key, c.metric, c.branch, str(c.first_bad_commit)

    def to_dict(self) -> dict[str, Any]:
        first_bad = (self.bisect or {}).get("first_bad") or {}
        return {**self.change.to_dict(), "rule": self.rule, "rule_detail": self.detail,
                "bisected_commit": first_bad.get("sha"), "bisected_subject": first_bad.get("subject")}


def _beyond(before: float, value: float, lower_is_better: bool, log: bool, config: ChangeConfig) -> float | None:
    """The night's change against the level before (a fraction, or dB), when worse beyond the threshold."""
    size = value / before - 1 if log else value - before
    worse = size > 0 if lower_is_better else size < 0
    limit = config.threshold if log else config.threshold_db
    return size if worse and abs(size) >= limit else None


DEFAULT_RULE = AlertRule()


@dataclass(frozen=True)
class Findings:
    """What ``changes`` reports of a history, from one search per series: every kept change and the alerts among
    them (each newest first), and how deep the history was."""

    changes: list[Change]
    alerts: list[Alert]
    depth: HistoryDepth


def find_changes_and_alerts(records: pd.DataFrame, config: ChangeConfig = DEFAULT_CONFIG,
                            rule: AlertRule = DEFAULT_RULE, bisects: Sequence[dict[str, Any]] = ()) -> Findings:
    """The changes of ``records`` (:func:`fp8bench.analysis.changes.find_changes`), the open regressions among them
    confirmed by ``rule`` or by a stored bisect, and the history's depth, each series searched once."""
    changes: list[Change] = []
    alerts: list[Alert] = []
    lengths: list[int] = []
    for searched in search_series(records, config):
        changes += searched.changes
        alerts += confirmed(searched.changes, searched.values, searched.metric, config, rule, bisects)
        lengths.append(searched.values.size)
    alerts.sort(key=lambda a: (a.change.first_bad_started_at or "", a.change.position), reverse=True)
    return Findings(newest_first(changes), alerts, depth_of(lengths, config))


def find_alerts(records: pd.DataFrame, config: ChangeConfig = DEFAULT_CONFIG, rule: AlertRule = DEFAULT_RULE,
                bisects: Sequence[dict[str, Any]] = ()) -> list[Alert]:
    """Open regressions of ``records`` confirmed by ``rule`` or by a stored bisect, newest first."""
    return find_changes_and_alerts(records, config, rule, bisects).alerts


def confirmed(changes: Sequence[Change], values: Any, metric: Metric, config: ChangeConfig, rule: AlertRule,
              bisects: Sequence[dict[str, Any]] = ()) -> list[Alert]:
    """The alerts among one series' ``changes``; ``values`` are its per-commit values in commit order."""
    out = []
    for change in changes:
        if change.kind != "regression" or not change.open:
            continue
        # A step most of whose nights were measured noisy confirms nothing, however many nights repeat it.
        found = bisected_commit(bisects, change.case_key, change.last_good_commit, change.first_bad_commit)
        if found is not None:
            sha = (found.get("first_bad") or {}).get("sha", "?")
            out.append(Alert(change, BISECT, f"bisected to {str(sha)[:12]}", found))
            continue
        if change.noisy:
            continue
        latest = values[-rule.nights:] if rule.nights else values[:0]
        sizes = [_beyond(change.before, float(v), metric.lower_is_better, metric.ratio, config) for v in latest]
        if len(latest) == rule.nights and all(s is not None for s in sizes):
            shown = ", ".join(f"{s:+.1%}" if metric.ratio else f"{s:+.2f} dB" for s in sizes if s is not None)
            detail = (f"last {rule.nights} nights {shown} against the level before" if rule.nights
                      else "every open regression alerts (no confirmation asked)")
            out.append(Alert(change, CONSECUTIVE_NIGHTS, detail))
    return out


def new_alerts(records: pd.DataFrame, since_started_at: str, config: ChangeConfig = DEFAULT_CONFIG,
               rule: AlertRule = DEFAULT_RULE, bisects: Sequence[dict[str, Any]] = (),
               now: Sequence[Alert] | None = None) -> list[Alert]:
    """Alerts of the whole history that were not alerts on the history up to the run started at
    ``since_started_at`` (that run included). ``now``: the whole history's alerts, when already found (the history
    is then searched only up to that run)."""
    now = find_alerts(records, config, rule, bisects) if now is None else now
    started = records["run_started_at"].astype(str)
    before = {a.ident for a in find_alerts(records[started <= since_started_at], config, rule, bisects)}
    return [a for a in now if a.ident not in before]


def rule_text(rule: AlertRule) -> str:
    return (f"confirmed by {rule.nights} consecutive night(s) or by a bisect" if rule.nights
            else "every open regression (no confirmation)")
