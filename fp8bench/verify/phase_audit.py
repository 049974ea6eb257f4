"""Phase purity and capture purity: what each timed region of a case really runs, checked without a GPU.

A timed phase must hold only what its name says. The pre-quantized ``gemm`` phase is the figure vendors quote for
an FP8 or FP4 GEMM, so it must time the kernel alone, on operands already in the layout the kernel reads: Transformer
Engine and torchao pack E2M1 pairs, swizzle block scales and transpose weight scales inside their *quantize* kernels,
never in front of the GEMM. Work left in the ``gemm`` phase (a pack of both operands, a scale swizzle, a per-expert
loop of scale rearrangements, a concatenation of per-expert outputs) is timed as GEMM and inflates every "pre-quantized"
speedup built on it.

Every timed region must also be something a CUDA graph can capture (``--cuda-graph``) and something an eager timing
does not stretch with host work:

* **no host synchronization**: ``.item()``, ``float(t)``, ``.tolist()``, ``.cpu()`` and ops whose output size depends
  on the data (``nonzero``, boolean indexing, ``unique``...) wait for the GPU; inside a capture CUDA refuses them
  (``cudaErrorStreamCaptureUnsupported``, see :mod:`fp8bench.measure.cuda_graphs`);
* **no host-to-device copy**: a tensor created on the host (a module-level constant, a factory call without
  ``device=``) and moved with ``.to(device)`` inside the region is a pageable ``cudaMemcpyAsync`` on every call, which
  a capture also refuses. Constants are built once per device, outside the timed region.

How the audit sees it on a CPU-only machine. A case is built exactly as the conformance replay builds it
(:func:`fp8bench.verify.cuda_replay.replay_case`: small CPU tensors, the scaled GEMMs replayed on fake CUDA tensors for
a target GPU), then each timed region (``end_to_end`` and every phase) is called once under two interception layers:

1. a ``TorchDispatchMode`` (:class:`_OpRecorder`) records every ATen op the region dispatches, the ops under
   autograd's backward included, and flags the synchronizing ones;
2. a ``TorchFunctionMode`` (:class:`_HostTracker`) keeps track of which tensors live in *host* memory, because on
   the CPU ``host_tensor.to(device)`` returns the tensor itself and dispatches nothing. A tensor is host memory when
   it is a module-level tensor constant of fp8bench (created at import, before any device exists), the result of a
   factory call (``torch.ones``, ``torch.tensor``, ``torch.zeros``...) that names no ``device``, or computed only from
   host tensors. ``.to(device)`` of such a tensor is the host-to-device copy a GPU would make: it is recorded, and a
   new tensor is returned so that the host original stays host memory.

Triton launches are opaque kernels here, as on a GPU (each is recorded as one ``triton.<kernel>`` op; the interpreter's
own host copies are not).

What this cannot see: kernels that do not go through PyTorch's dispatcher or Triton's launcher (Transformer Engine,
which cannot be imported here, and code Inductor generates: under a dispatch mode Dynamo runs the eager path), the
order of kernels on a real stream, and any copy a GPU driver makes on its own. A ``device=`` argument is taken to name
the case's device, since on the CPU the two are the same device.
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

_aten = torch.ops.aten

# The ops that *are* a GEMM: the dense and batched products, PyTorch's scaled and grouped entry points.
GEMM_OPS = frozenset({_aten.mm, _aten.bmm, _aten.addmm, _aten.baddbmm, _aten._scaled_mm, _aten._scaled_mm_v2,
                      _aten._scaled_grouped_mm, _aten._grouped_mm})
# Uninitialized allocations (a kernel's output buffer): they move no bytes, and an ATen GEMM makes the same one inside.
ALLOCATION_OPS = frozenset({_aten.empty, _aten.empty_strided, _aten.empty_like, _aten.new_empty,
                            _aten.new_empty_strided})
# ``_unsafe_view`` and ``alias`` reinterpret storage like a view but carry no alias annotation in their schema.
VIEW_LIKE_OPS = frozenset({_aten._unsafe_view, _aten.alias, _aten.lift_fresh})
# Ops that copy a value or a size back to the host, so the host waits for the device: the scalar read behind
# ``.item()``/``float()``/``bool()``, and the ops whose output size depends on the data.
SYNC_OPS = frozenset({_aten._local_scalar_dense, _aten.nonzero, _aten.masked_select, _aten.unique_consecutive,
                      _aten._unique, _aten._unique2, _aten.unique_dim})
# Factory functions that allocate on ``device=`` or, without one, on the host.
_FACTORIES = frozenset({torch.tensor, torch.as_tensor, torch.ones, torch.zeros, torch.empty, torch.full,
                        torch.arange, torch.linspace, torch.eye, torch.rand, torch.randn, torch.randint,
                        torch.randperm, torch.empty_strided, torch.scalar_tensor})
# Functions that hand a device tensor's values to Python: each waits for the device.
_TO_HOST = frozenset({torch.Tensor.tolist, torch.Tensor.numpy, torch.Tensor.cpu})


def op_name(func: Any) -> str:
    """``aten.mm`` for ``aten.mm.default``, ``aten.mm.out`` for other overloads."""
    packet = str(func.overloadpacket) if hasattr(func, "overloadpacket") else str(func)
    overload = getattr(func, "_overloadname", "default")
    return packet if overload == "default" else f"{packet}.{overload}"


def op_kind(func: Any) -> str:
    """``gemm``, ``view``, ``alloc`` or ``work`` (anything that reads or writes tensor data besides a GEMM)."""
    packet = getattr(func, "overloadpacket", None)
    if packet in GEMM_OPS:
        return "gemm"
    if getattr(func, "is_view", False) or packet in VIEW_LIKE_OPS:
        return "view"
    if packet in ALLOCATION_OPS:
        return "alloc"
    return "work"


@dataclass(frozen=True)
class Violation:
    """Something in a timed region that a CUDA graph cannot capture and an eager timing must not contain."""

    kind: str  # "sync" (the host waits for the device) or "h2d" (a host-to-device copy)
    detail: str  # the op or call
    site: str  # the innermost fp8bench frame that made it

    def describe(self) -> str:
        what = {"sync": "host synchronization", "h2d": "host-to-device copy"}[self.kind]
        return f"{what}: {self.detail} at {self.site}"


@dataclass
class RegionAudit:
    """The ops one timed region dispatched (in first-seen order, with counts) and its capture violations."""

    name: str
    ops: Counter[str] = field(default_factory=Counter)
    kinds: dict[str, str] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)

    def non_gemm_ops(self) -> list[str]:
        """Ops beyond GEMMs, views and uninitialized allocations (what a ``gemm`` phase must not contain)."""
        return [name for name in self.ops if self.kinds[name] == "work"]

    def describe_ops(self) -> str:
        return ", ".join(f"{name} x{count}" if count > 1 else name for name, count in self.ops.items()) or "(none)"

    def capture_refusal(self) -> str | None:
        """Why ``--cuda-graph`` could not capture this region, as :mod:`fp8bench.measure.cuda_graphs` would word it: its
        first host synchronization (``cudaErrorStreamCaptureUnsupported``) or host-to-device copy (a pageable
        ``cudaMemcpyAsync``, refused while a stream captures); ``None``: a simulated capture passes."""
        if not self.violations:
            return None
        return f"cannot capture {self.name} in a CUDA graph: {self.violations[0].describe()}"


def _site() -> str:
    frame = sys._getframe(1)
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        if module.startswith("fp8bench") and module != __name__:
            return f"{module.rsplit('.', 1)[-1]}.py:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back  # type: ignore[assignment]
    return "torch"


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


class _HostMemory:
    """The set of storages that live in host memory (see the module docstring), by weak reference."""

    def __init__(self) -> None:
        self._storages: set[StorageWeakRef] = set()

    @staticmethod
    def _key(t: torch.Tensor) -> StorageWeakRef | None:
        try:
            return StorageWeakRef(t.untyped_storage())
        except (RuntimeError, NotImplementedError):  # tensors without storage (fake, meta, sparse)
            return None

    def add(self, t: torch.Tensor) -> None:
        key = self._key(t)
        if key is not None:
            self._storages.add(key)

    def holds(self, t: torch.Tensor) -> bool:
        key = self._key(t)
        return key is not None and key in self._storages and not key.expired()

    def add_module_constants(self) -> None:
        """Every tensor at module level in fp8bench: created at import, on the host."""
        for name, module in list(sys.modules.items()):
            if name.startswith("fp8bench") and module is not None:
                for value in vars(module).values():
                    if isinstance(value, torch.Tensor):
                        self.add(value)


class _Recording:
    """Where the two layers write: the region being timed (``None`` between regions) and what it did."""

    def __init__(self) -> None:
        self.host = _HostMemory()
        self.region: RegionAudit | None = None
        self.suspended = 0  # > 0 inside an opaque kernel launch (Triton's interpreter)

    @contextlib.contextmanager
    def own_work(self) -> Iterator[None]:
        """Work that is not the case's (the audit's own copies, an opaque kernel's insides): neither recorded nor
        tracked."""
        self.suspended += 1
        try:
            yield
        finally:
            self.suspended -= 1

    def violation(self, kind: str, detail: str) -> None:
        if self.region is not None and not self.suspended:
            self.region.violations.append(Violation(kind, detail, _site()))


class _OpRecorder(TorchDispatchMode):
    """Records each dispatched op into the current region; host memory propagates through ops on host tensors."""

    def __init__(self, rec: _Recording) -> None:
        super().__init__()
        self.rec = rec

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        inputs = _tensors((args, kwargs))
        out = func(*args, **kwargs)
        rec = self.rec
        if rec.suspended:
            return out
        on_device = [t for t in inputs if not rec.host.holds(t)]
        if inputs and not on_device:  # computed from host tensors only: host memory too
            for t in _tensors(out):
                rec.host.add(t)
        if rec.region is not None:
            name = op_name(func)
            rec.region.ops[name] += 1
            rec.region.kinds.setdefault(name, op_kind(func))
            packet = getattr(func, "overloadpacket", None)
            if on_device and (packet in SYNC_OPS or (packet is _aten.index and _bool_index(args))):
                rec.violation("sync", name)
            if packet is _aten.copy_ and len(args) > 1 and rec.host.holds(args[1]) and not rec.host.holds(args[0]):
                rec.violation("h2d", f"{name} from a host tensor {list(args[1].shape)}")
        return out


def _bool_index(args: tuple[Any, ...]) -> bool:
    """``x[mask]``: a boolean index, whose result size the host must read back."""
    indices = args[1] if len(args) > 1 else []
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or [])


def _device_arg(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a ``Tensor.to``/``.cuda()`` call names a device (positionally, by keyword or as another tensor's)."""
    if "device" in kwargs and kwargs["device"] is not None:
        return True
    return any(isinstance(a, (str, torch.device, torch.Tensor)) for a in args[1:2])


