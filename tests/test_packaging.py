"""The wheel holds every package folder: pyproject.toml lists packages by name, so a folder added (or moved) without
its entry would work from a source tree and be missing from an installed fp8bench."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11's tomllib")

ROOT = Path(__file__).resolve().parents[1]


def _folders_with_files(package: str, folder: Path) -> set[str]:
    """``package`` and its sub-packages: every folder below ``folder`` that holds a file other than caches."""
    found = set()
    for path in folder.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:
            parts = path.parent.relative_to(folder).parts
            found.add(".".join([package, *parts]))
    return found


def test_every_folder_with_files_is_a_listed_package():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    mapped = {name: ROOT / path for name, path in config.get("package-dir", {}).items() if name}
    folders = _folders_with_files("fp8bench", ROOT / "fp8bench")
    for name, path in mapped.items():
        folders |= _folders_with_files(name, path)
    assert folders - listed == set(), "folders the wheel would leave out: add them to [tool.setuptools] packages"
    assert listed - folders == set(), "packages listed in pyproject.toml that have no folder"
