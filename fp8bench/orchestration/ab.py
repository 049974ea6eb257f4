"""A/B runs: base and head measured on the same runner, in the same job, interleaved in rounds.

Why interleave: a GPU runner's speed drifts (clocks, temperature, neighbours on the host, a driver's background
work). Measuring all of the base and then all of the head turns that drift into a fake regression or hides a
real one. Here each side lives in its own long-lived worker process, importing its own checkout's code, and the
two take turns: round ``r`` runs base then head when ``r`` is even and head then base when it is odd (an ABBA
order, so neither side is always first after the other has warmed the machine). Every round writes one ordinary
run file per side; the gate then uses each case's per-round medians as its samples, so drift shared by both
sides cancels out in the comparison.

A side is a folder holding a checkout of the project (a second clone, a worktree, or the same folder for an A/A
run) or a git ref, which is checked out into a temporary worktree for the duration of the A/B run. The worker
loads ``fp8bench`` from that folder by the ``package-dir`` mapping of its ``pyproject.toml`` (the installed copy is
never imported into it), then runs ``fp8bench run`` with the given arguments once per round, so each side
measures with its own runner and kernels. Extra registering modules (a test-only backend) can be given to one
side through ``FP8BENCH_PLUGINS`` in that side's environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from fp8bench.analysis.gate.config import GateConfig
from fp8bench.analysis.gate.decision import Verdict
from fp8bench.analysis.gate.report import AbInfo, GateReport, build_report, merge_rerun
from fp8bench.analysis.gate.sides import collect_side
from fp8bench.core.commits import user_ref
from fp8bench.core.git import GitError, add_worktree, remove_worktree
from fp8bench.core.redact import MASK
from fp8bench.core.run_header import payload_header
from fp8bench.results.ingest import load_side
from fp8bench.results.runfile_reader import read_run_header

# Executed by ``python -c`` in each worker. It must not import the installed fp8bench before the checkout's.
_WORKER = r'''
import contextlib, ctypes, importlib.util, io, json, os, signal, sys, tomllib, traceback
# Die with the parent (Linux: prctl PR_SET_PDEATHSIG = 1): a parent killed by SIGKILL or a CI timeout must not leave
# this process running a round, or holding a worktree, with parent 1.
with contextlib.suppress(Exception):
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    if os.getppid() == 1:  # the parent died before the call above took effect
        sys.exit(1)
# The parent decides when a round stops (SIGTERM ends it as an interrupted run, its finished records kept): Ctrl-C,
# which reaches every process of the terminal's group, must not print a traceback here or end a round on its own.
signal.signal(signal.SIGINT, signal.SIG_IGN)
# The protocol gets its own copy of stdout, before the checkout's code is imported; fd 1 then points at stderr, so
# that anything else writing to stdout (a print at import, a C library, a stray print later) cannot corrupt it.
proto = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr
root = sys.argv[1]
with open(os.path.join(root, "pyproject.toml"), "rb") as fh:
    cfg = tomllib.load(fh)
dirs = (cfg.get("tool", {}).get("setuptools", {}).get("package-dir")) or {"fp8bench": "fp8bench"}
for name in sorted(dirs, key=lambda n: n.count(".")):
    folder = os.path.join(root, dirs[name])
    if not os.path.exists(os.path.join(folder, "__init__.py")):
        continue
    spec = importlib.util.spec_from_file_location(name, os.path.join(folder, "__init__.py"),
                                                  submodule_search_locations=[folder])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, mod)
from fp8bench.cli import main
print(json.dumps({"ready": True, "fp8bench": os.path.dirname(sys.modules["fp8bench"].__file__)}), file=proto,
      flush=True)
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("stop"):
        break
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            rc = main(msg["argv"])
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 2
    except BaseException:
        rc, buf = 3, io.StringIO(traceback.format_exc())
    print(json.dumps({"rc": rc, "tail": buf.getvalue()[-2000:]}), file=proto, flush=True)
'''


class AbError(RuntimeError):
    """The A/B run itself failed (a worker died, a round failed): a harness error, never a verdict."""


@dataclass
class SideSpec:
    """One side: a checkout folder (or a git ref, see :func:`checkout_ref`) and extra environment variables."""

    name: str  # base | head
    root: Path
    env: dict[str, str] = field(default_factory=dict)


# Seconds a worker may take to import its checkout's fp8bench (torch included) and say it is ready: a cold import
# on a busy 2-core machine takes under a minute; a checkout that hangs at import must not hang the A/B or bisect.
WORKER_START_TIMEOUT_S = 600.0
# Seconds a stopping worker may take to exit (an interrupted round writes its run file first) before it is killed:
# short, because a CI runner's `timeout -k` kills the whole command soon after its first signal.
WORKER_STOP_GRACE_S = 10.0


class Worker:
    """A long-lived process running one side's fp8bench; one ``fp8bench run`` per :meth:`run` call."""

    def __init__(self, side: SideSpec, python: str = sys.executable, stderr: IO[str] | None = None,
                 start_timeout_s: float = WORKER_START_TIMEOUT_S) -> None:
        if not (side.root / "pyproject.toml").is_file():
            raise AbError(f"{side.name} checkout {side.root} has no pyproject.toml; give the project's root folder")
        env = {**os.environ, **side.env}
        # While one side measures, the other waits on its stdin; its OpenMP threads must sleep, not spin on the
        # cores the measuring side needs (GNU OpenMP spins for a while after each parallel region by default).
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        self.side = side
        self.busy = False  # a round was asked for and has not answered
        self.proc = subprocess.Popen([python, "-c", _WORKER, str(side.root)], cwd=side.root, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)
        try:
            hello = self._read(start_timeout_s, f"the {side.name} worker's start (importing {side.root})", "")
        except BaseException:  # a stop signal while it starts: nobody else holds this process to close it
            self.proc.kill()
            self.proc.wait()
            raise
        if not hello.get("ready"):
            raise AbError(f"{side.name} worker did not start: {hello}")
        self.package = hello["fp8bench"]

    def _read(self, timeout_s: float | None = None, what: str = "", flag: str = " (--round-timeout)") -> dict[str, Any]:
        """The worker's next protocol line; :class:`AbError` naming ``what`` (and the ``flag`` that set the limit)
        when it takes over ``timeout_s``, or when the line is not the protocol's."""
        assert self.proc.stdout is not None
        if timeout_s is not None:
            with selectors.DefaultSelector() as waiting:
                waiting.register(self.proc.stdout, selectors.EVENT_READ)
                if not waiting.select(timeout_s):
                    self.proc.kill()  # a hung side: its round fails, and the other side is not left waiting
                    self.proc.wait()
                    raise AbError(f"{what} did not finish within {timeout_s:g} s{flag}; its worker "
                                  f"({self.side.root}) was stopped")
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            raise AbError(f"{self.side.name} worker ({self.side.root}) exited with code {code}")
        try:
            reply = json.loads(line)
        except json.JSONDecodeError:
            reply = None
        if not isinstance(reply, dict):
            self.proc.kill()
            self.proc.wait()
            raise AbError(f"{self.side.name} worker ({self.side.root}) wrote {line[:80]!r} where a protocol line "
                          "belongs; it was stopped")
        return reply

    def run(self, run_args: Sequence[str], out: Path, timeout_s: float | None = None, what: str = "",
            force: bool = False) -> dict[str, Any]:
        """One round: ``fp8bench run RUN_ARGS --out OUT --no-store --json`` inside the worker; ``what`` names it
        ("head round 3") in messages, ``timeout_s`` bounds it."""
        assert self.proc.stdin is not None
        argv = ["run", *run_args, "--out", str(out), "--no-store", "--json", *(["--force"] if force else [])]
        self.busy = True
        self.proc.stdin.write(json.dumps({"argv": argv}) + "\n")
        self.proc.stdin.flush()
        reply = self._read(timeout_s, what or f"{self.side.name} round")
        self.busy = False
        # Exit 1 means a case failed or is invalid: that is data for the gate (a `broken` case), not a harness
        # error. Anything else without a run file is.
        if reply["rc"] not in (0, 1) or not out.is_file():
            raise AbError(f"{self.side.name} round failed (exit {reply['rc']}): {reply['tail'][-800:]}")
        return reply

    def close(self, grace_s: float = WORKER_STOP_GRACE_S) -> None:
        """Stop the worker; safe to call again. An idle worker is asked to stop; one still in a round (the A/B
        run was stopped or failed) gets SIGTERM, which ends its round as an interrupted run file with every record
        finished so far. Either way it is killed if it has not exited within ``grace_s`` seconds."""
        if self.proc.poll() is not None:
            return
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            if not self.busy:
                self.proc.stdin.write(json.dumps({"stop": True}) + "\n")
            self.proc.stdin.close()
        if self.busy:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def round_order(r: int) -> tuple[str, str]:
    """ABBA: base first in even rounds, head first in odd ones."""
    return ("base", "head") if r % 2 == 0 else ("head", "base")


