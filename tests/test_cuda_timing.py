"""CUDA timing on the case's device, and the CUDA-graph timing mode.

CPU tests run fp8bench's CUDA paths (device guard, events, L2 flush, graph capture and replay, energy windows) on the
fake runtime of ``tests/fake_cuda_runtime.py``: torch's own ``torch.cuda.graph``/``stream``/``device`` code on top of a
fake of the layer below, with CUDA's refusals and a simulated clock. They prove the logic against the vendor's rules as
the fake encodes them, not that a GPU agrees: the ``gpu``-marked tests at the end run the same paths on real hardware.
"""

from __future__ import annotations

import time

import pytest
import torch
from fake_cuda_runtime import (
    CAPTURE_UNSUPPORTED,
    EVENT_RECORD_S,
    FLUSH_BYTES_PER_S,
    GRAPH_LAUNCH_S,
    H100_L2_BYTES,
    ILLEGAL_ADDRESS,
    LAUNCH_S,
    FakeCuda,
)

from fp8bench.core.cases import Case
from fp8bench.core.comparability import comparability_key
from fp8bench.core.devices import Device
from fp8bench.core.pipeline import Pipeline, TimedReturn, Unsupported
from fp8bench.core.plugins import BACKENDS, WORKLOADS, Backend, Workload, load_all
from fp8bench.core.precisions import resolve_precision
from fp8bench.core.records import TIMING_MODES, Record, case_key, load_record
from fp8bench.energy import meters as energy
from fp8bench.energy.meters import WindowMeter, WindowPolicy
from fp8bench.measure.cuda_graphs import CAPTURE_ERROR_MODE, WARMUP_CALLS, CaptureRefused, GraphCapturer
from fp8bench.measure.runner import CaseMeasurer
from fp8bench.measure.settings import EnergySettings, RunSettings, TimingSettings
from fp8bench.measure.timing import CudaTimer, SamplingPolicy, TimingMode, timing_mode_for

load_all()
GPU1 = Device("cuda", 1)
FLUSH_S = 2 * H100_L2_BYTES / FLUSH_BYTES_PER_S  # one L2 flush on the fake's device
POLICY = SamplingPolicy(min_samples=5, min_time_s=0.0, max_time_s=1.0)


@pytest.fixture
def fake_cuda(monkeypatch):
    """Two fake H100s; cuda:0 is current, as in a fresh process."""
    fake = FakeCuda(device_count=2)
    with fake.install(monkeypatch):
        yield fake


def kernels_on(fake, device=None, seconds=(1e-3,)):
    """A call launching one kernel per duration on ``device`` (``None``: the current device, as ``device="cuda"``
    tensors do; an index: as a tensor on that GPU does)."""
    def call():
        for i, s in enumerate(seconds):
            fake.kernel(s, device=device, name=f"k{i}")
    return call


# -- the timer runs on the case's device (a run on cuda:1 must time cuda:1) -------------------------------------------
def test_events_time_work_on_the_selected_gpu_not_the_current_one(fake_cuda):
    timer = CudaTimer(GPU1, flush_l2=False)
    t = timer.time(kernels_on(fake_cuda, device=1))
    # Without a flush one launch latency precedes the kernel (timing.py docstring).
    assert t == pytest.approx(1e-3 + LAUNCH_S, rel=1e-6)
    assert {op.device for op in fake_cuda.ops("event")} == {1}


def test_events_are_created_before_timing_not_inside_samples(fake_cuda):
    """torch creates a CUDA event on its first record (fake rule, c10/cuda/CUDAEvent.h): an end event made per
    sample is created after the call, on the host, while a short kernel has already finished: that creation would be
    GPU idle time inside the sample (``--no-l2-flush``, where no flush hides it)."""
    timer = CudaTimer(GPU1, flush_l2=False)
    created = fake_cuda.events_created
    samples = [timer.time(kernels_on(fake_cuda, device=1, seconds=(2e-6,))) for _ in range(3)]
    assert fake_cuda.events_created == created  # no event created while timing
    assert samples == pytest.approx([2e-6 + LAUNCH_S] * 3, rel=1e-9)  # one launch latency, nothing else


