"""`fp8bench bisect`: the search (with a measurement function standing in for the A/B rounds), git ranges, the
evidence it keeps, and the real verb on a small real history of this project with one slow commit."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from fp8bench.analysis.bisect import (
    SAME,
    SKIP,
    SLOWER,
    UNDECIDED,
    BisectError,
    Commit,
    Probe,
    bisect,
    bisected_commit,
    load_evidence,
    probe_from_report,
    save_evidence,
)
from fp8bench.analysis.gate.report import GateReport
from fp8bench.cli import main
from fp8bench.orchestration.bisect_probes import commits_between
from fp8bench.render.bisect_markdown import marker, render_markdown

ROOT = Path(__file__).resolve().parents[1]


def history(n: int = 16) -> tuple[Commit, list[Commit]]:
    return Commit("g" * 40, "good"), [Commit(f"{i:02d}" + "c" * 38, f"change {i}") for i in range(n)]


class Bench:
    """Answers for each commit as the sequential A/B would: slower from ``slow_from`` on, with commits that do not
    build and commits undecided on their first measurement."""

    def __init__(self, commits: list[Commit], slow_from: int, broken: tuple[int, ...] = (),
                 noisy: tuple[int, ...] = (), never_decided: tuple[int, ...] = ()) -> None:
        self.index = {c.sha: i for i, c in enumerate(commits)}
        self.slow_from, self.broken, self.noisy, self.never = slow_from, broken, noisy, never_decided
        self.calls: list[tuple[int, float, int]] = []

    def __call__(self, commit: Commit, budget_s: float, attempt: int) -> Probe:
        i = self.index[commit.sha]
        self.calls.append((i, budget_s, attempt))
        if i in self.broken:
            return Probe(commit.sha, commit.subject, SKIP, reason="does not build: setup exited 1")
        if i in self.never or (i in self.noisy and attempt == 1):
            return Probe(commit.sha, commit.subject, UNDECIDED, 1.05, 0.9, 1.2, rounds=30)
        slow = i >= self.slow_from
        return Probe(commit.sha, commit.subject, SLOWER if slow else SAME, 1.5 if slow else 1.0,
                     1.4 if slow else 0.98, 1.6 if slow else 1.02, rounds=8, case="gemm[m=8,n=8,k=8] bf16 torch cpu")


def test_finds_the_slow_commit_of_sixteen_in_five_probes():
    good, commits = history()
    bench = Bench(commits, slow_from=11)
    result = bisect(good, commits[-1], commits, bench, 60)
    assert result.first_bad == commits[11] and result.exit_code == 1 and result.verdict == "regression"
    assert bench.calls[0][0] == 15  # the bad commit is confirmed first
    assert len(result.probes) == 5 and result.rounds == 40
    assert result.evidence() is not None and result.evidence().ratio == 1.5


@pytest.mark.parametrize("slow_from", [0, 1, 7, 8, 15])
def test_every_position_is_found(slow_from):
    good, commits = history()
    assert bisect(good, commits[-1], commits, Bench(commits, slow_from), 60).first_bad == commits[slow_from]


def test_a_commit_that_does_not_build_is_skipped():
    good, commits = history()
    bench = Bench(commits, slow_from=11, broken=(7,))  # 7 is the first midpoint
    result = bisect(good, commits[-1], commits, bench, 60)
    assert result.first_bad == commits[11]
    skipped = [p for p in result.probes if p.outcome == SKIP]
    assert [p.commit for p in skipped] == [commits[7].sha] and "does not build" in (skipped[0].reason or "")
    assert [i for i, _, _ in bench.calls].count(7) == 1


def test_a_noisy_step_gets_twice_the_budget_then_decides():
    good, commits = history()
    bench = Bench(commits, slow_from=11, noisy=(7,))
    result = bisect(good, commits[-1], commits, bench, 60)
    assert result.first_bad == commits[11]
    assert (7, 60, 1) in bench.calls and (7, 120.0, 2) in bench.calls
    assert [p.outcome for p in result.probes if p.commit == commits[7].sha] == [UNDECIDED, SAME]


def test_a_skipped_neighbour_of_the_step_leaves_a_range():
    good, commits = history()
    result = bisect(good, commits[-1], commits, Bench(commits, slow_from=11, broken=(10,)), 60)
    assert result.first_bad is None and result.exit_code == 2
    assert result.suspects == [commits[10], commits[11]]
    assert "one of 2" in result.reason


def test_a_bad_commit_that_is_not_slower_ends_it():
    good, commits = history()
    result = bisect(good, commits[-1], commits, Bench(commits, slow_from=99), 60)
    assert result.exit_code == 0 and result.verdict == "pass" and len(result.probes) == 1
    undecided = bisect(good, commits[-1], commits, Bench(commits, slow_from=0, never_decided=(15,)), 60)
    assert undecided.exit_code == 2 and len(undecided.probes) == 2  # measured twice, then given up


def test_probe_outcome_from_a_sequential_report():
    """Probe outcomes from sequential reports, given as the few keys an older report may hold (read by from_json)."""
    commit = Commit("a" * 40, "x")
    case = {"case": "c", "verdict": "slower", "ratio": 1.3, "ci_low": 1.2, "ci_high": 1.4, "reason": "r"}
    same = {"case": "d", "verdict": "same", "ratio": 1.0, "ci_low": 0.9, "ci_high": 1.04, "reason": "s"}

    def report(*cases):
        return GateReport.from_json({"cases": list(cases), "sequential": {"rounds": 9 if len(cases) > 1 else 8}})

    probe = probe_from_report(commit, report(same, case), 12.0, None)
    assert (probe.outcome, probe.ratio, probe.case, probe.rounds) == (SLOWER, 1.3, "c", 9)
    assert probe_from_report(commit, report(same), 1, None).outcome == SAME
    open_case = {**same, "verdict": "inconclusive", "ci_high": 1.2}
    assert probe_from_report(commit, report(open_case), 1, None).outcome == UNDECIDED
    unmeasured = probe_from_report(commit, report({"case": "e", "verdict": "not measured", "reason": "n"}), 1, None)
    assert (unmeasured.outcome, unmeasured.ratio, unmeasured.reason) == (UNDECIDED, None, "inconclusive")


def test_markdown_issue_body_and_kept_evidence(tmp_path):
    good, commits = history()
    result = bisect(good, commits[-1], commits, Bench(commits, slow_from=11, broken=(7,)), 60)
    cases = ["gemm[m=8,n=8,k=8] bf16 torch cpu"]
    md = render_markdown(result, cases, ["--shape", "8x8x8"])
    g, b = result.good.sha, result.bad.sha
    assert md.splitlines()[0] == marker(cases, g, b) and marker(cases, g, b) != marker(["other"], g, b)
    # One marker per case set, device and range: two bisects that measured nothing do not share an issue, nor do
    # two GPU models whose case keys both say cuda:0.
    assert marker([], g, b) != marker([], g, commits[-2].sha)
    assert marker(cases, g, b, "NVIDIA H100 80GB HBM3") != marker(cases, g, b, "NVIDIA H200")
    assert "**REGRESSION** (exit 1)" in md and commits[11].sha in md and "1.500 [1.400, 1.600]" in md
    assert "does not build" in md and "fp8bench ab --base gggggggggggg --head 11cccccccccc" in md
    save_evidence(result, cases, ["--shape", "8x8x8"], tmp_path)
    (tmp_path / "bisects" / "junk.json").write_text("{not json")
    evidence = load_evidence(tmp_path)
    assert len(evidence) == 1
    hit = bisected_commit(evidence, cases[0], good.sha, None)
    assert hit is not None and hit["first_bad"]["sha"] == commits[11].sha
    assert bisected_commit(evidence, "another case", good.sha, None) is None
    assert bisected_commit(evidence, cases[0], "f" * 40, "e" * 40) is None
    assert load_evidence(tmp_path / "absent") == []


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def test_commit_range_along_the_first_parent_line(tmp_path):
    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    for key, value in (("user.email", "t@localhost"), ("user.name", "t")):
        _git(repo, "config", key, value)
    for i in range(4):
        _git(repo, "commit", "-q", "--allow-empty", "-m", f"c{i}")
    shas = _git(repo, "rev-list", "--reverse", "HEAD").splitlines()
    good, bad, between = commits_between(repo, shas[0], "main")
    assert good.sha == shas[0] and bad.sha == shas[-1] and [c.sha for c in between] == shas[1:]
    assert [c.subject for c in between] == ["c1", "c2", "c3"]
    with pytest.raises(BisectError, match="not an ancestor"):
        commits_between(repo, shas[-1], shas[0])
    with pytest.raises(BisectError, match="same commit"):
        commits_between(repo, "main", shas[-1])
    with pytest.raises(BisectError, match="nope"):
        commits_between(repo, "nope", "main")


def test_bad_input_is_a_harness_error(tmp_path, capsys):
    assert main(["bisect", "--repo", str(tmp_path), "--good", "a", "--bad", "b", "--", "--shape", "8x8x8"]) == 3
    assert "fp8bench bisect: error:" in capsys.readouterr().err
    assert main(["bisect", "--good", "a", "--bad", "b"]) == 3


def _history_script():
    spec = importlib.util.spec_from_file_location("bisect_history", ROOT / "scripts" / "bisect_history.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bisect_refuses_a_used_out_folder_and_a_markdown_link_before_any_probe(tmp_path, capsys):
    """Stale round files in --out would be read as the bisect's own; a --markdown link would be written through."""
    used = tmp_path / "used"
    (used / "head").mkdir(parents=True)
    (used / "head" / "round-001.json").write_text("{}")
    args = ["bisect", "--repo", str(tmp_path), "--good", "HEAD~1", "--bad", "HEAD", "--", "--shape", "8x8x8"]
    assert main([*args[:-3], "--out", str(used), *args[-3:]]) == 3
    assert "is not a new or empty folder" in capsys.readouterr().err
    target = tmp_path / "elsewhere.md"
    target.write_text("keep me")
    link = tmp_path / "issue.md"
    link.symlink_to(target)
    assert main([*args[:-3], "--out", str(tmp_path / "new"), "--markdown", str(link), *args[-3:]]) == 3
    assert "issue.md" in capsys.readouterr().err and target.read_text() == "keep me"
    assert not (tmp_path / "new").exists()


