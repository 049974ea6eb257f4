"""The registries of workloads and backends, and the base classes their entries implement.

Adding a workload or a backend is one small module: a :class:`Workload` subclass registered in
:data:`WORKLOADS` (in ``workloads/``), or a :class:`Backend` registered in :data:`BACKENDS` with one builder per
workload it runs (in ``kernels/``). :func:`load_all` imports those modules; nothing is discovered from module names.
"""

from __future__ import annotations

import importlib
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from fp8bench.core.devices import Device
from fp8bench.core.pipeline import BuildContext, Pipeline
from fp8bench.core.registry import Registry
from fp8bench.core.shapes import Shape
from fp8bench.numerics.recipes import Precision


class Workload(ABC):
    """A computation benchmarked in every precision: its shapes, FLOPs, bytes, inputs and exact reference.

    ``default_shape`` is the shape string measured when the user names the workload without a shape (it must parse
    with :meth:`parse_shape`; ``fp8bench list workloads`` shows it). Defaults are sized for a CPU: every workload's
    default finishes in seconds to a minute on two cores.
    """

    name: str
    phases: tuple[str, ...]
    description: str
    default_shape: str

    @abstractmethod
    def parse_shape(self, text: str) -> Shape:
        """Parse and validate a shape string; raise :class:`fp8bench.core.shapes.ShapeError` naming the bad part."""

    @abstractmethod
    def flops(self, shape: Shape) -> int:
        """Floating-point operations of one end-to-end call (closed form; a multiply-add counts 2)."""

    @abstractmethod
    def min_bytes(self, shape: Shape, precision: Precision) -> int:
        """Minimum bytes one call must move to and from memory (inputs read once, output written once)."""

    @abstractmethod
    def make_inputs(self, shape: Shape, device: Device, seed: int) -> dict[str, torch.Tensor]:
        """Deterministic FP32 source tensors."""

    @abstractmethod
    def reference(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """The exact (FP64) result on the given inputs."""

    def shape_reason(self, shape: Shape, precision: Precision) -> str | None:
        """Why ``precision`` cannot run ``shape`` (alignment rules), or ``None``."""
        return None

    @abstractmethod
    def memory_reason(self, shape: Shape, precision: Precision, device: Device) -> str | None:
        """Why ``shape`` cannot fit in ``device``'s free memory, or ``None``. The runner asks before allocating
        anything, so every workload must estimate its memory in closed form (``fp8bench.workloads.memory.refusal``
        words the answer) rather than let a huge shape reach the allocator."""

    def probe_shape(self, shape: Shape, max_flops: float) -> Shape | None:
        """A smaller shape of the same kind for estimating a big case's cost, or ``None`` if ``shape`` is small."""
        return None

    def trains(self, shape: Shape) -> bool:
        """Whether a call of ``shape`` runs a backward pass (gradients exist, so FP8 recipes may use E5M2 for
        them: Transformer Engine's ``HYBRID`` format)."""
        return False


Builder = Callable[[BuildContext], Pipeline]
SupportCheck = Callable[[Precision, Device], "str | None"]


@dataclass
class Backend:
    """A family of kernels. ``availability`` says why it cannot run on a device at all (``None``: it can).

    ``interpreted`` says whether the kernels run under an interpreter on a device (Triton's on the CPU): such a case
    is checked for correctness only, its pipeline run once, and its timing fields stay empty.
    """

    name: str
    kind: str  # vendor | custom | reference
    description: str
    availability: Callable[[Device], str | None] = lambda device: None
    interpreted: Callable[[Device], bool] = lambda device: False
    builders: dict[str, tuple[Builder, SupportCheck]] = field(default_factory=dict)

    def builder(self, workload: str, supports: SupportCheck | None = None) -> Callable[[Builder], Builder]:
        """Register the builder of ``workload``; ``supports`` returns why a precision/device is refused."""

        def decorate(fn: Builder) -> Builder:
            self.builders[workload] = (fn, supports or (lambda precision, device: None))
            return fn

        return decorate

    def unsupported_reason(self, workload: str, precision: Precision, device: Device) -> str | None:
        reason = self.availability(device)
        if reason:
            return f"backend {self.name} unavailable: {reason}"
        if workload not in self.builders:
            return f"backend {self.name} has no {workload} implementation"
        why = self.builders[workload][1](precision, device)
        return f"{self.name} does not run {precision.name} on {device}: {why}" if why else None

    def build(self, ctx: BuildContext) -> Pipeline:
        return self.builders[ctx.workload][0](ctx)


WORKLOADS: Registry[Workload] = Registry("workload")
BACKENDS: Registry[Backend] = Registry("backend")

# Modules that register entries. Optional backends register themselves and report unavailability when their
# vendor package is missing, so importing them is always safe.
_PLUGIN_MODULES = (
    "fp8bench.workloads.gemm",
    "fp8bench.workloads.grouped_gemm",
    "fp8bench.kernels.torch_backend",
    "fp8bench.kernels.emulated",
    "fp8bench.kernels.torch_layers",
    "fp8bench.kernels.emulated_layers",
    "fp8bench.kernels.torch_grouped",
    "fp8bench.kernels.emulated_grouped",
    "fp8bench.kernels.triton_backend",
    "fp8bench.kernels.compiled",
    "fp8bench.kernels.torchao_backend",
    "fp8bench.kernels.te_backend",
    "fp8bench.workloads.collective",
    "fp8bench.kernels.torch_collective",
)
_EXTRA_MODULES: list[str] = []


def env_plugin_modules() -> list[str]:
    """Extra registering modules named in ``$FP8BENCH_PLUGINS`` (comma-separated import names), e.g. a backend
    kept outside the project, or a test-only backend loaded into one side of an A/B run."""
    return [m.strip() for m in os.environ.get("FP8BENCH_PLUGINS", "").split(",") if m.strip()]


def load_all() -> None:
    """Import every registering module once (idempotent)."""
    for module in (*_PLUGIN_MODULES, *_EXTRA_MODULES, *env_plugin_modules()):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if module in env_plugin_modules() and exc.name == module:
                raise ModuleNotFoundError(f"FP8BENCH_PLUGINS names {module!r}, which cannot be imported "
                                          "(is its folder on PYTHONPATH?)", name=module) from exc
            raise


def register_module(module: str) -> None:
    """Add a registering module to :func:`load_all` (for extensions and tests)."""
    if module not in _EXTRA_MODULES:
        _EXTRA_MODULES.append(module)