def test_work_that_names_no_device_runs_on_the_selected_gpu(fake_cuda):
    timer = CudaTimer(GPU1, flush_l2=False)
    timer.time(kernels_on(fake_cuda))
    assert [op.device for op in fake_cuda.ops("kernel")] == [1]
    assert fake_cuda.current == 0  # the guard restores the caller's device


def test_l2_flush_sized_from_the_selected_gpu_and_kept_out_of_the_sample(fake_cuda):
    timer = CudaTimer(GPU1, flush_l2=True)
    assert fake_cuda.properties_read == [1]
    assert timer._flush is not None and timer._flush.device == torch.device("cuda", 1)
    assert timer._flush.nbytes == 2 * H100_L2_BYTES
    t = timer.time(kernels_on(fake_cuda, device=1))
    flush, work = fake_cuda.ops("kernel")
    start, end = fake_cuda.ops("event")[-2:]  # the sample's (the timer recorded both once when made)
    assert flush.name == "zero_" and flush.device == 1 and flush.end_s - flush.start_s == pytest.approx(FLUSH_S)
    assert flush.end_s <= start.start_s <= work.start_s  # the flush completes before the sample starts
    assert t == pytest.approx(1e-3, rel=1e-9)  # the kernel alone: its launch hid behind the flush


# -- graph capture: warm-up and capture on a side stream of the case's GPU, refusals with the reason -----------------
def test_capture_warms_up_and_captures_on_a_side_stream_of_the_selected_gpu(fake_cuda):
    capturer = GraphCapturer(GPU1)
    call = capturer.capture("end_to_end", kernels_on(fake_cuda, seconds=(1e-5, 2e-5)))
    warm = [op for op in fake_cuda.ops("kernel")]
    assert len(warm) == 2 * WARMUP_CALLS and {(op.device, op.stream) for op in warm} == {(1, capturer.stream.stream_id)}
    assert capturer.stream.stream_id != 0
    (begin,) = fake_cuda.ops("capture_begin")
    assert (begin.device, begin.stream) == (1, capturer.stream.stream_id)
    assert call.graph.mode == CAPTURE_ERROR_MODE == "global"
    assert [name for name, _ in call.graph.nodes] == ["k0", "k1"]
    # One warm-up replay on cuda:1's default stream; the caller's device and streams are as they were.
    (replay,) = fake_cuda.ops("replay")
    assert (replay.device, replay.stream) == (1, 0)
    assert fake_cuda.current == 0 and fake_cuda.current_stream(1).stream_id == 0


def test_graph_replays_time_the_kernels_back_to_back_without_launch_gaps(fake_cuda):
    # Twenty 2 us kernels: launching each costs the host more than the GPU needs to run it.
    call = kernels_on(fake_cuda, device=1, seconds=(2e-6,) * 20)
    timer = CudaTimer(GPU1, flush_l2=True)
    eager = timer.time(call)
    graph = timer.time(GraphCapturer(GPU1).capture("end_to_end", call).replay)
    assert graph == pytest.approx(20 * 2e-6, rel=1e-9)  # the kernels alone: no gap, no flush, no launch
    # Eagerly, the launches that outlast the flush leave the GPU idle between kernels.
    expected_eager = EVENT_RECORD_S + 20 * LAUNCH_S + 2e-6 - FLUSH_S
    assert eager == pytest.approx(expected_eager, rel=1e-6) and eager > 1.5 * graph


def test_graph_replay_without_flush_includes_one_graph_launch(fake_cuda):
    call = GraphCapturer(GPU1).capture("end_to_end", kernels_on(fake_cuda, device=1, seconds=(2e-6,) * 4))
    assert CudaTimer(GPU1, flush_l2=False).time(call.replay) == pytest.approx(4 * 2e-6 + GRAPH_LAUNCH_S, rel=1e-9)


