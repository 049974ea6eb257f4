"""Every exit code the docs state is one the command gives: the prose, the docs' tables and each verb's table.

Three checks hold the docs to the code:

* every sentence of README.md and docs/*.md that states an exit code ("exits 1", "exit code 2", "(exit 3)") is a
  :class:`Claim` below, naming the verb and the code; a new sentence that is not one fails
  :func:`test_every_stated_exit_code_is_a_checked_claim`, so none goes unchecked;
* each claim's code is in that verb's ``EXIT_CODES`` (the table ``--help`` prints) with a meaning that says the
  same thing, and the claim is checked against the command itself: run here when that is cheap (bad input is
  refused before anything is measured), else by the command block it describes (its ``doc-test: exit:`` codes,
  run by tests/test_doc_commands.py) or by the named test that runs the command and asserts that code;
* the docs' exit-code tables (gate.md's, the "Exit codes:" lines) list exactly the verb's codes.

docs/cli.md's table of every verb is checked row by row by tests/test_exit_codes.py.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from fp8bench import exit_codes
from fp8bench.cli import main
from fp8bench.commands import VERBS as VERB_TABLE
from tests.test_doc_commands import ALL_BLOCKS, Block

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
VERBS = {verb.name: importlib.import_module(verb.module) for verb in VERB_TABLE}
# A statement of an exit code in prose: "exits 1", "exit code 130", "exit status 0", "(exit 2", "exit code is 2".
STATED = re.compile(r"\bexit(?:s|ed)?(?: with)?(?: code| status)?(?: is)? (\d+)\b", re.IGNORECASE)
# A row of an exit-code table (cli.md's "| `verb` | code |", gate.md's "| code |"): checked as tables, not prose.
TABLE_ROW = re.compile(r"^\|\s*(`[\w-]+`\s*\|\s*)?\d+\s*\|")


def prose(document: Path) -> str:
    """The document's text without exit-code table rows, its whitespace collapsed (sentences wrap across lines)."""
    lines = [line for line in document.read_text().splitlines() if not TABLE_ROW.match(line)]
    return " ".join(" ".join(lines).split())


@dataclass(frozen=True)
class Claim:
    """``says`` (words of ``document``, whitespace collapsed) states that ``verb`` exits ``code``, which means
    what ``meaning`` (words of the verb's ``EXIT_CODES`` row) says; ``check`` confirms it on the command."""

    document: str
    says: str
    verb: str  # a verb of fp8bench; "" for fp8bench without a verb or with an unknown one
    code: int
    meaning: str
    check: Callable[[Claim], None]
    slow: bool = False  # the check trains or measures for seconds


def runs(*argv: str) -> Callable[[Claim], None]:
    """Run ``fp8bench ARGV`` here (in process): it must exit with the claimed code."""
    def check(claim: Claim) -> None:
        code = main(list(argv))
        assert code == claim.code, f"{claim.document}: `fp8bench {' '.join(argv)}` exited {code}, the doc says " \
                                   f"{claim.code} ({claim.says!r})"
    return check


def block(exact: bool = False) -> Callable[[Claim], None]:
    """The command block nearest the claim (it describes that block's run): its ``doc-test: exit:`` codes, which
    tests/test_doc_commands.py holds the block to, include the claimed code; ``exact``: are only that code."""
    def check(claim: Claim) -> None:
        nearest = _nearest_block(claim)
        assert claim.code in nearest.exits, f"{nearest.name}: its doc-test exit codes {nearest.exits} lack the " \
                                            f"{claim.code} the doc states ({claim.says!r})"
        if exact:
            assert nearest.exits == (claim.code,), f"{nearest.name}: the doc says it exits {claim.code} " \
                                                   f"({claim.says!r}), its doc-test accepts {nearest.exits}"
    return check


def checked_by_test(node: str) -> Callable[[Claim], None]:
    """``tests/FILE.py::NAME``, a test that runs the command (or the code that decides its exit) and asserts the
    code: the test must exist and compare against the code or its named constant."""
    def check(claim: Claim) -> None:
        path, name = node.split("::")
        tree = ast.parse((ROOT / path).read_text())
        test = next((f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == name), None)
        assert test is not None, f"{claim.document}: {node}, which should check {claim.says!r}, does not exist"
        source = ast.get_source_segment((ROOT / path).read_text(), test) or ""
        names = [n for n, v in vars(exit_codes).items() if n.startswith("EXIT_") and v == claim.code]
        literal = re.search(rf"(==|=)\s*{claim.code}\b", source)
        assert literal or any(n in source for n in names), f"{node} asserts no exit code {claim.code}"
    return check