def round_files(folder: Path, rounds: int) -> dict[str, list[Path]]:
    """Where each side's round run files go: ``folder/base/rNN.json`` and ``folder/head/rNN.json``."""
    return {name: [folder / name / f"r{r:02d}.json" for r in range(rounds)] for name in ("base", "head")}


def run_rounds(workers: dict[str, Worker], run_args: Sequence[str], rounds: int, folder: Path,
               on_round: Callable[[int, str], None] | None = None, round_timeout_s: float | None = None,
               force: bool = False) -> dict[str, Path]:
    """Interleaved rounds into :func:`round_files`; a round over ``round_timeout_s`` fails the A/B run, named."""
    if rounds < 2:
        raise ValueError(f"rounds must be >= 2 for per-round medians (the gate method asks for >= 10), got {rounds}")
    files = round_files(folder, rounds)
    for name in files:
        (folder / name).mkdir(parents=True, exist_ok=True)
    for r in range(rounds):
        for name in round_order(r):
            workers[name].run(run_args, files[name][r], round_timeout_s, f"{name} round {r + 1} of {rounds}", force)
            if on_round:
                on_round(r, name)
    return {name: folder / name for name in files}


def checkout_ref(repo: Path, ref: str, into: Path) -> Path:
    """Check ``ref`` of the repository at ``repo`` out into a new detached worktree at ``into``."""
    try:
        user_ref(ref, "ref")
    except ValueError as exc:
        raise AbError(str(exc)) from None
    try:
        return add_worktree(repo, ref, into)
    except GitError as exc:
        raise AbError(f"cannot check out {ref!r} of {repo}: {exc}") from None


