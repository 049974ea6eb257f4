"""Host and device time per sample on GPUs, and the launch overhead of a case (wall minus device time).

On the fake CUDA runtime of ``tests/fake_cuda_runtime.py``, whose host clock the timer reads in place of
``time.perf_counter``: the figures follow from the simulated launch costs, and no GPU has produced them.
"""

from __future__ import annotations

import pytest
import test_cuda_timing
from fake_cuda_runtime import EVENT_RECORD_S, LAUNCH_S, FakeStreamHold
from rich.console import Console
from test_cuda_timing import GPU1, PHASE_S, POLICY, kernels_on

from fp8bench.measure import blocking
from fp8bench.measure.blocking import BlockedStreamTimer
from fp8bench.measure.runner import CaseMeasurer
from fp8bench.measure.settings import EnergySettings, RunSettings, TimingSettings
from fp8bench.measure.timing import CudaTimer
from fp8bench.render.run_table import render_table

fake_cuda, chain = test_cuda_timing.fake_cuda, test_cuda_timing.chain  # fixtures, shared


def simulated_timer(fake, flush_l2=False):
    timer = CudaTimer(GPU1, flush_l2=flush_l2)
    timer.host_clock = lambda: fake.host_s
    return timer


def test_launch_overhead_is_host_time_the_device_figure_leaves_out(fake_cuda):
    launch_bound = kernels_on(fake_cuda, device=1, seconds=(2e-6,) * 20)
    events = simulated_timer(fake_cuda)
    device = events.time(launch_bound)
    # cuda_events: the GPU idles between launches inside the events, so host and device time agree (both the twenty
    # launches, 5 us each, and the last kernel): the gaps are in the device figure, not in the overhead.
    assert device == pytest.approx(20 * LAUNCH_S + 2e-6, rel=1e-6)
    assert events.last_host_s == pytest.approx(device, rel=1e-6)
    # blocked_stream: the device figure is the kernels alone; the host's launches (and the end event and release
    # launched after them) are the overhead.
    held = BlockedStreamTimer(GPU1, FakeStreamHold(fake_cuda, 1), flush_l2=False)
    held.host_clock = lambda: fake_cuda.host_s
    device = held.time(launch_bound)
    assert device == pytest.approx(40e-6, rel=1e-9)
    assert held.last_host_s - device == pytest.approx(20 * LAUNCH_S + EVENT_RECORD_S + LAUNCH_S, rel=1e-6)
    # GPU-bound: the launches hide behind running kernels; almost nothing is left over.
    gpu_bound = events.time(kernels_on(fake_cuda, device=1, seconds=(1e-3,) * 3))
    assert events.last_host_s - gpu_bound == pytest.approx(0.0, abs=1e-9)


def test_record_carries_host_samples_median_and_launch_overhead(fake_cuda, chain, monkeypatch):
    monkeypatch.setattr(blocking, "stream_hold_for", lambda device: FakeStreamHold(fake_cuda, device.cuda_index))
    s = RunSettings(device="cuda:1",
                    timing=TimingSettings(budget_s=30, policy=POLICY, warmup_s=0.0, flush_l2=False,
                                          blocked_stream=True),
                    energy=EnergySettings(enabled=False))
    measurer = CaseMeasurer(s, GPU1)
    measurer.blocked.host_clock = lambda: fake_cuda.host_s
    record = measurer.measure(chain())
    assert record.status == "ok" and record.timing_mode == "blocked_stream", record.reason
    assert len(record.samples.host_samples_s) == record.samples.n == len(record.samples.samples_s)
    # Held: the device figure is the two kernels; the host also launched them, the end event and the release.
    assert record.samples.median_s == pytest.approx(PHASE_S["a"] + PHASE_S["b"], rel=1e-9)
    assert record.samples.launch_overhead_s == pytest.approx(3 * LAUNCH_S + EVENT_RECORD_S, rel=1e-6)
    assert record.samples.launch_overhead_s == pytest.approx(record.samples.host_median_s - record.samples.median_s)
    table = Console(width=250, record=True)
    render_table([record.to_dict()], "bf16", table)
    text = table.export_text()
    assert "launch ms" in text and "0.0160" in text


def test_cpu_records_have_no_host_split():
    from fp8bench.core.devices import Device
    from fp8bench.measure.runner import expand_cases

    (case,) = expand_cases([("gemm", ["16x16x16"])], ["bf16"], ["torch"], RunSettings(device="cpu"))
    record = CaseMeasurer(RunSettings(device="cpu", timing=TimingSettings(policy=POLICY, warmup_s=0.0),
                                      energy=EnergySettings(enabled=False)),
                          Device("cpu")).measure(case)
    timed = record.samples
    assert timed.host_samples_s == [] and timed.host_median_s is None and timed.launch_overhead_s is None
