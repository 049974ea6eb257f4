"""Repro commands: every record carries the `fp8bench run` command of its case, and running it measures the same
case with the same settings."""

from __future__ import annotations

import shlex

from fp8bench.analysis.gate.verdicts import GateConfig, gate, render_markdown
from fp8bench.cli import main
from fp8bench.core.repro import frame_commands, repro_command, repro_of
from fp8bench.results.runfile import read_run_file
from fp8bench.results.store import open_store
from tests.gate_fixtures import payload, record

CASE_ARGS = ["--shape", "16x32x48", "--precision", "fp8_rowwise", "--backend", "emulated", "--fast-accum", "off",
             "--no-phases", "--threads", "1", "--min-samples", "5", "--max-time", "0.02", "--budget", "5",
             "--seed", "3", "--no-energy"]
CASE_FIELDS = ("workload", "shape", "precision", "backend", "device", "fp8_format", "accumulation", "case_key")


def test_the_stored_command_reproduces_the_stored_case(tmp_path, capsys):
    assert main(["run", *CASE_ARGS, "--results-dir", str(tmp_path / "results"), "--json"]) == 0
    capsys.readouterr()
    store = open_store(tmp_path / "results")
    run_id = store.runs_frame()["run_id"].iloc[0]
    stored = store.run_payload(run_id)
    [rec] = stored["records"]
    argv = shlex.split(rec["repro"])
    assert argv[:2] == ["fp8bench", "run"] and "--fast-accum" in argv and argv[argv.index("--fast-accum") + 1] == "off"
    # The dashboard derives the same text from the store's typed columns and the run's settings.
    headers = {run_id: stored["run"]}
    assert frame_commands(store.records_frame(), headers) == [rec["repro"]]
    # Pasted into a shell (the verb's own entry point here), it measures the same case with the same settings.
    out = tmp_path / "again.json"
    assert main([*argv[1:], "--out", str(out), "--no-store", "--json"]) == 0
    capsys.readouterr()
    again = read_run_file(out)
    [rec2] = again["records"]
    from fp8bench.core.records import case_key

    assert {k: rec2.get(k) for k in CASE_FIELDS if k != "case_key"} == \
        {k: rec.get(k) for k in CASE_FIELDS if k != "case_key"}
    assert case_key(rec2) == case_key(rec)
    first, second = dict(stored["run"]["settings"]), dict(again["run"]["settings"])
    assert first.pop("device") == "auto" and second.pop("device") == "cpu"  # the command names the device it ran on
    assert first == second
    assert rec2["repro"] == rec["repro"]


def test_records_written_before_commands_were_stored_get_the_same_one():
    rec = {"workload": "gemm", "shape": {"m": 8, "n": 8, "k": 8}, "precision": "bf16", "backend": "torch",
           "device": "cpu"}
    settings = {"budget_s": 2.0, "policy": {"min_samples": 10, "max_time_s": 0.5, "target_rse": 0.005},
                "phases": False, "flush_l2": True, "cuda_graph": False, "energy": True, "threads": None}
    derived = repro_of(rec, {"settings": settings})
    assert derived == ("fp8bench run --workload gemm --shape m=8,n=8,k=8 --precision bf16 --backend torch --device cpu "
                       "--min-samples 10 --target-rse 0.005 --max-time 0.5 --budget 2 --no-phases")
    assert repro_of({**rec, "repro": "stored text"}, {"settings": settings}) == "stored text"
    assert repro_of(rec, None).startswith("fp8bench run --workload gemm")


def test_a_collective_of_several_ranks_starts_with_torchrun():
    rec = {"workload": "collective", "shape": {"op": "all_reduce", "n": 1024}, "precision": "bf16",
           "backend": "torch", "device": "cuda"}
    cmd = repro_command(rec, {"cuda_graph": True}, world_size=4)
    assert cmd.startswith("torchrun --nproc-per-node 4 -m fp8bench run --workload collective --shape op=all_reduce,n=1024")
    assert cmd.endswith("--cuda-graph")


def test_the_gate_report_gives_each_slower_case_its_command():
    fast, slow = [1e-3 * (1 + 0.001 * i) for i in range(20)], [2e-3 * (1 + 0.001 * i) for i in range(20)]
    base = payload("b", [record(64, "bf16", fast), record(64, "fp32", fast, seq=1)])
    cand = payload("c", [record(64, "bf16", slow), record(64, "fp32", fast, seq=1)])
    report = gate([base], [cand], GateConfig())
    assert report["slower_cases"] == ["gemm[m=64,n=64,k=64] bf16 torch cpu"]
    assert list(report["repro"]) == report["slower_cases"]
    md = render_markdown(report)
    assert "Reproduce a regressed case:" in md
    assert "fp8bench run --workload gemm --shape m=64,n=64,k=64 --precision bf16 --backend torch --device cpu" in md
    assert "--precision fp32" not in md