class _HostTracker(TorchFunctionMode):
    """Marks host memory at the Python boundary and records host-to-device copies and reads back to the host."""

    def __init__(self, rec: _Recording) -> None:
        super().__init__()
        self.rec = rec

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        rec = self.rec
        if rec.suspended:
            return func(*args, **kwargs)
        if func in (torch.Tensor.to, torch.Tensor.cuda) and args and isinstance(args[0], torch.Tensor) \
                and (func is torch.Tensor.cuda or _device_arg(args, kwargs)):
            source = args[0]
            if rec.host.holds(source):
                rec.violation("h2d", f"Tensor.{func.__name__}() of a host tensor {list(source.shape)}")
                # On a GPU this makes a new device tensor; on the CPU ``.to`` would return the host one itself.
                with rec.own_work():
                    return func(*args, **kwargs).clone()
            return func(*args, **kwargs)
        if func in _TO_HOST and args and isinstance(args[0], torch.Tensor) and not rec.host.holds(args[0]):
            rec.violation("sync", f"Tensor.{func.__name__}() of a device tensor")
            with rec.own_work():
                out = func(*args, **kwargs)
                if isinstance(out, torch.Tensor):  # .cpu(): a new host tensor on a GPU
                    out = out.clone()
            if isinstance(out, torch.Tensor):
                rec.host.add(out)
            return out
        out = func(*args, **kwargs)
        if func in _FACTORIES:
            device = kwargs.get("device")
            if device is None or _names_host(device):
                for t in _tensors(out):
                    rec.host.add(t)
            elif func in (torch.tensor, torch.as_tensor):
                rec.violation("h2d", f"torch.{func.__name__}(..., device=...) from host data")
        return out