def remove_checkout(repo: Path, path: Path) -> None:
    """Remove the worktree at ``path`` and its record in ``repo`` (:func:`fp8bench.core.git.remove_worktree`)."""
    remove_worktree(repo, path)


@dataclass
class AbResult:
    report: GateReport
    folder: Path


def run_ab(base: SideSpec, head: SideSpec, run_args: Sequence[str], folder: Path, rounds: int = 10,
           config: GateConfig | None = None, rerun_inconclusive: bool = True,
           on_round: Callable[[int, str], None] | None = None, stderr: IO[str] | None = None,
           round_timeout_s: float | None = None, force: bool = False,
           on_rerun: Callable[[list[str]], None] | None = None) -> AbResult:
    """Measure both sides in interleaved rounds and gate head against base (rerunning inconclusive cases once).
    ``round_timeout_s`` bounds each side's round; ``force`` lets round files replace those of an earlier A/B run
    in ``folder``. ``on_round(r, side)`` follows each side's run of round ``r``; ``on_rerun(cases)`` announces the
    rerun of the cases left inconclusive, before its rounds start."""
    # Round r of both sides ran back to back, so the gate compares them round by round.
    config = replace(config or GateConfig(), paired=True)
    workers: dict[str, Worker] = {}
    try:
        for spec in (base, head):
            workers[spec.name] = Worker(spec, stderr=stderr)
        dirs = run_rounds(workers, run_args, rounds, folder, on_round, round_timeout_s, force)
        report = build_report(collect_side(load_side(str(dirs["base"]))), collect_side(load_side(str(dirs["head"]))),
                              config)
        inconclusive = [c.case for c in report.cases if c.verdict is Verdict.INCONCLUSIVE]
        if rerun_inconclusive and inconclusive:
            if on_rerun:
                on_rerun(inconclusive)
            again = run_rounds(workers, run_args, rounds, folder / "rerun", on_round, round_timeout_s, force)
            rerun = build_report(collect_side(load_side(str(again["base"]))),
                                 collect_side(load_side(str(again["head"]))), config)
            report = merge_rerun(report, rerun)
    finally:
        for w in workers.values():
            w.close()
    return AbResult(replace(report, ab=ab_info(base, head, rounds, run_args, dirs, round_timeout_s, workers)),
                    folder)


