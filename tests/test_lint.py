"""The project's own lint and type-check configuration (pyproject.toml) holds for the whole tree."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The code's width: pyproject.toml's ruff ``line-length``, enforced by its E501 rule.
LINE_LIMIT = 120


def _ruff() -> str:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is part of the dev extra and must be installed")
    return ruff


def test_ruff_is_clean():
    out = subprocess.run([_ruff(), "check", "."], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize(("width", "flagged"), [(LINE_LIMIT, False), (LINE_LIMIT + 1, True)])
def test_a_line_over_the_limit_is_a_lint_error(width, flagged):
    """The project's configuration, not a default, decides: a line one column over the limit fails, one at it passes."""
    line = 'text = "' + "x" * (width - len('text = ""')) + '"\n'
    assert len(line) == width + 1
    out = subprocess.run([_ruff(), "check", "--stdin-filename", "fp8bench/width_probe.py", "-"], cwd=ROOT,
                         input=line, capture_output=True, text=True)
    assert ("E501" in out.stdout) is flagged, out.stdout + out.stderr


@pytest.mark.slow
def test_mypy_is_clean():
    out = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