def _names_host(device: Any) -> bool:
    """A ``device`` argument spelled ``"cpu"``: a deliberate host buffer (PyTorch's optimizers keep their step
    counters so). fp8bench names the case's device with ``torch.device`` objects (``Device.torch``, ``x.device``)."""
    return isinstance(device, str) and device.split(":")[0] == "cpu"


@contextlib.contextmanager
def _tracked_backward(tracker: _HostTracker) -> Iterator[None]:
    """Run custom autograd Functions' ``backward`` (Python code the autograd engine calls, where torch-function modes
    are not active) under ``tracker``, so their host copies are seen like the forward's."""
    from torch.autograd.function import BackwardCFunction

    original = BackwardCFunction.apply

    def apply(self: Any, *args: Any) -> Any:
        if tracker in torch.overrides._get_current_function_mode_stack():
            return original(self, *args)
        with tracker:
            return original(self, *args)

    BackwardCFunction.apply = apply  # type: ignore[method-assign]
    try:
        yield
    finally:
        BackwardCFunction.apply = original  # type: ignore[method-assign]


@contextlib.contextmanager
def _opaque_triton_launches(rec: _Recording) -> Iterator[None]:
    """Record each Triton launch as one op (a kernel, as on a GPU) and hide the interpreter's own host copies."""
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except Exception:  # noqa: BLE001 - no Triton (or no interpreter): nothing to wrap
        yield
        return
    original = InterpretedFunction.run

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if rec.region is not None and not rec.suspended:
            name = f"triton.{self.fn.__name__}"
            rec.region.ops[name] += 1
            rec.region.kinds.setdefault(name, "gemm" if "mm" in self.fn.__name__ else "work")
        with rec.own_work():
            return original(self, *args, **kwargs)

    InterpretedFunction.run = run  # type: ignore[method-assign]
    try:
        yield
    finally:
        InterpretedFunction.run = original  # type: ignore[method-assign]


