"""Every command block of README.md and docs/*.md runs green as written, so that the docs cannot drift from the tool.

A *command block* is a fenced block tagged ``bash``, ``sh`` or ``console``; in a ``console`` block the commands are
the lines after a ``$`` prompt (the rest is the output it showed). Each document's blocks run in order in one
sandbox shared by all: a copy of the repository's files, built once per session (a fresh clone, in effect: a git
repository of one commit), with ``results/`` reset to empty before each document (only the CPU ceilings cache
kept) and the project's virtual environment first on ``PATH``, as after ``source .venv/bin/activate``. A block passes
when it exits 0 (bash with ``-e``: every line must) and leaves no file outside ``results/`` new or changed, so no
document sees another's.

A document steers the test with HTML comments on the lines right above a block, invisible on the rendered page:

``<!-- doc-test: skip: REASON -->``
    not run here, for the reason given (a GPU, another host, a server that runs until stopped).
``<!-- doc-test: sub: OLD => NEW -->``
    run with OLD replaced by NEW: a placeholder made concrete, or a long run shrunk; the document's prose says
    how long the full command takes.
``<!-- doc-test: exit: CODES -->``
    the exit codes that count as green (a gate's verdicts: 0, 1 and 2 are answers, 3 is a failure).
``<!-- doc-test: needs: smoke -->``
    the sandbox starts with the results of ``fp8bench run --suite smoke``, as after the README's set-up.
``<!-- doc-test: output: REGEX -->``
    the block's output (stdout and stderr) must match REGEX: what the prose says the command printed (a verdict, a
    commit, "nothing listed"), so that a figure in the text is the one the command gives. Repeatable.

A ``console`` block's output table is checked too: every case it shows must come out with the same status.

The blocks take minutes (marker ``long``, run by CI and with ``--long``); parsing the directives is checked on every
run, so that a typo cannot silently skip a block.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import outside_xdist

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND_LANGUAGES = ("bash", "sh", "console")
DIRECTIVE = re.compile(r"^<!--\s*doc-test:\s*(\w+):\s*(.*?)\s*-->$")
KEYS = ("skip", "sub", "exit", "needs", "output")
BLOCK_TIMEOUT_S = 1800  # a hung block fails the test; the slowest documented block takes a few minutes
# Where each block's duration is written, when set (a JSON list), for the docs' stated times.
TIMES_ENV = "FP8BENCH_DOC_TEST_TIMES"


@dataclass
class Block:
    document: Path
    line: int  # 1-based line of the opening fence
    language: str
    text: str
    skip: str | None = None
    subs: list[tuple[str, str]] = field(default_factory=list)
    exits: tuple[int, ...] = (0,)
    needs: tuple[str, ...] = ()
    outputs: list[str] = field(default_factory=list)  # regexes the block's output must match

    @property
    def name(self) -> str:
        return f"{self.document.name}:{self.line}"

    def script(self) -> str:
        """What bash runs: the block with its substitutions; for a console block, its prompted commands."""
        text = self.text
        for old, new in self.subs:
            if old not in text:
                raise AssertionError(f"{self.name}: `sub: {old} => {new}` matches nothing in the block")
            text = text.replace(old, new)
        if self.language != "console":
            return text
        commands, continuing = [], False
        for line in text.splitlines():
            if line.startswith("$ ") or continuing:
                commands.append(line[2:] if line.startswith("$ ") else line)
                continuing = line.rstrip().endswith("\\")
        return "\n".join(commands)

    def shown_rows(self) -> list[tuple[str, ...]]:
        """(workload, shape, precision, backend, status) of every row of a console block's run table."""
        rows = []
        for line in self.text.splitlines():
            cells = [c.strip() for c in line.strip("│ ").split("│")]
            if len(cells) >= 5 and cells[0] in ("gemm", "attention", "transformer_step", "grouped_gemm",
                                                  "collective"):
                rows.append((*cells[:4], cells[4].split(":")[0]))
        return rows


