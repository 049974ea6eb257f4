"""The ``fp8bench`` command line: one parser, one module per verb (:mod:`fp8bench.commands`), imported on demand.

Every verb takes ``--json`` for machine-readable output and ends its ``--help`` with its exit-code table and the
document that explains it. Bad input (an unknown flag or name, a value that does not parse, an impossible shape, a
missing device, an unreadable file) is one line on stderr naming the bad value and what is accepted, and the
verb's bad-input exit code (2, or 3 for ``gate`` and ``ab``, where 2 is the "inconclusive" verdict). That holds
for argparse's own errors too: each verb's parser exits with its own bad-input code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType
from typing import NoReturn

from fp8bench import __version__
from fp8bench.commands import VERB_BY_NAME, VERBS
from fp8bench.commands.verb_interface import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    STANDARD_EXIT_CODES,
    ExitCodes,
    UsageError,
    help_epilog,
)
from fp8bench.core.redact import error_line, has_password, redact
from fp8bench.measure.interrupts import signals_interrupt
from fp8bench.results.errors import StoreError

GENERAL_DOC = "docs/cli.md"


def verb_module(name: str) -> ModuleType:
    """The module of verb ``name`` (imported now if it was not)."""
    return importlib.import_module(VERB_BY_NAME[name].module)


def _verb_in(argv: list[str]) -> str:
    """The verb ``argv`` names ("" for none): its first word that is not an option, as the top-level parser takes
    no option with a value."""
    return next((word for word in argv if not word.startswith("-")), "")


def exit_codes_of(module: ModuleType) -> ExitCodes:
    """A verb's exit-code table (``EXIT_CODES``; verbs without a verdict may rely on the standard one)."""
    return getattr(module, "EXIT_CODES", STANDARD_EXIT_CODES)


def doc_of(module: ModuleType) -> str:
    """The document a verb's ``--help`` links (``DOC``, else the overview of every verb)."""
    return getattr(module, "DOC", GENERAL_DOC)


def _exit_with(parser: argparse.ArgumentParser, code: int) -> None:
    """Make ``parser``'s usage errors exit with ``code`` (argparse always uses 2, and has no hook for it), with any
    password in the echoed arguments masked (a mistyped flag echoes the store URL that follows it)."""

    def error(message: str) -> NoReturn:
        parser.print_usage(sys.stderr)
        parser.exit(code, f"{parser.prog}: error: {redact(message)}\n")

    parser.error = error  # type: ignore[method-assign]


def _installed_version() -> str:
    try:
        return version("fp8bench")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return __version__


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser: every verb complete, or with ``only``, just that verb (none for ``""``), the others
    reduced to their help line so that their modules are not imported."""
    parser = argparse.ArgumentParser(
        prog="fp8bench",
        description="Does FP8 pay off on this device, for these shapes, and at what cost in accuracy and energy? "
                    "Measure workloads in FP32/TF32/BF16/FP16 and FP8 recipes, store the results, compare them.",
        epilog="Start with `fp8bench doctor`, then `fp8bench run --suite smoke`. Each verb has its own --help, "
               f"which ends with its exit codes. docs: README.md and {GENERAL_DOC} in the fp8bench repository.",
    )
    # The installed distribution's version: the one `pip show fp8bench` reports, whatever the checkout says.
    parser.add_argument("--version", action="version", version=f"fp8bench {_installed_version()}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb in VERBS:
        if only is not None and verb.name != only:
            sub.add_parser(verb.name, help=verb.help)
            continue
        module = verb_module(verb.name)
        codes = exit_codes_of(module)
        p = sub.add_parser(verb.name, help=verb.help, description=module.DESCRIPTION,
                           epilog=help_epilog(codes, doc_of(module)),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        _exit_with(p, codes.bad_input)
        p.set_defaults(verb_parser=p)  # for flags only the top-level parse sees (see _parse)
        module.add_arguments(p)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse ``argv``; flags no verb knows are that verb's usage error (its bad-input code), not argparse's 2."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        getattr(args, "verb_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run one verb; returns the process exit code (usage errors included, instead of raising SystemExit)."""
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(only=_verb_in(argv))
    try:
        args = _parse(parser, argv)
    except SystemExit as exc:  # argparse's --help (0) and its usage errors (the verb's bad-input code)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if not args.verb:
        parser.print_help()
        return EXIT_USAGE
    if isinstance(getattr(args, "store", None), str) and has_password(args.store):
        print(f"fp8bench {args.verb}: warning: the store URL carries a password, which shell history and process "
              "lists keep; give it through $PGPASSWORD or ~/.pgpass instead (docs/security.md)", file=sys.stderr)
    try:
        with signals_interrupt():  # SIGTERM and SIGHUP end a verb the way Ctrl-C does
            return int(verb_module(args.verb).execute(args))
    # Every bad-input error of fp8bench (unknown name, bad shape, missing device, unreadable run file or suite) is
    # a ValueError; StoreError is the one exception. Catching only those keeps torch out of verbs that need none.
    except (UsageError, StoreError, ValueError) as exc:
        print(f"fp8bench {args.verb}: error: {redact(exc)}", file=sys.stderr)
        return exit_codes_of(verb_module(args.verb)).bad_input
    except KeyboardInterrupt as exc:
        print(f"fp8bench {args.verb}: interrupted ({getattr(exc, 'signal_name', 'SIGINT')})", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if not _database_error(exc):
            raise
        # SQLAlchemy's own text carries the statement and every parameter (a whole record's JSON): one line only.
        print(f"fp8bench {args.verb}: error: the store failed: {error_line(exc)}", file=sys.stderr)
        return exit_codes_of(verb_module(args.verb)).bad_input


def _database_error(exc: BaseException) -> bool:
    """Whether ``exc`` comes from the database layer (SQLAlchemy or a driver), without importing it."""
    return any(type(e).__module__.split(".")[0] in ("sqlalchemy", "psycopg", "sqlite3")
               for e in (exc, exc.__cause__) if e is not None)


if __name__ == "__main__":
    sys.exit(main())