@pytest.mark.parametrize("sync", ["item", "synchronize", "stream_synchronize"])
def test_capture_refuses_a_call_that_synchronizes_with_the_host(fake_cuda, sync):
    def call():
        fake_cuda.kernel(1e-5)
        if sync == "item":
            fake_cuda.item()  # float(loss), .item(), .cpu()
        elif sync == "synchronize":
            torch.cuda.synchronize()  # a backend's device.synchronize()
        else:
            torch.cuda.current_stream().synchronize()

    capturer = GraphCapturer(GPU1)
    with pytest.raises(CaptureRefused) as refused:
        capturer.capture("end_to_end", call)
    reason = str(refused.value)
    # The first error, not capture_end's follow-up ("operation failed due to a previous error during capture").
    assert reason.startswith("cannot capture end_to_end in a CUDA graph: AcceleratorError: CUDA error: operation not "
                             "permitted when stream is capturing (the call synchronizes with the host")
    assert "previous error" not in reason and "\n" not in reason
    assert refused.value.__cause__.error_code == 901 and refused.value.__cause__.__context__.error_code == \
        CAPTURE_UNSUPPORTED
    # torch.cuda.graph leaves its stream current when capture_end raises; the capturer puts the caller's back.
    assert fake_cuda.current == 0 and fake_cuda.current_stream(1).stream_id == 0
    assert capturer.captured == []


def test_capture_refuses_a_call_whose_work_runs_on_another_gpu(fake_cuda):
    with pytest.raises(CaptureRefused, match=r"cannot capture gemm in a CUDA graph: it recorded no GPU work on cuda:1"):
        GraphCapturer(GPU1).capture("gemm", kernels_on(fake_cuda, device=0))


class KernelChain(Workload):
    """Two phases of fake kernels on the current device; records which device was current when inputs were made."""

    name = "test_kernel_chain"
    phases = ("a", "b")
    description = "test workload: two fake kernels"
    input_devices: list[int] = []

    def parse_shape(self, text):
        return {"n": int(text.split("=")[1])}

    def flops(self, shape):
        return 2 * shape["n"]

    def min_bytes(self, shape, precision):
        return 4 * shape["n"]

    def make_inputs(self, shape, device, seed):
        self.input_devices.append(torch.cuda.current_device())
        return {"x": torch.ones(shape["n"])}

    def reference(self, inputs):
        return inputs["x"].double()

    def memory_reason(self, shape, precision, device):
        return None  # a few host floats behind fake kernels: nothing that could exhaust memory


PHASE_S = {"a": 3e-4, "b": 5e-4}


def make_backend(fake, name="test_fake_gpu", host_sync_in=None, cold_s=None):
    """A backend whose phases launch fake kernels on the current device; ``host_sync_in`` names a phase (or
    ``end_to_end``) that also reads a value back to the host; ``cold_s`` maps a phase to its seconds when its data
    is not in the L2 (the fake's L2 rule; without it a phase takes its ``PHASE_S`` whatever the L2 holds)."""
    backend = Backend(name=name, kind="custom", description="test backend on the fake GPU")
    cold_s = cold_s or {}

    @backend.builder("test_kernel_chain")
    def build(ctx):
        def phase(p):
            def run():
                fake.kernel(PHASE_S[p], name=p, cold_s=cold_s.get(p))
                if host_sync_in == p:
                    fake.item()
            return run

        a, b = phase("a"), phase("b")

        def end_to_end():
            for p in ("a", "b"):
                fake.kernel(PHASE_S[p], name=p, cold_s=cold_s.get(p))
            if host_sync_in == "end_to_end":
                fake.item()

        return Pipeline(end_to_end=end_to_end, phases={"a": a, "b": b}, output=lambda: ctx.inputs["x"].clone(),
                        returns=TimedReturn.other("nothing: fake kernels compute no values"))

    return backend


