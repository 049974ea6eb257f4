"""The exit-code contract of every verb: bad input never exits with a verdict's code, and --help prints the table.

Every verb in ``VERBS`` is checked, so a verb added later is covered without touching this file: it must
declare ``EXIT_CODES`` (its table) and ``DOC`` (the document its --help links), and its usage errors, argparse's
own included, must exit with the table's bad-input code.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from fp8bench.cli import build_parser, main
from fp8bench.commands import VERBS as VERB_TABLE
from fp8bench.commands.verb_interface import EXIT_HARNESS_ERROR, EXIT_INCONCLUSIVE, ExitCodes

ROOT = Path(__file__).resolve().parents[1]
VERBS = {verb.name: importlib.import_module(verb.module) for verb in VERB_TABLE}


@pytest.mark.parametrize("verb", VERBS)
def test_verb_declares_its_table_and_an_existing_doc(verb):
    module = VERBS[verb]
    assert isinstance(getattr(module, "EXIT_CODES", None), ExitCodes), f"{verb}: declare EXIT_CODES (an ExitCodes)"
    codes = module.EXIT_CODES
    assert "bad input" in codes.meaning(codes.bad_input), f"{verb}: the bad-input row must say so"
    assert 0 in dict(codes.rows)
    doc = getattr(module, "DOC", None)
    assert doc and (ROOT / doc).is_file(), f"{verb}: DOC {doc!r} must name a file in the repository"


@pytest.mark.parametrize("verb", VERBS)
def test_help_ends_with_the_exit_code_table_and_the_doc(verb, capsys):
    module = VERBS[verb]
    assert main([verb, "--help"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("exit codes:"):]
    for code, _meaning in module.EXIT_CODES.rows:
        assert f"\n  {code:<4} " in table, f"{verb} --help does not list exit code {code}"
    assert f"docs: {module.DOC}" in table


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize("argv", [["--no-such-flag"], ["--json", "--no-such-flag=1"]])
def test_an_unknown_flag_exits_with_the_bad_input_code(verb, argv, capsys):
    module = VERBS[verb]
    code = main([verb, *argv])
    assert code == module.EXIT_CODES.bad_input, f"{verb}: usage error exited {code}"
    err = capsys.readouterr().err
    assert "error:" in err and err.strip().splitlines()[-1].startswith(f"fp8bench {verb}: error:")


@pytest.mark.parametrize("verb", ["gate", "ab"])
def test_gate_and_ab_usage_errors_can_never_read_as_inconclusive(verb, tmp_path, capsys):
    # A mistyped flag after valid positionals reaches the top-level parser ("unrecognized arguments"), a bad value
    # reaches the flag's type, a missing argument the verb's parser: all three are 3, never 2.
    if verb == "gate":
        attempts = [["gate", "a.json", "b.json", "--treshold", "5%"], ["gate", "a.json", "b.json", "--threshold", "x"],
                    ["gate", "a.json"], ["gate", "a.json", "b.json", "--fail-on", "never"]]
    else:
        run_args = ["--", "--shape", "32x32x32"]
        attempts = [["ab", "--base", ".", "--roundz", "3", *run_args],
                    ["ab", "--base", ".", "--rounds", "x", *run_args],
                    ["ab", *run_args], ["ab", "--base", ".", "--threshold", "five", *run_args]]
    for argv in attempts:
        code = main(argv)
        assert code == EXIT_HARNESS_ERROR != EXIT_INCONCLUSIVE, f"{' '.join(argv)} exited {code}"


def test_top_level_usage_errors_exit_2(capsys):
    assert main(["no-such-verb"]) == 2
    assert main([]) == 2


def test_every_table_is_in_the_cli_document():
    text = (ROOT / "docs" / "cli.md").read_text()
    for verb, module in VERBS.items():
        for code, meaning in module.EXIT_CODES.rows:
            row = f"| `{verb}` | {code} | {meaning} |"
            assert row in text, f"docs/cli.md lacks the row {row}"


def test_the_workflow_parser_is_the_same_parser():
    # tests/test_workflow.py parses the CI workflow's commands with build_parser(); a verb's parser there must
    # refuse bad input with the same code as `fp8bench` itself.
    parser = build_parser()
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["gate", "only-one"])
    assert exc.value.code == EXIT_HARNESS_ERROR


@pytest.mark.parametrize("argv", [
    ["payoff", "--workload", "gemmm"], ["payoff", "--baseline", "bf61"], ["payoff", "--precision", "fp8_rowwse"],
    ["changes", "--workload", "gemmm"], ["changes", "--backend", "tourch"],
    ["export", "--format", "csv", "--workload", "gemmm"], ["export", "--format", "csv", "--precision", "fp9"],
])
def test_a_mistyped_filter_name_is_bad_input_naming_it_not_an_empty_answer(argv, tmp_path, capsys):
    """A filter that matches nothing would read as an empty store or as "no regression": a name that no registry
    and no stored record carries is refused, with the accepted names."""
    from tests.test_changes import nightly_store

    nightly_store(tmp_path / "store", n=4, slow_from=99)
    module = VERBS[argv[0]]
    code = main([*argv, "--store", str(tmp_path / "store")])
    err = capsys.readouterr().err
    bad = next(a for a in argv[1:] if not a.startswith("--") and a != "csv")
    assert code == module.EXIT_CODES.bad_input, f"{argv}: exited {code}"
    assert f"'{bad}'" in err and "accepted:" in err


def test_a_filter_name_only_the_store_knows_is_still_accepted(tmp_path, capsys):
    """Records of a backend no longer registered (an older version, a plugin not loaded now) can still be read."""
    import json

    from tests.gate_fixtures import payload, record

    run = tmp_path / "run.json"
    run.write_text(json.dumps(payload("r", [{**record(64, "bf16", [1e-3, 1.1e-3]), "backend": "retired_backend"}])))
    assert main(["export", str(run), "--format", "csv", "--backend", "retired_backend"]) == 0
    assert "retired_backend" in capsys.readouterr().out
