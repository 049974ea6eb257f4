"""torchrun's environment, and the lockstep timer on a real gloo process group of two processes."""

import socket
import time
from datetime import timedelta

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from fp8bench.core.devices import Device
from fp8bench.hardware.distributed import LaunchEnv, LaunchError, device_spec_for, launch_env
from fp8bench.measure.lockstep import LockstepTimer
from fp8bench.measure.timing import CpuTimer, SamplingPolicy, agreed, sample

TORCHRUN = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29500"}


def test_launch_env_reads_torchruns_variables():
    assert launch_env({}) is None
    env = launch_env(TORCHRUN)
    assert env == LaunchEnv(rank=1, world_size=2, local_rank=1, local_world_size=2) and not env.is_main


@pytest.mark.parametrize("environ,message", [
    ({"RANK": "0"}, "RANK set but WORLD_SIZE, LOCAL_RANK missing"),
    ({**TORCHRUN, "RANK": "x"}, "must be integers"),
    ({**TORCHRUN, "RANK": "2"}, "RANK=2 must lie in 0..WORLD_SIZE-1"),
])
def test_partial_or_malformed_environments_are_refused(environ, message):
    with pytest.raises(LaunchError, match=message):
        launch_env(environ)


def test_each_rank_takes_its_own_gpu_unless_told_otherwise():
    env = LaunchEnv(rank=3, world_size=4, local_rank=1)
    assert device_spec_for("cuda", env) == "cuda:1"
    assert device_spec_for("cpu", env) == "cpu"
    assert device_spec_for("cuda:0", env) == "cuda:0"


def test_a_timer_of_one_process_takes_its_own_decisions():
    assert agreed(CpuTimer(), True) is True and agreed(CpuTimer(), False) is False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(rank: int, port: int, results) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=60))
    try:
        timer = LockstepTimer(CpuTimer(), Device("cpu"))
        # Rank 1 is the slow one: every rank must report rank 1's time.
        sleep_s = 0.05 if rank == 1 else 0.0
        t = timer.time(lambda: time.sleep(sleep_s))
        flag = timer.agree(rank == 1)
        reason = timer.agree_reason("out of memory" if rank == 1 else None)
        # A deadline only rank 0 has passed still stops both ranks' sampling at the same sample.
        deadline = time.monotonic() + (0.0 if rank == 0 else 60.0)
        samples = sample(lambda: None, timer, SamplingPolicy(min_samples=3), deadline)
        results.put((rank, t, flag, reason, samples.n, samples.stopped_by))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # spawns a process per rank
def test_lockstep_timer_reports_the_slowest_rank_and_agrees_on_decisions():
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(rank, port, results)) for rank in (0, 1)]
    for p in procs:
        p.start()
    got = {}
    try:
        for _ in procs:
            rank, *values = results.get(timeout=120)
            got[rank] = values
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert got[0][0] == got[1][0] >= 0.05  # the same sample on both ranks: rank 1's sleep
    assert got[0][1] is True and got[1][1] is True
    assert got[0][2] == "rank 1: out of memory" and got[1][2] == "out of memory"
    assert got[0][3:] == got[1][3:] == [0, "budget"]
