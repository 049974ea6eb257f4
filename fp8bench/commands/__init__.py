"""CLI verbs, one module each.

A verb module defines ``NAME``, ``HELP``, ``DESCRIPTION``, ``EXIT_CODES`` (its exit-code table, printed by
``--help``), ``DOC`` (the document ``--help`` links), ``add_arguments(parser)`` and ``execute(args) -> int``.
Adding a verb is adding its module name to :data:`VERB_MODULES`; ``tests/test_exit_codes.py`` then checks it.
"""

VERB_MODULES = (
    "fp8bench.commands.doctor",
    "fp8bench.commands.list_names",
    "fp8bench.commands.run",
    "fp8bench.commands.converge",
    "fp8bench.commands.ingest",
    "fp8bench.commands.gate",
    "fp8bench.commands.compare",
    "fp8bench.commands.ab",
    "fp8bench.commands.bisect",
    "fp8bench.commands.dashboard",
    "fp8bench.commands.changes",
    "fp8bench.commands.payoff",
    "fp8bench.commands.selfcheck",
    "fp8bench.commands.export",
)