class Auditor:
    """Records what timed regions dispatch. Enter it *before* the case is built (so that host constants made during
    the build are known), then call :meth:`region` around each timed call."""

    def __init__(self) -> None:
        self._rec = _Recording()
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> Auditor:
        self._rec.host.add_module_constants()
        self._stack.enter_context(_opaque_triton_launches(self._rec))
        tracker = _HostTracker(self._rec)
        self._stack.enter_context(_tracked_backward(tracker))
        self._stack.enter_context(tracker)
        self._stack.enter_context(_OpRecorder(self._rec))
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def region(self, name: str, fn: Callable[[], Any]) -> RegionAudit:
        """Call ``fn`` once as the timed region ``name``; return what it dispatched."""
        audit = RegionAudit(name)
        self._rec.region = audit
        try:
            fn()
        finally:
            self._rec.region = None
        return audit


@dataclass
class CaseAudit:
    """One case's timed regions: ``status`` is ``audited`` or why the case was not built."""

    workload: str
    backend: str
    precision: str
    device: str  # the device the case was built for: a CUDA target's name, or "cpu" (backends that run CPU-only)
    status: str
    regions: dict[str, RegionAudit] = field(default_factory=dict)

    @property
    def gemm_phase(self) -> RegionAudit | None:
        return self.regions.get("gemm")

    def violations(self) -> list[tuple[str, Violation]]:
        return [(name, v) for name, r in self.regions.items() for v in r.violations]


