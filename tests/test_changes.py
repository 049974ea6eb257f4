"""Change points on constructed nightly histories, and the `fp8bench changes` verb on a store."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from fp8bench.analysis.changes import (
    ChangeConfig,
    HistoryDepth,
    changes_frame,
    find_changes,
    history_depth,
    mark_noisy,
    new_since,
    noise_sigma,
    rank_changes,
)
from fp8bench.cli import main
from fp8bench.core.noise import HostLoad
from fp8bench.results.store import open_store
from tests.gate_fixtures import record


def history(values, name="gemm[m=64,n=64,k=64] bf16 torch cpu", metric="median_s", branch="main"):
    n = len(values)
    return pd.DataFrame({
        "id": range(n), "run_id": [f"r{i:03d}" for i in range(n)], "seq": 0, "case_key": name,
        "comparability_key": "key-" + name, "device_name": "Test CPU", "device": "cpu", "device_label": "Test CPU",
        "git_commit": [f"c{i:03d}" for i in range(n)], "git_branch": branch, "commit_depth": range(1, n + 1),
        "commit_time": [f"2026-01-{1 + i % 28:02d}T00:00:00+00:00" for i in range(n)],
        "run_started_at": [f"2026-{1 + i // 28:02d}-{1 + i % 28:02d}T02:00:00+00:00" for i in range(n)],
        metric: values})


def noisy(n, cv=0.01, seed=0, level=1e-3):
    return level * np.exp(np.random.default_rng(seed).normal(0, cv, n))


def test_a_step_is_found_at_its_commit_with_its_size_and_interval():
    values = noisy(30)
    values[18:] *= 1.2
    [change] = find_changes(history(values))
    assert change.kind == "regression" and change.open
    assert change.first_bad_commit == "c018" and change.last_good_commit == "c017" and change.position == 18
    assert change.size == pytest.approx(0.2, abs=0.02)
    assert change.ci_low > 1.1 and change.ci_high < 1.3 and change.p_value < 0.01
    assert (change.n_before, change.n_after) == (18, 12) and change.first_bad_run == "r018"


def test_flat_noise_reports_nothing_and_a_single_slow_night_is_not_a_change():
    assert find_changes(history(noisy(40, cv=0.03, seed=1))) == []
    spike = noisy(40, seed=2)
    spike[20] *= 3
    assert find_changes(history(spike)) == []


def test_a_step_under_the_threshold_is_not_reported():
    values = noisy(40, cv=0.002, seed=3)
    values[20:] *= 1.03
    assert find_changes(history(values)) == []
    assert len(find_changes(history(values), ChangeConfig(threshold=0.02))) == 1


def test_a_fixed_regression_is_closed_and_a_speedup_is_an_improvement():
    values = noisy(36, seed=4)
    values[12:24] *= 1.3
    changes = find_changes(history(values))
    assert [(c.kind, c.open, c.position) for c in changes] == [("improvement", False, 24),
                                                              ("regression", False, 12)]  # newest first


def test_sqnr_drop_is_a_regression_in_db():
    values = 30 + np.random.default_rng(5).normal(0, 0.1, 30)
    values[15:] -= 3
    [change] = find_changes(history(values, metric="sqnr_db"), ChangeConfig(metrics=("sqnr_db",)))
    assert change.kind == "regression" and change.size == pytest.approx(-3, abs=0.3)


def test_commit_order_not_run_time_orders_the_history():
    values = noisy(30, seed=6)
    values[15:] *= 1.25
    frame = history(values)
    # The runs of the slow commits ran first (a backfill), the fast ones later: commit depth still orders them.
    frame["run_started_at"] = frame["run_started_at"].iloc[::-1].to_numpy()
    [change] = find_changes(frame)
    assert change.first_bad_commit == "c015" and change.kind == "regression"


def test_series_are_per_branch_and_comparability_key():
    values = noisy(30, seed=7)
    values[15:] *= 1.25
    other = history(noisy(30, seed=8), branch="feature")
    both = pd.concat([history(values), other], ignore_index=True)
    [change] = find_changes(both)
    assert change.branch == "main"


def test_history_depth_says_which_series_were_long_enough_to_search():
    config = ChangeConfig(min_size=3)
    short = history(noisy(5, seed=1), name="gemm[m=8,n=8,k=8] bf16 torch cpu")
    assert history_depth(short, config) == HistoryDepth(series=1, judged=0, longest=5, needed=6)
    assert not history_depth(short, config).enough and find_changes(short, config) == []
    # Two runs of one commit are one point; a series on another branch is another series.
    rerun = pd.concat([short, short.iloc[[-1]]], ignore_index=True)
    assert history_depth(rerun, config).longest == 5
    both = pd.concat([short, history(noisy(8, seed=2), branch="feature")], ignore_index=True)
    depth = history_depth(both, config)
    assert (depth.series, depth.judged, depth.longest, depth.enough) == (2, 1, 8, True)
    assert history_depth(short.iloc[0:0], config).longest == 0


def test_new_since_keeps_open_regressions_measured_after_a_run():
    values = noisy(30, seed=9)
    values[20:] *= 1.3
    changes = find_changes(history(values))
    assert new_since(changes, "2026-01-20T02:00:00+00:00") == changes  # commit 20 ran on 2026-01-21
    assert new_since(changes, "2026-01-22T02:00:00+00:00") == []


def test_a_step_carried_by_noisy_runs_is_kept_as_noisy_and_never_new():
    """A step whose commits after it were all measured noisy (under load, or spread over the noise band) is still
    shown, as ``noisy``, but is never a new regression: a load spike does not alert."""
    values = noisy(30, seed=9)
    values[20:] *= 1.3
    [loaded] = find_changes(history(values).assign(noisy=[i >= 20 for i in range(30)]))
    assert loaded.noisy is True
    assert new_since([loaded], "2026-01-20T02:00:00+00:00") == []
    [quiet] = find_changes(history(values).assign(noisy=False))
    assert quiet.noisy is False and new_since([quiet], "2026-01-20T02:00:00+00:00") == [quiet]
    assert list(rank_changes(changes_frame([loaded, quiet]))["noisy"]) == [False, True]  # confirmed first


def test_a_noisy_record_gives_way_to_a_quiet_one_of_the_same_commit():
    """Two runs of each commit: from commit 20 on, one ran under load 30% slower. The commit's value is its quiet
    run's, so no change is found."""
    values = noisy(30, seed=4)
    quiet = history(values).assign(noisy=False)
    loaded = history(values * np.where(np.arange(30) >= 20, 1.3, 1.0)).assign(noisy=np.arange(30) >= 20)
    loaded["id"] += 100
    assert find_changes(pd.concat([quiet, loaded], ignore_index=True)) == []


