"""Fixture stores for the dashboard tests, filled by real CPU runs of the fp8bench command line.

:func:`shared_store`: a short ``fp8bench converge`` (BF16 and FP8 loss curves for the Numerics page), then two small
runs of the same GEMM cases (so Compare and History have two points) and a real ``fp8bench gate`` between them (so
History has a verdict to mark).

:func:`every_record_store`: every kind of record the product writes on a CPU, each written by a real run: every
workload (``collective`` under a real two-rank ``torchrun``; ``grouped_gemm`` with Zipf routing, a real-valued
``alpha`` and the per-expert loop), every precision, every backend family (vendor, Transformer Engine unavailable,
Triton interpreted, torchao, the emulated reference), records with a profile trace, and every status: ``ok``,
``skipped`` (unsupported, unaligned, unavailable), ``failed`` (a shape refused for memory before allocating) and
``invalid`` (a NaN in the output, through the test-only plugin ``plugins/fp8bench_test_nonfinite.py``). Its two
newest runs share no case, as in a store that mixes workloads.

Each is built once per test session and shared by the AppTest and browser tests.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import built_once, plugins_in_process

from fp8bench.cli import main

# Tiny and fast on a 2-core CPU: one shape, the torch and emulated backends, a BF16 baseline, a row-wise FP8
# recipe torch runs natively, and MXFP8, which torch skips on the CPU (so the store holds a skipped record too).
RUN_ARGS = ["run", "--shape", "128x128x128", "--precision", "bf16", "fp8_rowwise", "mxfp8",
            "--backend", "torch", "emulated", "--budget", "20", "--max-time", "0.2", "--json"]
# A one-layer decoder on short sequences: a few seconds per curve on the CPU, still a real training loop.
CONVERGE_ARGS = ["converge", "--shape", "tiny,seq=16,batch=2,layers=1", "--steps", "8", "--window", "2",
                 "--precision", "bf16", "fp8_rowwise", "--no-control", "--stats-every", "0", "--json"]


def as_read(markdown: str) -> str:
    """Markdown source as the reader sees it: the page escapes every stored or typed string (backslash before
    each punctuation character, an invisible word joiner to stop autolinks), so tests compare against this."""
    return re.sub(r"\\(.)", r"\1", markdown).replace("\u2060", "")


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def fp8bench(*args: str | Path, check: bool = True) -> CliResult:
    """Run the real command line in this process (no second torch import), capturing its output."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    result = CliResult(code, out.getvalue(), err.getvalue())
    if check and code != 0:
        raise AssertionError(f"fp8bench {' '.join(map(str, args))} exited {code}:\n{result.stderr[-2000:]}")
    return result


def build_store(results: Path) -> dict[str, object]:
    """Fill ``results`` (run files + SQLite store) and return what was made. The CPU's ceilings are measured as on
    a quiet host, whatever the load now: under load a run carries none, and the Roofline page would have none to
    show."""
    from unittest import mock

    from fp8bench.core.noise import HostLoad

    with mock.patch("fp8bench.hardware.peaks.host_load", lambda: HostLoad(0.2, 2)):
        return _build_store(results)


def _build_store(results: Path) -> dict[str, object]:
    converge = json.loads(fp8bench(*CONVERGE_ARGS, "--results-dir", results).stdout.strip().splitlines()[-1])
    run_ids = []
    for _ in range(2):
        out = fp8bench(*RUN_ARGS, "--results-dir", results).stdout.strip().splitlines()[-1]
        run_ids.append(json.loads(out)["run_id"])
    files = [results / "runs" / f"{r}.json" for r in run_ids]
    gate = fp8bench("gate", *files, "--results-dir", results, "--json", check=False)
    if gate.returncode not in (0, 1, 2):
        raise AssertionError(f"fp8bench gate failed ({gate.returncode}):\n{gate.stderr[-2000:]}")
    return {"dir": results, "run_ids": run_ids, "run_files": files, "converge_run_id": converge["run_id"],
            "gate_verdict": json.loads(gate.stdout.strip().splitlines()[-1]).get("verdict")}


def _built_once(tmp_path_factory: pytest.TempPathFactory, name: str,
                build: Callable[[Path], dict[str, object]]) -> dict[str, object]:
    """``build(folder)``'s result, built on first use in the test run and reused by every later caller."""
    info = built_once(tmp_path_factory, name, build)
    return {**info, "dir": Path(info["dir"]), "run_files": [Path(f) for f in info.get("run_files", [])]}


