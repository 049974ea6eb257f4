"""Outputs checked after timing (fp8bench/measure/output_check.py): the last timed call against a fresh call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fp8bench.measure.output_check import (
    SQNR_CEILING_DB,
    SQNR_TOLERANCE_DB,
    OutputWatch,
    check,
    deterministic,
    sqnr_threshold_db,
)
from fp8bench.numerics.recipes import resolve_precision

PLUGINS = Path(__file__).resolve().parent / "plugins"


def test_bitwise_check_fails_on_one_differing_bit_and_passes_identical_bits():
    fresh = torch.randn(8, 8)
    assert check(fresh.clone(), fresh, exact=True, fresh_sqnr_db=None).passed is True
    timed = fresh.clone()
    timed.view(torch.int32)[0, 0] ^= 1  # the last mantissa bit of one element
    result = check(timed, fresh, exact=True, fresh_sqnr_db=None)
    assert result.passed is False and result.method == "bitwise"
    assert result.differing_frac == pytest.approx(1 / 64)
    assert "1.562% of elements differ bitwise" in result.reason
    # NaN in the same place is the same bits; a value comparison would call it a difference.
    nan = torch.full((2,), float("nan"))
    assert check(nan.clone(), nan, exact=True, fresh_sqnr_db=None).passed is True


def test_sqnr_check_allows_the_recipes_own_error_and_rejects_more():
    torch.manual_seed(0)
    fresh = torch.randn(256, 256)
    assert sqnr_threshold_db(30.0) == 30.0 - SQNR_TOLERANCE_DB
    assert sqnr_threshold_db(140.0) == SQNR_CEILING_DB and sqnr_threshold_db(3.0) == 0.0
    # Noise at the recipe's own level (SQNR ~30 dB against the fresh output) passes a 30 dB recipe ...
    near = fresh + torch.randn(256, 256) * fresh.std() * 10 ** (-30 / 20)
    passed = check(near, fresh, exact=False, fresh_sqnr_db=30.0)
    assert passed.passed is True and passed.method == "sqnr" and 29 < passed.sqnr_db < 31
    # ... half the work is not.
    failed = check(fresh * 0.5, fresh, exact=False, fresh_sqnr_db=30.0)
    assert failed.passed is False and failed.sqnr_db == pytest.approx(6.02, abs=0.01)
    assert "under the 24.0 dB the recipe's own error allows" in failed.reason


def test_shape_or_dtype_change_fails():
    fresh = torch.zeros(4, 4)
    assert check(torch.zeros(4, 2), fresh, exact=True, fresh_sqnr_db=None).passed is False
    assert check(torch.zeros(4, 4, dtype=torch.bfloat16), fresh, exact=False, fresh_sqnr_db=None).passed is False


def test_only_delayed_scaling_is_compared_by_sqnr():
    assert deterministic(resolve_precision("bf16")) and deterministic(resolve_precision("fp8_rowwise"))
    assert not deterministic(resolve_precision("fp8_delayed"))


def test_watch_takes_the_fresh_output_first_and_the_last_timed_one():
    values = iter([torch.ones(3), torch.full((3,), 2.0), torch.full((3,), 3.0)])
    calls = []

    def call():
        calls.append(1)
        return next(values)

    watch = OutputWatch(call, call, graph=False, exact=True)
    assert len(calls) == 1 and torch.equal(watch.fresh, torch.ones(3))
    timed = watch.timed(call)
    timed(), timed()
    watch.keep_last()
    result = watch.verdict(torch.ones(3, dtype=torch.float64))
    assert torch.equal(watch.timed_output, torch.full((3,), 3.0)) and result.passed is False


def test_watch_says_why_it_does_not_check():
    def out():
        return torch.ones(2)

    def step():
        return torch.ones(2)

    separate = OutputWatch(out, step, graph=False, exact=True)
    assert separate.timed(step) is step  # nothing wraps the timed call
    assert separate.verdict(torch.ones(2)).to_dict()["passed"] is None
    assert "separate function" in separate.verdict(torch.ones(2)).reason
    graph = OutputWatch(step, step, graph=True, exact=True)
    assert "CUDA-graph replays hand back no output" in graph.verdict(torch.ones(2)).reason


@pytest.mark.slow  # a fresh interpreter with a plugin
def test_a_kernel_that_skips_work_after_its_first_call_ends_invalid(tmp_path):
    """Real torch GEMMs on the CPU: bf16 through a plugin that multiplies half of K after its first call, fp32
    untouched. The run exits 1 (a case came out invalid) and says why."""
    out = tmp_path / "run.json"
    env = {**os.environ, "FP8BENCH_PLUGINS": "fp8bench_test_skips_work",
           "FP8BENCH_TEST_SKIPS_WORK_PRECISIONS": "bf16",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(PLUGINS), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "fp8bench", "run", "--device", "cpu", "--shape", "64x64x64",
                           "--precision", "bf16", "fp32", "--backend", "torch", "--no-store", "--no-energy",
                           "--json", "--min-samples", "3", "--max-time", "0.05", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    records = {r["precision"]: r for r in json.loads(out.read_text())["records"]}
    skipping, honest = records["bf16"], records["fp32"]
    assert skipping["status"] == "invalid" and skipping["valid"] is False
    assert skipping["reason"].startswith("timed output differs from a fresh call's: ")
    assert skipping["output_check"]["method"] == "bitwise" and skipping["output_check"]["passed"] is False
    assert skipping["output_check"]["differing_frac"] > 0.9
    assert honest["status"] == "ok" and honest["output_check"] == {
        "method": "bitwise", "passed": True, "reason": None, "differing_frac": 0.0, "sqnr_db": None,
        "threshold_db": None}