@pytest.fixture
def chain(fake_cuda):
    KernelChain.input_devices = []
    WORKLOADS.add(KernelChain.name, KernelChain())
    added = []

    def backend(**kwargs):
        b = make_backend(fake_cuda, **kwargs)
        BACKENDS.add(b.name, b)
        added.append(b.name)
        return Case(KernelChain.name, {"n": 8}, resolve_precision("bf16"), b.name)

    yield backend
    WORKLOADS.remove(KernelChain.name)
    for name in added:
        BACKENDS.remove(name)


def settings(**timing):
    return RunSettings(device="cuda:1", timing=TimingSettings(budget_s=30, policy=POLICY, warmup_s=0.0, **timing),
                       energy=EnergySettings(enabled=False))


def test_runner_measures_a_case_entirely_on_its_gpu(fake_cuda, chain):
    case = chain()
    record = CaseMeasurer(settings(), GPU1).measure(case)
    assert record.status == "ok", record.reason
    assert KernelChain.input_devices == [1]
    assert {op.device for op in fake_cuda.log if op.kind in ("kernel", "event", "sync")} == {1}
    assert record.timing_mode == "cuda_events" and record.l2_flushed is True
    # Two kernels, both launched while the flush runs: the sample is their sum.
    assert record.samples.median_s == pytest.approx(PHASE_S["a"] + PHASE_S["b"], rel=1e-9)
    assert record.samples.phases == pytest.approx(PHASE_S, rel=1e-9)
    assert fake_cuda.current == 0


def test_a_sticky_cuda_error_ends_the_device_for_the_rest_of_the_run(fake_cuda, chain):
    """After an illegal address every CUDA call of the process fails with it (fake rule, CUDA Runtime API,
    cudaErrorIllegalAddress): the later cases are recorded as not run, with the case that broke the context, never
    as failures of their own carrying the first case's error."""
    faulting = chain(name="test_fake_faulting")
    backend = BACKENDS.get(faulting.backend)
    build, supports = backend.builders[KernelChain.name]

    def faulting_build(ctx):
        pipeline = build(ctx)
        return Pipeline(end_to_end=lambda: fake_cuda.fault(ILLEGAL_ADDRESS), phases=pipeline.phases,
                        output=pipeline.output)

    backend.builders[KernelChain.name] = (faulting_build, supports)
    healthy = chain()
    measurer = CaseMeasurer(settings(), GPU1)
    first, second, third = (measurer.measure(case, seq=i) for i, case in enumerate([faulting, healthy, healthy]))
    assert first.status == "failed" and "an illegal memory access was encountered" in first.reason
    for later in (second, third):
        assert (later.status, later.reason.split(":")[0]) == ("skipped", "not run")
        assert later.reason.startswith("not run: CUDA context lost after case 0 (AcceleratorError: CUDA error: an "
                                       "illegal memory access was encountered)")


@pytest.mark.parametrize("rewrap", [RuntimeError, Unsupported], ids=["library-error", "refusal"])
def test_a_lost_context_is_found_whatever_error_a_library_raises_first(fake_cuda, chain, rewrap):
    """A library (cuBLAS, TE, NCCL) may report the fault in words of its own, or a builder may turn it into a
    refusal: the device itself, one synchronize later, says the context is lost."""
    faulting = chain(name="test_fake_faulting_rewrapped")
    backend = BACKENDS.get(faulting.backend)
    build, supports = backend.builders[KernelChain.name]

    def end_to_end():
        try:
            fake_cuda.fault(ILLEGAL_ADDRESS)
        except RuntimeError as exc:
            raise rewrap("CUBLAS_STATUS_EXECUTION_FAILED when calling cublasLtMatmul") from exc

    def faulting_build(ctx):
        pipeline = build(ctx)
        return Pipeline(end_to_end=end_to_end, phases=pipeline.phases, output=pipeline.output)

    backend.builders[KernelChain.name] = (faulting_build, supports)
    measurer = CaseMeasurer(settings(), GPU1)
    first, later = (measurer.measure(case, seq=i) for i, case in enumerate([faulting, chain()]))
    assert first.status in ("failed", "skipped") and "CUBLAS_STATUS_EXECUTION_FAILED" in first.reason
    assert later.status == "skipped" and later.reason.startswith("not run: CUDA context lost after case 0")


