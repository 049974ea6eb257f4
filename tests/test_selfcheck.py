"""`fp8bench selfcheck`: the checks driven by a simulated GPU (a healthy one, and one broken per check), the real CPU
subset end to end, and the command's exit codes.

The simulated GPU is the real selfcheck code over fakes of the vendor interfaces it reads: CUDA events
(``tests/fake_cuda.py``: GEMM time from the FLOPs actually run at H100-like rates, and a host clock that advances
with it) and NVML (``tests/fake_nvml.py``: an autospec of nvidia-ml-py driven by a simulated board). The GEMMs, the
quantizers and the numerics are real CPU computations. Nothing here shows that a real GPU passes.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch
from fake_cuda import FakeCudaTimer, SimulatedClock
from fake_nvml import FakeGpu, make_pynvml

from fp8bench.cli import main
from fp8bench.core.devices import Device
from fp8bench.core.peak_table import table_peak
from fp8bench.core.records import Record
from fp8bench.energy.meters import EnergyReading, WindowPolicy, nvml_meter
from fp8bench.measure.selfcheck import (
    PEAK_FRACTION,
    TIMER_REPEATS,
    Probe,
    SelfcheckConfig,
    Verdict,
    exit_verdict,
    judge_energy,
    judge_peak,
    judge_smallest_case,
    judge_sqnr,
    judge_timer,
    largest_square_gemm,
    probe_for,
    run_selfcheck,
)
from fp8bench.measure.timing import SamplingPolicy
from fp8bench.results.runfile import read_run_file

H100 = "NVIDIA H100 80GB HBM3"
BF16_PEAK, FP8_PEAK = table_peak(H100, "bf16").value, table_peak(H100, "fp8").value  # type: ignore[union-attr]

# Small enough for seconds on a 2-core CPU. The timer loop is in simulated seconds: a 256^3 BF16 GEMM takes ~50 ns
# on the simulated H100, so 5 us is a loop of ~100 real CPU calls.
FAST = SelfcheckConfig(
    gemm_size=256, min_gemm_size=128, loop_gemm_size=256, sqnr_shape=(128, 256, 2048), backends=("torch", "emulated"),
    budget_s=30, policy=SamplingPolicy(min_samples=3, min_time_s=0.0, max_samples=20, max_time_s=0.5),
    timer_loop_s=5e-6, energy_window_s=0.2, energy_warmup_s=0.05,
    # The claims' own probes run real CUDA work: tests/test_claims.py drives them on their own.
    checks=("gemm_peak", "cpu_ceiling", "timer_vs_wall", "sqnr", "energy", "backend"))


class FrozenCounterGpu(FakeGpu):
    """A board whose total-energy counter never moves (a driver that reports a stale value)."""

    def energy_mj(self) -> int:
        return 123_456


@dataclass
class OverCountingGpu(FakeGpu):
    """A board whose counter runs ``factor`` times faster than its power readings say."""

    factor: float = 1.6

    def energy_mj(self) -> int:
        return int(super().energy_mj() * self.factor)


def simulated_gpu(share_of_peak: float = 0.7, event_scale: float = 1.0, board: FakeGpu | None = None) -> Probe:
    """An H100 as the selfcheck sees it: GEMMs at ``share_of_peak`` of the table's peaks, NVML from ``board``."""
    clock = SimulatedClock()
    timer = FakeCudaTimer(clock, share_of_peak * BF16_PEAK, share_of_peak * FP8_PEAK, event_scale)
    nv = make_pynvml(board or FakeGpu())
    meter = nvml_meter(Device("cpu"), nv=nv, policy=WindowPolicy(min_window_s=0.2, max_window_s=0.6))
    return Probe(Device("cpu"), H100, gpu=True, timer=timer, wall_clock=clock, meter=meter, peaks=None,
                 free_memory_bytes=80 * 2**30)


def verdicts(results, check: str) -> dict[str, Verdict]:
    return {r.subject: r.verdict for r in results if r.check == check}


@pytest.fixture(scope="module")
def healthy():
    return run_selfcheck(simulated_gpu(), FAST)


