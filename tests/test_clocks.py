"""Clocks under control (fp8bench/hardware/clocks.py): --lock-clocks through NVML, and samples at a throttled clock
discarded and retaken.

NVML is the fake of ``tests/fake_nvml.py`` (an autospec of the real nvidia-ml-py surface, so a call the release
lacks or a wrong signature fails), the GPU the fake CUDA runtime of ``tests/fake_cuda_runtime.py``. No GPU and no
root were involved: the lock has never been set on hardware here.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import test_cuda_timing
from fake_nvml import FakeGpu, make_pynvml
from test_cuda_timing import GPU1, POLICY

from fp8bench.core.devices import Device
from fp8bench.energy import meters as energy
from fp8bench.energy.telemetry import Sample
from fp8bench.hardware import clocks
from fp8bench.hardware.clocks import (
    MAX_CONSECUTIVE_DISCARDS,
    RECOVERY_DELAY_S,
    THROTTLE_THRESHOLD,
    ClockCheckedTimer,
    ClockLock,
    ClockLockRefused,
    lock_clocks,
)
from fp8bench.measure.runner import CaseMeasurer, run_cases
from fp8bench.measure.settings import ClockSettings, EnergySettings, RunSettings, TimingSettings
from fp8bench.results.runfile import read_run_file

fake_cuda, chain = test_cuda_timing.fake_cuda, test_cuda_timing.chain  # fixtures, shared
FLOOR_RELEASE = "12.535.77"  # the oldest nvidia-ml-py pyproject.toml allows (tests/data/pynvml)


# -- locking -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("release", [None, FLOOR_RELEASE])
@pytest.mark.parametrize("policy", ["base", "max"])
def test_lock_sets_and_resets_through_nvml(release, policy):
    gpu = FakeGpu()
    nv = make_pynvml(gpu, release)
    nv.nvmlInit()  # the test's own session (the fake counts them, as the driver does)
    handle = nv.nvmlDeviceGetHandleByIndex(0)
    with ClockLock(nv, handle, policy) as lock:
        assert lock.locked
        expected = nv.NVML_CLOCK_LIMIT_ID_TDP if policy == "base" else gpu.max_sm_clock_mhz
        nv.nvmlDeviceSetGpuLockedClocks.assert_called_once_with(handle, expected, expected)
        nv.nvmlDeviceResetGpuLockedClocks.assert_not_called()
    nv.nvmlDeviceResetGpuLockedClocks.assert_called_once_with(handle)
    assert lock.environment()["policy"] == policy and lock.environment()["locked"] is False


def test_lock_is_reset_on_ctrl_c_inside_it():
    nv = make_pynvml(FakeGpu())
    nv.nvmlInit()
    handle = nv.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(KeyboardInterrupt), ClockLock(nv, handle, "base"):
        raise KeyboardInterrupt
    nv.nvmlDeviceResetGpuLockedClocks.assert_called_once_with(handle)


@pytest.mark.parametrize(("error", "words"), [
    ("NVMLError_NoPermission", r"needs root \(NVML: no permission\); run as root"),
    ("NVMLError_NotSupported", "cannot lock its clocks"),
])
def test_lock_refusals_say_why(error, words):
    nv = make_pynvml(FakeGpu())
    nv.nvmlDeviceSetGpuLockedClocks.side_effect = getattr(nv, error)(
        {"NVMLError_NoPermission": nv.NVML_ERROR_NO_PERMISSION,
         "NVMLError_NotSupported": nv.NVML_ERROR_NOT_SUPPORTED}[error])
    closed = []
    nv.nvmlInit()
    with pytest.raises(ClockLockRefused, match=words):
        ClockLock(nv, nv.nvmlDeviceGetHandleByIndex(0), "max", close=lambda: closed.append(1)).__enter__()
    assert closed == [1]  # NVML is shut down again
    with pytest.raises(ClockLockRefused, match="this run is on cpu"):
        lock_clocks(Device("cpu"), "base")
    with pytest.raises(ClockLockRefused, match="--lock-clocks 'turbo'; accepted: base, max"):
        lock_clocks(Device("cpu"), "turbo")


def test_a_crashing_process_resets_the_lock_at_exit(tmp_path):
    """An error nothing catches: the interpreter's exit runs the reset (atexit)."""
    script = textwrap.dedent("""
        import sys
        from types import SimpleNamespace
        from fp8bench.hardware.clocks import ClockLock

        class NVMLError(Exception):
            pass

        nv = SimpleNamespace(NVML_CLOCK_LIMIT_ID_TDP=0xFFFFFF01, NVMLError=NVMLError, NVMLError_NoPermission=NVMLError,
                             NVMLError_NotSupported=NVMLError, NVML_CLOCK_SM=1,
                             nvmlDeviceGetClockInfo=lambda h, t: 1590,
                             nvmlDeviceSetGpuLockedClocks=lambda h, lo, hi: print("set", lo, hi, flush=True),
                             nvmlDeviceResetGpuLockedClocks=lambda h: print("reset", flush=True))
        ClockLock(nv, "handle", "base").__enter__()
        raise RuntimeError("a crash")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "RuntimeError: a crash" in proc.stderr
    assert proc.stdout.splitlines() == [f"set {0xFFFFFF01} {0xFFFFFF01}", "reset"]


def test_run_records_the_lock_and_resets_it_after_a_ctrl_c(fake_cuda, chain, monkeypatch, tmp_path):
    gpu = FakeGpu()
    nv = make_pynvml(gpu)
    nv.nvmlInit()
    monkeypatch.setattr(clocks, "lock_clocks", lambda device, policy: ClockLock(
        nv, nv.nvmlDeviceGetHandleByIndex(0), policy).__enter__())
    monkeypatch.setattr("fp8bench.measure.runner.lock_clocks", clocks.lock_clocks)
    case = chain()
    s = RunSettings(device="cuda:1", timing=TimingSettings(budget_s=30, policy=POLICY, warmup_s=0.0),
                    energy=EnergySettings(enabled=False), clocks=ClockSettings(lock="max"))

    def interrupt(i, _case):
        if i == 1:
            raise KeyboardInterrupt

    outcome = run_cases([case, case], s, GPU1, run_file=tmp_path / "run.json", on_start=interrupt)
    assert outcome.interrupted and len(outcome.records) == 1
    header = read_run_file(tmp_path / "run.json")["run"]
    assert header["clock_lock"] == {"policy": "max", "min_mhz": 1980, "max_mhz": 1980, "locked": True,
                                    "via": "nvmlDeviceSetGpuLockedClocks", "read_back_mhz": None,
                                    "reference_mhz": 1980, "reference_source": "lock target"}
    assert header["gpu"]["clock_policy"] == "locked:1980"
    nv.nvmlDeviceResetGpuLockedClocks.assert_called_once()


# -- the reference clock under a lock ------------------------------------------------------------------------------
def _loading(gpu):
    """A load that brings ``gpu`` out of idle until its waiter is called (what clocks.busy does to a real GPU)."""
    def load():
        before, gpu.idle = gpu.idle, False

        def wait():
            gpu.idle = before
        return wait
    return load


def _locked_idle_gpu(policy, **kwargs):
    gpu = FakeGpu(idle=True, sm_clock_mhz=1980, max_sm_clock_mhz=1980, base_sm_clock_mhz=1590, **kwargs)
    nv = make_pynvml(gpu)
    nv.nvmlInit()
    lock = ClockLock(nv, nv.nvmlDeviceGetHandleByIndex(0), policy)
    lock.load = _loading(gpu)
    lock.pause = lambda seconds: None
    return gpu, lock.__enter__()


def test_a_base_lock_on_an_idle_gpu_reads_its_clock_back_under_load():
    """Idle, the locked GPU reports 345 MHz (nvmlDeviceGetClockInfo is the current clock, and NVML has no getter
    for the locked range): read then, it would be a reference that no throttled sample falls under."""
    gpu, lock = _locked_idle_gpu("base")
    assert lock.clock_mhz == 1590
    assert lock.setting["read_back_mhz"] == 1590 and lock.setting["reference_source"] == "read back under load"
    assert gpu.idle  # the load is over
    lock.reset()


def test_a_max_lock_takes_its_target_as_the_reference_whatever_it_reads_back():
    gpu, lock = _locked_idle_gpu("max")
    assert lock.clock_mhz == 1980 and lock.setting["reference_source"] == "lock target"
    lock.reset()


def test_a_base_lock_read_back_idle_or_slowed_falls_back_to_the_device_reference_and_says_why():
    gpu = FakeGpu(idle=True, base_sm_clock_mhz=1590)
    nv = make_pynvml(gpu)
    nv.nvmlInit()
    lock = ClockLock(nv, nv.nvmlDeviceGetHandleByIndex(0), "base", load=lambda: lambda: None,
                     pause=lambda seconds: None).__enter__()  # a load that never reached the GPU
    assert lock.clock_mhz is None
    assert "gpu_idle" in lock.setting["reference_source"] and "345 MHz" in lock.setting["reference_source"]
    lock.reset()
    gpu.idle, gpu.reasons = False, 0x040  # hardware thermal slowdown: not the locked clock either
    lock = ClockLock(nv, nv.nvmlDeviceGetHandleByIndex(0), "base", load=lambda: lambda: None,
                     pause=lambda seconds: None).__enter__()
    assert lock.clock_mhz is None and "hw_thermal_slowdown" in lock.setting["reference_source"]
    lock.reset()
    without_load = ClockLock(nv, nv.nvmlDeviceGetHandleByIndex(0), "base").__enter__()
    assert without_load.clock_mhz is None and "no load" in without_load.setting["reference_source"]
    without_load.reset()


class _DrainingLoad:
    """A load the GPU finishes after ``busy_reads`` readings, on a driver without the GpuIdle bit (nvml.h of NVML
    API 13, go-nvml 2f9e261, :3319-3322: "may be removed in a later release"): its idle clock then reads as a clock
    with no reason. ``running`` answers as ``torch.cuda.current_stream().query()`` would, negated."""

    def __init__(self, gpu, busy_reads):
        self.gpu, self.left = gpu, busy_reads

    def __call__(self):
        self.gpu.idle = False
        return self

    def pause(self, seconds):  # the wait before each reading: the queue drains meanwhile
        self.gpu.idle = self.left <= 0
        self.left -= 1

    def running(self):
        return not self.gpu.idle

    def wait(self):
        self.gpu.idle = True


def test_a_base_lock_keeps_only_readings_taken_while_the_load_still_ran():
    """The queue drained after two of five readings (the depth of the launch queue is the driver's: nvbench
    blocking_kernel.cuh :82-84), and the driver sets no GpuIdle bit: the three idle readings must not count."""
    gpu = FakeGpu(idle=True, base_sm_clock_mhz=1590, idle_reason_bit=False)
    nv = make_pynvml(gpu)
    nv.nvmlInit()
    load = _DrainingLoad(gpu, busy_reads=2)
    lock = ClockLock(nv, nv.nvmlDeviceGetHandleByIndex(0), "base", load=load, pause=load.pause).__enter__()
    assert lock.clock_mhz == 1590, lock.setting
    lock.reset()


def test_a_base_lock_rejects_a_reading_far_under_the_median_of_the_others():
    gpu = FakeGpu(base_sm_clock_mhz=1590)
    nv = make_pynvml(gpu)
    nv.nvmlInit()
    clocks = iter([1590, 1590, 600, 1590, 1590])
    nv.nvmlDeviceGetClockInfo.side_effect = lambda h, t: next(clocks) if t == nv.NVML_CLOCK_SM else 2619
    lock = ClockLock(nv, nv.nvmlDeviceGetHandleByIndex(0), "base", load=lambda: lambda: None,
                     pause=lambda seconds: None).__enter__()
    assert lock.clock_mhz == 1590 and "600 MHz far under" in lock.setting["reference_source"], lock.setting
    lock.reset()


def test_a_load_that_fails_while_locked_resets_the_lock_before_raising():
    gpu = FakeGpu()
    nv = make_pynvml(gpu)
    nv.nvmlInit()

    def failing_load():
        raise RuntimeError("out of memory")
    with pytest.raises(RuntimeError, match="out of memory"):
        ClockLock(nv, nv.nvmlDeviceGetHandleByIndex(0), "base", load=failing_load).__enter__()
    assert gpu.locked_sm_clock_mhz is None


def test_a_max_lock_read_back_far_under_its_target_is_noted():
    gpu = FakeGpu(max_sm_clock_mhz=1980, reasons=0x040)
    nv = make_pynvml(gpu)
    nv.nvmlInit()
    gpu.sm_clock_mhz = 1100  # what the board runs at under the lock, held down by heat
    nv.nvmlDeviceSetGpuLockedClocks.side_effect = lambda h, lo, hi: None  # a lock the heat overrides
    lock = ClockLock(nv, nv.nvmlDeviceGetHandleByIndex(0), "max", load=lambda: lambda: None,
                     pause=lambda seconds: None).__enter__()
    assert lock.clock_mhz == 1980 and "1100 MHz" in lock.setting["read_back_note"]
    lock.reset()


# -- per-sample clock check ----------------------------------------------------------------------------------------
def test_defaults_are_nvbenchs():
    assert THROTTLE_THRESHOLD == 0.75 and RECOVERY_DELAY_S == 0.05


def test_a_throttled_sample_is_discarded_and_retaken_after_a_recovery_delay():
    clocks_read = iter([1980, 900, 1000, 1980, 1980])
    slept = []
    timer = ClockCheckedTimer(inner=type("T", (), {"time": lambda self, fn: fn()})(),
                              read=lambda: Sample(0.0, sm_clock_mhz=next(clocks_read), power_w=650.0),
                              reference_clock_mhz=1755.0, sleep=slept.append)
    calls = []
    for i in range(3):
        timer.time(lambda i=i: calls.append(i) or 1e-3)
    # Sample 2 was read at 900 and 1000 MHz (under 75% of 1755): two discards, delays doubling, then kept.
    assert calls == [0, 1, 1, 1, 2] and slept == [RECOVERY_DELAY_S, 2 * RECOVERY_DELAY_S]
    record = timer.take_record()
    assert record["discarded_samples"] == 2 and record["sample_sm_clock_mhz"] == [1980, 1980, 1980]
    assert record["sample_power_w"] == [650.0] * 3 and record["kept_throttled"] is False


def test_samples_whose_power_came_from_two_sources_are_recorded_as_mixed():
    from fp8bench.energy.telemetry import PowerSource

    sources = iter([PowerSource.INSTANT, None, PowerSource.USAGE])
    timer = ClockCheckedTimer(inner=type("T", (), {"time": lambda self, fn: fn()})(),
                              read=lambda: Sample(0.0, sm_clock_mhz=1980, power_w=600.0, power_source=next(sources)),
                              reference_clock_mhz=1755.0, sleep=lambda s: None)
    for _ in range(3):
        timer.time(lambda: 1e-3)
    assert timer.take_record()["sample_power_source"] == "mixed"


def nvml_on_fake_gpu(monkeypatch, gpu):
    nv = make_pynvml(gpu)
    monkeypatch.setattr(energy, "_FACTORIES", [lambda device: energy.nvml_meter(device, nv=nv)])
    return nv


def test_simulated_throttle_mid_run_discards_and_retakes_samples(fake_cuda, chain, monkeypatch):
    """The GPU drops to 900 MHz at its 10th kernel and recovers during the recovery delay."""
    gpu = FakeGpu(sm_clock_mhz=1980, default_sm_clock_mhz=1755)
    nvml_on_fake_gpu(monkeypatch, gpu)
    slept = []

    def recover(seconds):
        slept.append(seconds)
        gpu.sm_clock_mhz = 1980

    monkeypatch.setattr(clocks, "_sleep", recover)
    launches = [0]
    kernel = fake_cuda.kernel

    def throttling_kernel(*args, **kwargs):
        launches[0] += 1
        if launches[0] == 10:  # the 3rd end-to-end sample (4 warm-up launches before)
            gpu.sm_clock_mhz = 900
        return kernel(*args, **kwargs)

    monkeypatch.setattr(fake_cuda, "kernel", throttling_kernel)
    s = RunSettings(device="cuda:1", timing=TimingSettings(budget_s=30, policy=POLICY, warmup_s=0.0, flush_l2=False),
                    energy=EnergySettings(enabled=False))
    record = CaseMeasurer(s, GPU1).measure(chain())
    assert record.status == "ok", record.reason
    assert record.samples.discarded_samples == 1 and slept == [RECOVERY_DELAY_S]
    per_sample = record.telemetry.per_sample
    n = record.samples.n
    assert len(per_sample["sample_sm_clock_mhz"]) == n and set(per_sample["sample_sm_clock_mhz"]) == {1980}
    assert per_sample["reference_sm_clock_mhz"] == 1755 and per_sample["sample_power_w"] == [300.0] * n


def test_a_device_that_stays_throttled_is_not_waited_for_and_ends_invalid(fake_cuda, chain, monkeypatch):
    gpu = FakeGpu(sm_clock_mhz=900, default_sm_clock_mhz=1755)
    nvml_on_fake_gpu(monkeypatch, gpu)
    slept = []
    monkeypatch.setattr(clocks, "_sleep", slept.append)
    s = RunSettings(device="cuda:1", timing=TimingSettings(budget_s=30, policy=POLICY, warmup_s=0.0, flush_l2=False),
                    energy=EnergySettings(enabled=False))
    record = CaseMeasurer(s, GPU1).measure(chain())
    # Three discards in a row for the end-to-end samples and three for the phases, then each keeps its samples and
    # stops checking: at the default delay 0.35 s of waiting each, not the case's budget.
    discards = 2 * MAX_CONSECUTIVE_DISCARDS
    assert record.samples.discarded_samples == discards and len(slept) == discards
    assert record.telemetry.per_sample["kept_throttled"] is True
    assert record.status == "invalid" and "median SM clock 900 MHz" in record.reason


def test_run_verb_refuses_lock_clocks_on_the_cpu_before_writing_anything(tmp_path, capsys):
    from fp8bench.cli import main

    out = tmp_path / "run.json"
    code = main(["run", "--device", "cpu", "--lock-clocks", "base", "--shape", "16x16x16", "--precision", "bf16",
                 "--no-store", "--out", str(out)])
    assert code == 2 and not out.exists()
    assert "--lock-clocks locks an NVIDIA GPU's clocks through NVML; this run is on cpu" in capsys.readouterr().err


# -- one power-cap rule ----------------------------------------------------------------------------------------------
SW_POWER_CAP, SW_THERMAL = 0x004, 0x020


def _timer(readings, slept):
    it = iter(readings)

    def read():
        clock, mask = next(it)
        return Sample(0.0, sm_clock_mhz=clock, power_w=700.0, reasons_mask=mask)
    return ClockCheckedTimer(inner=type("T", (), {"time": lambda self, fn: fn()})(), read=read,
                             reference_clock_mhz=1755.0, sleep=slept.append)


def test_a_power_capped_sample_is_kept_with_its_clock_never_retaken():
    """1200 MHz is 68 % of the reference, under nvbench's 75 %: with the power-cap bit alone it is the board's
    legitimate state, kept with its clock; a thermal slowdown at the same clock is retaken."""
    slept, calls = [], []
    timer = _timer([(1980, 0), (1200, SW_POWER_CAP), (1980, 0), (1980, 0)], slept)
    for i in range(3):
        timer.time(lambda i=i: calls.append(i) or 1e-3)
    assert calls == [0, 1, 2] and slept == []
    record = timer.take_record()
    assert record["sample_sm_clock_mhz"] == [1980, 1200, 1980] and record["discarded_samples"] == 0
    timer = _timer([(1200, SW_POWER_CAP | SW_THERMAL), (1980, 0)], slept)
    timer.time(lambda: 1e-3)
    assert timer.take_record()["discarded_samples"] == 1


def test_a_power_capped_run_keeps_every_sample_and_stays_valid(fake_cuda, chain, monkeypatch):
    gpu = FakeGpu(sm_clock_mhz=1200, default_sm_clock_mhz=1755, reasons=SW_POWER_CAP)
    nvml_on_fake_gpu(monkeypatch, gpu)
    monkeypatch.setattr(clocks, "_sleep", lambda s: None)
    s = RunSettings(device="cuda:1", timing=TimingSettings(budget_s=30, policy=POLICY, warmup_s=0.0, flush_l2=False),
                    energy=EnergySettings(enabled=False))
    record = CaseMeasurer(s, GPU1).measure(chain())
    assert record.samples.discarded_samples == 0
    assert record.status == "ok" and any(n.startswith("power-capped:") for n in record.notes)


def test_a_successful_lock_keeps_its_nvml_session_until_the_reset():
    """The lock's session stays open while the GPU is locked, so the reset can reach the driver."""
    from fp8bench.energy import nvml

    gpu = FakeGpu()
    dev = nvml.open_device(0, None, make_pynvml(gpu))
    lock = ClockLock(dev.nv, dev.handle, "max", close=dev.close).__enter__()
    assert gpu.nvml_refs == 1 and gpu.locked_sm_clock_mhz == 1980
    lock.reset()
    assert gpu.locked_sm_clock_mhz is None and gpu.nvml_refs == 0


def test_a_base_clock_lock_makes_the_locked_clock_the_reference(fake_cuda, chain, monkeypatch, tmp_path):
    """H100 SXM: default clock 1980 MHz, base (TDP) clock 1590 MHz, 80 % of it. Locked at base, every sample runs
    at 1590 MHz: that is the reference, read back from the GPU after the lock."""
    gpu = FakeGpu(sm_clock_mhz=1980, default_sm_clock_mhz=1980, base_sm_clock_mhz=1590)
    nv = nvml_on_fake_gpu(monkeypatch, gpu)
    monkeypatch.setattr("fp8bench.measure.runner.lock_clocks",
                        lambda device, policy: clocks.lock_clocks(device, policy, nv, load=_loading(gpu)))
    monkeypatch.setattr("fp8bench.energy.meters.cuda_uuid", lambda device: None)
    s = RunSettings(device="cuda:1", timing=TimingSettings(budget_s=30, policy=POLICY, warmup_s=0.0, flush_l2=False),
                    energy=EnergySettings(enabled=False), clocks=ClockSettings(lock="base"))
    outcome = run_cases([chain()], s, GPU1, run_file=tmp_path / "run.json")
    record = outcome.records[0]
    assert record.telemetry.timing["reference_sm_clock_mhz"] == 1590
    assert record.status == "ok", record.reason
    header = read_run_file(tmp_path / "run.json")["run"]
    assert header["clock_lock"]["read_back_mhz"] == 1590 and gpu.locked_sm_clock_mhz is None


def test_a_load_runs_until_its_stream_has_drained(fake_cuda):
    """clocks.Load.running asks the stream (torch.cuda.Stream.query: False while work is pending)."""
    import torch

    torch.cuda.synchronize(1)
    fake_cuda.kernel(1e-3, device=1)
    load = clocks.Load(torch.cuda.current_stream(1), lambda: torch.cuda.synchronize(1))
    assert load.running()
    load()
    assert not load.running()
