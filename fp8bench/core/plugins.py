"""The registries of workloads and backends, and the base classes their entries implement.

Adding a workload or a backend is one small module: a :class:`Workload` subclass registered in
:data:`WORKLOADS` (in ``workloads/``), or a :class:`Backend` registered in :data:`BACKENDS` with one builder per
workload it runs (in ``kernels/``). :func:`load_all` imports every module of those two folders, so a new file is
all it takes; the names users type are the strings the modules register, never derived from the file names.

A backend owns its availability, as an asv environment does (``Environment.matches()``): it declares the device
kinds it runs on, the optional libraries it needs (:class:`fp8bench.core.libraries.Library`, with the oldest
version) and any further rule of its own, and :meth:`Backend.availability` says why it cannot run, in words.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fp8bench.core.libraries import Library
from fp8bench.core.registry import Registry

if TYPE_CHECKING:  # names in signatures only: importing this module loads no torch, its registering modules do
    import torch

    from fp8bench.core.devices import Device
    from fp8bench.core.pipeline import BuildContext, Pipeline
    from fp8bench.core.precisions import Precision
    from fp8bench.core.shapes import Shape


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

    def eager_pipeline(self, ctx: BuildContext) -> Pipeline:
        """The workload's own pipeline in plain PyTorch ops, which a backend that runs workloads' own pipelines
        (``torch``) uses when it has no builder of its own for the workload. Workloads without one keep this
        default, and such a backend records their cases as skipped."""
        raise NotImplementedError(f"workload {self.name} has no pipeline of its own")

    def eager_support(self, precision: Precision, device: Device) -> str | None:
        """Why :meth:`eager_pipeline` cannot run ``precision`` (``None``: it can). By default it runs the plain float
        precisions: a scaled recipe needs a backend's quantizers and scaled GEMMs."""
        if precision.is_scaled:
            return (f"the {self.name} workload's own pipeline runs float precisions; no backend has a "
                    f"{precision.name} implementation of it")
        return None

    def has_eager_pipeline(self) -> bool:
        return type(self).eager_pipeline is not Workload.eager_pipeline

    def trains(self, shape: Shape) -> bool:
        """Whether a call of ``shape`` runs a backward pass (gradients exist, so FP8 recipes may use E5M2 for
        them: Transformer Engine's ``HYBRID`` format)."""
        return False


Builder = Callable[["BuildContext"], "Pipeline"]
SupportCheck = Callable[["Precision", "Device"], "str | None"]


@dataclass
class Backend:
    """A family of kernels, and what it needs to run (:meth:`availability` says why it cannot).

    ``device_kinds`` are the :attr:`fp8bench.core.devices.Device.kind` values it runs on (``device_kinds_reason``
    words the refusal elsewhere); ``requires`` are the optional libraries it imports; ``check`` is any further rule
    of its own (a compiler, the mode a library was imported in), asked last. ``note`` is a caveat on an available
    backend that ``fp8bench doctor`` shows (how it runs on this device). ``interpreted`` says whether the kernels
    run under an interpreter on a device (Triton's on the CPU): such a case is checked for correctness only, its
    pipeline run once, and its timing fields stay empty.
    """

    name: str
    kind: str  # vendor | custom | reference
    description: str
    device_kinds: tuple[str, ...] = ("cpu", "cuda")
    device_kinds_reason: str | None = None
    requires: tuple[Library, ...] = ()
    check: Callable[[Device], str | None] = lambda device: None
    note: Callable[[Device], str | None] = lambda device: None
    interpreted: Callable[[Device], bool] = lambda device: False
    runs_eager_pipelines: bool = False  # runs a workload's own pipeline when it has no builder for the workload
    builders: dict[str, tuple[Builder, SupportCheck]] = field(default_factory=dict)

    def availability(self, device: Device) -> str | None:
        """Why this backend cannot run on ``device`` at all (``None``: it can): the device kind, then each library
        it needs (installed, new enough), then its own rule."""
        if device.kind not in self.device_kinds:
            return self.device_kinds_reason or (
                f"backend {self.name} runs on {' and '.join(k.upper() for k in self.device_kinds)} devices only")
        for library in self.requires:
            reason = library.status().reason
            if reason:
                return reason
        return self.check(device)

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
        if workload in self.builders:
            why = self.builders[workload][1](precision, device)
        elif self._runs_own_pipeline_of(workload):
            why = WORKLOADS.get(workload).eager_support(precision, device)
        else:
            return f"backend {self.name} has no {workload} implementation"
        return f"{self.name} does not run {precision.name} on {device}: {why}" if why else None

    def build(self, ctx: BuildContext) -> Pipeline:
        if ctx.workload in self.builders:
            return self.builders[ctx.workload][0](ctx)
        return WORKLOADS.get(ctx.workload).eager_pipeline(ctx)

    def workloads(self) -> list[str]:
        """The workloads this backend runs: those it has builders for, then those whose own pipeline it runs."""
        return [*self.builders, *(w for w in WORKLOADS if w not in self.builders and self._runs_own_pipeline_of(w))]

    def _runs_own_pipeline_of(self, workload: str) -> bool:
        return self.runs_eager_pipelines and workload in WORKLOADS and WORKLOADS.get(workload).has_eager_pipeline()


WORKLOADS: Registry[Workload] = Registry("workload")
BACKENDS: Registry[Backend] = Registry("backend")

# The registering modules in the order listings and runs show their entries (the order they were added in);
# every other module of workloads/ and kernels/ loads after them, alphabetically. Optional backends register
# themselves and report unavailability when their vendor package is missing, so importing them is always safe.
_ORDERED_MODULES = (
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


def declared_libraries() -> list[Library]:
    """The optional libraries the registered backends need, each once, in registration order."""
    found: dict[str, Library] = {}
    for name in BACKENDS:
        for library in BACKENDS.get(name).requires:
            found.setdefault(library.name, library)
    return list(found.values())


def env_plugin_modules() -> list[str]:
    """Extra registering modules named in ``$FP8BENCH_PLUGINS`` (comma-separated import names), e.g. a backend
    kept outside the project, or a test-only backend loaded into one side of an A/B run."""
    return [m.strip() for m in os.environ.get("FP8BENCH_PLUGINS", "").split(",") if m.strip()]


def _folder_modules() -> list[str]:
    """Every module of the ``fp8bench.workloads`` and ``fp8bench.kernels`` packages, by name."""
    names: list[str] = []
    for package in ("fp8bench.workloads", "fp8bench.kernels"):
        path = importlib.import_module(package).__path__
        names += sorted(f"{package}.{m.name}" for m in pkgutil.iter_modules(path) if not m.name.startswith("_"))
    return names


def load_all() -> None:
    """Import every registering module once (idempotent): the workloads and kernels folders, then
    ``$FP8BENCH_PLUGINS``."""
    ordered = [*_ORDERED_MODULES, *(m for m in _folder_modules() if m not in _ORDERED_MODULES)]
    for module in (*ordered, *env_plugin_modules()):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if module in env_plugin_modules() and exc.name == module:
                raise ModuleNotFoundError(f"FP8BENCH_PLUGINS names {module!r}, which cannot be imported "
                                          "(is its folder on PYTHONPATH?)", name=module) from exc
            raise


def registered_names() -> dict[str, list[str]]:
    """The workload, backend and precision names a user may type, with every registering module loaded
    (:func:`load_all`; torch with them)."""
    from fp8bench.core.precisions import PRECISIONS  # its formats are torch dtypes: loaded here, with the registries

    load_all()
    return {"workload": WORKLOADS.names(), "backend": BACKENDS.names(), "precision": PRECISIONS.names()}