def test_a_healthy_gpu_passes_every_check(healthy):
    by_check = {r.check for r in healthy.results}
    assert by_check == {"gemm_peak", "timer_vs_wall", "sqnr", "energy", "backend"}
    failed = [(r.check, r.subject, r.detail) for r in healthy.results if r.verdict is not Verdict.PASS]
    assert not failed
    assert healthy.verdict is None
    assert set(verdicts(healthy.results, "gemm_peak")) == {"bf16", "fp8_tensorwise"}
    assert len(verdicts(healthy.results, "sqnr")) == 12  # five FP8 recipes x E4M3, E5M2; nvfp4 and mxfp4 (E2M1)
    assert {"nvfp4/e2m1", "mxfp4/e2m1"} <= set(verdicts(healthy.results, "sqnr"))
    peak = {r.subject: r.measured for r in healthy.results if r.check == "gemm_peak"}
    for subject in peak.values():
        assert subject["size"] == 256 and subject["tflops"] / subject["peak_tflops"] == pytest.approx(0.7, rel=0.1)
    energy = next(r for r in healthy.results if r.check == "energy")
    assert energy.subject == "nvml_counter"
    assert energy.measured["mean_power_w"] == pytest.approx(300.0)


def test_a_slow_gemm_fails_the_peak_check():
    out = run_selfcheck(simulated_gpu(share_of_peak=0.3), replace(FAST, checks=("gemm_peak", "timer_vs_wall")))
    assert set(verdicts(out.results, "gemm_peak").values()) == {Verdict.FAIL}
    assert "under the 50% floor" in next(r.detail for r in out.results if r.check == "gemm_peak")
    assert verdicts(out.results, "timer_vs_wall") == {"events": Verdict.PASS}
    assert out.verdict is Verdict.FAIL


def test_events_disagreeing_with_the_wall_clock_fail_the_timer_check():
    out = run_selfcheck(simulated_gpu(event_scale=0.5), replace(FAST, checks=("gemm_peak", "timer_vs_wall")))
    timer = next(r for r in out.results if r.check == "timer_vs_wall")
    assert timer.verdict is Verdict.FAIL and "differs by 50.00%" in timer.detail
    # Half-length events also make the GEMM look twice as fast as the H100's datasheet allows.
    assert set(verdicts(out.results, "gemm_peak").values()) == {Verdict.FAIL}
    assert "above the peak itself" in next(r.detail for r in out.results if r.check == "gemm_peak")


def test_a_kernel_with_wrong_weight_scales_fails_the_sqnr_check(monkeypatch):
    """A scaled GEMM that reads the weights' scales as 1 (a scale-layout bug) through the torch backend."""
    from fp8bench.numerics.scaled_gemm import ScaledGemm

    real = ScaledGemm.prepare

    def unscaled_b(self, q, role):  # ScaledGemm.prepare's signature: the weights laid out with unit scales
        return real(self, replace(q, scale=torch.ones_like(q.scale)) if role == "rhs" else q, role)

    monkeypatch.setattr(ScaledGemm, "prepare", unscaled_b)
    out = run_selfcheck(simulated_gpu(), replace(FAST, checks=("sqnr",)))
    sqnr = {r.subject: r for r in out.results if r.check == "sqnr"}
    on_torch = [s for s, r in sqnr.items() if r.measured["backend"] == "torch"]
    on_emulated = [s for s, r in sqnr.items() if r.measured["backend"] == "emulated"]
    # The CPU's torch kernels run tensorwise and rowwise scales; block scales are refused and run on emulated.
    assert sorted(on_torch) == [f"{r}/{f}" for r in ("fp8_delayed", "fp8_rowwise", "fp8_tensorwise") for f in
                                ("e4m3", "e5m2")]
    assert all(sqnr[s].verdict is Verdict.FAIL for s in on_torch)
    assert all(sqnr[s].verdict is Verdict.PASS for s in on_emulated)
    assert out.verdict is Verdict.FAIL


def test_a_frozen_energy_counter_fails_the_energy_check():
    out = run_selfcheck(simulated_gpu(board=FrozenCounterGpu()), replace(FAST, checks=("energy",)))
    energy = next(r for r in out.results if r.check == "energy")
    assert energy.verdict is Verdict.FAIL and "did not advance" in energy.detail


def test_energy_disagreeing_with_power_times_time_fails_the_energy_check():
    out = run_selfcheck(simulated_gpu(board=OverCountingGpu(factor=1.6)), replace(FAST, checks=("energy",)))
    energy = next(r for r in out.results if r.check == "energy")
    assert energy.verdict is Verdict.FAIL
    assert energy.measured["joules_per_iter"] / energy.measured["power_x_time_j"] == pytest.approx(1.6, rel=0.1)


