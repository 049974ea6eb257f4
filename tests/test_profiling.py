"""Profiles on demand (fp8bench.measure.profiling): a trace per case from a pass outside the timed samples, its phase
ranges and top ops in the record and the store, and the nsys command line that reruns exactly one case."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import torch

from fp8bench.cli import build_parser, main
from fp8bench.commands import run as run_command
from fp8bench.core.devices import Device
from fp8bench.core.pipeline import Pipeline
from fp8bench.measure.profiling import (
    NSYS_PROFILE_FLAGS,
    RANGE_PREFIX,
    CaseProfiler,
    nsys_command,
    nvtx_profile,
    phase_range,
    profile_iterations,
    top_ops,
)
from fp8bench.measure.runner import CaseMeasurer, expand_cases
from fp8bench.measure.settings import EnergySettings, RunSettings, TimingSettings
from fp8bench.measure.timing import CpuTimer
from fp8bench.results.runfile import read_run_file
from fp8bench.results.store import open_store
from tests.settings_support import with_policy

CPU = Device("cpu")
FP8_CASE = ["--shape", "64x64x64", "--precision", "fp8_tensorwise", "--backend", "emulated", "--device", "cpu",
            "--budget", "5", "--no-energy"]


def run_json(capsys, *argv: str) -> tuple[int, dict, str]:
    code = main(["run", *argv, "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out.strip().splitlines()[-1]) if out.strip() else {}, err


def test_cpu_profile_writes_a_valid_trace_with_the_phase_ranges(capsys, results_dir):
    code, summary, err = run_json(capsys, *FP8_CASE, "--results-dir", str(results_dir), "--profile")
    assert code == 0, err
    (record,) = summary["records"]
    profile = record["extra"]["profile"]
    trace = Path(profile["trace"])
    # Beside the run file, in the run's own folder, named by the case's position and description.
    assert trace.parent == Path(summary["run_file"]).resolve().parent / f"{summary['run_id']}.profile"
    assert trace.name == "000-gemm-m-64-n-64-k-64-fp8_tensorwise-emulated.pt.trace.json"
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e.get("name") for e in events}
    for phase in ("end_to_end", "quantize", "gemm", "epilogue"):  # the emulated pipeline's phases
        assert RANGE_PREFIX + phase in names
    ranges = [e for e in events if e.get("name") == RANGE_PREFIX + "gemm" and e.get("ph") == "X"]
    assert len(ranges) == profile["iterations"] >= 1 and all(e["dur"] > 0 for e in ranges)
    assert profile["top_ops"] and all(op["self_s"] > 0 and op["calls"] >= 1 for op in profile["top_ops"])
    assert any(op["name"] == "aten::mm" for op in profile["top_ops"])  # the GEMM itself is among them
    assert [op["self_s"] for op in profile["top_ops"]] == sorted((op["self_s"] for op in profile["top_ops"]),
                                                                 reverse=True)
    assert not any(op["name"].startswith(RANGE_PREFIX) for op in profile["top_ops"])
    # The store keeps the profile in the record's JSON and the trace's path in a typed column.
    store = open_store(results_dir)
    frame = store.records_frame(run_ids=[summary["run_id"]])
    assert list(frame["profile_trace"]) == [str(trace)]
    assert store.run_payload(summary["run_id"])["records"][0]["extra"]["profile"] == profile


class WatchingTimer(CpuTimer):
    """The CPU timer, noting whether a profiler was recording during any timed sample."""

    def __init__(self) -> None:
        self.samples = 0
        self.profiled_samples = 0

    def time(self, fn):
        self.samples += 1
        self.profiled_samples += bool(torch.autograd.profiler._is_profiler_enabled)
        return super().time(fn)


@pytest.mark.slow  # a fresh interpreter: what the C library prints
def test_a_profiled_run_prints_no_kineto_marker_lines(tmp_path):
    """libkineto writes "USDT: ... profiler_start/stop" to the process's stderr (fd 2, below Python): a real process."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    out = subprocess.run([sys.executable, "-m", "fp8bench.cli", "run", *FP8_CASE, "--profile", "--no-store",
                          "--results-dir", str(tmp_path)], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "profile gemm[m=64,n=64,k=64] fp8_tensorwise/e4m3 emulated cpu:" in out.stdout
    assert "USDT" not in out.stderr and "profiler_start" not in out.stderr