def test_a_record_is_noisy_under_load_or_over_the_spread_band():
    frame = history([1e-3, 1e-3, 1e-3]).assign(iqr_s=[1e-5, 5e-4, 1e-5])
    loads = {"r000": HostLoad(0.5, 2), "r001": HostLoad(0.5, 2), "r002": HostLoad(9.0, 2)}
    assert list(mark_noisy(frame, loads)["noisy"]) == [False, True, True]


def test_noise_estimate_ignores_a_step():
    y = np.log(noisy(200, cv=0.02, seed=10))
    stepped = y.copy()
    stepped[100:] += np.log(1.5)
    assert noise_sigma(stepped) == pytest.approx(noise_sigma(y), rel=0.05)
    assert noise_sigma(y) == pytest.approx(0.02, rel=0.2)


def test_bad_settings_are_refused_with_the_accepted_values():
    with pytest.raises(ValueError, match="unknown metric speed; accepted: median_s"):
        ChangeConfig(metrics=("speed",))
    with pytest.raises(ValueError, match="min_size 1"):
        ChangeConfig(min_size=1)


def commit_of(night: int) -> str:
    """A distinct 40-digit commit hash per night (its 7-digit short form differs too)."""
    return f"{night:07x}" + "0" * 33


def nightly_store(path, n=24, slow_from=16, factor=1.3, **bf16_fields):
    """A store of ``n`` nightly runs on one branch, one commit each; bf16 slows down from ``slow_from``;
    ``bf16_fields`` replace fields of every bf16 record."""
    store = open_store(path)
    rng = np.random.default_rng(11)
    run_ids = []
    for i in range(n):
        run_id = f"night{i:02d}"
        records = []
        for seq, (precision, base) in enumerate((("bf16", 1e-3), ("fp32", 2e-3))):
            level = base * (factor if precision == "bf16" and i >= slow_from else 1)
            rec = record(64, precision, list(level * np.exp(rng.normal(0, 0.01, 5))))
            records.append({**rec, "seq": seq, **(bf16_fields if precision == "bf16" else {})})
        run = {"run_id": run_id, "started_at": f"2026-03-{1 + i:02d}T02:00:00+00:00", "status": "complete",
               "git": {"commit": commit_of(i), "branch": "main", "dirty": False, "first_parent_depth": 100 + i},
               "host": {"alias": "h"}, "device": {"name": "Test CPU"}, "device_spec": "cpu",
               "software": {"torch": "2.13.0"}, "settings": {}}
        store.ingest_run({"schema_version": 1, "run": run, "records": records})
        run_ids.append(run_id)
    return run_ids


