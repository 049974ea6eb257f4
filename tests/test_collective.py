"""The ``collective`` workload: shapes and byte counts, its refusal outside torchrun, and a real two-process run
under ``torchrun`` on the CPU (gloo), checked for bytes, numerics and one writer."""

import json
import os
import subprocess
import sys

import pytest
from rich.console import Console

from fp8bench.cli import main
from fp8bench.core.shapes import ShapeError
from fp8bench.render.run_table import render_bandwidths
from fp8bench.results.runfile import read_run_file
from fp8bench.workloads.collective import COLLECTIVE

TORCHRUN_TIMEOUT_S = 400  # two processes on a loaded 2-core machine; a hang fails here instead of blocking CI


def test_shapes_name_their_op():
    assert COLLECTIVE.parse_shape("op=all_gather,m=256,n=64") == {"op": "all_gather", "m": 256, "n": 64}
    assert COLLECTIVE.parse_shape("m=32,op=tp_linear,n=64,k=16") == {"op": "tp_linear", "m": 32, "n": 64, "k": 16}
    assert COLLECTIVE.parse_shape(COLLECTIVE.default_shape)["op"] == "all_gather"


@pytest.mark.parametrize("text,message", [
    ("m=256,n=64", "missing op; expected op=all_gather|reduce_scatter|tp_linear"),
    ("op=broadcast,m=256,n=64", "unknown op 'broadcast'; accepted: all_gather, reduce_scatter, tp_linear"),
    ("op=tp_linear,m=256,n=64", "missing k"),
    ("op=reduce_scatter,m=0,n=64", "m = 0 must be a positive integer"),
])
def test_bad_shapes_say_what_is_accepted(text, message):
    with pytest.raises(ShapeError, match=message):
        COLLECTIVE.parse_shape(text)


def test_pure_collectives_count_no_flops_and_tp_linear_counts_its_gemm():
    assert COLLECTIVE.flops(COLLECTIVE.parse_shape("op=all_gather,m=256,n=64")) == 0
    assert COLLECTIVE.flops(COLLECTIVE.parse_shape("op=tp_linear,m=32,n=64,k=16")) == 2 * 32 * 64 * 16


def test_runs_without_collectives_print_no_bandwidth_table():
    console = Console(record=True, width=200)
    render_bandwidths([{"workload": "gemm", "shape": {"m": 8, "n": 8, "k": 8}, "precision": "bf16",
                        "backend": "torch", "device": "cpu", "status": "ok", "extra": {}}], "bf16", console)
    assert console.export_text() == ""


def test_outside_torchrun_every_case_is_skipped_with_the_launch_command(capsys, tmp_path):
    code = main(["run", "--workload", "collective", "--precision", "bf16", "fp8_tensorwise", "--no-store",
                 "--out", str(tmp_path / "run.json"), "--json"])
    out = capsys.readouterr().out
    assert code == 0
    records = json.loads(out)["records"]
    assert [r["status"] for r in records] == ["skipped", "skipped"]
    assert all("torchrun --nproc-per-node 2 -m fp8bench run --workload collective" in r["reason"] for r in records)


SHAPES = ["op=all_gather,m=256,n=128", "op=reduce_scatter,m=256,n=128", "op=tp_linear,m=64,n=128,k=64"]


@pytest.fixture(scope="module")
def torchrun_run(tmp_path_factory):
    """One two-rank run of every op in BF16, FP8 tensorwise and FP8 rowwise, launched as users launch it."""
    out = tmp_path_factory.mktemp("collective") / "run.json"
    # `python -m torch.distributed.run` is the torchrun console script itself, found without relying on PATH.
    torchrun = [sys.executable, "-m", "torch.distributed.run"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [*torchrun, "--standalone", "--nproc-per-node", "2", "-m", "fp8bench", "run", "--workload",
         "collective", "--shape", *SHAPES, "--precision", "bf16", "fp8_tensorwise", "fp8_rowwise", "fp8_blockwise",
         "--budget", "60", "--min-samples", "5", "--max-time", "0.2", "--no-store", "--out", str(out)],
        capture_output=True, text=True, timeout=TORCHRUN_TIMEOUT_S, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, read_run_file(out)


def _record(run, op, precision):
    (record,) = [r for r in run["records"] if r["shape"]["op"] == op and r["precision"] == precision]
    return record


@pytest.mark.slow  # a real two-process torchrun launch
def test_only_rank_zero_writes_and_prints(torchrun_run):
    stdout, run = torchrun_run
    json_lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert len(json_lines) == 1 and stdout.strip().splitlines()[-1] == json_lines[0]
    assert run["run"]["spec"]["distributed"] == {"world_size": 2, "ranks_per_node": 2, "backend": "gloo",
                                                 "launcher": "torchrun"}
    assert len(run["records"]) == 3 * 4
    # The bandwidth table follows the main one, one row per measured case.
    assert "busbw GB/s" in stdout and stdout.count("op=all_gather,m=256,n=128") == 2 * 3 + 1  # + blockwise skipped
    assert all(r["tflops"] is None for r in run["records"] if r["shape"]["op"] != "tp_linear")


@pytest.mark.slow  # a real two-process torchrun launch
@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter", "tp_linear"])
def test_fp8_sends_half_the_bytes_of_bf16_plus_its_scales(torchrun_run, op):
    _, run = torchrun_run
    bf16, tensorwise, rowwise = (_record(run, op, p) for p in ("bf16", "fp8_tensorwise", "fp8_rowwise"))
    assert all(r["status"] == "ok" for r in (bf16, tensorwise, rowwise)), [r["reason"] for r in (bf16, tensorwise)]
    elements = bf16["shape"]["m"] * bf16["shape"]["n"]
    assert bf16["bytes"] == 2 * elements
    assert tensorwise["bytes"] == elements + 4 * 2  # one FP32 scale per rank
    rows_per_scale = {"all_gather": 1, "reduce_scatter": 1, "tp_linear": 2}[op]  # tp: each rank's m output rows
    assert rowwise["bytes"] == elements + 4 * bf16["shape"]["m"] * rows_per_scale
    for r in (bf16, tensorwise, rowwise):
        extra = r["extra"]
        assert extra["comm_bytes"] == r["bytes"] and extra["world_size"] == 2 and extra["op"] == op
        assert extra["busbw_gbps"] == pytest.approx(extra["algbw_gbps"] * 0.5)
        assert extra["algbw_gbps"] == pytest.approx(r["bytes"] / r["phases"]["communicate"] / 1e9)


@pytest.mark.slow  # a real two-process torchrun launch
@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter", "tp_linear"])
def test_numerics_are_those_of_the_precision_not_of_a_scrambled_result(torchrun_run, op):
    _, run = torchrun_run
    bf16, fp8 = _record(run, op, "bf16"), _record(run, op, "fp8_rowwise")
    # A chunk from the wrong rank or in the wrong order would bring SQNR near 0 dB; BF16 keeps 8 mantissa bits
    # (~50 dB), E4M3 3 (~30 dB).
    assert bf16["numerics"]["sqnr_db"] > 45
    assert 24 < fp8["numerics"]["sqnr_db"] < bf16["numerics"]["sqnr_db"]


@pytest.mark.slow  # a real two-process torchrun launch
def test_recipes_it_cannot_pack_are_skipped_and_energy_says_why_it_is_missing(torchrun_run):
    _, run = torchrun_run
    blockwise = _record(run, "all_gather", "fp8_blockwise")
    assert blockwise["status"] == "skipped" and "blockwise scales are not implemented" in blockwise["reason"]
    assert "not metered in a distributed run" in _record(run, "all_gather", "bf16")["energy"]["reason"]
