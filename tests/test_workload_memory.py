"""Every workload refuses a case that cannot fit before allocating it, with the figure; the run goes on."""

from __future__ import annotations

import json
import re
import resource
import time

import pytest

from fp8bench.cli import main
from fp8bench.core.devices import Device, resolve_device
from fp8bench.core.plugins import WORKLOADS, Workload, load_all
from fp8bench.core.precisions import resolve_precision
from fp8bench.workloads.gemm import OPERAND_BYTES
from fp8bench.workloads.grouped_gemm import routing

# Shapes far beyond any machine's memory (the 100000^3 GEMM is the probe: it once tried to allocate 40 GB).
HUGE = {"gemm": "100000x100000x100000", "attention": "b=64,h=64,kv_heads=8,s=131072,d=128",
        "transformer_step": "width=16384,heads=128,kv_heads=128,layers=64,seq=8192,max_seq=8192,batch=64,vocab=256000",
        "grouped_gemm": "g=256,tokens=1000000,top_k=8,n=4096,k=7168",
        "collective": "op=reduce_scatter,m=1000000,n=100000"}


def test_every_registered_workload_must_estimate_its_memory():
    load_all()
    assert "memory_reason" in Workload.__abstractmethods__  # a new workload cannot forget it
    assert set(WORKLOADS.names()) <= set(HUGE), "give every workload a huge shape here"


@pytest.mark.parametrize("workload", sorted(HUGE))
def test_huge_shape_is_refused_with_the_figure(workload):
    load_all()
    w = WORKLOADS.get(workload)
    reason = w.memory_reason(w.parse_shape(HUGE[workload]), resolve_precision("bf16"), resolve_device("cpu"))
    assert reason is not None and reason.startswith("out of memory on cpu:")
    assert re.search(r"needs (about|at least) [\d.]+ GiB \(.+\), [\d.]+ GiB available$", reason)


def test_gemm_of_100000_cubed_fails_at_once_and_the_run_goes_on(tmp_path, capsys):
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    started = time.monotonic()
    code = main(["run", "--shape", "100000x100000x100000", "64x64x64", "--precision", "bf16", "--backend", "torch",
                 "--budget", "100000", "--max-time", "0.02", "--no-energy", "--results-dir", str(tmp_path), "--json"])
    elapsed = time.monotonic() - started
    records = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["records"]
    assert code == 1 and [r["status"] for r in records] == ["failed", "ok"]
    figure = float(re.search(r"needs about ([\d.]+) GiB", records[0]["reason"]).group(1))
    assert figure >= 2 * 100000**2 * 4 / 2**30  # at least the FP32 operands A and B
    assert "GiB available" in records[0]["reason"]
    grown_gib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 2**20
    assert grown_gib < 2, f"the refused case allocated ~{grown_gib:.1f} GiB"
    assert elapsed < 120  # refused, not attempted (the small case takes a few seconds on a busy machine)


def test_estimates_count_the_outputs_the_output_check_keeps():
    """The check keeps up to three outputs beside the call's own (a fresh copy, the last timed output while the next
    call writes, its copy after sampling): each estimate must hold 4 bytes x 4 per output element at least."""
    load_all()
    gpu = Device("cuda", 0)  # only ``is_cuda`` is read: nothing is allocated
    gemm, grouped, attention = (WORKLOADS.get(n) for n in ("gemm", "grouped_gemm", "attention"))
    m, n, k = 256, 512, 128
    shape = gemm.parse_shape(f"{m}x{n}x{k}")
    assert gemm.memory_bytes(shape, gpu) - OPERAND_BYTES * (m * k + n * k) >= m * n * (4 * 4 + 8)
    g = grouped.parse_shape("g=4,tokens=64,top_k=2,n=128,k=128")
    rows = routing(g).rows
    assert grouped.memory_bytes(g, gpu) - OPERAND_BYTES * (rows * 128 + 4 * 128 * 128) >= rows * 128 * (4 * 4 + 8)
    a = attention.parse_shape("b=2,h=4,s=64,d=32")
    forward_only = attention.memory_bytes({**a, "backward": 0})
    tokens, width = 2 * 64, 4 * 32
    sources_and_scores = 4 * (2 * tokens * width + (3 * 4 * 32 + 4 * 32) * width) + 8 * tokens * width * 4 \
        + 4 * 2 * 4 * 64 * 64
    assert forward_only - sources_and_scores >= 3 * 4 * tokens * width
    # With backward each checked output is y and dx in FP64 (16 bytes an element), and the last timed value is
    # flattened into a new FP64 tensor before its copy is kept: four such copies.
    with_backward = attention.memory_bytes({**a, "backward": 1})
    assert with_backward - (sources_and_scores + 4 * 2 * 4 * 64 * 64) >= 4 * 16 * tokens * width