def shared_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The store of :func:`build_store`, built once per test session."""
    return _built_once(tmp_path_factory, "dashboard_store", build_store)


TORCHRUN_TIMEOUT_S = 400  # two processes on a loaded 2-core machine; a hang fails the fixture instead of CI
# Small enough that every case (the emulated reference included) ends in about a second on a busy 2-core CPU.
QUICK = ["--budget", "3", "--max-time", "0.05", "--min-samples", "5", "--json"]
# A one-layer model 64 wide: 32 tokens per step, so the MX and 4-bit recipes' 32-element blocks fit and the
# 128-blocks of fp8_blockwise do not (a skipped record with the alignment rule).
SMALL_MODEL = "tiny,layers=1,batch=1,seq=32,width=64,ffn=128,heads=2,kv_heads=1,vocab=128"
# MoE shapes with named and real-valued shape values: Zipf routing with alpha 1.5, the grouped kernel (torch) and
# the per-expert loop (the emulated reference), and a balanced routing.
MOE_SHAPES = ["g=4,tokens=64,top_k=2,n=64,k=64,route=zipf,alpha=1.5",
              "g=4,tokens=64,top_k=2,n=64,k=64,route=zipf,alpha=1.5,impl=loop",
              "g=4,tokens=64,top_k=2,n=64,k=64,impl=loop"]
COLLECTIVE_SHAPES = ["op=all_gather,m=64,n=32", "op=tp_linear,m=32,n=64,k=32"]
INVALID_SHAPE = "96x96x96"  # a shape of its own: the NaN run shares no case with the others
FAILED_SHAPE = "300000x300000x300000"  # terabytes: refused before allocating, a `failed` record


def _last_json(stdout: str) -> dict[str, object]:
    return json.loads(stdout.strip().splitlines()[-1])


def _subprocess_run(args: list[str], env: dict[str, str], exit_code: int = 0) -> dict[str, object]:
    """A run in its own processes (torchrun's ranks)."""
    proc = subprocess.run(args, capture_output=True, text=True, timeout=TORCHRUN_TIMEOUT_S, env={**os.environ, **env})
    if proc.returncode != exit_code:
        raise AssertionError(f"{' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return _last_json(proc.stdout)


def build_every_record_store(results: Path) -> dict[str, object]:
    """Fill ``results`` with every kind of record (see the module docstring); returns the run ids in run order."""
    run_ids: list[str] = []

    def run(*args: str) -> None:
        run_ids.append(str(_last_json(fp8bench("run", *args, *QUICK, "--results-dir", results).stdout)["run_id"]))

    converge = _last_json(fp8bench(*CONVERGE_ARGS, "--results-dir", results).stdout)
    run_ids.append(str(converge["run_id"]))
    run("--shape", "64x64x64", "128x128x128", "--precision", "all", "--backend", "emulated")
    run("--shape", "128x128x128", "--precision", "bf16", "fp8_rowwise", "nvfp4", "--backend", "emulated",
        "--profile")  # records with a profile trace
    files = [results / "runs" / f"{r}.json" for r in run_ids[1:3]]
    gate = fp8bench("gate", *files, "--results-dir", results, "--json", check=False)
    if gate.returncode not in (0, 1, 2):
        raise AssertionError(f"fp8bench gate failed ({gate.returncode}):\n{gate.stderr[-2000:]}")
    run("--workload", "attention", "--shape", "b=1,h=2,kv_heads=1,s=32,d=16", "--precision", "all",
        "--backend", "emulated")
    run("--workload", "transformer_step", "--shape", SMALL_MODEL, "--precision", "all", "--backend", "emulated")
    run("--workload", "grouped_gemm", "--shape", *MOE_SHAPES, "--precision", "fp32", "bf16", "fp8_rowwise", "mxfp8",
        "--backend", "torch", "emulated")
    run("--shape", "64x64x64", "--precision", "bf16", "fp8_tensorwise", "fp8_rowwise", "nvfp4",
        "--backend", "torch", "te", "triton", "torchao")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    collective = _subprocess_run(
        [*torchrun, "-m", "fp8bench", "run", "--workload", "collective", "--shape", *COLLECTIVE_SHAPES,
         "--precision", "bf16", "fp8_rowwise", "mxfp4", *QUICK, "--results-dir", str(results)],
        {"OMP_NUM_THREADS": "1"})
    run_ids.append(str(collective["run_id"]))
    with pytest.MonkeyPatch.context() as patch, plugins_in_process(patch) as load:
        load("fp8bench_test_nonfinite", FP8BENCH_TEST_NONFINITE_PRECISIONS="fp16")
        invalid = fp8bench("run", "--shape", INVALID_SHAPE, "--precision", "bf16", "fp16", "--backend", "emulated",
                           *QUICK, "--results-dir", results, check=False)
    if invalid.returncode != 1:  # 1: a case came out invalid, which is the point
        raise AssertionError(f"fp8bench run exited {invalid.returncode}:\n{invalid.stderr[-2000:]}")
    run_ids.append(str(_last_json(invalid.stdout)["run_id"]))
    failed = fp8bench("run", "--shape", FAILED_SHAPE, "--precision", "bf16", "--backend", "emulated", *QUICK,
                      "--results-dir", results, check=False)
    if failed.returncode != 1:  # 1: a case failed, which is the point
        raise AssertionError(f"fp8bench run exited {failed.returncode}:\n{failed.stderr[-2000:]}")
    run_ids.append(str(_last_json(failed.stdout)["run_id"]))
    return {"dir": results, "run_ids": run_ids, "gate_run_ids": run_ids[1:3]}


def every_record_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The store of :func:`build_every_record_store`, built once per test session."""
    return _built_once(tmp_path_factory, "every_record_store", build_every_record_store)
