"""The command line imports only the verb that runs: ``fp8bench --help`` no verb, ``fp8bench VERB --help`` that verb
alone, and neither imports torch or pandas (each is asked in a fresh interpreter, as a user's shell would)."""

from __future__ import annotations

import json
import subprocess
import sys

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


@pytest.mark.parametrize("verb", ["gate", "run", "selfcheck"])
def test_a_verbs_help_imports_that_verb_alone_and_no_torch(verb):
    module = next(v.module for v in VERBS if v.name == verb)
    seen = _imports_of([verb, "--help"])
    assert seen["code"] == 0 and not seen["torch"] and not seen["pandas"]
    assert seen["verbs"] == [module]


def test_no_verb_imports_another():
    """Each verb stands alone (flags and reports that several verbs share live in modules that are no verb's, such as
    ``commands/gating.py``), so running one verb never loads another's module."""
    import ast
    from pathlib import Path

    verb_modules = {verb.module for verb in VERBS}
    root = Path(__file__).resolve().parents[1]
    found = {}
    for module in sorted(verb_modules):
        path = root / (module.replace(".", "/") + ".py")
        imported = {node.module for node in ast.walk(ast.parse(path.read_text()))
                    if isinstance(node, ast.ImportFrom) and node.module}
        found[module] = sorted(imported & (verb_modules - {module}))
    assert found == {module: [] for module in sorted(verb_modules)}