def _nearest_block(claim: Claim) -> Block:
    document = ROOT / claim.document
    lines = document.read_text().splitlines()
    words = claim.says.split()
    line = next(i + 1 for i in range(len(lines)) if " ".join(" ".join(lines[i:i + 3]).split()).find(
        " ".join(words[:4])) >= 0)
    blocks = [b for b in ALL_BLOCKS if b.document == document]
    assert blocks, f"{claim.document} has no command block for {claim.says!r}"
    return min(blocks, key=lambda b: abs(b.line - line))


def _ab_stops_as_a_harness_error(claim: Claim) -> None:
    """A round that does not answer raises ``AbError`` (tests/test_ab_reports.py::test_a_hung_side_fails_its_round_by
    _name); ``ab`` catches it and answers with :func:`fp8bench.commands.verb_interface.harness_error`."""
    from fp8bench.commands.verb_interface import harness_error
    from fp8bench.orchestration.ab import AbError

    assert harness_error("ab", AbError("head round 3 of 10 did not finish"), expected=True) == claim.code


def selfcheck_verdict(verdict: str) -> Callable[[Claim], None]:
    """A check that broke is an ``ERROR`` verdict, one that failed ``FAIL`` (tests/test_selfcheck.py, e.g.
    ::test_a_broken_check_is_a_harness_error_and_the_others_still_run; ::test_exit_verdict_precedence: the run's
    verdict is its worst); the verb answers the run's verdict with its code from ``VERDICT_EXIT``."""
    def check(claim: Claim) -> None:
        from fp8bench.commands.selfcheck import VERDICT_EXIT
        from fp8bench.measure.selfcheck import Verdict

        assert VERDICT_EXIT[Verdict[verdict]] == claim.code
    return check


GATE_SIDES = ("gate", "a.json", "b.json")
# A short training run with the negative control: too few steps for the control to leave BF16's curve (17 s wall,
# 6 s of CPU on this 2-core machine), so it is not flagged.
SHORT_CONVERGE = ("converge", "--shape", "tiny,seq=16,batch=2,layers=1", "--steps", "4", "--window", "2",
                  "--precision", "bf16", "--backend", "emulated", "--stats-every", "0", "--json")