def test_a_failing_backend_fails_and_an_unavailable_one_is_listed(monkeypatch):
    from fp8bench.core.plugins import BACKENDS

    emulated = BACKENDS.get("emulated")
    builder, supports = emulated.builders["gemm"]

    def crashing(ctx):
        raise RuntimeError("kernel launch failed")

    monkeypatch.setitem(emulated.builders, "gemm", (crashing, supports))
    out = run_selfcheck(simulated_gpu(), replace(FAST, backends=("emulated", "te"), checks=("backend",)))
    backend = {r.subject: r for r in out.results if r.check == "backend"}
    assert backend["emulated"].verdict is Verdict.FAIL and "kernel launch failed" in backend["emulated"].detail
    assert backend["te"].verdict is Verdict.NOT_RUN and "unavailable" in backend["te"].detail


def test_a_broken_check_is_a_harness_error_and_the_others_still_run():
    probe = simulated_gpu()
    probe = replace(probe, meter=BrokenMeter())
    out = run_selfcheck(probe, replace(FAST, checks=("timer_vs_wall", "energy")))
    energy = next(r for r in out.results if r.check == "energy")
    assert energy.verdict is Verdict.ERROR and "meter exploded" in energy.detail
    assert verdicts(out.results, "timer_vs_wall") == {"events": Verdict.PASS}
    assert out.verdict is Verdict.ERROR


class BrokenMeter:
    method = "nvml_counter"

    def measure(self, fn, device, seconds_per_call, name="end_to_end") -> EnergyReading:
        raise TypeError("meter exploded")


# --- verdict rules on numbers ----------------------------------------------------------------------------------


def test_peak_band():
    assert judge_peak(600, 1000, "x")[0] is Verdict.PASS
    assert judge_peak(PEAK_FRACTION * 1000 - 1, 1000, "x")[0] is Verdict.FAIL
    assert judge_peak(1200, 1000, "x")[0] is Verdict.FAIL
    assert judge_peak(None, 1000, "x")[0] is Verdict.FAIL
    assert judge_peak(600, None, "x")[0] is Verdict.FAIL


def test_timer_sqnr_and_case_rules():
    assert judge_timer([(1.0, 1.04), (1.0, 1.0)], "events")[0] is Verdict.PASS
    assert judge_timer([(1.0, 1.0), (1.0, 1.06)], "events")[0] is Verdict.FAIL
    assert judge_sqnr(27.0, 28.5)[0] is Verdict.PASS
    assert judge_sqnr(26.0, 28.5)[0] is Verdict.FAIL
    assert judge_sqnr(None, 28.5)[0] is Verdict.FAIL
    def smallest(status: str, reason: str) -> Record:
        return Record("gemm", {"m": 16, "n": 16, "k": 16}, "bf16", "torchao", "cpu", status, reason)

    ok, _ = judge_smallest_case(smallest("skipped", "torchao runs FP8 only"))
    assert ok
    for status, reason in (("skipped", "over budget: one call takes 9 s"), ("skipped", ""), ("failed", "boom"),
                           ("invalid", "NaN")):
        assert not judge_smallest_case(smallest(status, reason))[0]


def test_energy_rules():
    base = EnergyReading("nvml_counter", 2.0, 200.0, 1.0, 100, telemetry={"power_w": {"median": 150.0, "mean": 200.0}})
    assert judge_energy(base)[0] is Verdict.PASS  # 200 W x 10 ms = 2 J
    assert judge_energy(replace(base, joules_per_iter=2.5))[0] is Verdict.FAIL
    assert judge_energy(replace(base, method="nvml_power"))[0] is Verdict.FAIL
    assert judge_energy(replace(base, joules_per_iter=None, reason="did not advance"))[0] is Verdict.FAIL
    assert judge_energy(replace(base, telemetry={}))[0] is Verdict.FAIL


def test_exit_verdict_precedence():
    def r(v):
        return type("R", (), {"verdict": v})()

    assert exit_verdict([r(Verdict.PASS), r(Verdict.NEEDS_GPU), r(Verdict.NOT_RUN)]) is None
    assert exit_verdict([r(Verdict.PASS), r(Verdict.FAIL)]) is Verdict.FAIL
    assert exit_verdict([r(Verdict.FAIL), r(Verdict.ERROR)]) is Verdict.ERROR