def test_runner_times_graph_replays_and_releases_the_graphs(fake_cuda, chain):
    case = chain()
    record = CaseMeasurer(settings(cuda_graph=True), GPU1).measure(case)
    assert record.status == "ok", record.reason
    assert record.timing_mode == "cuda_graph" and record.l2_flushed is True
    assert record.samples.median_s == pytest.approx(PHASE_S["a"] + PHASE_S["b"], rel=1e-9)
    assert record.samples.phases == pytest.approx(PHASE_S, rel=1e-9)
    replays = fake_cuda.ops("replay")
    assert {r.name for r in replays} == {"a+b", "a", "b"} and {r.device for r in replays} == {1}
    assert len(replays) >= 3 * (POLICY.min_samples + 1)  # every sample a replay, after one warm-up replay each
    assert fake_cuda.graphs_reset == 3 and record.timing.graph_capture_s >= 0
    assert {op.device for op in fake_cuda.log} == {1}


def test_runner_skips_a_case_that_cannot_be_captured_and_says_why(fake_cuda, chain):
    record = CaseMeasurer(settings(cuda_graph=True), GPU1).measure(chain(host_sync_in="end_to_end"))
    assert record.status == "skipped" and record.samples.median_s is None and record.samples.samples_s == []
    assert record.reason.startswith("cannot capture end_to_end in a CUDA graph: AcceleratorError: CUDA error: "
                                    "operation not permitted when stream is capturing")
    assert record.timing_mode == "cuda_graph"


def test_runner_leaves_out_a_phase_that_cannot_be_captured(fake_cuda, chain):
    # Only phase b, timed alone, reads back; the end-to-end call does not.
    record = CaseMeasurer(settings(cuda_graph=True), GPU1).measure(chain(host_sync_in="b"))
    assert record.status == "ok" and set(record.samples.phases) == {"a"}
    assert any(n.startswith("phase b not timed: cannot capture b in a CUDA graph: AcceleratorError") for n in
               record.notes)
    assert fake_cuda.graphs_reset == 2


def test_energy_window_loops_the_replays_on_the_selected_gpu(fake_cuda, chain, monkeypatch):
    # A counter reading 300 W of simulated time: it advances with every launch.
    meter = WindowMeter("test_counter", counter=lambda: 300.0 * fake_cuda.host_s,
                        policy=WindowPolicy(min_window_s=0.02, max_window_s=1.0))
    monkeypatch.setattr(energy, "_FACTORIES", [lambda device: meter])
    s = RunSettings(device="cuda:1", timing=TimingSettings(budget_s=30, policy=POLICY, warmup_s=0.0, cuda_graph=True),
                    energy=EnergySettings(enabled=True))
    before = len(fake_cuda.ops("replay"))
    record = CaseMeasurer(s, GPU1).measure(chain())
    assert record.status == "ok" and record.energy.iterations > 0
    replays = [op for op in fake_cuda.ops("replay")[before:] if op.name == "a+b"]
    assert len(replays) >= record.energy.iterations + record.samples.n  # the window looped replays, not eager calls
    assert {op.device for op in fake_cuda.log} == {1}


def test_energy_window_runs_its_calls_on_the_metered_gpu(fake_cuda):
    meter = WindowMeter("test_counter", counter=lambda: 300.0 * fake_cuda.host_s,
                        policy=WindowPolicy(min_window_s=0.01, max_window_s=1.0))
    reading = meter.measure(kernels_on(fake_cuda, seconds=(1e-4,)), GPU1, 1e-4)
    assert reading.iterations > 0
    assert {op.device for op in fake_cuda.log if op.kind in ("kernel", "sync")} == {1}


