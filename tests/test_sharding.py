"""`fp8bench run --devices`: the device list, the split of cases and cores, the in-order merge, and whole runs on
CPU workers (the same records as one worker; a killed or segfaulting worker fails its case, not the run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fp8bench.cli import main
from fp8bench.commands.verb_interface import EXIT_CASE_FAILED, EXIT_OK, EXIT_USAGE
from fp8bench.core.devices import Device, DeviceError
from fp8bench.core.records import Record
from fp8bench.measure.runner import expand_cases
from fp8bench.measure.settings import EnergySettings, RunSettings, TimingSettings
from fp8bench.measure.sharding import (
    MAX_CRASHES_IN_A_ROW,
    DevicePlan,
    WorkerSlot,
    _InOrder,
    _pin,
    plan_devices,
    run_sharded,
)
from fp8bench.results.record_stream import RecordStream
from fp8bench.results.runfile import read_run_file
from fp8bench.results.store import open_store

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ROOT / "tests" / "plugins"
# Two shapes, so two workers each get one (cases of a shape stay on one worker).
CASES = ["--shape", "64x64x64", "96x96x96", "--precision", "bf16", "fp8_tensorwise", "fp8_rowwise", "fp32",
         "--backend", "torch", "--budget", "60", "--max-time", "0.02", "--no-energy"]
# What must not depend on which worker measured a case (timings naturally do).
SAME = ("seq", "workload", "shape", "precision", "backend", "device", "status", "reason", "fp8_format",
        "accumulation", "flops", "bytes", "numerics", "timing_mode", "l2_flushed")


# -- the device list ---------------------------------------------------------------------------------------------
def test_cpu_workers_get_disjoint_equal_core_slices_and_threads():
    plan = plan_devices("cpu,cpu", cpus=[0, 1, 2, 3, 4])
    assert plan.spec == "cpu,cpu" and plan.threads == 2 and plan.device == Device("cpu")
    assert [s.cpus for s in plan.slots] == [(0, 1), (2, 3)]  # core 4 left over: every worker gets as many
    assert [s.threads for s in plan_devices("cpu, CPU", threads=1, cpus=[0, 1, 2, 3]).slots] == [1, 1]


@pytest.mark.parametrize("spec, threads, message", [
    ("cpu,cpu,cpu", None, "asks for 3 CPU workers, but this process may use 2 core(s)"),
    ("cpu,cpu", 2, "--threads 2 with 2 CPU workers on 2 core(s): each worker has 1 core(s)"),
    ("auto", None, "'auto' is for --device"),
    ("cpu,", None, "comma-separated list such as cuda:0,cuda:1 or cpu,cpu"),
    ("cpu:0,cpu:1", None, "the CPU takes no index"),
    ("gpu0", None, "unknown device 'gpu0'; accepted: auto, cpu, cuda, cuda:N"),
])
def test_bad_device_lists_are_refused_naming_the_value(spec, threads, message):
    with pytest.raises(DeviceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        plan_devices(spec, threads, cpus=[0, 1])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
def test_all_without_a_gpu_says_how_to_use_cpu_workers():
    with pytest.raises(DeviceError, match="no CUDA device on this machine .* --devices cpu,cpu"):
        plan_devices("all")


@pytest.fixture
def two_gpus(monkeypatch):
    """torch.cuda as a machine with two GPUs reports itself (only the calls plan_devices makes)."""
    names = {0: "NVIDIA H100 80GB HBM3", 1: "NVIDIA H100 80GB HBM3"}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(names))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: names[i])
    return names


def test_all_is_every_gpu_and_a_gpu_worker_keeps_torchs_threads(two_gpus):
    plan = plan_devices("all")
    assert plan.spec == "cuda:0,cuda:1" and plan.threads is None
    assert [(str(s.device), s.cpus, s.threads) for s in plan.slots] == [("cuda:0", None, None), ("cuda:1", None, None)]
    assert plan_devices("cuda:1,cuda").spec == "cuda:1,cuda:0"
    assert [s.threads for s in plan_devices("all", threads=3).slots] == [3, 3]  # --threads reaches GPU workers


@pytest.mark.parametrize("spec, message", [
    ("cuda:1,cuda:1", "names cuda:1 more than once"),
    ("cpu,cuda:0", "mixes the CPU and GPUs"),
    ("cuda:0,cuda:2", "this machine has 2 CUDA device"),
])
def test_bad_gpu_lists_are_refused(two_gpus, spec, message):
    with pytest.raises(DeviceError, match=message):
        plan_devices(spec)


def test_gpus_of_different_models_are_refused(two_gpus):
    two_gpus[1] = "NVIDIA A100-SXM4-80GB"
    with pytest.raises(DeviceError, match="the GPUs differ .*cuda:1 is NVIDIA A100-SXM4-80GB.*run each model"):
        plan_devices("all")


def test_a_gpu_worker_makes_its_gpu_current(monkeypatch):
    current: list[int] = []
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current[-1])
    pinned = _pin(WorkerSlot(1, Device("cuda", 3)))
    assert current == [3] and pinned["cuda_current"] == 3 and pinned["pid"] == os.getpid()


def test_the_cases_of_a_shape_stay_on_one_worker_and_shapes_go_round_robin():
    cases = expand_cases([("gemm", ["64x64x64", "96x96x96", "128x128x128"])], ["bf16", "fp8_tensorwise"],
                         ["torch", "emulated"], RunSettings())
    shards = plan_devices("cpu,cpu", cpus=[0, 1]).shards(cases)
    assert shards == [[0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7]]
    worker_of = {i: w for w, shard in enumerate(shards) for i in shard}
    for m in (64, 96, 128):  # every shape's cases on one worker
        assert len({worker_of[i] for i, c in enumerate(cases) if dict(c.shape)["m"] == m}) == 1


# -- the in-order merge --------------------------------------------------------------------------------------------
def _record(seq: int) -> Record:
    return Record("gemm", {"m": 8, "n": 8, "k": 8}, "bf16", "torch", "cpu", "ok", seq=seq)


def test_records_reach_the_stream_in_case_order_and_a_stop_keeps_the_waiting_ones():
    stream = RecordStream(None, {"run_id": "r"}, None)
    seen: list[int] = []
    merge = _InOrder(stream, lambda seq, rec: seen.append(seq))
    merge.add(2, _record(2))
    merge.add(1, _record(1))
    assert stream.records == []  # case 0 is still being measured
    merge.add(0, _record(0))
    merge.add(5, _record(5))
    merge.add(4, _record(4))
    assert [r.seq for r in stream.records] == [0, 1, 2]
    merge.flush()  # the run stopped with case 3 unfinished: 4 and 5 are kept, in order, with the gap
    assert [r.seq for r in stream.records] == seen == [0, 1, 2, 4, 5]


def test_device_and_devices_together_are_a_usage_error(capsys, tmp_path):
    code = main(["run", "--device", "cpu", "--devices", "cpu,cpu", "--no-store", "--out", str(tmp_path / "r.json")])
    assert code == EXIT_USAGE and "--device and --devices both name devices" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_lock_clocks_with_devices_is_a_usage_error_before_anything_runs(capsys, tmp_path):
    """The workers of --devices lock no clock: a run header saying --lock-clocks over unlocked devices would be a
    false statement, so the pair is refused before any worker starts."""
    out = tmp_path / "r.json"
    code = main(["run", "--devices", "cpu,cpu", "--lock-clocks", "base", "--no-store", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE and "--lock-clocks locks the clock of one run's device" in err and "--devices" in err
    assert not out.exists()


def test_devices_under_torchrun_is_a_usage_error(capsys, tmp_path, monkeypatch):
    from fp8bench.hardware.distributed import _LAUNCH_VARS

    for name, value in zip(_LAUNCH_VARS, ("0", "2", "0"), strict=True):  # rank 0 of 2, as torchrun sets them
        monkeypatch.setenv(name, value)
    code = main(["run", "--devices", "cpu,cpu", "--no-store", "--out", str(tmp_path / "r.json")])
    assert code == EXIT_USAGE and "under torchrun every rank is already a process" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


# -- whole runs on CPU workers -------------------------------------------------------------------------------------
def _run(tmp_path: Path, name: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, dict, str]:
    """``fp8bench run`` in a fresh process (as users run it; worker processes are spawned from it)."""
    out = tmp_path / f"{name}.json"
    proc = subprocess.run([sys.executable, "-m", "fp8bench.cli", "run", *CASES, *args, "--out", str(out),
                           "--results-dir", str(tmp_path / "results")], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=600)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["run_file"] == str(out)
    return proc.returncode, read_run_file(out), proc.stderr


@pytest.mark.slow
def test_two_cpu_workers_write_the_records_one_worker_writes(tmp_path):
    code1, one, err1 = _run(tmp_path, "one", "--threads", "1")
    code2, two, err2 = _run(tmp_path, "two", "--devices", "cpu,cpu")
    assert code1 == code2 == EXIT_OK, err1[-2000:] + err2[-2000:]
    assert len(one["records"]) == len(two["records"]) == 8
    for a, b in zip(one["records"], two["records"], strict=True):
        assert {k: a[k] for k in SAME} == {k: b[k] for k in SAME}
        assert b["status"] == "ok" and b["median_s"] > 0 and b["samples_s"]
    run = two["run"]
    assert run["status"] == "complete" and run["requested_device"] == "cpu,cpu"
    assert run["settings"]["threads"] == run["device"]["threads"] == 1
    workers = run["workers"]
    assert [w["cases"] for w in workers] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # Each worker was pinned to its own core with one thread, as read back inside the worker.
    assert [[(p["cpus"], p["threads"]) for p in w["pinned"]] for w in workers] == [[([0], 1)], [([1], 1)]]
    assert len({w["pids"][0] for w in workers} | {os.getpid()}) == 3 and not any(w["deaths"] for w in workers)
    # One run in the store, its records in case order.
    store = open_store(tmp_path / "results")
    rows = store.records_frame(run_ids=[run["run_id"]])
    assert list(rows["seq"]) == list(range(8))
    assert list(rows["precision"]) == [r["precision"] for r in one["records"]]


@pytest.mark.slow
@pytest.mark.parametrize("how, signal_name", [("kill", "SIGKILL"), ("segfault", "SIGSEGV")])
def test_a_dead_worker_fails_its_case_and_a_new_one_measures_the_rest(tmp_path, how, signal_name):
    env = {"PYTHONPATH": os.pathsep.join([str(PLUGINS), os.environ.get("PYTHONPATH", "")]),
           "FP8BENCH_PLUGINS": "fp8bench_test_crash", "FP8BENCH_TEST_CRASH": how,
           "FP8BENCH_TEST_CRASH_PRECISIONS": "fp8_rowwise"}
    code, run, err = _run(tmp_path, "crash", "--devices", "cpu,cpu", env=env)
    assert code == EXIT_CASE_FAILED, err[-2000:]
    records = run["records"]
    assert [r["seq"] for r in records] == list(range(8))
    failed = [r for r in records if r["status"] == "failed"]
    assert [r["precision"] for r in failed] == ["fp8_rowwise", "fp8_rowwise"]
    assert all(r["status"] == "ok" for r in records if r["precision"] != "fp8_rowwise")
    workers = run["run"]["workers"]
    for worker, rec in zip(workers, failed, strict=True):
        dead_pid = worker["pids"][0]
        assert rec["reason"] == (f"the worker process for cpu (pid {dead_pid}) was killed by {signal_name} while "
                                 "measuring this case")
        assert rec["device"] == "cpu" and rec["energy"]["joules_per_iter"] is None and rec["timing_mode"] == "cpu"
        assert len(worker["pids"]) == 2 and len(worker["deaths"]) == 1  # restarted once, for the shape's fp32
    assert run["run"]["status"] == "complete"


@pytest.mark.slow
def test_a_device_whose_workers_keep_dying_is_given_up_after_a_few(tmp_path):
    env = {"PYTHONPATH": os.pathsep.join([str(PLUGINS), os.environ.get("PYTHONPATH", "")]),
           "FP8BENCH_PLUGINS": "fp8bench_test_crash",
           "FP8BENCH_TEST_CRASH_PRECISIONS": "bf16,fp8_tensorwise,fp8_rowwise,fp32"}
    code, run, err = _run(tmp_path, "broken", "--devices", "cpu", env=env)
    assert code == EXIT_CASE_FAILED, err[-2000:]
    records = run["records"]
    assert len(records) == 8 and all(r["status"] == "failed" for r in records)
    crashed = [r for r in records if "while measuring this case" in r["reason"]]
    assert len(crashed) == MAX_CRASHES_IN_A_ROW
    rest = records[MAX_CRASHES_IN_A_ROW:]
    assert all(r["reason"].startswith(f"not measured: {MAX_CRASHES_IN_A_ROW} workers for cpu died in a row")
               for r in rest)
    assert len(run["run"]["workers"][0]["pids"]) == MAX_CRASHES_IN_A_ROW


@pytest.mark.slow
def test_a_worker_that_cannot_start_fails_its_cases_with_the_reason(tmp_path):
    cases = expand_cases([("gemm", ["64x64x64"])], ["bf16", "fp32"], ["torch"], RunSettings())
    plan = DevicePlan("cpu", (WorkerSlot(0, Device("cpu"), (4096,), 1),), 1)  # a core no machine here has
    outcome = run_sharded(cases, RunSettings(timing=TimingSettings(budget_s=5),
                                             energy=EnergySettings(enabled=False)), plan.device, plan=plan,
                          run_file=tmp_path / "run.json")
    assert [r.status for r in outcome.records] == ["failed", "failed"]
    assert all((r.reason or "").startswith("worker for cpu could not start: OSError") for r in outcome.records)
    assert read_run_file(tmp_path / "run.json")["run"]["workers"][0]["deaths"] == []  # it ended, it did not die


@pytest.mark.slow
def test_a_sharded_run_profiles_each_case_in_its_worker(tmp_path):
    code, run, err = _run(tmp_path, "profiled", "--devices", "cpu,cpu", "--profile", "torch", "--precision", "bf16")
    assert code == EXIT_OK, err[-2000:]
    traces = [Path(r["extra"]["profile"]["trace"]) for r in run["records"]]
    assert len(traces) == 2 and all(t.is_file() and t.parent.parent == tmp_path for t in traces)
    assert [t.name[:3] for t in traces] == ["000", "001"]  # named by seq, so workers never write the same file
    assert all(json.loads(t.read_text())["traceEvents"] for t in traces)