def parse(document: Path) -> list[Block]:
    """The command blocks of ``document`` with their directives; raises on a directive it does not know."""
    lines = document.read_text().splitlines()
    blocks: list[Block] = []
    pending: list[tuple[str, str, int]] = []
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        match = DIRECTIVE.match(line)
        if match:
            if match.group(1) not in KEYS:
                raise ValueError(f"{document.name}:{i + 1}: unknown doc-test directive {match.group(1)!r}; "
                                 f"accepted: {', '.join(KEYS)}")
            pending.append((match.group(1), match.group(2), i + 1))
            i += 1
            continue
        if line.startswith("```"):
            language = line[3:].strip()
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip().startswith("```"))
            if language in COMMAND_LANGUAGES:
                block = Block(document, i + 1, language, "\n".join(lines[i + 1:end]))
                for key, value, where in pending:
                    if key == "skip":
                        block.skip = value
                    elif key == "sub":
                        old, sep, new = value.partition(" => ")
                        if not sep:
                            raise ValueError(f"{document.name}:{where}: `sub:` takes OLD => NEW, got {value!r}")
                        block.subs.append((old, new))
                    elif key == "exit":
                        block.exits = tuple(int(v) for v in value.split())
                    elif key == "output":
                        re.compile(value)  # a typo in the pattern fails here, on every run
                        block.outputs.append(value)
                    else:
                        block.needs = tuple(value.split())
                blocks.append(block)
            elif pending:
                raise ValueError(f"{document.name}:{pending[0][2]}: doc-test directives above a {language or 'plain'}"
                                 " block, which is no command block")
            pending = []
            i = end + 1
            continue
        if line and pending:
            raise ValueError(f"{document.name}:{pending[0][2]}: doc-test directives must sit right above a block")
        i += 1
    return blocks


ALL_BLOCKS = [b for d in DOCUMENTS for b in parse(d)]
RUN_DOCUMENTS = sorted({b.document for b in ALL_BLOCKS if b.skip is None}, key=DOCUMENTS.index)


def test_every_command_block_is_run_or_skipped_with_a_reason():
    assert ALL_BLOCKS, "no command block found"
    for block in ALL_BLOCKS:
        assert block.skip is None or len(block.skip) > 10, f"{block.name}: skip needs a reason"
        assert block.skip is not None or block.script().strip(), f"{block.name}: nothing to run"
    # Most documented commands run here; only those that need what a CPU machine lacks are skipped.
    ran = [b for b in ALL_BLOCKS if b.skip is None]
    assert len(ran) >= len(ALL_BLOCKS) / 2, [b.name for b in ALL_BLOCKS if b.skip]


def test_directives_are_parsed_and_typos_refused(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- doc-test: sub: 200 => 20 -->\n<!-- doc-test: exit: 0 2 -->\n"
                   "<!-- doc-test: output: ^ok \\d+ -->\n```bash\nfp8bench x --steps 200\n```\n\n"
                   "```console\n$ fp8bench run \\\n  --shape 8x8x8\nsome output\n```\n")
    first, second = parse(doc)
    assert first.script() == "fp8bench x --steps 20" and first.exits == (0, 2) and first.outputs == [r"^ok \d+"]
    assert second.script() == "fp8bench run \\\n  --shape 8x8x8"
    doc.write_text("<!-- doc-test: skipp: typo -->\n```bash\nls\n```\n")
    with pytest.raises(ValueError, match="unknown doc-test directive 'skipp'"):
        parse(doc)
    doc.write_text("<!-- doc-test: skip: a reason -->\nsome text\n```bash\nls\n```\n")
    with pytest.raises(ValueError, match="right above a block"):
        parse(doc)


def make_sandbox(where: Path) -> Path:
    """A copy of the repository's files as a git repository of one commit, the venv linked in, ``results/`` empty."""
    where.mkdir(parents=True)
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        source = ROOT / name
        if source.is_file() and not name.startswith("results/"):
            (where / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, where / name)
    (where / "results").mkdir(exist_ok=True)
    (where / ".venv").symlink_to(ROOT / ".venv")
    env = {**os.environ, "GIT_AUTHOR_NAME": "doc test", "GIT_AUTHOR_EMAIL": "doc@test",
           "GIT_COMMITTER_NAME": "doc test", "GIT_COMMITTER_EMAIL": "doc@test"}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "docs snapshot"]):
        subprocess.run(["git", *args], cwd=where, env=env, check=True, capture_output=True)
    (where / ".git" / "info" / "exclude").write_text(".venv\n")
    return where


def block_env() -> dict[str, str]:
    """The environment of a shell on a developer's machine: no test settings (FP8BENCH_*, pytest-xdist's)."""
    env = {k: v for k, v in outside_xdist(os.environ).items()
           if not k.startswith("FP8BENCH_") or k == "FP8BENCH_HOST_ALIAS"}
    venv = ROOT / ".venv"
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv))
    env.pop("PYTHONHOME", None)
    return env