def test_largest_square_gemm_halves_until_it_fits():
    assert largest_square_gemm(None) == 8192
    assert largest_square_gemm(80 * 2**30) == 8192
    assert largest_square_gemm(2 * 2**30) == 4096  # 40 bytes x 8192^2 = 2.5 GiB > 80% of 2 GiB
    assert largest_square_gemm(10 * 2**20) is None


def test_config_refuses_nonsense():
    with pytest.raises(ValueError, match="GEMM sizes"):
        SelfcheckConfig(gemm_size=512, min_gemm_size=1024)
    with pytest.raises(ValueError, match="budget_s"):
        SelfcheckConfig(budget_s=0)
    with pytest.raises(ValueError, match="unknown check.*accepted: gemm_peak"):
        SelfcheckConfig(checks=("sqnr", "speed"))


# --- the real CPU subset ---------------------------------------------------------------------------------------


@pytest.mark.slow  # every CPU check, end to end
@pytest.mark.measures_ceilings  # the check compares a GEMM with ceilings measured now
def test_cpu_subset_end_to_end(tmp_path):
    """The real probe of this CPU: measured ceilings, CpuTimer against time.time, the real quantizers and kernels."""
    run_file = tmp_path / "selfcheck.json"
    config = replace(FAST, policy=SamplingPolicy(min_samples=3, max_time_s=1), timer_loop_s=0.2)
    out = run_selfcheck(probe_for(Device("cpu")), config,
                        run_file)
    by_check = {(r.check, r.subject): r for r in out.results}
    for subject in ("bf16", "fp8_tensorwise"):
        assert by_check[("gemm_peak", subject)].verdict is Verdict.NEEDS_GPU
    assert by_check[("energy", "nvml")].verdict is Verdict.NEEDS_GPU
    # Numerics and the smallest cases are deterministic here; the two timing checks are measured, not assumed.
    assert {r.verdict for r in out.results if r.check in ("sqnr", "backend")} == {Verdict.PASS}
    ceiling = by_check[("cpu_ceiling", "bf16")]
    assert ceiling.verdict in (Verdict.PASS, Verdict.FAIL) and ceiling.measured["bf16_ceiling_tflops"] > 0
    timer = by_check[("timer_vs_wall", "cpu timer")]
    assert timer.verdict in (Verdict.PASS, Verdict.FAIL) and timer.measured["timer"] == "CpuTimer"
    assert len(timer.measured["pairs_s"]) == TIMER_REPEATS and all(wall > 0 for _, wall in timer.measured["pairs_s"])

    data = read_run_file(run_file)
    assert data["run"]["status"] == "complete"
    assert [c["verdict"] for c in data["run"]["selfcheck"]["checks"]] == [r.verdict.value for r in out.results]
    checks = {rec["extra"]["selfcheck"] for rec in data["records"]}
    assert checks == {"cpu_ceiling", "sqnr", "backend"}
    # One ceiling record, 12 SQNR cases (five FP8 recipes x E4M3, E5M2; nvfp4 and mxfp4), the backend checks',
    # and a second record for each SQNR case torch refused here and the emulated reference ran.
    assert len(data["records"]) == len(out.records) == 1 + 12 + 2 * 2 + sum(
        r.measured["backend"] == "emulated" for r in out.results if r.check == "sqnr")


@pytest.mark.slow  # measures the CPU ceilings
@pytest.mark.measures_ceilings  # the check compares a GEMM with ceilings measured now
def test_the_cpu_ceiling_check_refreshes_the_cached_ceilings(tmp_path, monkeypatch):
    """On a quiet host the ceilings the check measured become the cache later runs read; under load they do not."""
    config = replace(FAST, checks=("cpu_ceiling",), policy=SamplingPolicy(min_samples=3, max_time_s=0.5))
    monkeypatch.setattr(os, "getloadavg", lambda: (0.3, 0.3, 0.3))
    out = run_selfcheck(probe_for(Device("cpu"), tmp_path), config)
    (result,) = out.results
    assert result.measured["cached"] and "cached in" in result.detail
    (entry,) = json.loads((tmp_path / "cpu_ceilings.json").read_text()).values()
    assert entry["bf16"] == result.measured["bf16_ceiling_tflops"]
    assert entry["load"]["load_avg_1m"] == 0.3

    monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    loaded = run_selfcheck(probe_for(Device("cpu"), tmp_path / "other"), config)
    assert not loaded.results[0].measured["cached"] and "not cached: measured under load" in loaded.results[0].detail
    assert not (tmp_path / "other" / "cpu_ceilings.json").exists()


