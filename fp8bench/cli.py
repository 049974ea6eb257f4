"""The ``fp8bench`` command line: one parser, one module per verb (:mod:`fp8bench.commands`).

Every verb takes ``--json`` for machine-readable output. Bad input (an unknown name, an impossible shape, a missing
device, an unreadable file) is one line on stderr naming the bad value and what is accepted, and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType

from fp8bench.commands import VERB_MODULES
from fp8bench.commands.common import EXIT_INTERRUPTED, EXIT_USAGE, UsageError


def _verbs() -> dict[str, ModuleType]:
    modules = [importlib.import_module(m) for m in VERB_MODULES]
    return {m.NAME: m for m in modules}


def build_parser(verbs: dict[str, ModuleType] | None = None) -> argparse.ArgumentParser:
    verbs = verbs or _verbs()
    parser = argparse.ArgumentParser(
        prog="fp8bench",
        description="Does FP8 pay off on this device, for these shapes, and at what cost in accuracy and energy? "
                    "Measure workloads in FP32/TF32/BF16/FP16 and FP8 recipes, store the results, compare them.",
        epilog="Start with `fp8bench doctor`, then `fp8bench run --suite smoke`. Each verb has its own --help.",
    )
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for name, module in verbs.items():
        p = sub.add_parser(name, help=module.HELP, description=module.DESCRIPTION,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Every bad-input error of fp8bench (unknown name, bad shape, missing device, unreadable run file or suite) is
    # a ValueError; StoreError is the one exception. Importing only those keeps torch out of verbs that need none.
    from fp8bench.store import StoreError

    verbs = _verbs()
    parser = build_parser(verbs)
    args = parser.parse_args(argv)
    if not args.verb:
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(verbs[args.verb].execute(args))
    except (UsageError, StoreError, ValueError) as exc:
        print(f"fp8bench {args.verb}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"fp8bench {args.verb}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