# A recipe that diverged and one that failed to train land in the same list (ConvergeOutcome.diverged), whose
# exit code this test asserts for a recipe torch refuses on the CPU.
FAILED_CURVE = "tests/test_converge_stream.py::test_a_recipe_that_fails_to_train_reaches_the_run_file_and_the_store"
CLAIMS = [
    Claim("docs/cli.md", "(informational, exit 0)", "compare", 0, "whatever it found",
          checked_by_test("tests/test_gate.py::test_cli_compare_reports_but_exits_0")),
    Claim("docs/cli.md", "so their bad input exits 3", "gate", 3, "bad input", runs(*GATE_SIDES, "--threshold", "x")),
    Claim("docs/cli.md", "so their bad input exits 3", "ab", 3, "bad input",
          runs("ab", "--base", ".", "--rounds", "x", "--", "--shape", "8x8x8")),
    Claim("docs/cli.md", "so their bad input exits 3", "bisect", 3, "bad input", runs("bisect", "--good", "a")),
    Claim("docs/cli.md", "Unknown verbs and `fp8bench` without a verb exit 2", "", 2, "", runs("no-such-verb")),
    Claim("docs/devices.md", "the exit code is 1 (a case failed)", "run", 1, "a case failed",
          checked_by_test("tests/test_sharding.py::test_a_dead_worker_fails_its_case_and_a_new_one_measures_the_rest")),
    Claim("docs/devices.md", "exit code 130, status `interrupted`", "run", 130, "interrupted",
          checked_by_test("tests/test_run_safety.py::test_sigterm_and_sighup_end_a_run_like_ctrl_c")),
    Claim("docs/findings-cpu.md", "The command exits 1: a recipe (mxfp4) diverged", "converge", 1, "diverged",
          checked_by_test(FAILED_CURVE)),
    Claim("docs/gate.md", "Bad input exits 3, never 2", "gate", 3, "bad input",
          runs(*GATE_SIDES, "--fail-on", "never")),
    Claim("docs/gate.md", "an inconclusive verdict then exits 0", "gate", 0, "unless --fail-on regression",
          checked_by_test("tests/test_gate_reporting.py::test_fail_on_regression_lets_an_inconclusive_outcome_pass_but_says"
                    "_so")),
    Claim("docs/gate.md", "`inconclusive` (exit 2) on a busy machine", "gate", 2, "inconclusive", block()),
    Claim("docs/gate.md", "a `regression` (exit 1) there would be a false alarm", "gate", 1, "regression", block()),
    Claim("docs/gate.md", "prints the same table and always exits 0", "compare", 0, "whatever it found",
          checked_by_test("tests/test_gate.py::test_cli_compare_reports_but_exits_0")),
    Claim("docs/gate.md", "the gate answered `noisy` (exit 2)", "gate", 2, "noisy",
          checked_by_test("tests/test_gate.py::test_a_side_measured_under_load_is_noisy_not_a_regression")),
    Claim("docs/gate.md", "`slower`: a regression, exit 1", "gate", 1, "regression",
          checked_by_test("tests/test_gate_reporting.py::test_fail_on_regression_still_fails_a_regression")),
    Claim("docs/gate.md", "SIGHUP) ends it with exit code 130", "ab", 130, "interrupted",
          checked_by_test("tests/test_stop_signals.py::test_two_signals_in_a_row_leave_no_worktree_no_worker_and_keep_"
                    "finished_rounds")),
    Claim("docs/gate.md", "SIGHUP) ends it with exit code 130", "bisect", 130, "interrupted",
          checked_by_test("tests/test_stop_signals.py::test_two_signals_in_a_row_leave_no_worktree_no_worker_and_keep_"
                    "finished_rounds")),
    Claim("docs/gate.md", "`pass`, exit 0", "ab", 0, "pass", block()),
    Claim("docs/gate.md", "`inconclusive` (exit 2) when the machine's noise", "ab", 2, "inconclusive", block()),
    Claim("docs/gate.md", "as a harness error (exit 3) naming the side", "ab", 3, "harness error",
          _ab_stops_as_a_harness_error),
    Claim("docs/gate.md", "nothing to bisect (exit 0 when it is the `same`", "bisect", 0, "nothing to bisect",
          checked_by_test("tests/test_bisect.py::test_a_bad_commit_that_is_not_slower_ends_it")),
    Claim("docs/gate.md", "`same`, 2 when undecided", "bisect", 2, "undecided",
          checked_by_test("tests/test_bisect.py::test_a_bad_commit_that_is_not_slower_ends_it")),
    Claim("docs/gate.md", "exit 1 with the first slower commit", "bisect", 1, "found",
          checked_by_test("tests/test_bisect.py::test_real_bisect_finds_the_slow_commit_and_skips_the_broken_one")),
    Claim("docs/gate.md", "exit 2 with the range of suspects", "bisect", 2, "skipped/undecided commits leave a range",
          checked_by_test("tests/test_bisect.py::test_a_skipped_neighbour_of_the_step_leaves_a_range")),
    Claim("docs/gate.md", "3 for bad input or a GOOD that does not build", "bisect", 3, "bad input",
          checked_by_test("tests/test_bisect.py::test_bad_input_is_a_harness_error")),
    Claim("docs/gate.md", "It exits 1 and names commit 11", "bisect", 1, "found", block(exact=True)),
    Claim("docs/gate.md", "exit 1 with commit 3", "bisect", 1, "found", block(exact=True)),
    Claim("docs/gpu-claims.md", "A failed claim fails the selfcheck (exit 1)", "selfcheck", 1, "a check failed",
          selfcheck_verdict("FAIL")),
    Claim("docs/history-and-changes.md", "# nightly CI: exit 1 on an open regression", "changes", 1,
          "--fail-on-new",
          checked_by_test("tests/test_changes.py::test_changes_verb_lists_the_regression_and_fails_on_new")),
    Claim("docs/history-and-changes.md", "fails (exit 1) on an alert", "changes", 1, "--fail-on-new",
          checked_by_test("tests/test_changes.py::test_changes_verb_lists_the_regression_and_fails_on_new")),
    Claim("docs/history-and-changes.md", "`changes` exits 1 with one bisectable alert", "changes", 1, "--fail-on-new",
          checked_by_test("tests/test_nightly_chain.py::test_the_nightly_chain_bisects_the_slow_commit_and_runs_nothing_"
                    "from_a_hostile_record")),
    Claim("docs/history-and-changes.md", "with the run of commit 11 exits 1", "changes", 1, "--fail-on-new",
          checked_by_test("tests/test_changes.py::test_changes_verb_lists_the_regression_and_fails_on_new")),
    Claim("docs/history-and-changes.md", "given that run or a later one it exits 0", "changes", 0, "no regression",
          checked_by_test("tests/test_changes.py::test_changes_verb_lists_the_regression_and_fails_on_new")),
    Claim("docs/history-and-changes.md", "nights 15 to 17 exit 1", "changes", 1, "--fail-on-new",
          checked_by_test("tests/test_changes.py::test_changes_verb_lists_the_regression_and_fails_on_new")),
    Claim("docs/history-and-changes.md", "night 18 exits 0", "changes", 0, "no regression",
          checked_by_test("tests/test_changes.py::test_changes_verb_lists_the_regression_and_fails_on_new")),
    Claim("docs/profiling.md", "Any other value is bad input (exit 2", "run", 2, "bad input",
          runs("run", "--profile", "perf", "--shape", "8x8x8", "--no-store")),
    Claim("docs/selfcheck.md", "hold the cores (exit 1)", "selfcheck", 1, "a check failed", block()),
    Claim("docs/selfcheck.md", "**`ERROR`** (exit 3)", "selfcheck", 3, "harness error",
          selfcheck_verdict("ERROR")),
    Claim("docs/store.md", "The exit code is 2 when anything was left out", "ingest", 2, "skipped",
          checked_by_test("tests/test_ingest_files.py::test_bad_files_are_named_and_skipped_and_bad_records_alone_are_left_"
                    "out")),
    Claim("docs/store.md", "the run stops (exit 74)", "run", 74, "disk filled",
          checked_by_test("tests/test_run_safety.py::test_full_disk_stops_the_run_with_its_exit_code_and_keeps_every_"
                    "written_record")),
    Claim("docs/timing-modes.md", "the run stops before writing anything, exit 2", "run", 2, "bad input",
          runs("run", "--device", "cpu", "--lock-clocks", "base", "--shape", "8x8x8", "--no-store")),
    Claim("docs/timing-modes.md", "it is refused, exit 2, before any worker starts", "run", 2, "bad input",
          runs("run", "--devices", "cpu,cpu", "--lock-clocks", "base", "--shape", "8x8x8", "--no-store")),
    Claim("docs/timing-modes.md", "before writing anything, with exit code 2", "run", 2, "bad input",
          runs("run", "--device", "cpu", "--cuda-graph", "--shape", "8x8x8", "--no-store")),
    Claim("docs/workloads.md", "(exit code 2, before anything runs)", "run", 2, "bad input",
          runs("run", "--workload", "attention", "--shape", "no_such_preset", "--no-store")),
    Claim("docs/workloads.md", "On this CPU it exits 1", "converge", 1, "diverged",
          checked_by_test(FAILED_CURVE)),
    Claim("docs/workloads.md", "exits 1 saying so", "converge", 1, "negative control was not flagged",
          runs(*SHORT_CONVERGE), slow=True),
    Claim("docs/workloads.md", "otherwise the command exits 1", "converge", 1, "negative control was not flagged",
          runs(*SHORT_CONVERGE), slow=True),
    Claim("docs/workloads.md", "the other curves still train, and the command exits 1", "converge", 1,
          "failed to train", checked_by_test(FAILED_CURVE)),
]
# Exit statuses of the project's scripts the docs state: the words, the command (run from the repository) and the
# status it must give. scripts/test turns pytest's "no tests collected" (5) into a failure.
OTHER_PROGRAMS = {
    ("docs/development.md", "(`pytest` exit 5, no tests collected, counts as a failure)"):
        (["bash", "scripts/test", "-q", "-p", "no:cacheprovider", "tests/test_doc_figures.py", "-k", "no_such_test"],
         1),
    ("docs/phase-purity.md", "Exit status 0 when every `gemm` phase is pure"):
        ([sys.executable, "scripts/phase_purity.py", "--workload", "gemm", "--backend", "emulated", "--precision",
          "bf16"], 0),
}