@pytest.mark.slow
def test_real_bisect_finds_the_slow_commit_and_skips_the_broken_one(tmp_path, capsys, worker_ceilings_dir):
    """A 6-commit history of this project's code: commit 4 repeats the torch GEMM 5 times per call, commit 2 does
    not build. Real worktrees, real workers, real rounds of tiny single-threaded GEMMs; a 50% threshold keeps a
    5x slowdown far from the noise of a shared machine."""
    truth = _history_script().build_history(tmp_path / "h", commits=6, slow_at=4, broken_at=2, factor=5)
    commits = truth["commits"]
    md = tmp_path / "issue.md"
    rc = main(["bisect", "--repo", truth["repo"], "--good", commits[0], "--bad", commits[-1], "--step-budget", "300",
               "--min-rounds", "3", "--threshold", "0.5", "--out", str(tmp_path / "out"), "--results-dir",
               str(tmp_path / "results"), "--markdown", str(md), "--json", "--",
               "--shape", "64x64x64", "--precision", "bf16", "--backend", "torch", "--no-phases", "--threads", "1",
               "--min-samples", "10", "--max-time", "0.05", "--budget", "5", "--results-dir", str(worker_ceilings_dir)])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 1, summary
    assert summary["first_bad"] == truth["first_slow"] and summary["subject"] == "change 4: rework the torch GEMM"
    assert summary["ratio"] > 2 and summary["ci_low"] > 1.5 and summary["rounds"] >= 9
    probes = json.loads((tmp_path / "out" / "bisect.json").read_text())["probes"]
    broken = [p for p in probes if p["commit"] == truth["broken"]]
    assert [p["outcome"] for p in broken] == ["skip"] and "does not build" in broken[0]["reason"]
    assert md.read_text().startswith("<!-- fp8bench-bisect: ")
    assert load_evidence(tmp_path / "results")[0]["first_bad"]["sha"] == truth["first_slow"]
    assert not list(Path(truth["repo"]).parent.glob("fp8bench-bisect-*"))
    assert _git(Path(truth["repo"]), "worktree", "list").count("\n") == 0  # every probe's worktree removed


