"""Every workload refuses a case that cannot fit before allocating it, with the figure; the run goes on."""

from __future__ import annotations

import json
import re
import resource
import time

import pytest

from fp8bench.cli import main
from fp8bench.core.devices import resolve_device
from fp8bench.core.plugins import WORKLOADS, Workload, load_all
from fp8bench.numerics.recipes import resolve_precision

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
