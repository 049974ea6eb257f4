"""Commit order along a branch and commit links."""

from __future__ import annotations

import pandas as pd
import pytest

from fp8bench.core.commits import commit_link, commit_order, url_template, web_url


def frame(commits, depth=None, time=None, started=None):
    n = len(commits)
    return pd.DataFrame({"run_id": [f"r{i}" for i in range(n)], "git_commit": commits,
                         "commit_depth": depth or [None] * n, "commit_time": time or [None] * n,
                         "run_started_at": started or [f"2026-01-0{i + 1}" for i in range(n)]})


def test_depth_orders_commits_and_reruns_share_a_position():
    f = frame(["b", "a", "c", "a"], depth=[5, 4, 6, 4])
    assert commit_order(f).tolist() == [1, 0, 2, 0]


def test_without_depth_the_commit_time_orders_then_the_first_run():
    f = frame(["b", "a", "c"], time=["2026-02-02", "2026-02-01", "2026-02-03"])
    assert commit_order(f).tolist() == [1, 0, 2]
    f = frame(["b", "a", "c"], depth=[2, None, 3], started=["2026-03-01", "2026-03-03", "2026-03-02"])
    assert commit_order(f).tolist() == [0, 2, 1]  # one commit lacks a depth: run start order for all


def test_runs_without_a_commit_each_get_their_own_position():
    f = frame([None, None], started=["2026-01-02", "2026-01-01"])
    assert commit_order(f).tolist() == [1, 0]


@pytest.mark.parametrize("remote, url", [
    ("git@github.com:org/fp8bench.git", "https://github.com/org/fp8bench"),
    ("https://user:secret-token@github.com/org/fp8bench.git", "https://github.com/org/fp8bench"),
    ("ssh://git@gitlab.example.com:2222/team/fp8bench.git", "https://gitlab.example.com/team/fp8bench"),
    ("/srv/git/fp8bench", None), ("", None), (None, None)])
def test_web_url_drops_credentials_and_local_paths(remote, url):
    assert web_url(remote) == url


def test_url_template_from_a_template_or_a_repository():
    assert url_template("https://git.example.com/x/-/commit/{commit}") == "https://git.example.com/x/-/commit/{commit}"
    assert url_template("git@github.com:org/fp8bench.git") == "https://github.com/org/fp8bench/commit/{commit}"
    assert commit_link(url_template("https://github.com/o/r"), "abc123") == "https://github.com/o/r/commit/abc123"
    assert commit_link(None, "abc") is None and commit_link("x/{commit}", None) is None