def test_every_stated_exit_code_is_a_checked_claim():
    unclaimed = []
    for document in DOCUMENTS:
        name = str(document.relative_to(ROOT))
        text = prose(document)
        spans = []
        for says in [c.says for c in CLAIMS if c.document == name] + [s for d, s in OTHER_PROGRAMS if d == name]:
            at = text.find(says)
            assert at >= 0, f"{name} no longer says {says!r}: update the claim (and its check) with the doc"
            spans.append((at, at + len(says)))
        for match in STATED.finditer(text):
            if not any(start <= match.start(1) < end for start, end in spans):
                unclaimed.append(f"{name}: ...{text[max(0, match.start() - 60):match.end() + 20]}...")
    assert not unclaimed, "exit codes stated in the docs but not checked (add a Claim):\n" + "\n".join(unclaimed)


@pytest.mark.parametrize("claim", [pytest.param(c, marks=[pytest.mark.slow] if c.slow else []) for c in CLAIMS],
                         ids=lambda c: f"{c.document}:{c.verb or 'fp8bench'}:{c.code}")
def test_each_claim_is_in_the_verbs_table_and_what_the_command_gives(claim, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a command run here writes nothing into the repository
    monkeypatch.setenv("FP8BENCH_RESULTS_DIR", str(tmp_path / "results"))
    if claim.verb:
        table = dict(VERBS[claim.verb].EXIT_CODES.rows)
        assert claim.code in table, f"{claim.document} says `{claim.verb}` exits {claim.code} ({claim.says!r}); " \
                                    f"its EXIT_CODES (--help) lists only {sorted(table)}"
        assert claim.meaning in table[claim.code], f"{claim.verb} {claim.code} means {table[claim.code]!r}; " \
                                                   f"{claim.document} says {claim.says!r}"
    claim.check(claim)


@pytest.mark.parametrize(("document", "says"), list(OTHER_PROGRAMS))
def test_the_scripts_exit_as_the_docs_say(document, says):
    argv, code = OTHER_PROGRAMS[document, says]
    out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == code, f"{document} says {says!r}: `{' '.join(argv)}` exited {out.returncode}\n" \
                                   f"{out.stderr[-2000:]}"


def _table_codes(document: str, heading: str) -> list[int]:
    """The codes of the first ``| code | meaning |`` table after ``heading`` in ``document``."""
    lines = (ROOT / document).read_text().splitlines()
    start = lines.index(heading)
    rows = []
    for line in lines[start + 1:]:
        if rows and not line.startswith("|"):
            break
        match = re.match(r"^\|\s*(\d+)\s*\|", line)
        if match:
            rows.append(int(match.group(1)))
    return rows


@pytest.mark.parametrize("verb", ["gate", "ab"])
def test_gate_mds_table_lists_exactly_the_verbs_codes(verb):
    documented = _table_codes("docs/gate.md", "## Exit codes of `gate` and `ab`")
    codes = [code for code, _ in VERBS[verb].EXIT_CODES.rows]
    assert set(documented) <= set(codes), f"docs/gate.md's table lists {documented}, {verb} --help {codes}"
    # gate.md's table is the verdicts'; a code past them (130: stopped) is stated under "A/B runs" and in cli.md.
    assert [c for c in codes if c not in documented] == ([] if verb == "gate" else [exit_codes.EXIT_INTERRUPTED])


def test_the_exit_codes_line_of_changes_lists_its_codes():
    text = prose(ROOT / "docs" / "history-and-changes.md")
    line = text[text.index("Exit codes: "):text.index("or an unreadable store.")]
    documented = [int(c) for c in re.findall(r"(?:^Exit codes: |; )(\d+) ", line)]
    assert documented == [code for code, _ in VERBS["changes"].EXIT_CODES.rows]
