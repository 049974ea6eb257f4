"""`fp8bench list` on the command line: its description, exit codes and flags, which build its ``--help``
without loading what the verb runs; :func:`execute` hands the parsed flags to :mod:`fp8bench.commands.list_names`.
"""

from __future__ import annotations

import argparse

from fp8bench.commands.verb_interface import STANDARD_EXIT_CODES, add_json_flag

DESCRIPTION = "List every registered name the other verbs accept."
EXIT_CODES = STANDARD_EXIT_CODES
DOC = "docs/cli.md"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", nargs="?", default="all",
                   choices=["all", "workloads", "precisions", "backends", "suites", "shape-sets"])
    add_json_flag(p)


def execute(args: argparse.Namespace) -> int:
    # Imported only now: the action loads torch and every plugin at its top, which
    # `fp8bench list --help` must not wait for.
    from fp8bench.commands import list_names

    return list_names.execute(args)