def test_profiling_never_enters_a_timed_sample(tmp_path):
    settings = with_policy(RunSettings(device="cpu", timing=TimingSettings(budget_s=5),
                                       energy=EnergySettings(enabled=False)), min_samples=5, max_samples=5)
    (case,) = expand_cases([("gemm", ["64x64x64"])], ["fp8_tensorwise"], ["emulated"], settings)
    plain_timer, profiled_timer = WatchingTimer(), WatchingTimer()
    plain = CaseMeasurer(settings, CPU, timer=plain_timer).measure(case)
    profiled = CaseMeasurer(settings, CPU, timer=profiled_timer,
                            profiler=CaseProfiler("torch", tmp_path)).measure(case)
    assert "profile" not in plain.extra and Path(profiled.extra["profile"]["trace"]).is_file()
    # max_samples fixes the count: the same samples, phase by phase, with or without the profiled pass.
    assert profiled.samples.n == plain.samples.n == 5
    counts = [{k: v.n for k, v in r.samples.phase_stats.items()} for r in (profiled, plain)]
    assert counts[0] == counts[1]
    assert profiled_timer.samples == plain_timer.samples > 0
    assert profiled_timer.profiled_samples == 0  # the profiler never ran while a sample was timed


def test_a_failing_profiler_loses_the_profile_not_the_measurement(tmp_path, monkeypatch):
    import fp8bench.measure.profiling as profiling

    def broken(*_args, **_kwargs):
        raise RuntimeError("profiler already enabled on this thread")

    monkeypatch.setattr(profiling, "torch_profile", broken)
    settings = with_policy(RunSettings(device="cpu", timing=TimingSettings(budget_s=5),
                                       energy=EnergySettings(enabled=False)), min_samples=3, max_samples=3)
    (case,) = expand_cases([("gemm", ["32x32x32"])], ["bf16"], ["torch"], settings)
    record = CaseMeasurer(settings, CPU, profiler=CaseProfiler("torch", tmp_path)).measure(case)
    assert record.status == "ok" and record.samples.n == 3 and "profile" not in record.extra
    assert "profile not taken (torch): RuntimeError: profiler already enabled on this thread" in record.notes


def test_nvtx_mode_on_the_cpu_runs_the_pass_and_says_nvtx_is_cuda_only(tmp_path):
    settings = with_policy(RunSettings(device="cpu", timing=TimingSettings(budget_s=5),
                                       energy=EnergySettings(enabled=False)), min_samples=3, max_samples=3)
    (case,) = expand_cases([("gemm", ["32x32x32"])], ["bf16"], ["torch"], settings)
    record = CaseMeasurer(settings, CPU, profiler=CaseProfiler("nvtx", tmp_path)).measure(case)
    profile = record.extra["profile"]
    assert profile["tool"] == "nvtx" and "CUDA only" in profile["note"] and not any(tmp_path.iterdir())


def test_pass_iterations_shrink_for_slow_calls():
    assert profile_iterations(0.001) == 3 and profile_iterations(2.0) == 2 and profile_iterations(60.0) == 1


def _rerun_case(command: str) -> tuple[list, object, list[str]]:
    """The cases and settings that the `fp8bench run` inside an nsys command line asks for."""
    argv = shlex.split(command)
    assert argv[:2] == ["nsys", "profile"] and all(flag in argv for flag in NSYS_PROFILE_FLAGS)
    run_argv = argv[argv.index("fp8bench") + 1:]
    args = build_parser().parse_args(run_argv)
    entries, overrides, _ = run_command._plan(args)
    settings = run_command._settings(args, overrides)
    cases = [c for w, s, p, b in entries for c in expand_cases([(w, s)], p, b, settings)]
    return cases, settings, run_argv


