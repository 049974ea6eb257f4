"""Where fp8bench keeps its files when nobody says otherwise.

The results folder holds run files (``runs/``), the default SQLite store (``fp8bench.sqlite``), gate reports
(``gate/``), A/B rounds (``ab/``) and measured CPU ceilings. It is ``./results`` relative to the working directory,
or ``$FP8BENCH_RESULTS_DIR``. The command line and the dashboard both take their default from here, so a screen
never has to reach into the command line for it.
"""

from __future__ import annotations

import os
from pathlib import Path

RESULTS_DIR_ENV = "FP8BENCH_RESULTS_DIR"


def default_results_dir() -> Path:
    """``$FP8BENCH_RESULTS_DIR`` or ``./results`` (relative to the working directory)."""
    return Path(os.environ.get(RESULTS_DIR_ENV, "results"))
