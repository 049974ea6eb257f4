"""Where fp8bench keeps its files when nobody says otherwise.

The results folder holds run files (``runs/``) with their profile traces (``runs/RUN_ID.profile/``, from
``fp8bench run --profile``), the default SQLite store (``fp8bench.sqlite``), gate reports
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


# A run's profile traces live in ``runs/RUN_ID.profile/`` (a folder not named ``*.json``, so that ``fp8bench ingest
# runs/`` never takes it for a run file), one ``SEQ-CASE.pt.trace.json`` per case: torch.profiler's own suffix
# (its tensorboard_trace_handler's), which trace viewers recognize.
PROFILE_DIR_SUFFIX = ".profile"
TRACE_SUFFIX = ".pt.trace.json"


def profile_dir(runs: Path, run_id: str) -> Path:
    """The folder of one run's traces in ``runs``, the folder of its run file."""
    return runs / f"{run_id}{PROFILE_DIR_SUFFIX}"