def test_the_history_refuses_a_slow_commit_right_after_the_broken_one(tmp_path):
    """The commit after the broken one fixes the build; were it the slow one, the fix never came and every later
    commit would fail to build."""
    with pytest.raises(ValueError, match="broken_at 1 must not be right before the slow commit 2"):
        _history_script().build_history(tmp_path / "h", commits=4, slow_at=2, broken_at=1)


def test_the_marker_names_the_device_the_probes_measured_on(tmp_path):
    """Two runners of different GPU models that bisect the same range get an issue each: the marker takes the device
    name from the good side's first round file."""
    from fp8bench.analysis.bisect import device_of
    from fp8bench.results.runfile import RunFileWriter

    good, commits = history()
    result = bisect(good, commits[-1], commits, Bench(commits, slow_from=11, broken=(7,)), 60)
    probe_folder = tmp_path / "probe-1"
    (probe_folder / "base").mkdir(parents=True)
    RunFileWriter(probe_folder / "base" / "r000.json",
                  {"run_id": "r0", "device": {"name": "NVIDIA H200", "kind": "cuda"}}).finish(status="complete")
    result.probes[0] = Probe(**{**result.probes[0].__dict__, "folder": str(probe_folder)})
    assert device_of(result) == "NVIDIA H200"
    md = render_markdown(result, ["c"], [], device_of(result))
    assert md.splitlines()[0] == marker(["c"], result.good.sha, result.bad.sha, "NVIDIA H200")


