"""Every call fp8bench makes to git, in one place.

fp8bench reads git for three things: the commit a run measured (the run header's ``git`` section: commit, branch,
dirty, first-parent depth, commit time, ``origin``), the commits between two refs that ``bisect`` searches, and
the detached worktrees that ``ab`` and ``bisect`` check refs out into. Each call runs ``git -C REPO ...`` with an
argument vector (never a shell), so a ref or path is one argument whatever it holds; refs a user typed are checked
before they get here (:func:`fp8bench.core.commits.user_ref`: one that begins with ``-`` would be read as an
option). Facts that may be absent (no git, not a repository, a shallow clone) come back as ``None``; a command
that must succeed raises :class:`GitError` with git's own message.
"""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

# A fact about the checkout that takes git longer than this is left out rather than waited for (seconds).
FACT_TIMEOUT_S = 10.0
# Removing a worktree of a large checkout is a folder deletion; past this, it is left for ``git worktree prune``.
REMOVE_TIMEOUT_S = 120.0


class GitError(RuntimeError):
    """A git command that had to succeed failed: the command, the repository and git's message."""


def _run(repo: Path | str | None, args: tuple[str, ...], timeout_s: float | None) -> subprocess.CompletedProcess[str]:
    where = ["-C", str(repo)] if repo is not None else []
    return subprocess.run(["git", *where, *args], capture_output=True, text=True, timeout=timeout_s)


def git_fact(repo: Path | str | None, *args: str) -> str | None:
    """``git ARGS``'s output in ``repo`` (the current directory for ``None``), stripped, or ``None`` when git is
    missing, slower than :data:`FACT_TIMEOUT_S` or fails: for facts a run records when it can."""
    try:
        out = _run(repo, args, FACT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git(repo: Path | str, *args: str) -> str:
    """``git ARGS``'s output in ``repo``, stripped; :class:`GitError` when it fails."""
    try:
        out = _run(repo, args, None)
    except OSError as exc:
        raise GitError(f"git {' '.join(args)} in {repo}: {exc}") from exc
    if out.returncode != 0:
        raise GitError(f"git {' '.join(args)} in {repo}: {out.stderr.strip() or out.stdout.strip()}")
    return out.stdout.strip()


def is_ancestor(repo: Path | str, older: str, newer: str) -> bool:
    """Whether commit ``older`` is an ancestor of (or is) ``newer``."""
    return _run(repo, ("merge-base", "--is-ancestor", older, newer), None).returncode == 0


def add_worktree(repo: Path | str, ref: str, into: Path) -> Path:
    """Check ``ref`` out into a new detached worktree at ``into``; :class:`GitError` when git refuses."""
    git(repo, "worktree", "add", "--detach", str(into), ref)
    return into


def remove_worktree(repo: Path | str, path: Path) -> None:
    """Remove the worktree at ``path`` and its record in ``repo``; safe to call again, and for a worktree that a
    stopped ``git worktree add`` left half made (still locked, or with no folder left: hence ``--force`` twice).
    git runs in a session of its own, so that a Ctrl-C at the terminal, which reaches the whole foreground group,
    cannot stop it half way; a failure is left for ``git worktree prune``."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", "--force", str(path)],
                       capture_output=True, start_new_session=True, timeout=REMOVE_TIMEOUT_S)
