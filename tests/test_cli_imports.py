"""The command line imports only the verb that runs: ``fp8bench --help`` no verb, ``fp8bench VERB --help`` that verb
alone, and neither imports torch or pandas (each is asked in a fresh interpreter, as a user's shell would)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fp8bench.commands import VERBS

PROBE = """
import contextlib, io, json, sys
from fp8bench.cli import main
from fp8bench.commands import VERBS
VERB_MODULES = {verb.module for verb in VERBS}
with contextlib.redirect_stdout(io.StringIO()):
    code = main(sys.argv[1:])
verbs = sorted(m for m in sys.modules if m in VERB_MODULES)
print(json.dumps({"code": code, "verbs": verbs, "torch": "torch" in sys.modules, "pandas": "pandas" in sys.modules}))
"""


def _imports_of(argv: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_general_help_imports_no_verb():
    seen = _imports_of(["--help"])
    assert seen == {"code": 0, "verbs": [], "torch": False, "pandas": False}


@pytest.mark.parametrize("verb", ["gate", "run", "selfcheck", "changes"])
def test_a_verbs_help_imports_that_verb_alone_and_no_torch_or_pandas(verb):
    module = next(v.module for v in VERBS if v.name == verb)
    seen = _imports_of([verb, "--help"])
    assert seen["code"] == 0 and not seen["torch"] and not seen["pandas"]
    assert seen["verbs"] == [module]


def test_no_verb_imports_another():
    """Each verb stands alone (flags and reports that several verbs share live in modules that are no verb's, such as
    ``commands/gating.py``), so running one verb never loads another's module."""
    verb_modules = {verb.module for verb in VERBS}
    root = Path(__file__).resolve().parents[1]
    found = {}
    for module in sorted(verb_modules):
        path = root / (module.replace(".", "/") + ".py")
        imported = {node.module for node in ast.walk(ast.parse(path.read_text()))
                    if isinstance(node, ast.ImportFrom) and node.module}
        found[module] = sorted(imported & (verb_modules - {module}))
    assert found == {module: [] for module in sorted(verb_modules)}


HEAVY = ("torch", "pandas")  # seconds to import; a verb's --help needs neither


def test_no_verbs_help_imports_torch_or_pandas():
    """Every verb's ``--help``, one after the other in one interpreter: none of them loads torch or pandas. Each verb
    is charged with the heavy modules that were new after its help, so a failure names the verb."""
    probe = ("import contextlib, io, json, sys\n"
             "from fp8bench.cli import main\n"
             "from fp8bench.commands import VERBS\n"
             f"HEAVY = {HEAVY!r}\n"
             "codes, loaded = {}, {}\n"
             "for verb in VERBS:\n"
             "    before = {m for m in HEAVY if m in sys.modules}\n"
             "    with contextlib.redirect_stdout(io.StringIO()):\n"
             "        codes[verb.name] = main([verb.name, '--help'])\n"
             "    loaded[verb.name] = sorted(m for m in HEAVY if m in sys.modules and m not in before)\n"
             "print(json.dumps({'codes': codes, 'loaded': loaded}))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["codes"] == {verb.name: 0 for verb in VERBS}
    assert {verb: heavy for verb, heavy in seen["loaded"].items() if heavy} == {}


def _deferred_imports(path: Path) -> list[tuple[str, int, str]]:
    """The imports inside functions of ``path``: (function, line, imported module)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom):
                    found += [(node.name, inner.lineno, f"{inner.module}.{a.name}") for a in inner.names]
                elif isinstance(inner, ast.Import):
                    found += [(node.name, inner.lineno, a.name) for a in inner.names]
    return found


def test_the_command_line_imports_at_module_tops():
    """cli.py and fp8bench/commands import at their tops. The one exception: a verb module whose action is heavy
    hands over to it in ``execute``, importing that action module (no verb's) under a comment that says why."""
    root = Path(__file__).resolve().parents[1]
    verb_modules = {verb.module for verb in VERBS}
    wrong = []
    for path in sorted([root / "fp8bench" / "cli.py", *(root / "fp8bench" / "commands").glob("*.py")]):
        module = ".".join(path.relative_to(root).with_suffix("").parts)
        lines = path.read_text().splitlines()
        deferred = _deferred_imports(path)
        for function, line, imported in deferred:
            hand_over = (module in verb_modules and function == "execute" and len(deferred) == 1
                         and imported.startswith("fp8bench.commands.") and imported not in verb_modules
                         and lines[line - 2].strip().startswith("#"))
            if not hand_over:
                wrong.append(f"{path.name}:{line} {function}: {imported}")
    assert wrong == []


def test_reading_a_store_for_changes_imports_no_torch(tmp_path):
    """``fp8bench changes`` reads a store: it needs the registries (and so torch, which their modules import) only to
    judge a filter name that no stored record carries, a typo or a name registered but not measured yet."""
    from tests.test_changes import nightly_store

    store = str(tmp_path / "store")
    nightly_store(store, n=4, slow_from=99)
    for argv in (["changes", "--store", store], ["changes", "--store", store, "--workload", "gemm", "--all"]):
        seen = _imports_of(argv)
        assert (seen["code"], seen["torch"]) == (0, False), argv
    registered_not_stored = _imports_of(["changes", "--store", store, "--workload", "grouped_gemm"])
    assert registered_not_stored["code"] == 0  # accepted: the workload is registered, its history empty