@pytest.fixture(scope="session")
def shared_sandbox(tmp_path_factory) -> Path:
    """The one copy of the repository every document's blocks run in (built once per session): each document
    starts from its ``results/`` reset, and a block may change nothing else, so no document sees another's."""
    return make_sandbox(tmp_path_factory.mktemp("docs") / "repo")


# The CPU's measured ceilings, a cache in results/ (fp8bench.hardware.peaks): kept from one document to the next,
# as on a machine where the README's set-up ran, instead of each document's first run measuring them again.
CEILINGS_CACHE = "cpu_ceilings.json"


def reset_results(sandbox: Path, smoke: Path | None) -> None:
    """The sandbox as a fresh clone has it after the set-up, ``results/`` empty or holding the smoke suite's
    results, and the CPU ceilings cache kept. Files a failed document left behind are removed here too, so that
    one failure does not fail the documents after it."""
    for args in (["checkout", "-q", "--", "."], ["clean", "-fdq"]):  # ignored files (results/, .venv) stay
        subprocess.run(["git", *args], cwd=sandbox, check=True, capture_output=True)
    cache = sandbox / "results" / CEILINGS_CACHE
    ceilings = cache.read_bytes() if cache.is_file() else None
    shutil.rmtree(sandbox / "results", ignore_errors=True)  # git clean removes it when it is empty
    if smoke is None:
        (sandbox / "results").mkdir()
    else:
        shutil.copytree(smoke, sandbox / "results")
    if ceilings is not None:
        cache.write_bytes(ceilings)


@pytest.fixture(scope="session")
def smoke_results(shared_sandbox, tmp_path_factory) -> Path:
    """``results/`` after the README's set-up ran the smoke suite (once per session, copied where needed)."""
    reset_results(shared_sandbox, None)
    out = subprocess.run(["fp8bench", "run", "--suite", "smoke"], cwd=shared_sandbox, env=block_env(),
                         capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
    assert out.returncode == 0, out.stderr[-3000:]
    kept = tmp_path_factory.mktemp("smoke") / "results"
    shutil.copytree(shared_sandbox / "results", kept)
    return kept


def changed_files(sandbox: Path) -> list[str]:
    """Files a block left or changed in the repository outside ``results/`` (git's untracked, non-ignored files
    and changed tracked ones)."""
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=sandbox, capture_output=True,
                         text=True, check=True).stdout
    return [line[3:] for line in out.splitlines()]


def record_time(block: Block, seconds: float, code: int) -> None:
    target = os.environ.get(TIMES_ENV)
    if not target:
        return
    path = Path(target)
    rows = json.loads(path.read_text()) if path.exists() else []
    rows.append({"block": block.name, "seconds": round(seconds, 1), "exit": code,
                 "load_avg_1m": round(os.getloadavg()[0], 2)})
    path.write_text(json.dumps(rows, indent=1))


@pytest.mark.long
@pytest.mark.parametrize("document", RUN_DOCUMENTS, ids=lambda p: p.name)
def test_documented_commands_run_as_written(document, shared_sandbox, request):
    blocks = [b for b in ALL_BLOCKS if b.document == document]
    smoke = request.getfixturevalue("smoke_results") if any("smoke" in b.needs for b in blocks) else None
    sandbox = shared_sandbox
    reset_results(sandbox, smoke)
    for block in blocks:
        if block.skip is not None:
            continue
        started = time.monotonic()
        out = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.script()], cwd=sandbox, env=block_env(),
                             capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
        record_time(block, time.monotonic() - started, out.returncode)
        assert out.returncode in block.exits, (
            f"{block.name} exited {out.returncode} (expected {block.exits}):\n{block.script()}\n--- stdout ---\n"
            f"{out.stdout[-3000:]}\n--- stderr ---\n{out.stderr[-3000:]}")
        for pattern in block.outputs:
            assert re.search(pattern, out.stdout + out.stderr, re.MULTILINE), (
                f"{block.name}: the doc says its output shows {pattern!r}; it printed:\n{out.stdout[-3000:]}\n"
                f"--- stderr ---\n{out.stderr[-3000:]}")
        for row in block.shown_rows():
            assert re.search(r"\s*│\s*".join(map(re.escape, row)), out.stdout), (
                f"{block.name} shows the case {row}, which came out otherwise here:\n{out.stdout[-3000:]}")
        stray = changed_files(sandbox)
        assert not stray, f"{block.name} left {stray} outside results/: outputs belong under results/"
