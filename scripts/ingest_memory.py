"""Peak memory of `fp8bench ingest` on one large run file, with this checkout's code and, side by side, an older one's.

Run files are read record by record, so ingesting one should take about as much memory whatever its length. This
writes a schema-1 run file of about ``--size-mb`` megabytes (GEMM records of 100 raw samples each), ingests it into a
fresh SQLite store in a child process per version of the code, and prints each child's peak resident set size
(``getrusage(RUSAGE_CHILDREN).ru_maxrss``). The test ``tests/test_runfile_reader.py::
test_ingest_memory_does_not_grow_with_the_file`` checks the rule; this measures the figure docs/store.md states.

    python scripts/ingest_memory.py                        # this checkout, a 200 MB file
    python scripts/ingest_memory.py --before-ref c5a7f8e   # and the code of c5a7f8e, unpacked with git archive
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLES_PER_RECORD = 100


def write_big_run_file(path: Path, size_mb: float) -> int:
    """A finished schema-1 run file of about ``size_mb`` megabytes; returns its record count."""
    rnd = random.Random(0)
    run = {"run_id": "big", "started_at": "2026-11-23T00:00:00+00:00", "finished_at": "2026-11-23T01:00:00+00:00",
           "status": "complete", "git": {"commit": "c0ffee"}, "host": {"alias": "probe"},
           "device": {"name": "Probe CPU"}, "device_spec": "cpu", "software": {"torch": "2.13.0"}, "settings": {}}
    with path.open("w") as fh:
        fh.write('{"schema_version": 1, "run": ' + json.dumps(run) + ', "records": [')
        i, size = 0, fh.tell()
        while size < size_mb * 1e6:
            samples = [1e-3 * (1 + 0.01 * rnd.random()) for _ in range(SAMPLES_PER_RECORD)]
            rec = {"workload": "gemm", "shape": {"m": 64 + i, "n": 64, "k": 64}, "precision": "bf16",
                   "backend": "torch", "device": "cpu", "status": "ok", "samples_s": samples,
                   "median_s": sorted(samples)[SAMPLES_PER_RECORD // 2], "valid": True, "seq": i,
                   "phases": {"gemm": 1e-3}, "numerics": {"sqnr_db": 40.0}}
            text = (", " if i else "") + json.dumps(rec)
            fh.write(text)
            size += len(text)
            i += 1
        fh.write("]}")
    return i


def code_roots(tmp: Path, before_ref: str | None) -> dict[str, Path]:
    """This checkout, and the code of ``before_ref`` (unpacked with ``git archive``)."""
    roots = {"this checkout": ROOT}
    if before_ref:
        folder = tmp / f"ref-{before_ref}"
        folder.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", before_ref, "fp8bench"], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
        roots[f"at {before_ref}"] = folder
    return roots


def peak_ingest(code_root: Path, run_file: Path, store: Path) -> tuple[int, float]:
    """(exit code, peak RSS in MiB) of ``fp8bench ingest RUN_FILE`` run with the code in ``code_root`` first on
    ``sys.path``, ahead of the installed copy."""
    cli = [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); from fp8bench.cli import main; "
           "sys.exit(main(sys.argv[1:]))", str(code_root)]
    wrapper = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True); "
               "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", wrapper, *cli, "ingest", str(run_file), "--store", str(store)],
                         capture_output=True, text=True, cwd=ROOT, check=True).stdout.split()
    return int(out[0]), int(out[1]) / 1024  # ru_maxrss is in KiB on Linux


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=200.0, help="size of the run file (default 200)")
    parser.add_argument("--before-ref", default=None, help="a git ref whose code is measured too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fp8bench-ingest-memory-") as folder:
        tmp = Path(folder)
        big = tmp / "big-run.json"
        n = write_big_run_file(big, args.size_mb)
        print(f"{big.stat().st_size / 1e6:.0f} MB, {n} records")
        failed = False
        for label, root in code_roots(tmp, args.before_ref).items():
            code, mib = peak_ingest(root, big, tmp / f"store-{label.replace(' ', '-')}")
            print(f"{label}: exit {code}, peak RSS {mib:.0f} MiB")
            failed |= code != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