@pytest.mark.parametrize("flags", [
    ["--workload", "gemm", "--shape", "64x64x64", "--precision", "bf16", "fp8_rowwise", "--backend", "torch"],
    ["--workload", "gemm", "--shape", "32x48x64", "--precision", "fp8_delayed", "fp8_tensorwise", "--fast-accum",
     "on", "off", "--amax-history-len", "16", "--amax-compute-algo", "most_recent", "--margin", "1",
     "--fp8-format", "e5m2", "--backend", "emulated", "torch", "--seed", "7", "--threads", "1",
     "--min-samples", "4", "--max-noise", "2"],
    ["--workload", "attention", "--shape", "b=1,h=2,s=32,d=16", "--precision", "fp8_tensorwise", "--backend",
     "emulated"],
])
def test_nsys_command_parses_back_into_exactly_its_case(tmp_path, flags):
    args = build_parser().parse_args(["run", *flags, "--device", "cpu"])
    entries, overrides, _ = run_command._plan(args)
    settings = run_command._settings(args, overrides)
    cases = [c for w, s, p, b in entries for c in expand_cases([(w, s)], p, b, settings)]
    assert cases
    for seq, case in enumerate(cases):
        command = nsys_command(case, settings, CPU, tmp_path / f"{seq:03d}")
        (back,), back_settings, run_argv = _rerun_case(command)
        assert back == case, command
        assert (back_settings.seed, back_settings.threads, back_settings.timing.policy.min_samples,
                back_settings.timing.policy.target_rse, back_settings.timing.budget_s) == (
                settings.seed, settings.threads, settings.timing.policy.min_samples,
                settings.timing.policy.target_rse, settings.timing.budget_s)
        assert back_settings.profile == "nvtx" and not back_settings.energy.enabled and "--no-store" in run_argv


def test_the_profiled_rerun_keeps_every_timing_and_clock_setting_of_the_run(tmp_path):
    """A blocked-stream case rerun under nsys must be timed with a held stream again, under the same clock lock,
    throttle check and energy-window rule: the rerun's settings are the run's but for its profile and energy."""
    flags = ["--workload", "gemm", "--shape", "64x64x64", "--precision", "bf16", "--backend", "torch",
             "--blocked-stream", "--lock-clocks", "base", "--throttle-threshold", "0.5",
             "--throttle-recovery-delay", "1.5", "--clock-floor", "0.8", "--strict-clocks", "--energy-error", "0",
             "--no-l2-flush", "--no-phases", "--threads", "1", "--seed", "3", "--budget", "7"]
    args = build_parser().parse_args(["run", *flags, "--device", "cpu"])
    entries, overrides, _ = run_command._plan(args)
    settings = run_command._settings(args, overrides)
    (case,) = [c for w, s, p, b in entries for c in expand_cases([(w, s)], p, b, settings)]
    (back,), back_settings, _ = _rerun_case(nsys_command(case, settings, CPU, tmp_path / "000"))
    assert back == case
    assert (back_settings.timing, back_settings.clocks, back_settings.recipe, back_settings.seed,
            back_settings.threads) == (settings.timing, settings.clocks, settings.recipe, settings.seed,
                                       settings.threads)
    assert back_settings.energy.error_target is None and not back_settings.energy.enabled
    assert back_settings.profile == "nvtx"


def test_run_with_profile_nsys_prints_and_records_the_command(capsys, results_dir):
    code = main(["run", *FP8_CASE, "--fp8-format", "e5m2", "--results-dir", str(results_dir), "--profile", "nsys"])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out.strip().splitlines()[-1])
    (row,) = summary["profiles"]
    (record,) = read_run_file(summary["run_file"])["records"]
    command = record["extra"]["profile"]["command"]
    assert row["command"] == command and f"profile {row['case']}: {command}" in out
    folder = Path(summary["run_file"]).parent / f"{summary['run_id']}.profile"
    assert folder.is_dir() and not any(folder.iterdir())  # ready for the command's report; nothing traced here
    (back,), _, _ = _rerun_case(command)
    assert back.describe() == "gemm[m=64,n=64,k=64] fp8_tensorwise emulated"
    assert back.precision.fp8_format.value == "e5m2"
    assert f"--output={Path(summary['run_file']).parent / summary['run_id']}.profile/000-" in command


@pytest.mark.parametrize("value", ["bogus", "", "TORCH"])
def test_bad_profile_value_is_one_line_and_the_bad_input_code(capsys, results_dir, value):
    code = main(["run", *FP8_CASE, "--results-dir", str(results_dir), f"--profile={value}"])
    _, err = capsys.readouterr()
    assert code == 2
    assert f"unknown --profile value {value!r}; accepted: torch, nvtx, nsys" in err and err.count("\n") == 1
    assert not (results_dir / "runs").exists() or not any((results_dir / "runs").iterdir())