# Small shapes that every recipe's alignment accepts; grouped_gemm in both implementations.
AUDIT_SHAPES: dict[str, tuple[str, ...]] = {
    "gemm": ("256x256x256",),
    "grouped_gemm": ("g=4,tokens=64,top_k=2,n=128,k=128,impl=grouped", "g=4,tokens=64,top_k=2,n=128,k=128,impl=loop"),
    "attention": ("b=2,h=2,s=64,d=64,kv_heads=1,backward=1",),
    "transformer_step": ("tiny,layers=1,batch=2,seq=64",),
}
AUDIT_WORKLOADS = tuple(AUDIT_SHAPES)


def audit_case(workload: str, shape_text: str, precision_name: str, backend: str,
               targets: tuple[Any, ...] | None = None) -> CaseAudit:
    """Build one case as on the first target that runs it (else on the CPU, for backends that run only there),
    then audit ``end_to_end`` and each phase. A case no device runs comes back with the reason as its status."""
    from fp8bench.core.devices import Device
    from fp8bench.core.pipeline import BuildContext, Unsupported
    from fp8bench.core.plugins import BACKENDS, WORKLOADS, load_all
    from fp8bench.core.precisions import resolve_precision
    from fp8bench.verify.cuda_replay import TARGETS, emulating

    load_all()
    wl, impl = WORKLOADS.get(workload), BACKENDS.get(backend)
    shape = wl.parse_shape(shape_text)
    precision = resolve_precision(precision_name)
    cpu = Device("cpu")
    chosen = targets or (TARGETS["h100-torch2.13"], TARGETS["b200-torch2.13"])
    reasons: list[str] = []
    for target in (*chosen, None):
        with contextlib.ExitStack() as stack:
            if target is not None:
                stack.enter_context(emulating(target))
            device = Device("cuda", 0) if target is not None else cpu
            why = impl.unsupported_reason(workload, precision, device) or wl.shape_reason(shape, precision)
            if why:
                reasons.append(why)
                continue
            where = target.name if target is not None else "cpu"
            auditor = stack.enter_context(Auditor())
            inputs = wl.make_inputs(shape, cpu, 0)
            try:
                pipeline = impl.build(BuildContext(workload, shape, precision, cpu, inputs))
            except Unsupported as exc:
                return CaseAudit(workload, backend, precision_name, where, f"skipped: {exc}")
            audit = CaseAudit(workload, backend, precision_name, where, "audited")
            audit.regions["end_to_end"] = auditor.region("end_to_end", pipeline.end_to_end)
            for name, fn in pipeline.phases.items():
                audit.regions[name] = auditor.region(name, fn)
            return audit
    return CaseAudit(workload, backend, precision_name, "-", f"skipped: {reasons[0] if reasons else 'no device'}")


def audit_matrix(workloads: tuple[str, ...] = AUDIT_WORKLOADS, backends: tuple[str, ...] | None = None,
                 precisions: tuple[str, ...] | None = None) -> list[CaseAudit]:
    """Every backend x precision x workload (each shape of :data:`AUDIT_SHAPES`)."""
    from fp8bench.core.plugins import BACKENDS, load_all
    from fp8bench.core.precisions import PRECISIONS

    load_all()
    out = []
    for workload in workloads:
        for shape in AUDIT_SHAPES[workload]:
            for backend in backends or tuple(BACKENDS.names()):
                for precision in precisions or tuple(PRECISIONS.names()):
                    case = audit_case(workload, shape, precision, backend)
                    # Several shapes of one workload differ in their last key (grouped_gemm's impl).
                    case.workload = workload if len(AUDIT_SHAPES[workload]) == 1 else \
                        f"{workload} [{shape.rsplit(',', 1)[-1]}]"
                    out.append(case)
    return out
