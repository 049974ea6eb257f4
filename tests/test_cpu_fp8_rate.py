"""The CPU FP8 GEMM rate probe behind `fp8bench doctor`: its verdict rule, its bound on time, and doctor's output.

Time is read from ``time.perf_counter``; where the bound itself is under test, that clock is replaced by one that
advances by a fixed cost per GEMM call, so the test does not depend on how busy the machine is.
"""

from __future__ import annotations

import json

import pytest

from fp8bench.cli import main
from fp8bench.hardware import cpu_fp8_rate
from fp8bench.hardware.cpu_fp8_rate import SLOW_FACTOR, CpuFp8Rate, measure_cpu_fp8_rate


def test_slow_path_rule():
    tuned = CpuFp8Rate((128, 128, 256), fp8_gflops=100.0, bf16_gflops=150.0, probe_s=0.01)
    slow = CpuFp8Rate((128, 128, 256), fp8_gflops=20.0, bf16_gflops=150.0, probe_s=0.01)
    assert not tuned.slow_path and tuned.warning() is None
    assert slow.slowdown == pytest.approx(7.5) and slow.slow_path
    assert "slow reference path" in slow.warning() and "--backend emulated" in slow.warning()
    edge = CpuFp8Rate((1, 1, 1), fp8_gflops=150.0 / SLOW_FACTOR, bf16_gflops=150.0, probe_s=0.0)
    assert not edge.slow_path
    assert slow.to_dict()["slow_path"] is True and slow.to_dict()["shape"] == [128, 128, 256]


class CostClock:
    """``time.perf_counter`` for a machine where a patched GEMM call costs what :meth:`gemm` says, and everything
    else 1 us per reading of the clock."""

    def __init__(self) -> None:
        self.now = 0.0
        self.calls = {"fp8": 0}

    def __call__(self) -> float:
        self.now += 1e-6
        return self.now

    def gemm(self, kind: str, seconds: float):
        def call(*_args, **_kwargs):
            self.calls[kind] += 1
            self.now += seconds
        return call


def test_a_slow_path_is_timed_once_after_warm_up_so_the_probe_stays_under_a_second(monkeypatch):
    clock = CostClock()
    monkeypatch.setattr(cpu_fp8_rate.time, "perf_counter", clock)
    # The slowest CPU FP8 path known: ~0.2 s a call at the probe's shape.
    monkeypatch.setattr(cpu_fp8_rate, "fp8_scaled_mm", clock.gemm("fp8", 0.2))
    rate = measure_cpu_fp8_rate()
    assert clock.calls["fp8"] == 2  # one warm-up, one timed call: the timed budget is spent
    assert rate.fp8_gflops == pytest.approx(2 * 128 * 128 * 256 / 0.2 / 1e9, rel=1e-3)
    assert rate.probe_s < 1.0  # on this clock: two FP8 calls, and the real BF16 ones at 1 us
    assert rate.slow_path


def test_the_real_probe_measures_both_kinds():
    rate = measure_cpu_fp8_rate()
    assert rate is not None and rate.fp8_gflops > 0 and rate.bf16_gflops > 0 and rate.shape == (128, 128, 256)


def test_doctor_reports_the_rate_warns_on_a_slow_path_and_fits_80_columns(capsys, monkeypatch):
    slow = CpuFp8Rate((128, 128, 256), fp8_gflops=2.0, bf16_gflops=150.0, probe_s=0.01)
    monkeypatch.setattr(cpu_fp8_rate, "measure_cpu_fp8_rate", lambda: slow)
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 80
    flat = " ".join(out.split())
    assert "warning: torch's CPU FP8 GEMM is a slow reference path on this CPU" in flat
    # The precision x backend matrix keeps every backend's name whole.
    header = next(line for line in out.splitlines() if "precision" in line and "emulated" in line)
    for backend in ("torch", "emulated", "triton", "compiled", "torchao", "te"):
        assert f" {backend} " in header
    assert main(["doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["cpu_fp8_gemm"]["slow_path"] is True and len(report["warnings"]) == 1


def test_doctor_is_short_by_default_and_verbose_lists_every_refusal(capsys, monkeypatch):
    """The default answers "what runs here" on one screen; --verbose adds the torch API table, the training matrix
    and every refusal's reason (163 lines before on this CPU)."""
    fast = CpuFp8Rate((128, 128, 256), fp8_gflops=200.0, bf16_gflops=150.0, probe_s=0.01)
    monkeypatch.setattr(cpu_fp8_rate, "measure_cpu_fp8_rate", lambda: fast)
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["doctor", "--device", "cpu"]) == 0
    short = capsys.readouterr().out
    assert len(short.splitlines()) <= 60, short
    assert "precision x backend" in short and "doctor --verbose" in short
    assert "torchao does not run fp8_delayed" not in " ".join(short.split())
    assert main(["doctor", "--device", "cpu", "--verbose"]) == 0
    full = " ".join(capsys.readouterr().out.split())
    assert "torchao does not run fp8_delayed" in full and "scaled-GEMM API of torch" in full
