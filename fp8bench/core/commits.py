"""Commits as an axis: ordering measurements by commit along a branch, and linking a commit to its web page.

Nightly runs are ordered by what was measured, not by when: a rerun of last week's commit belongs last week. Along
one branch the first-parent chain orders commits, and its length up to a commit (``git rev-list --count
--first-parent``, recorded per run as ``git.first_parent_depth``, stored as ``commit_depth``) grows by one per
commit, whatever the clocks say. Runs that lack it (a shallow CI clone, an older store) fall back to the committer
date, then to the run's start time. :func:`commit_order` turns that into positions 0, 1, 2, ... per distinct
commit, the x-axis of the History page and the time axis of change-point detection.

Links: ``--repo-url`` gives a template with ``{commit}`` (``https://git.example.com/fp8/commit/{commit}``) or a
repository address to which ``/commit/{commit}`` is appended (GitHub, GitLab and Gitea all serve that path);
without it, the remote recorded with the run (``git.remote``, credentials removed), or the ``origin`` remote of
the current checkout.

A ref given on the command line (``ab --base``, ``bisect --good``) reaches git as an argument: one that begins with
``-`` would be read as an option (``--lock`` leaves a locked worktree behind), so :func:`user_ref` refuses it.
"""

from __future__ import annotations

import urllib.parse

import pandas as pd

from fp8bench.core.git import git_fact

ORDER_COLUMNS = ("commit_depth", "commit_time", "run_started_at")


def user_ref(ref: str, flag: str) -> str:
    """``ref`` as given to ``flag``, refused (ValueError) when git would read it as an option or it is empty."""
    if not ref or ref.startswith("-"):
        raise ValueError(f"{flag} {ref!r} is no git ref or checkout: a ref cannot begin with '-' (give a branch, "
                         "tag, commit or path)")
    return ref


def commit_order(frame: pd.DataFrame) -> pd.Series:
    """Position (0 = oldest) of each row's commit on its branch, from ``git_commit`` and :data:`ORDER_COLUMNS`.

    Commits are sorted by first-parent depth when every commit in ``frame`` has one, else by committer date
    when every commit has one, else by the first run's start; ties keep the earlier first run first. Rows without
    a commit are ordered by their run's start as if each run were its own commit."""
    if frame.empty:
        return pd.Series(dtype="int64", index=frame.index)
    commits = frame["git_commit"].astype("object").where(frame["git_commit"].notna(),
                                                          "run:" + frame["run_id"].astype(str))
    per_commit = frame.assign(_commit=commits).groupby("_commit", sort=False).agg(
        depth=("commit_depth", "max"), when=("commit_time", "min"), first_run=("run_started_at", "min"))
    keys = ["first_run"]
    if per_commit["when"].notna().all():
        keys.insert(0, "when")
    if per_commit["depth"].notna().all():
        keys.insert(0, "depth")
    ordered = per_commit.sort_values(keys, kind="stable").index
    position = pd.Series(range(len(ordered)), index=ordered)
    return commits.map(position).astype("int64")


def web_url(remote: str | None) -> str | None:
    """A git remote as an https address without credentials: ``git@github.com:o/r.git`` and
    ``https://user:token@github.com/o/r.git`` both become ``https://github.com/o/r``; a local path gives ``None``."""
    if not remote:
        return None
    text = remote.strip()
    if text.startswith("git@") and ":" in text:
        host, repo = text[4:].split(":", 1)
        text = f"https://{host}/{repo}"
    elif text.startswith("ssh://"):
        text = "https://" + text[6:].split("@", 1)[-1]
    if not text.startswith(("https://", "http://")):
        return None
    rest = text.split("://", 1)[1]
    host_part, _, path_part = rest.partition("/")
    host_part = host_part.rsplit("@", 1)[-1].split(":", 1)[0]  # drop user:token@ and a port
    path_part = path_part.rstrip("/").removesuffix(".git")
    return f"https://{host_part}/{path_part}" if path_part else None


def checkout_remote() -> str | None:
    """The ``origin`` remote of the current directory's checkout as a web address, or ``None``."""
    return web_url(git_fact(None, "remote", "get-url", "origin"))


def url_template(repo_url: str | None) -> str | None:
    """A link template with ``{commit}`` from ``--repo-url`` (a template, or a repository address)."""
    if not repo_url:
        return None
    if "{commit}" in repo_url:
        return repo_url
    base = web_url(repo_url) or repo_url.rstrip("/")
    return base + "/commit/{commit}"


def commit_link(template: str | None, commit: str | None) -> str | None:
    """The web page of ``commit``, or ``None`` without a template or a commit, or when the result is not an
    ``http``/``https`` address: a template comes from a stored git remote, which a run file can set to
    ``javascript:...``, and a link is only ever drawn to a web page."""
    from fp8bench.core.escaping import web_url

    if not template or not commit:
        return None
    return web_url(template.replace("{commit}", urllib.parse.quote(str(commit), safe="")))