def test_cuda_graph_timing_is_refused_on_the_cpu():
    with pytest.raises(ValueError, match=r"CUDA-graph timing needs a CUDA device; this run is on cpu"):
        CaseMeasurer(RunSettings(device="cpu", timing=TimingSettings(cuda_graph=True)), Device("cpu"))
    assert timing_mode_for(Device("cpu"), False) is TimingMode.CPU
    assert timing_mode_for(GPU1, False) is TimingMode.CUDA_EVENTS
    assert timing_mode_for(GPU1, True) is TimingMode.CUDA_GRAPH


def test_run_verb_refuses_cuda_graph_on_the_cpu_before_writing_anything(tmp_path, capsys):
    from fp8bench.cli import main

    out = tmp_path / "run.json"
    code = main(["run", "--device", "cpu", "--cuda-graph", "--shape", "16x16x16", "--precision", "bf16",
                 "--no-store", "--out", str(out)])
    assert code == 2 and not out.exists()
    assert "CUDA-graph timing needs a CUDA device; this run is on cpu" in capsys.readouterr().err


def test_run_verb_reports_the_timing_mode(tmp_path, capsys):
    import json

    from fp8bench.cli import main

    code = main(["run", "--device", "cpu", "--shape", "16x16x16", "--precision", "bf16", "--no-store", "--json",
                 "--no-energy", "--min-samples", "3", "--max-time", "0.05", "--out", str(tmp_path / "run.json")])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and summary["timing_mode"] == "cpu"
    assert [r["timing_mode"] for r in summary["records"]] == ["cpu"]


# -- records, the comparability key and the dashboard keep graph and eager figures apart ----------------------------
def test_timing_modes_are_one_list():
    assert {m.value for m in TimingMode} == set(TIMING_MODES)
    with pytest.raises(ValueError, match="record timing mode 'graph'; accepted: cpu, cuda_events, cuda_graph"):
        Record("gemm", {"m": 1}, "bf16", "torch", "cuda:0", "ok", timing_mode="graph")


def _record(**fields):
    return load_record({"workload": "gemm", "shape": {"m": 64, "n": 64, "k": 64}, "precision": "bf16",
                        "backend": "torch", "device": "cuda", "status": "ok", "fp8_format": None, **fields})


def test_comparability_key_separates_graph_from_eager_and_keeps_eager_keys():
    run = {"device": {"name": "NVIDIA H100 80GB HBM3"}, "settings": {"flush_l2": True, "seed": 0, "threads": None}}
    legacy = comparability_key(_record(), run)  # written before records carried a timing mode
    eager = comparability_key(_record(timing_mode="cuda_events", l2_flushed=True), run)
    graph = comparability_key(_record(timing_mode="cuda_graph", l2_flushed=True), run)
    assert eager == legacy
    assert set(graph.differences(eager)) == {"case", "definition_hash"}
    assert graph.case == eager.case + " cuda_graph"


def test_gate_never_compares_graph_with_eager():
    from fp8bench.analysis.gate.report import gate
    from tests.gate_fixtures import payload, record

    eager = record(64, "bf16", [1e-3] * 12)
    graph = {**record(64, "bf16", [2e-3] * 12), "timing_mode": "cuda_graph"}  # twice as slow: not a verdict
    report = gate([payload("base", [eager])], [payload("cand", [graph])])
    verdicts = {c.case: c.verdict for c in report.cases}
    # Two different cases: the eager one is absent from the candidate (missing, which fails unless allowed).
    assert verdicts == {case_key(eager): "missing", case_key(graph): "new"}


