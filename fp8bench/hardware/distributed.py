"""Runs across processes: ``torch.distributed`` launched by ``torchrun``, and timing that keeps every rank in step.

fp8bench builds no launcher. ``torchrun`` (PyTorch's own, the one distributed training already uses) starts one
process per device and hands each its place in environment variables: ``RANK`` (0..``WORLD_SIZE``-1 over every
node), ``WORLD_SIZE``, ``LOCAL_RANK`` (its index on its node) and the rendezvous address ``MASTER_ADDR`` /
``MASTER_PORT``. :func:`launch_env` reads them; :func:`init` joins the process group over the ``env://``
rendezvous, with NCCL when the rank's device is a GPU and gloo on the CPU.

Every rank runs the same cases in the same order, and every collective call must be made by every rank the same
number of times, or the ranks wait on each other forever; a distributed run therefore times through
:class:`fp8bench.measure.lockstep.LockstepTimer`, which keeps the ranks' decisions in step.

A rank that crashes or stops answering leaves the others in a collective until the process group's timeout
(:func:`collective_timeout_s`), after which they fail instead of hanging.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from fp8bench.core.devices import Device

# torchrun sets all of these in every process it starts (torch/distributed/run.py, "Environment variables").
_LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
# A collective still waiting after this long means a rank is gone: fail rather than hang (gloo's default is 30 min).
MIN_COLLECTIVE_TIMEOUT_S = 300.0

LAUNCH_HINT = ("launch it with torchrun, one process per device, e.g. `torchrun --nproc-per-node 2 -m fp8bench run "
               "--workload collective` (docs/distributed.md)")


class LaunchError(ValueError):
    """torchrun's environment is partial or malformed."""


@dataclass(frozen=True)
class LaunchEnv:
    """Where ``torchrun`` placed this process."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int | None = None  # ranks on this node (torchrun's LOCAL_WORLD_SIZE)

    @property
    def is_main(self) -> bool:
        """Rank 0 writes the run file, the store and the table; the other ranks only measure."""
        return self.rank == 0


def launch_env(environ: dict[str, str] | None = None) -> LaunchEnv | None:
    """This process's place from torchrun's variables, or ``None`` when it was not started by a launcher."""
    env = dict(os.environ if environ is None else environ)
    present = [v for v in _LAUNCH_VARS if v in env]
    if not present:
        return None
    if len(present) != len(_LAUNCH_VARS):
        missing = [v for v in _LAUNCH_VARS if v not in env]
        raise LaunchError(f"{', '.join(present)} set but {', '.join(missing)} missing: start distributed runs "
                          "with torchrun, which sets all of them")
    try:
        rank, world, local = (int(env[v]) for v in _LAUNCH_VARS)
    except ValueError as exc:
        raise LaunchError(f"torchrun variables must be integers: {', '.join(f'{v}={env[v]!r}' for v in _LAUNCH_VARS)}"
                          ) from exc
    if not (world >= 1 and 0 <= rank < world and local >= 0):
        raise LaunchError(f"RANK={rank} must lie in 0..WORLD_SIZE-1 (WORLD_SIZE={world}), LOCAL_RANK={local} >= 0")
    per_node = env.get("LOCAL_WORLD_SIZE", "")
    return LaunchEnv(rank, world, local, int(per_node) if per_node.isdigit() else None)


def run_spec(launch: LaunchEnv, device: Device) -> dict[str, Any]:
    """What the run header says about the ranks (``spec.distributed``; part of every record's comparability key)."""
    return {"world_size": launch.world_size, "ranks_per_node": launch.local_world_size,
            "backend": backend_for(device), "launcher": "torchrun"}


def device_spec_for(spec: str, launch: LaunchEnv) -> str:
    """The device a rank measures on: ``auto`` and ``cuda`` become the rank's own GPU, ``cuda:LOCAL_RANK``
    (``auto`` stays the CPU without CUDA); an explicit ``cuda:N`` or ``cpu`` is kept as given."""
    text = spec.strip().lower()
    if text == "cuda" or (text == "auto" and torch.cuda.is_available()):
        return f"cuda:{launch.local_rank}"
    return spec


def collective_timeout_s(budget_s: float) -> float:
    """How long a collective may wait for the other ranks: several case budgets, at least five minutes."""
    return max(MIN_COLLECTIVE_TIMEOUT_S, 4 * budget_s)


def backend_for(device: Device) -> str:
    """NCCL between GPUs, gloo between CPU processes (PyTorch's own pairing)."""
    return "nccl" if device.is_cuda else "gloo"


def init(device: Device, timeout_s: float) -> None:
    """Join the process group torchrun's rendezvous describes (``env://``)."""
    if dist.is_initialized():
        return
    kwargs: dict[str, Any] = {"backend": backend_for(device), "timeout": timedelta(seconds=timeout_s)}
    if device.is_cuda:
        torch.cuda.set_device(device.cuda_index)  # NCCL binds each rank's communicator to its current GPU
        kwargs["device_id"] = device.torch
    dist.init_process_group(**kwargs)


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def world() -> tuple[int, int]:
    """``(rank, world_size)`` of the current process group, or ``(0, 1)`` outside one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1