def ab_info(base: SideSpec, head: SideSpec, rounds: int, run_args: Sequence[str], dirs: dict[str, Path],
            round_timeout_s: float | None, workers: dict[str, Worker]) -> AbInfo:
    """The report's A/B section: the checkouts, their round folders' dirty state, the workers' packages."""
    return AbInfo(str(base.root), str(head.root), rounds, list(run_args), masked_env(base.env), masked_env(head.env),
                  {name: side_dirty(dirs[name]) for name in ("base", "head")}, round_timeout_s,
                  {n: w.package for n, w in workers.items()})


def masked_env(env: dict[str, str]) -> dict[str, str]:
    """A side's extra environment for the report: every value masked, the names kept. Values given to a side are
    often tokens or URLs with passwords, and the report is published (a pull-request comment, the store)."""
    return {name: MASK for name in env}


def side_dirty(rounds: Path) -> bool | None:
    """Whether a side measured a checkout with uncommitted changes (``git.dirty`` of its round run files): true if
    any round says so, ``None`` when no round recorded it."""
    flags = []
    for path in sorted(rounds.glob("r*.json")):
        try:
            flags.append(payload_header(read_run_header(path)).git.dirty)
        except ValueError:  # a round file that is no run file (RunFileError), or whose git object is not one
            continue
    known = [f for f in flags if isinstance(f, bool)]
    return any(known) if known else None


def temporary_checkouts(repo: Path, refs: dict[str, str], register: Callable[[Callable[[], None]], object] | None = None
                        ) -> tuple[dict[str, Path], Callable[[], None]]:
    """Worktrees for git refs (``{"base": "origin/main", ...}``) and the function that removes them (safe to call
    again). ``register`` (a :class:`fp8bench.measure.interrupts.Teardown`'s ``add``) receives that function before
    anything is made, so a stop signal at any point still has every worktree removed."""
    made: list[Path] = []
    folder: list[Path] = []

    def cleanup() -> None:
        for p in made:
            remove_checkout(repo, p)
        for f in folder:
            shutil.rmtree(f, ignore_errors=True)

    if register is not None:
        register(cleanup)
    folder.append(Path(tempfile.mkdtemp(prefix="fp8bench-ab-")))
    try:
        for name, ref in refs.items():
            made.append(folder[0] / name)  # before git makes it: a stop during `git worktree add` still removes it
            checkout_ref(repo, ref, made[-1])
    except BaseException:
        cleanup()
        raise
    return dict(zip(refs, made, strict=True)), cleanup
