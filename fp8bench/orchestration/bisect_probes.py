"""The probes of ``fp8bench bisect``: each commit checked out into its own worktree, built, and measured against
the good commit with the rounds of a sequential A/B (:mod:`fp8bench.orchestration.sequential_ab`); the search that
chooses which commit to probe, and what its outcome means, is :mod:`fp8bench.analysis.bisect`.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from fp8bench.analysis.bisect import SKIP, BisectError, Commit, Probe, probe_from_report
from fp8bench.analysis.gate.config import GateConfig
from fp8bench.analysis.gate.sequential import SequentialConfig
from fp8bench.core.commits import user_ref
from fp8bench.core.git import GitError, git, is_ancestor
from fp8bench.orchestration.ab import AbError, SideSpec, Worker, checkout_ref, remove_checkout
from fp8bench.orchestration.sequential_ab import run_sequential


def _git(repo: Path, *args: str) -> str:
    try:
        return git(repo, *args)
    except GitError as exc:
        raise BisectError(str(exc)) from None


def resolve(repo: Path, ref: str) -> Commit:
    try:
        user_ref(ref, "ref")
    except ValueError as exc:
        raise BisectError(str(exc)) from None
    sha = _git(repo, "rev-parse", "--verify", f"{ref}^{{commit}}")
    return Commit(sha, _git(repo, "log", "-1", "--format=%s", sha))


def commits_between(repo: Path, good: str, bad: str) -> tuple[Commit, Commit, list[Commit]]:
    """Good, bad and the commits after good up to bad along bad's first-parent line, oldest first."""
    g, b = resolve(repo, good), resolve(repo, bad)
    if g.sha == b.sha:
        raise BisectError(f"good and bad are the same commit {g.sha[:12]}")
    if not is_ancestor(repo, g.sha, b.sha):
        raise BisectError(f"good {good} ({g.sha[:12]}) is not an ancestor of bad {bad} ({b.sha[:12]})")
    lines = _git(repo, "rev-list", "--first-parent", "--reverse", "--format=%H %s", f"{g.sha}..{b.sha}")
    commits = []
    for line in lines.splitlines():
        if line.startswith("commit "):
            continue
        sha, _, subject = line.partition(" ")
        commits.append(Commit(sha, subject))
    if not commits or commits[-1].sha != b.sha:
        raise BisectError(f"bad {bad} is not on a first-parent line from good {good}")
    return g, b, commits


def default_setup() -> list[str]:
    """Byte-compile the checkout with this Python: a commit with a syntax error does not build."""
    return [sys.executable, "-m", "compileall", "-q", "."]


@dataclass
class ProbeRunner:
    """Measures commits against good with sequential A/B rounds: one long-lived worker for good, one per probe."""

    repo: Path
    good: Commit
    run_args: Sequence[str]
    folder: Path
    config: GateConfig = field(default_factory=GateConfig)
    setup: str | None = None  # a shell command run in each worktree; None: :func:`default_setup`
    plugin: str | None = None  # a module of the repository loaded on both sides (a repository of custom kernels)
    min_rounds: int = 8
    round_timeout_s: float | None = None
    stderr: IO[str] | None = None
    on_round: Callable[[int, str], None] | None = None
    _tmp: Path | None = None
    _good_worker: Worker | None = None
    _checkouts: dict[str, Path] = field(default_factory=dict)
    _made: list[Path] = field(default_factory=list)  # every worktree begun, checked out or not

    def _checkout(self, commit: Commit) -> Path:
        """The commit's worktree (checked out once, kept until :meth:`close`)."""
        assert self._tmp is not None
        if commit.sha not in self._checkouts:
            path = self._tmp / commit.sha[:12]
            self._made.append(path)  # before git makes it: a stop during `git worktree add` still removes it
            self._checkouts[commit.sha] = checkout_ref(self.repo, commit.sha, path)
        return self._checkouts[commit.sha]

    def _env(self, root: Path) -> dict[str, str]:
        if not self.plugin:
            return {}
        path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
        return {"FP8BENCH_PLUGINS": self.plugin, "PYTHONPATH": path}

    def _build(self, root: Path) -> str | None:
        """Run the setup command in ``root``; the reason it failed, or None."""
        env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
        cmd: Any = default_setup() if self.setup is None else self.setup
        done = subprocess.run(cmd, cwd=root, shell=isinstance(cmd, str), env=env, capture_output=True, text=True)
        if done.returncode == 0:
            return None
        shown = cmd if isinstance(cmd, str) else shlex.join(cmd)
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return f"setup `{shown}` exited {done.returncode}: {' / '.join(tail)}"

    def start(self) -> None:
        """Check out and build good, and start its worker (kept for every probe)."""
        self._tmp = Path(tempfile.mkdtemp(prefix="fp8bench-bisect-"))
        root = self._checkout(self.good)
        failed = self._build(root)
        if failed:
            raise BisectError(f"the good commit {self.good.sha[:12]} does not build: {failed}")
        try:
            self._good_worker = Worker(SideSpec("base", root, self._env(root)), stderr=self.stderr)
        except AbError as exc:
            raise BisectError(f"the good commit {self.good.sha[:12]} cannot be loaded: {exc}") from exc

    def close(self) -> None:
        """Stop the good commit's worker and remove every worktree and the temporary folder; safe to call again."""
        if self._good_worker is not None:
            self._good_worker.close()
        while self._made:
            remove_checkout(self.repo, self._made.pop())
        self._checkouts.clear()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def __call__(self, commit: Commit, budget_s: float, attempt: int) -> Probe:
        assert self._good_worker is not None, "start() first"
        began = time.monotonic()
        folder = self.folder / f"{commit.sha[:12]}-{attempt}"
        root = self._checkout(commit)

        def skipped(reason: str) -> Probe:
            return Probe(commit.sha, commit.subject, SKIP, reason=reason, seconds=time.monotonic() - began,
                         folder=str(folder))

        failed = self._build(root) if attempt == 1 else None
        if failed:
            return skipped(f"does not build: {failed}")
        try:
            head = Worker(SideSpec("head", root, self._env(root)), stderr=self.stderr)
        except AbError as exc:
            return skipped(f"cannot be loaded: {exc}")
        try:
            seq = SequentialConfig(budget_s, self.min_rounds)
            report = run_sequential({"base": self._good_worker, "head": head}, self.run_args, folder, seq,
                                    self.config, self.on_round, round_timeout_s=self.round_timeout_s)
        except AbError as exc:
            if self._good_worker.proc.poll() is not None:
                raise BisectError(f"the good commit's worker failed: {exc}") from exc
            return skipped(f"could not be measured: {exc}")
        finally:
            head.close()
        (folder / "report.json").write_text(json.dumps(report.to_json(), indent=1, default=str))
        return probe_from_report(commit, report, time.monotonic() - began, str(folder))
