"""``python -m fp8bench``: the command line, for launchers that start a module (``torchrun -m fp8bench run ...``)."""

from fp8bench.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