@pytest.mark.slow  # every CPU check, end to end
@pytest.mark.measures_ceilings  # the check compares a GEMM with ceilings measured now
def test_cli_on_the_cpu_prints_a_table_and_ends_in_json(tmp_path, capsys):
    out_file = tmp_path / "sc.json"
    rc = main(["selfcheck", "--device", "cpu", "--check", "gemm_peak", "energy", "backend", "--backend", "torch",
               "te", "--out", str(out_file), "--results-dir", str(tmp_path / "results")])
    stdout = capsys.readouterr().out
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert "needs a GPU" in stdout and "unavailable: Transformer Engine" in stdout
    assert summary["run_file"] == str(out_file) and read_run_file(out_file)["run"]["status"] == "complete"
    assert summary["counts"] == {"PASS": 1, "FAIL": 0, "ERROR": 0, "needs a GPU": 3, "not run": 1}
    assert rc == 0 and summary["verdict"] == "PASS"
    assert main(["selfcheck", "--device", "cpu", "--check", "backend", "--backend", "torch", "--json",
                 "--out", str(out_file), "--force", "--results-dir", str(tmp_path / "results")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [c["check"] for c in report["checks"]] == ["backend"] and report["device"] == "cpu"


def test_cli_bad_input_exits_3(tmp_path, capsys):
    assert main(["selfcheck", "--device", "cuda:7"]) == 3
    assert "cuda:7" in capsys.readouterr().err
    assert main(["selfcheck", "--backend", "nope"]) == 3
    assert "unknown backend 'nope'" in capsys.readouterr().err
    assert main(["selfcheck", "--check", "speed"]) == 3
    assert "unknown check(s) speed" in capsys.readouterr().err
    (tmp_path / "dir.json").mkdir()
    assert main(["selfcheck", "--device", "cpu", "--out", str(tmp_path / "dir.json")]) == 3
    for argv in (["selfcheck", "--bogus"], ["selfcheck", "--device"]):  # argparse's own errors
        assert main(argv) == 3


def test_a_full_disk_stops_the_selfcheck_and_keeps_its_records(tmp_path, capsys, monkeypatch):
    """The run file's disk fills on the second case record and has room again at the final write: the selfcheck
    stops there (no further check runs into the full disk), exits 74, and the run file keeps both records and says
    ``failed: disk full``. The failure is injected at the operating-system boundary (``os.fsync`` raising ENOSPC
    once), since a disk cannot be filled on cue."""
    import errno

    import fp8bench.results.runfile as runfile

    real_fsync, calls = os.fsync, []
    out_file = tmp_path / "sc.json"

    def fsync(fd: int) -> None:
        # Only the run file's writes count (its first line goes through a temporary ".sc.json.*.tmp" beside it,
        # its records are appended to sc.json): other files written on the way, such as the CPU ceilings cached on
        # a quiet machine, must not move the failure.
        name = Path(os.readlink(f"/proc/self/fd/{fd}")).name
        if name == out_file.name or name.startswith(f".{out_file.name}."):
            calls.append(fd)
            if len(calls) == 3:  # header, record 0, then record 1 fails
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(runfile.os, "fsync", fsync)
    rc = main(["selfcheck", "--device", "cpu", "--check", "backend", "--backend", "emulated", "torch", "--json",
               "--out", str(out_file), "--results-dir", str(tmp_path / "results")])
    captured = capsys.readouterr()
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert rc == 74, captured.err
    assert "disk full" in captured.err and summary["disk_full"]
    assert summary["checks"] == []  # the backend check stopped inside its first backend: no verdict was reached
    kept = read_run_file(out_file)
    assert kept["run"]["status"] == "failed: disk full"
    assert [r["precision"] for r in kept["records"]] == ["bf16", "fp8_tensorwise"]


def test_a_ceiling_check_failing_under_load_names_the_load():
    """Above the peak on a loaded host reads as the load's doing, not a wrong timer or table."""
    verdict, detail = judge_peak(1200, 1000, "x", under_load="load average 4.20 on 2 CPU(s)")
    assert verdict is Verdict.FAIL and "timer or table wrong" not in detail
    assert "measured at load average 4.20 on 2 CPU(s): the load is the likely cause" in detail
    assert "the load is the likely cause" in judge_peak(100, 1000, "x", under_load="load average 9")[1]
    assert "timer or table wrong" in judge_peak(1200, 1000, "x")[1]
