"""The ``blocked_stream`` timing mode (fp8bench/measure/blocking.py).

Two layers. The Triton spin and release kernels themselves run under Triton's CPU interpreter (the flag, the
generation count, the give-up rule). The timer and the runner run on the fake CUDA runtime of
``tests/fake_cuda_runtime.py``, whose :class:`FakeStreamHold` holds a stream as CUDA does and hangs the host for real
when nothing releases it. Neither is a GPU: nothing here has run on hardware.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import replace

import pytest
import test_cuda_timing
import torch
from fake_cuda_runtime import (
    EVENT_RECORD_S,
    FLUSH_BYTES_PER_S,
    H100_L2_BYTES,
    LAUNCH_S,
    FakeStreamHold,
    Unmodelled,
)
from test_cuda_timing import GPU1, PHASE_S, POLICY, KernelChain, kernels_on

import fp8bench.kernels  # noqa: F401 - sets TRITON_INTERPRET=1 on a machine without CUDA, before Triton is imported
from fp8bench.core.cases import Case
from fp8bench.core.comparability import comparability_key
from fp8bench.core.devices import Device
from fp8bench.core.pipeline import Pipeline
from fp8bench.core.plugins import BACKENDS, Backend
from fp8bench.core.precisions import resolve_precision
from fp8bench.core.records import case_key
from fp8bench.measure import blocking
from fp8bench.measure.blocking import BlockedStreamTimer, HoldTimedOut, held_timer, timer_for_calls
from fp8bench.measure.cuda_graphs import GraphCapturer
from fp8bench.measure.runner import CaseMeasurer
from fp8bench.measure.settings import EnergySettings, RunSettings, TimingSettings
from fp8bench.measure.timing import CudaTimer, TimingMode, timing_mode_for

fake_cuda, chain = test_cuda_timing.fake_cuda, test_cuda_timing.chain  # fixtures, shared
FLUSH_S = 2 * H100_L2_BYTES / FLUSH_BYTES_PER_S


# -- the real Triton kernels, interpreted on the CPU -------------------------------------------------------------------
@pytest.fixture
def interpreted_kernels():
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton was imported without its interpreter in this process")
    return blocking.spin_kernels()


def test_spin_kernel_ends_on_its_release_and_gives_up_without_one(interpreted_kernels):
    spin, release = interpreted_kernels
    flag = torch.zeros(1, dtype=torch.int32)
    gave_up = torch.full((1,), 7, dtype=torch.int32)
    release[(1,)](flag, 3)
    assert flag.item() == 3
    spin[(1,)](flag, gave_up, 3, 1000)  # released: ends at once
    assert gave_up.item() == 0
    spin[(1,)](flag, gave_up, 2, 1000)  # an older generation is released too
    assert gave_up.item() == 0
    spin[(1,)](flag, gave_up, 4, 50)  # never released: polls 50 times and says it gave up
    assert gave_up.item() == 1


def test_the_spin_gives_up_after_a_time_counted_in_polls_timed_on_the_device(interpreted_kernels):
    """The give-up is a time (SPIN_GIVE_UP_S), turned into polls by timing the spin itself: a device whose polls are
    ten times slower polls a tenth as often, and gives up after the same seconds."""
    assert blocking.give_up_checks(1.0, 2e-6) == 500_000
    assert blocking.give_up_checks(1.0, 2e-5) == 50_000
    assert blocking.give_up_checks(1e-9, 1.0) == 1 and blocking.give_up_checks(1e9, 1e-9) == 2**31 - 1
    with pytest.raises(ValueError, match="seconds per poll must be finite and positive, got 0.0"):
        blocking.give_up_checks(1.0, 0.0)
    spin, _ = interpreted_kernels
    flag, gave_up = torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    timed = []

    def timed_spin(checks):  # what TritonStreamHold does with CUDA events, here with a stand-in clock
        spin[(1,)](flag, gave_up, blocking.NEVER_RELEASED, checks)
        timed.append(checks)
        return checks * 3e-6

    assert blocking.poll_seconds(timed_spin, checks=64) == pytest.approx(3e-6)
    assert timed == [64] and gave_up.item() == 1  # the calibration spin ran all its polls, unreleased


# -- the timer on the fake runtime ----------------------------------------------------------------------------------
def host_wall(fake, fn):
    """Host seconds from before the call to after a device synchronize: what a host clock times (``cpu`` mode)."""
    start = fake.host_s
    fn()
    torch.cuda.synchronize(1)
    return fake.host_s - start


def modes_table(fake):
    """Seconds per call in each mode, for a launch-bound call (twenty 2 us kernels: each launch costs the host
    5 us) and a GPU-bound one (three 1 ms kernels), L2 flushed. The table of docs/timing-modes.md."""
    rows = {}
    for name, seconds in (("20 x 2 us", (2e-6,) * 20), ("3 x 1 ms", (1e-3,) * 3)):
        call = kernels_on(fake, device=1, seconds=seconds)
        rows[name] = {
            "host wall": host_wall(fake, call),
            "cuda_events": CudaTimer(GPU1).time(call),
            "cuda_graph": CudaTimer(GPU1).time(GraphCapturer(GPU1).capture(name, call).replay),
            "blocked_stream": BlockedStreamTimer(GPU1, FakeStreamHold(fake, 1)).time(call),
            "kernels": sum(seconds),
        }
    return rows


def test_three_modes_side_by_side_with_known_launch_gaps(fake_cuda, capsys):
    table = modes_table(fake_cuda)
    short, long = table["20 x 2 us"], table["3 x 1 ms"]
    # Launch-bound: events around eager launches include the gaps beyond what the flush hides ...
    assert short["cuda_events"] == pytest.approx(EVENT_RECORD_S + 20 * LAUNCH_S + 2e-6 - FLUSH_S, rel=1e-6)
    # ... graph replays and the held stream do not: the kernels back to back.
    assert short["cuda_graph"] == pytest.approx(short["kernels"], rel=1e-9)
    assert short["blocked_stream"] == pytest.approx(short["kernels"], rel=1e-9)
    assert short["cuda_events"] > 1.5 * short["blocked_stream"]
    # The host clock counts every launch and the wait: more than any device mode.
    assert short["host wall"] > short["cuda_events"]
    # GPU-bound: the launches hide behind the running kernels, and every device mode agrees.
    for mode in ("cuda_events", "cuda_graph", "blocked_stream"):
        assert long[mode] == pytest.approx(long["kernels"], rel=1e-9)
    with capsys.disabled():  # the table, for docs/timing-modes.md (pytest -s prints it)
        print("\ncall | kernels | host wall | cuda_events | cuda_graph | blocked_stream")
        for name, row in table.items():
            print(name, *(f"{row[k] * 1e6:.1f} us" for k in ("kernels", "host wall", "cuda_events", "cuda_graph",
                                                              "blocked_stream")), sep=" | ")


def test_held_work_waits_for_the_release_and_the_flush_stays_outside(fake_cuda):
    hold = FakeStreamHold(fake_cuda, 1)
    t = BlockedStreamTimer(GPU1, hold).time(kernels_on(fake_cuda, device=1, seconds=(1e-5, 1e-5)))
    (release,) = fake_cuda.ops("release")
    flush, k0, k1 = fake_cuda.ops("kernel")
    start, end = fake_cuda.ops("event")[-2:]  # the sample's (the timer recorded both once when made)
    assert flush.name == "zero_" and flush.start_s >= release.start_s  # nothing ran before the release
    assert flush.end_s <= start.start_s <= k0.start_s and k1.start_s == k0.end_s  # back to back
    assert t == pytest.approx(2e-5, rel=1e-9) and hold.holds == hold.releases == 1
    assert fake_cuda.current == 0  # the device guard restores the caller's device


def test_a_call_that_synchronizes_makes_the_spin_give_up_and_the_timer_refuse(fake_cuda):
    def syncing():
        fake_cuda.kernel(1e-5, device=1)
        fake_cuda.item(device=1)  # float(loss): waits for work queued behind the spin

    timer = BlockedStreamTimer(GPU1, FakeStreamHold(fake_cuda, 1, give_up_s=1.0))
    with pytest.raises(HoldTimedOut, match=r"the call waits for the GPU while its stream is held"):
        timer.time(syncing)
    fallback = CudaTimer(GPU1)
    chosen, mode, note = timer_for_calls(timer, fallback, [kernels_on(fake_cuda, device=1), syncing])
    assert chosen is fallback and mode is TimingMode.CUDA_EVENTS
    assert note.startswith("timed with cuda_events, not blocked_stream: the call waits for the GPU")
    # A call that never waits keeps the mode.
    fine = timer_for_calls(timer, fallback, [kernels_on(fake_cuda, device=1)])
    assert fine[0] is timer and fine[1] is TimingMode.BLOCKED_STREAM and fine[2] is None


@pytest.mark.parametrize("fault", ["synchronizing call", "no release"])
def test_a_spin_kernel_that_never_sees_its_flag_hangs(fake_cuda, fault):
    """What CUDA does with a spin kernel without a give-up rule: the host waits forever. The fake must hang too
    (a thread still blocked after a second), or a broken hold would pass every test above."""
    hold = FakeStreamHold(fake_cuda, 1, give_up_s=None)
    if fault == "no release":
        hold.release = lambda generation: None
    timer = BlockedStreamTimer(GPU1, hold)

    def call():
        fake_cuda.kernel(1e-5, device=1)
        if fault == "synchronizing call":
            torch.cuda.synchronize(1)

    outcome = []

    def measure():
        try:
            outcome.append(timer.time(call))
        except Unmodelled as exc:
            outcome.append(exc)

    thread = threading.Thread(target=measure, daemon=True)
    thread.start()
    thread.join(timeout=1.0)
    try:
        assert thread.is_alive() and fake_cuda.hung and outcome == []  # timed out: still waiting
    finally:
        fake_cuda.unstick.set()
        thread.join(timeout=5)
    assert isinstance(outcome[0], Unmodelled)


# -- the runner -----------------------------------------------------------------------------------------------------
@pytest.fixture
def fake_holds(fake_cuda, monkeypatch):
    holds = []

    def hold_for(device):
        holds.append(FakeStreamHold(fake_cuda, device.cuda_index, give_up_s=1.0))
        return holds[-1]

    monkeypatch.setattr(blocking, "stream_hold_for", hold_for)
    monkeypatch.setattr(blocking, "count_launches", fake_cuda.count_launches)
    return holds


def settings():
    return RunSettings(device="cuda:1", energy=EnergySettings(enabled=False),
                       timing=TimingSettings(budget_s=30, policy=POLICY, warmup_s=0.0, blocked_stream=True))


def test_runner_times_held_calls_and_keys_them_apart(fake_cuda, fake_holds, chain):
    record = CaseMeasurer(settings(), GPU1).measure(chain())
    assert record.status == "ok", record.reason
    assert record.timing_mode == "blocked_stream" and record.l2_flushed is True
    assert record.samples.median_s == pytest.approx(PHASE_S["a"] + PHASE_S["b"], rel=1e-9)
    assert record.samples.phases == pytest.approx(PHASE_S, rel=1e-9)
    assert fake_holds[0].releases >= 3 * POLICY.min_samples
    assert {op.device for op in fake_cuda.log} == {1}
    as_dict = record.to_dict()
    assert case_key(as_dict).endswith(" cuda:1 blocked_stream")
    run = {"device": {"name": "NVIDIA H100 80GB HBM3"}, "settings": {}}
    eager = comparability_key(replace(record, timing_mode="cuda_events"), run)
    assert set(comparability_key(record, run).differences(eager)) == {"case", "definition_hash"}


@pytest.mark.parametrize("serializing", [False, True])
def test_a_case_whose_worker_died_is_keyed_with_the_mode_its_siblings_were_timed_in(fake_cuda, fake_holds, chain,
                                                                                  monkeypatch, serializing):
    """A sharded run's crashed case gets its record in the parent (measure.sharding.crashed_record), which times
    nothing: it states the mode a worker would have used, so the case keeps the key its measured siblings have."""
    from fp8bench.measure.sharding import crashed_record

    if serializing:  # blocked_stream cannot apply: every worker falls back to cuda_events
        monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    case = chain()
    measured = CaseMeasurer(settings(), GPU1).measure(case)
    crashed = crashed_record(case, GPU1, 1, settings(), "the worker process for cuda:1 (pid 1) was killed")
    assert crashed.timing_mode == measured.timing_mode == ("cuda_events" if serializing else "blocked_stream")
    assert case_key(crashed) == case_key(measured)


SLOW_AFTER_READS = 6


def test_a_case_over_budget_while_sampling_states_the_mode_its_samples_were_taken_in(fake_cuda, fake_holds, chain,
                                                                                    monkeypatch):
    """A call that synchronizes is timed with cuda_events, not held; when it then runs out of budget while sampling,
    the skipped record keeps those samples under cuda_events and says why, not under the blocked_stream asked for."""
    import time

    item, reads = fake_cuda.item, []

    def slow_item(*args, **kwargs):  # past the probe and warm-up, each read-back holds the host 0.3 s
        reads.append(1)
        if len(reads) > SLOW_AFTER_READS:
            time.sleep(0.3)
        return item(*args, **kwargs)

    monkeypatch.setattr(fake_cuda, "item", slow_item)
    s = RunSettings(device="cuda:1", energy=EnergySettings(enabled=False),
                    timing=TimingSettings(budget_s=1.0, policy=POLICY, warmup_s=0.0, blocked_stream=True))
    record = CaseMeasurer(s, GPU1).measure(chain(host_sync_in="end_to_end"))
    assert record.status == "skipped" and re.match(r"over budget: \d of 5 samples", record.reason), record.reason
    assert record.samples.n >= 1 and record.timing_mode == "cuda_events", record.notes
    assert any(n.startswith("timed with cuda_events, not blocked_stream: the call waits for the GPU") for n in
               record.notes), record.notes


@pytest.mark.parametrize("where", ["end_to_end", "b"])
def test_runner_falls_back_to_events_when_a_call_synchronizes(fake_cuda, fake_holds, chain, where):
    record = CaseMeasurer(settings(), GPU1).measure(chain(host_sync_in=where))
    assert record.status == "ok", record.reason
    assert record.timing_mode == "cuda_events"  # every figure of the record from one mode
    assert any(n.startswith("timed with cuda_events, not blocked_stream: the call waits for the GPU") for n in
               record.notes)
    assert set(record.samples.phases) == {"a", "b"}


def test_blocked_stream_falls_back_on_the_cpu_and_without_triton(monkeypatch):
    from fp8bench.measure.runner import expand_cases

    (case,) = expand_cases([("gemm", ["32x32x32"])], ["bf16"], ["torch"], RunSettings(device="cpu"))
    s = RunSettings(device="cpu", timing=TimingSettings(policy=POLICY, warmup_s=0.0, blocked_stream=True),
                    energy=EnergySettings(enabled=False))
    record = CaseMeasurer(s, Device("cpu")).measure(case)
    assert record.status == "ok" and record.timing_mode == "cpu"
    assert "timed with cpu, not blocked_stream: blocked_stream timing holds a CUDA stream; cpu has none" in \
        record.notes
    monkeypatch.setattr(blocking.importlib.util, "find_spec", lambda name: None)
    timer, note = held_timer(GPU1, True, True)
    assert timer is None and note.startswith("timed with cuda_events, not blocked_stream: the spin kernel that "
                                             "holds the stream is a Triton kernel, and Triton is not installed")
    assert timing_mode_for(Device("cpu"), False, True) is TimingMode.CPU
    with pytest.raises(ValueError, match="--cuda-graph and --blocked-stream are two ways"):
        timing_mode_for(GPU1, True, True)


@pytest.fixture
def allocating_case(fake_cuda, chain):
    """A case whose timed call allocates its output (as every GEMM does) and whose output is checked after timing:
    the check keeps the last output alive while the next call allocates its own."""
    backend = Backend(name="test_fake_alloc", kind="custom", description="test backend that allocates its output")

    @backend.builder(KernelChain.name)
    def build(ctx):
        def end_to_end():
            out = ctx.inputs["x"].clone()  # the values (host floats) ...
            out.storage_block = fake_cuda.alloc(4 * ctx.shape["n"])  # ... and the device memory they would take
            fake_cuda.kernel(PHASE_S["a"], name="a")
            return out

        return Pipeline(end_to_end=end_to_end, phases={"a": end_to_end}, output=end_to_end)

    BACKENDS.add(backend.name, backend)
    yield Case(KernelChain.name, {"n": 8}, resolve_precision("bf16"), backend.name)
    BACKENDS.remove(backend.name)


def test_the_kept_output_allocates_in_warm_up_not_inside_a_held_sample(fake_cuda, fake_holds, allocating_case):
    """Warm-up and the held trial run what the samples run (the call with its output kept), so the allocator's
    second block is made before any hold; a cudaMalloc while held would make the spin give up (fake rule)."""
    record = CaseMeasurer(settings(), GPU1).measure(allocating_case)
    assert fake_cuda.mallocs_while_held == 0
    assert record.status == "ok", record.reason
    assert record.timing_mode == "blocked_stream"
    assert fake_cuda.mallocs == 2  # the fresh output's block, then one for the kept output alongside it


# -- two streams that cannot run side by side ------------------------------------------------------------------------
@pytest.mark.parametrize("variable", ["CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_LAUNCH_BLOCKING",
                                      "PYTORCH_NO_CUDA_MEMORY_CACHING"])
def test_an_environment_that_serializes_streams_is_refused_before_any_spin(fake_cuda, fake_holds, chain,
                                                                           monkeypatch, variable):
    """With one hardware queue (fake rule) the release queues behind the spin it should end; with blocking launches
    the spin's own launch waits for it; without the caching allocator every allocation in a held call is a cudaMalloc,
    which waits for the held stream. Every hold would wait out the give-up: refused by name, at once."""
    fake_cuda.hardware_queues = 1
    monkeypatch.setenv(variable, "1")
    record = CaseMeasurer(settings(), GPU1).measure(chain())
    assert sum(h.holds for h in fake_holds) == 0  # no spin launched, none waited out
    assert record.status == "ok" and record.timing_mode == "cuda_events"
    assert any(n.startswith(f"timed with cuda_events, not blocked_stream: {variable}=1 ") for n in record.notes), \
        record.notes


def test_streams_that_do_not_overlap_are_found_once_and_named(fake_cuda, fake_holds, chain):
    """One hardware queue without the variable that says so (an MPS client): an empty held call, before any case,
    shows that the release cannot reach the spin; the reason says so, not that the call synchronizes."""
    fake_cuda.hardware_queues = 1
    measurer, case = CaseMeasurer(settings(), GPU1), chain()
    records = [measurer.measure(case, seq=i) for i in range(2)]
    assert sum(h.holds for h in fake_holds) == 1  # the one probe: no case waits out a spin
    for record in records:
        assert record.status == "ok" and record.timing_mode == "cuda_events"
        assert any(n.startswith("timed with cuda_events, not blocked_stream: a release on a second stream did not "
                                "reach the held stream") for n in record.notes), record.notes


def test_a_give_up_during_sampling_retimes_the_case_with_events_not_skips_it(fake_cuda, fake_holds, chain):
    """A call that reads back to the host only now and then (every fifth call here, like a loss logged every N
    steps) passes the held trial and makes a later held sample give up: the case is then timed with cuda_events
    from its first sample, and says why, instead of being skipped."""
    calls = []
    case = chain()
    backend = BACKENDS.get(case.backend)
    build, supports = backend.builders[KernelChain.name]

    def build_sometimes_syncing(ctx):
        pipeline = build(ctx)

        def end_to_end():
            value = pipeline.end_to_end()
            calls.append(1)
            if len(calls) % 5 == 0:
                fake_cuda.item()
            return value

        return Pipeline(end_to_end=end_to_end, phases=pipeline.phases, output=pipeline.output,
                        returns=pipeline.returns)

    backend.builders[KernelChain.name] = (build_sometimes_syncing, supports)
    record = CaseMeasurer(settings(), GPU1).measure(case)
    assert record.status == "ok", record.reason
    assert record.timing_mode == "cuda_events" and record.samples.n >= POLICY.min_samples
    assert any(n.startswith("timed with cuda_events, not blocked_stream: a held sample gave up") for n in
               record.notes), record.notes


def test_a_call_of_more_launches_than_may_queue_behind_a_hold_is_not_held(fake_cuda, monkeypatch):
    """nvbench's blocking_kernel.cuh advises about 32 launches at most behind a blocked stream: a call of 40 is
    timed with events, and says why; one of 32 is held."""
    monkeypatch.setattr(blocking, "count_launches", fake_cuda.count_launches, raising=False)
    timer, fallback = BlockedStreamTimer(GPU1, FakeStreamHold(fake_cuda, 1)), CudaTimer(GPU1)
    chosen, mode, note = timer_for_calls(timer, fallback, [kernels_on(fake_cuda, device=1, seconds=(1e-6,) * 40)])
    assert (chosen, mode) == (fallback, TimingMode.CUDA_EVENTS)
    assert note == ("timed with cuda_events, not blocked_stream: a call submits 40 GPU operations, more than the 32 "
                    "that may safely queue behind a held stream")
    chosen, mode, note = timer_for_calls(timer, fallback, [kernels_on(fake_cuda, device=1, seconds=(1e-6,) * 32)])
    assert (chosen, mode, note) == (timer, TimingMode.BLOCKED_STREAM, None)