def test_changes_verb_lists_the_regression_and_fails_on_new(tmp_path, capsys):
    runs = nightly_store(tmp_path / "store")
    store = str(tmp_path / "store")
    assert main(["changes", "--store", store, "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["open_regressions"] == 1 and out["shown"] == 1
    [change] = out["list"]
    assert change["first_bad_commit"] == commit_of(16) and change["last_good_commit"] == commit_of(15)
    assert change["case_key"].startswith("gemm[m=64,n=64,k=64] bf16") and change["size"] == pytest.approx(0.3, abs=0.03)
    assert main(["changes", "--store", store, "--fail-on-new", runs[15]]) == 1
    printed = capsys.readouterr().out
    assert "open regression" in printed and commit_of(16)[:10] in printed
    assert "alert (consecutive nights)" in printed
    # The step needs 3 nights after it to be found (nights 16-18) and the latest 2 to confirm it: it becomes an
    # alert on night 18. So a nightly job that passes the previous night's run fails exactly once, that night.
    assert main(["changes", "--store", store, "--fail-on-new", runs[16]]) == 1  # the first bad commit's own run
    assert main(["changes", "--store", store, "--fail-on-new", runs[17]]) == 1
    assert main(["changes", "--store", store, "--fail-on-new", runs[18]]) == 0
    capsys.readouterr()
    assert main(["changes", "--store", store, "--fail-on-new", runs[17], "--json"]) == 1
    [new] = json.loads(capsys.readouterr().out)["new"]
    assert new["rule"] == "consecutive nights" and new["rule_detail"].startswith("last 2 nights")
    assert new["bisect_command"] == (f"fp8bench bisect --good {commit_of(15)} --bad {commit_of(16)} -- --workload "
                                     "gemm --shape m=64,n=64,k=64 --precision bf16 --backend torch --device cpu")
    assert main(["changes", "--store", store, "--fail-on-new", "no-such-run"]) == 2
    assert "no such run" in capsys.readouterr().err
    assert main(["changes", "--store", store, "--precision", "fp32", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["changes"] == 0


def test_a_stored_command_with_an_unbalanced_quote_does_not_stop_the_nightly_chain(tmp_path, capsys):
    """The bisect command comes from the record's typed fields, never from its stored text."""
    runs = nightly_store(tmp_path / "store", repro="fp8bench run --workload 'gemm; touch /tmp/pwned")
    assert main(["changes", "--store", str(tmp_path / "store"), "--fail-on-new", runs[17], "--json"]) == 1
    [new] = json.loads(capsys.readouterr().out)["new"]
    assert new["bisect_argv"] == ["fp8bench", "bisect", "--good", commit_of(15), "--bad", commit_of(16), "--",
                                  "--workload", "gemm", "--shape", "m=64,n=64,k=64", "--precision", "bf16",
                                  "--backend", "torch", "--device", "cpu"]
    assert "touch" not in new["bisect_command"]


def test_a_record_whose_field_is_no_flag_value_is_named_and_the_others_proceed(tmp_path, capsys):
    runs = nightly_store(tmp_path / "store", device="cpu`;touch /tmp/pwned;`", slow_from=16)
    assert main(["changes", "--store", str(tmp_path / "store"), "--fail-on-new", runs[17], "--json"]) == 1
    captured = capsys.readouterr()
    [new] = json.loads(captured.out)["new"]
    assert new["bisect_argv"] is None and new["bisect_command"] is None
    assert "no bisect for gemm[m=64,n=64,k=64] bf16" in captured.err and "field 'device'" in captured.err


def test_changes_verb_says_when_the_history_is_too_short_to_judge(tmp_path, capsys):
    """One commit cannot hold a step: the verb says nothing can be judged, never "no regression"."""
    nightly_store(tmp_path / "short", n=1)
    assert main(["changes", "--store", str(tmp_path / "short")]) == 0
    printed = capsys.readouterr().out
    assert "Not enough history to look for changes: the longest case history has 1 commit(s)" in printed
    assert "No open regression" not in printed
    assert json.loads(printed.strip().splitlines()[-1])["judged_histories"] == 0
    nightly_store(tmp_path / "flat", n=12, slow_from=99)
    assert main(["changes", "--store", str(tmp_path / "flat")]) == 0
    assert "No open regression found in the 2 case history(ies) long enough to judge." in capsys.readouterr().out


def test_changes_verb_searches_each_series_once(tmp_path, monkeypatch):
    """The search (PELT, then a bootstrap and a Mann-Whitney test per cut) is the costly step of ``changes`` over
    a nightly store; the changes, the alerts and the history's depth are read from one search per series. The store
    has two series (bf16, fp32) of 24 commits; ``--fail-on-new`` searches the history up to the given run once
    more."""
    import fp8bench.analysis.changes as changes_module

    nightly_store(tmp_path / "store")
    searched = []
    search = changes_module.segment
    monkeypatch.setattr(changes_module, "segment", lambda y, *a, **k: searched.append(y.size) or search(y, *a, **k))
    assert main(["changes", "--store", str(tmp_path / "store"), "--json"]) == 0
    assert searched == [24, 24], searched
    searched.clear()
    assert main(["changes", "--store", str(tmp_path / "store"), "--fail-on-new", "night17", "--json"]) == 1
    assert sorted(searched) == [18, 18, 24, 24], searched


def _python_calls(fn) -> int:
    """Python-level function calls ``fn()`` makes (a count, not a timing: machine load cannot change it)."""
    import sys

    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        calls += event == "call"
    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def test_work_per_commit_does_not_grow_with_the_series_length():
    """A nightly store grows by commits per series; ``changes`` over a million records did not finish because its
    Python-level work per commit grew with the series' length (a pure-Python PELT search, a grouping per series).
    Two steps per history, as a real one has: the calls per commit at 1,000 commits stay within 1.5x of those
    at 100."""
    find_changes(history(noisy(40)))  # first use imports the search's modules: not counted
    per_commit = {}
    for n in (100, 1000):
        values = noisy(n, seed=4)
        values[n // 3:] *= 1.3
        values[2 * n // 3:] /= 1.3
        frame = history(values)
        found = []
        per_commit[n] = _python_calls(lambda f=frame, out=found: out.extend(find_changes(f))) / n
        assert len(found) == 2, found
    assert per_commit[1000] < 1.5 * per_commit[100], per_commit


def test_segmentation_matches_the_python_pelt_search():
    """The C search (ruptures' linear-kernel PELT) cuts where ruptures' Python PELT with the l2 cost does."""
    import ruptures

    from fp8bench.analysis.changes import segment

    config = ChangeConfig()
    for seed in range(20):
        rng = np.random.default_rng(seed)
        y = rng.normal(0, 0.01, 120) + np.repeat(rng.normal(0, 0.05, 4), 30)
        pen = config.penalty * max(noise_sigma(y), 0.005) ** 2 * np.log(y.size)  # segment()'s penalty
        reference = ruptures.Pelt(model="l2", min_size=config.min_size, jump=1).fit(y.reshape(-1, 1))
        assert segment(y, config) == reference.predict(pen=pen)[:-1], seed


def test_per_commit_medians_match_a_pandas_grouping():
    """Several runs of one commit reduce to their median, its first run and earliest start; unusable values
    (missing, not positive for a ratio metric) are left out."""
    from fp8bench.analysis.changes import METRICS, _per_commit

    rng = np.random.default_rng(0)
    n = 60
    frame = history(rng.lognormal(0, 0.1, n)).assign(position=rng.integers(0, 15, n))
    frame.loc[[3, 7], "median_s"] = [np.nan, -1.0]
    frame.loc[5, "run_started_at"] = None
    got = _per_commit(frame, METRICS["median_s"])
    usable = frame[frame["median_s"] > 0]
    want = usable.groupby("position").agg(value=("median_s", "median"), commit=("git_commit", "first"),
                                          run_id=("run_id", "first"), started=("run_started_at", "min"))
    assert list(got.index) == list(want.index)
    assert np.allclose(got["value"], want["value"])
    assert list(got["commit"]) == list(want["commit"]) and list(got["run_id"]) == list(want["run_id"])
    assert list(got["started"]) == list(want["started"])


def test_dropping_cuts_retests_only_their_neighbours(monkeypatch):
    """A long history that PELT cuts often, every cut too small to keep: dropping the weakest cut changes only the
    tests of the two cuts beside it, so the tests stay in proportion to the cuts (re-testing every cut after each
    drop grew with their square, and a nightly store's long histories have many)."""
    import fp8bench.analysis.changes as changes

    values = noisy(600, cv=0.001, seed=5)
    for start in range(20, 600, 40):
        values[start:start + 20] *= 1.03  # under the 5 % threshold: each cut is found, then dropped
    cuts, tests = [], []
    segment, test_cut = changes.segment, changes._test_cut
    monkeypatch.setattr(changes, "segment", lambda *a, **k: cuts.extend(segment(*a, **k)) or list(cuts))
    monkeypatch.setattr(changes, "_test_cut", lambda *a, **k: tests.append(1) or test_cut(*a, **k))
    assert find_changes(history(values)) == []
    assert len(cuts) >= 20, cuts
    assert len(tests) <= 3 * len(cuts), (len(tests), len(cuts))


def test_a_case_several_ranks_measured_gets_no_bisect_and_is_named(capsys):
    """bisect's probe runs are one process each: a case measured under torchrun gets no bisect command, said on
    stderr, instead of one that would measure it on a single rank."""
    from types import SimpleNamespace

    from fp8bench.commands.changes import bisect_command

    rec = {"workload": "collective", "shape": {"op": "all_reduce", "n": 1024}, "precision": "bf16",
           "backend": "torch", "device": "cuda:0", "status": "ok"}
    run = {"run_id": "r2", "settings": {}, "spec": {"distributed": {"world_size": 4, "ranks_per_node": 4}}}
    store = SimpleNamespace(run_payload=lambda run_id: {"run": run, "records": [rec]})
    change = SimpleNamespace(last_good_commit="a" * 40, first_bad_commit="b" * 40, first_bad_run="r2",
                             case_key="collective[op=all_reduce,n=1024] bf16 torch cuda:0")
    assert bisect_command(store, SimpleNamespace(change=change)) is None
    assert "measured by 4 ranks under torchrun; bisect runs one process" in capsys.readouterr().err