class ProbesOf:
    """Stands in for the verb's probe runner (worktrees, builds, A/B rounds): each probe is what ``bench`` answers."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench

    def __call__(self, commit: Commit, budget_s: float, attempt: int) -> Probe:
        return self.bench(commit, budget_s, attempt)

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass


def _probe_with(monkeypatch, good: Commit, commits: list[Commit], bench: Bench) -> None:
    """Make `fp8bench bisect` search ``commits`` after ``good`` with ``bench`` for its measurements. Both the
    orchestration module and the verb's own namespace are patched, wherever the verb imports the two names from."""
    import fp8bench.commands.bisect as verb
    import fp8bench.orchestration.bisect_probes as probes

    def runner(*args, **kwargs) -> ProbesOf:
        return ProbesOf(bench)

    def between(repo, good_rev, bad_rev):
        return good, commits[-1], commits

    for module in (probes, verb):
        monkeypatch.setattr(module, "ProbeRunner", runner, raising=False)
        monkeypatch.setattr(module, "commits_between", between, raising=False)


def test_bisect_prints_a_plain_table_and_keeps_the_markdown_for_its_reports(tmp_path, monkeypatch, capsys):
    """On a terminal or in a log the finding reads as plain text (no Markdown escapes, pipes, headings or hidden
    marker); the Markdown goes to bisect.md, --markdown and the job summary."""
    good, commits = history()
    commits[7] = Commit(commits[7].sha, "rework [tiles], 1.5x faster")  # punctuation Markdown would escape
    _probe_with(monkeypatch, good, commits, Bench(commits, slow_from=11, broken=(7,)))
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    out_dir = tmp_path / "out"
    rc = main(["bisect", "--good", "GOOD", "--bad", "BAD", "--out", str(out_dir), "--results-dir",
               str(tmp_path / "results"), "--markdown", str(tmp_path / "issue.md"), "--", "--shape", "8x8x8"])
    out = capsys.readouterr().out
    assert rc == 1, out
    text = out.strip().splitlines()[:-1]  # the last line is the JSON summary
    assert not any(line.startswith(("|", "#", "<!--")) or "**" in line or "\\" in line for line in text), out
    assert text[0] == "fp8bench bisect: REGRESSION (exit 1)", out
    assert f"First slower commit: {commits[11].sha} change 11" in text, out
    (broken,) = [line for line in text if line.startswith(commits[7].sha[:12])]
    assert "rework [tiles], 1.5x faster" in broken and "skip" in broken and "does not build" in broken, out
    assert text[-1] == f"the Markdown report (issue body, job summary): {out_dir / 'bisect.md'}", out
    md = (out_dir / "bisect.md").read_text()
    assert md.startswith("<!-- fp8bench-bisect: ") and "## fp8bench bisect: **REGRESSION** (exit 1)" in md
    assert "rework \\[tiles\\]" in md and (tmp_path / "issue.md").read_text() == md
    assert summary.read_text() == "earlier step\n" + md + "\n"  # appended, never overwritten
    assert json.loads(out.strip().splitlines()[-1])["first_bad"] == commits[11].sha
