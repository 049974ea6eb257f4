"""CLI verbs, imported only when their verb runs.

:data:`VERBS` is the table the command line is built from: each verb's name, its module and its line in
``fp8bench --help``. ``fp8bench --help`` imports no verb; ``fp8bench VERB ...`` imports that verb's module alone. A
verb module defines ``DESCRIPTION``, ``EXIT_CODES`` (its exit-code table, printed by ``--help``), ``DOC`` (the
document ``--help`` links), ``add_arguments(parser)`` and ``execute(args) -> int``, and imports at its top only what
its ``--help`` needs. A verb whose work loads torch, pandas or the store is two modules: ``VERB_flags``, the table's
module with the five names above, and ``VERB``, its action, with every import at its top; ``VERB_flags.execute``
imports the action when the verb runs, its one deferred import. No verb module imports another: what several verbs
share lives in modules that are no verb's (``verb_interface``: exit codes, shared flags, JSON output;
``gating_flags`` and ``gating``: the gate's flags, and its reports; ``console`` and ``store_access``: the terminal
and the store, for actions). Adding a verb is adding its row here; ``tests/test_exit_codes.py`` then checks it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Verb:
    """One verb of the command line."""

    name: str
    """What the user types: ``fp8bench NAME``."""
    module: str
    """The module that implements it, imported only when it runs or its ``--help`` is asked for."""
    help: str
    """Its line in ``fp8bench --help``."""


VERBS: tuple[Verb, ...] = (
    Verb("doctor", "fp8bench.commands.doctor_flags",
         "what this machine can run, and why not"),
    Verb("list", "fp8bench.commands.list_names_flags",
         "workloads, precisions, backends, suites and shape sets"),
    Verb("run", "fp8bench.commands.run_flags",
         "measure cases: table, run file, store rows"),
    Verb("converge", "fp8bench.commands.converge_flags",
         "convergence check: FP8 and 4-bit loss curves against BF16 on the same model and data"),
    Verb("ingest", "fp8bench.commands.ingest_flags",
         "add fp8bench run files and pytest-benchmark JSON to a store (idempotent)"),
    Verb("gate", "fp8bench.commands.gate_flags",
         "fail on a real regression in time, energy or accuracy: ratio of medians, bootstrap CI, Benjamini-Hochberg"),
    Verb("compare", "fp8bench.commands.compare_flags",
         "per-case ratio of medians with bootstrap interval and p-values (informational, exit 0)"),
    Verb("ab", "fp8bench.commands.ab_flags",
         "A/B: run base and head in interleaved rounds (separate processes) and gate head against base"),
    Verb("bisect", "fp8bench.commands.bisect_flags",
         "bisect a slowdown: the first commit between GOOD and BAD that the gate finds slower than GOOD"),
    Verb("dashboard", "fp8bench.commands.dashboard",
         "serve the Streamlit dashboard on a store (127.0.0.1 by default)"),
    Verb("changes", "fp8bench.commands.changes_flags",
         "change points in the nightly history: regressions and improvements by commit, newest first"),
    Verb("payoff", "fp8bench.commands.payoff_flags",
         "where FP8 pays off: the smallest shape from which each recipe beats BF16 end to end, per device"),
    Verb("selfcheck", "fp8bench.commands.selfcheck_flags",
         "acceptance check of a device: peak GEMM rate, timers, FP8 numerics, energy meter, backends"),
    Verb("export", "fp8bench.commands.export_flags",
         "records as CSV, Parquet, github-action-benchmark or Bencher JSON, filtered like the dashboard"),
)

VERB_BY_NAME: dict[str, Verb] = {verb.name: verb for verb in VERBS}