def _recording_cuda(monkeypatch) -> list[tuple[str, ...]]:
    """torch's CUDA boundary as the profiled pass meets it on a GPU, recorded: NVTX push/pop (what
    ``torch.cuda.nvtx.range`` calls), cudaProfilerStart/Stop (``torch.cuda.profiler``), and synchronize."""
    log: list[tuple[str, ...]] = []
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda msg: log.append(("push", msg)))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: log.append(("pop",)))
    monkeypatch.setattr(torch.cuda.profiler, "start", lambda: log.append(("cudaProfilerStart",)))
    monkeypatch.setattr(torch.cuda.profiler, "stop", lambda: log.append(("cudaProfilerStop",)))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: log.append(("sync",)))
    return log


def _logging_pipeline(log: list[tuple[str, ...]]) -> Pipeline:
    def call(name: str):
        return lambda: log.append(("call", name))
    return Pipeline(end_to_end=call("e2e"), phases={"quantize": call("quantize"), "gemm": call("gemm")},
                    output=lambda: torch.zeros(1))


def test_nvtx_mode_on_cuda_brackets_one_range_per_call_with_the_profiler_api(monkeypatch):
    log = _recording_cuda(monkeypatch)
    info = nvtx_profile(_logging_pipeline(log), Device("cuda", 0), iterations=2)
    assert info == {"tool": "nvtx"}
    one_round = [("push", "fp8bench/end_to_end"), ("call", "e2e"), ("pop",),
                 ("push", "fp8bench/quantize"), ("call", "quantize"), ("pop",),
                 ("push", "fp8bench/gemm"), ("call", "gemm"), ("pop",), ("sync",)]
    assert log == [("cudaProfilerStart",), *one_round, *one_round, ("cudaProfilerStop",)]


def test_nvtx_capture_is_closed_when_a_call_raises(monkeypatch):
    log = _recording_cuda(monkeypatch)
    pipeline = _logging_pipeline(log)
    pipeline.phases["gemm"] = lambda: (_ for _ in ()).throw(RuntimeError("CUBLAS_STATUS_NOT_SUPPORTED"))
    with pytest.raises(RuntimeError):
        nvtx_profile(pipeline, Device("cuda", 0), iterations=1)
    assert log[0] == ("cudaProfilerStart",) and log[-1] == ("cudaProfilerStop",) and log[-2] == ("pop",)


def test_torch_mode_on_cuda_opens_an_nvtx_range_inside_each_record_function(monkeypatch):
    log = _recording_cuda(monkeypatch)
    with phase_range("gemm", Device("cuda", 0), torch_range=True):
        log.append(("call",))
    assert log == [("push", "fp8bench/gemm"), ("call",), ("pop",)]
    with phase_range("gemm", CPU, torch_range=True):  # the CPU: record_function only, no NVTX
        pass
    assert len(log) == 3


class Avg:
    """The attributes of torch.profiler's FunctionEventAvg that top_ops reads (times in microseconds)."""

    def __init__(self, key: str, count: int, cpu_us: float, device_us: float) -> None:
        self.key, self.count, self.self_cpu_time_total, self.self_device_time_total = key, count, cpu_us, device_us


def test_top_ops_rank_kernels_by_device_self_time_on_cuda_and_ops_by_cpu_self_time_elsewhere():
    averages = [Avg("fp8bench/gemm", 3, 900.0, 0.0), Avg("ProfilerStep*", 3, 50.0, 0.0),
                Avg("aten::_scaled_mm", 3, 40.0, 0.0), Avg("sm90_xmma_gemm_e4m3", 3, 0.0, 300.0),
                Avg("cudaLaunchKernel", 9, 120.0, 0.0), Avg("amax_kernel", 6, 0.0, 30.0)]
    on_gpu = [op.to_dict() for op in top_ops(averages, on_device=True)]
    assert on_gpu == [{"name": "sm90_xmma_gemm_e4m3", "self_s": pytest.approx(3e-4), "calls": 3},
                      {"name": "amax_kernel", "self_s": pytest.approx(3e-5), "calls": 6}]
    assert [op.name for op in top_ops(averages, on_device=False)] == ["cudaLaunchKernel", "aten::_scaled_mm"]
    assert len(top_ops([Avg(f"op{i}", 1, 1.0 + i, 0.0) for i in range(30)], on_device=False)) == 10