def test_store_queries_and_dashboard_label_graph_records_apart(results_dir):
    from fp8bench.analysis.selection import LATEST_CLASSES
    from fp8bench.results.store import open_store
    from fp8bench.results.store.queries import GRAPH_LABEL, RecordFilter, filter_options, latest_records
    from tests.gate_fixtures import payload, record

    store = open_store(results_dir)
    eager = record(64, "bf16", [1e-3] * 3)
    graph = {**record(64, "bf16", [4e-4] * 3), "timing_mode": "cuda_graph"}
    store.ingest_run(payload("r1", [eager, graph]))
    speed = {"speed": LATEST_CLASSES["speed"]}
    latest = latest_records(store, speed)
    labels = dict(zip(latest["timing_mode"].fillna("eager"), latest["device_label"], strict=True))
    assert labels == {"eager": "Test CPU", "cuda_graph": "Test CPU" + GRAPH_LABEL}  # two rows, never one
    assert set(filter_options(store)["device_label"]) == {"Test CPU", "Test CPU" + GRAPH_LABEL}
    only_graph = latest_records(store, speed, RecordFilter(device=("Test CPU" + GRAPH_LABEL,)))
    assert list(only_graph["timing_mode"]) == ["cuda_graph"]
    pytest.importorskip("streamlit")
    from fp8bench.dashboard.data import enrich

    assert set(enrich(latest)["device_label"]) == set(labels.values())


def test_cpu_records_say_cpu_timing_without_flush():
    from fp8bench.measure.runner import expand_cases

    (case,) = expand_cases([("gemm", ["32x32x32"])], ["bf16"], ["torch"], RunSettings(device="cpu"))
    record = CaseMeasurer(RunSettings(device="cpu", timing=TimingSettings(policy=POLICY, warmup_s=0.0),
                                      energy=EnergySettings(enabled=False)),
                          Device("cpu")).measure(case)
    assert record.status == "ok" and record.timing_mode == "cpu" and record.l2_flushed is False


# -- on a real GPU (skipped without one) ----------------------------------------------------------------------------
def _last_gpu() -> Device:
    return Device("cuda", torch.cuda.device_count() - 1)


@pytest.mark.gpu
def test_gpu_events_time_the_selected_gpu():
    device = _last_gpu()
    a = torch.randn(2048, 2048, device=device.torch)
    before = torch.cuda.current_device()
    timer = CudaTimer(device, flush_l2=True)
    timer.time(lambda: a @ a)
    t_event = min(timer.time(lambda: a @ a) for _ in range(5))
    torch.cuda.synchronize(device.torch)
    started = time.perf_counter()
    for _ in range(20):
        a @ a
    torch.cuda.synchronize(device.torch)
    t_wall = (time.perf_counter() - started) / 20
    assert torch.cuda.current_device() == before
    # Generous bounds, a correctness check: events recorded on another GPU's idle stream read microseconds.
    assert 0.5 * t_wall <= t_event <= 2 * t_wall


@pytest.mark.gpu
def test_gpu_capture_refuses_a_host_synchronization():
    device = _last_gpu()
    x = torch.randn(1024, device=device.torch)
    with pytest.raises(CaptureRefused, match="operation not permitted when stream is capturing"):
        GraphCapturer(device).capture("end_to_end", lambda: float((x * 2).sum()))
    assert torch.cuda.current_stream(device.cuda_index) == torch.cuda.default_stream(device.cuda_index)


@pytest.mark.gpu
def test_gpu_graph_mode_runs_a_gemm_case():
    device = _last_gpu()
    from fp8bench.measure.runner import expand_cases

    s = RunSettings(device=str(device), timing=TimingSettings(budget_s=20, policy=POLICY, cuda_graph=True),
                    energy=EnergySettings(enabled=False))
    (case,) = expand_cases([("gemm", ["1024x1024x1024"])], ["bf16"], ["torch"], s)
    graph = CaseMeasurer(s, device).measure(case)
    eager = CaseMeasurer(RunSettings(device=str(device), timing=TimingSettings(budget_s=20, policy=POLICY),
                                     energy=EnergySettings(enabled=False)), device).measure(case)
    assert graph.status == eager.status == "ok", (graph.reason, eager.reason)
    assert graph.timing_mode == "cuda_graph" and eager.timing_mode == "cuda_events"
    assert 0 < graph.samples.median_s <= 2 * eager.samples.median_s  # sanity only: speed is reported, not asserted
