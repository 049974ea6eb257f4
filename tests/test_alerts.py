"""Alerts: an open regression alerts when confirmed by consecutive nights or by a bisect, and says which."""

from __future__ import annotations

import pytest

from fp8bench.analysis.alerts import BISECT, CONSECUTIVE_NIGHTS, AlertRule, find_alerts, new_alerts
from tests.test_changes import history, noisy


def stepped(n=30, at=20, factor=1.3, seed=3):
    values = noisy(n, seed=seed)
    values[at:] *= factor
    return values


def test_a_step_confirmed_by_two_nights_alerts_with_its_rule():
    [alert] = find_alerts(history(stepped()))
    assert alert.rule == CONSECUTIVE_NIGHTS and alert.change.first_bad_commit == "c020"
    assert alert.detail.startswith("last 2 nights +") and "against the level before" in alert.detail
    out = alert.to_dict()
    assert out["rule"] == CONSECUTIVE_NIGHTS and out["bisected_commit"] is None and out["first_bad_commit"] == "c020"


def test_a_last_night_back_to_normal_does_not_confirm():
    values = stepped()
    values[-1] = noisy(1, seed=99)[0]  # the latest night is at the old level again
    assert find_alerts(history(values), rule=AlertRule(2)) == []
    assert find_alerts(history(values), rule=AlertRule(1)) == []
    [unconfirmed] = find_alerts(history(values), rule=AlertRule(0))  # the detector alone still reports it
    assert unconfirmed.change.open


def test_a_bisect_confirms_and_names_the_commit():
    values = stepped()
    values[-1] = noisy(1, seed=99)[0]
    bisect = {"cases": ["gemm[m=64,n=64,k=64] bf16 torch cpu"], "good": {"sha": "c019"}, "bad": {"sha": "c029"},
              "first_bad": {"sha": "c020", "subject": "rework the GEMM"}}
    [alert] = find_alerts(history(values), bisects=[bisect])
    assert alert.rule == BISECT and alert.to_dict()["bisected_commit"] == "c020"
    assert alert.to_dict()["bisected_subject"] == "rework the GEMM"
    other_case = {**bisect, "cases": ["gemm[m=64,n=64,k=64] fp32 torch cpu"]}
    assert find_alerts(history(values), bisects=[other_case]) == []


def test_flat_and_improving_histories_do_not_alert():
    assert find_alerts(history(noisy(40, seed=5))) == []
    faster = noisy(30, seed=6)
    faster[15:] /= 1.3
    assert find_alerts(history(faster)) == []


def test_new_is_the_night_it_became_an_alert():
    frame = history(stepped())
    started = list(frame["run_started_at"])
    assert len(new_alerts(frame, started[20])) == 1  # not found yet on the first slow night
    assert len(new_alerts(frame, started[22])) == 0  # found and confirmed by night 22 (3 nights after the step)
    assert len(new_alerts(frame, started[-1])) == 0


def test_a_negative_rule_is_refused():
    with pytest.raises(ValueError, match="alert nights must be >= 0"):
        AlertRule(-1)


def test_nights_measured_noisy_do_not_confirm():
    """The consecutive nights that would confirm a regression were run under load: no alert."""
    frame = history(stepped()).assign(noisy=[i >= 20 for i in range(30)])
    assert find_alerts(frame) == []
    assert len(find_alerts(history(stepped()).assign(noisy=False))) == 1
