"""The README fits on a screen, says the same set-up commands CI runs, and every link in the docs resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")


def test_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; move detail into docs/"


def test_readme_setup_commands_are_the_ones_ci_runs():
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip().startswith("bash scripts/")]
    assert ci == ["bash scripts/quickstart", "bash scripts/test"]
    block = README.read_text().split("## Set up", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    assert [line.strip() for line in block.strip().splitlines()] == ci


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.name)
def test_relative_links_resolve(page):
    for target, _anchor in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        assert (page.parent / target).exists(), f"{page.name} links {target}, which does not exist"



def test_tests_folder_holds_what_development_md_says():
    """docs/development.md describes tests/ (test files, fakes, named support modules, plugins/ and data/): a new
    kind of file there is named in that page first."""
    page = (ROOT / "docs" / "development.md").read_text()
    tests = ROOT / "tests"
    support = {p.name for p in tests.glob("*.py") if not p.name.startswith(("test_", "fake_"))}
    unnamed = sorted(name for name in support if f"`{name}`" not in page and f"{name} " not in page)
    assert not unnamed, f"support modules in tests/ that docs/development.md does not name: {unnamed}"
    folders = {p.name for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}
    assert folders == {"plugins", "data"}, folders
    assert "fake_*.py" in page and "test_<topic>.py" in page
