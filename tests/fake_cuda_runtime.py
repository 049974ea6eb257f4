"""A fake CUDA runtime under ``torch.cuda``'s Python API, with a simulated clock, for CPU tests of the CUDA paths.

What stays real and what is faked
---------------------------------
torch 2.13's own Python orchestration runs unchanged on top of the fake: ``torch.cuda.graph`` (the capture context
manager: synchronize, side stream, ``capture_begin``/``capture_end``, and its failure to restore the stream when
``capture_end`` raises), ``torch.cuda.stream``/``StreamContext`` and ``torch.cuda.device``. The fake replaces the layer
below them, the one a CPU build lacks (``torch._C``'s CUDA bindings, the caching allocator, the driver): device
selection, streams, events, ``CUDAGraph``, ``synchronize``, device properties, and device allocations made with
``torch.empty(..., device="cuda...")`` (intercepted by a ``TorchFunctionMode``).

Every rule encoded here is the vendor's, with its source:

* torch/csrc/cuda/Module.cpp, ``THCPModule_setStream_wrap``: setting a stream also makes its device current.
* torch/cuda/streams.py, ``Event.record``: no stream given means ``torch.cuda.current_stream()``, the *current
  device's* current stream. c10/cuda/CUDAEvent.h, ``CUDAEvent::record``: an event takes the device of the first stream
  that records it; a later stream of another device raises a ``RuntimeError`` naming both devices.
  ``CUDAEvent::elapsed_time``: ``ValueError`` unless both events have ``enable_timing`` and were recorded;
  ``RuntimeError`` unless both completed.
* aten/src/ATen/cuda/CUDAGraph.cpp: ``capture_begin`` refuses the default stream (a ``RuntimeError``) and a graph that
  already owns one; ``capture_end`` must end on the stream it began on,
  fails with the CUDA error when the capture was invalidated, and *warns* (``TORCH_WARN``, a ``UserWarning``) when the
  graph has no nodes; ``replay`` requires a successful capture and launches on the capture device's current stream.
* torch/csrc/cuda/Graph.cpp: ``capture_error_mode`` must be ``global``, ``thread_local`` or ``relaxed``.
* CUDA runtime (stream capture; PyTorch ``docs/source/notes/cuda.rst``, "Constraints": "Ops that synchronize the CPU
  with the GPU (e.g., .item() calls) are prohibited"): a device or stream synchronize, or a device-to-host copy, while
  the stream captures fails with ``cudaErrorStreamCaptureUnsupported`` (900) and invalidates the capture; work launched
  into an invalidated capture, and ``cudaStreamEndCapture`` on it, fail with ``cudaErrorStreamCaptureInvalidated``
  (901); waiting on or querying an event recorded during a capture fails with ``cudaErrorCapturedEvent`` (907). Work on
  another stream is not captured: torch's streams are created ``cudaStreamNonBlocking`` (c10/cuda/CUDAStream.cpp,
  ``kDefaultFlags``), so they take no implicit dependency on a capturing stream.
* c10/cuda/CUDAEvent.h, ``CUDAEvent::record``: ``torch.cuda.Event()`` creates no CUDA event; the first ``record``
  does (``createEvent``, i.e. ``cudaEventCreateWithFlags``), on the host, costing :data:`EVENT_CREATE_S`. An end
  event first recorded after the call it times puts that creation into the sample.
* c10/cuda/CUDAException.cpp, ``c10_cuda_check_implementation``, and c10/cuda/CUDAMiscFunctions.cpp: a failing CUDA
  call raises ``torch.AcceleratorError`` (a ``RuntimeError``) whose message starts ``CUDA error: <cudaGetErrorString>``
  and whose ``error_code`` is the ``cudaError_t`` (torch/csrc/Exceptions.cpp, ``_new_accelerator_error_object``).
  ``AcceleratorError`` exists from torch 2.8.0 (``class AcceleratorError(RuntimeError)`` in the 2.8.0 wheel's
  ``torch/_C/__init__.pyi``; absent from 2.4.1 to 2.7.1): before it the same check raised a plain ``RuntimeError``
  (``c10::Error``) with the same message, which :func:`cuda_error` makes with ``before_2_8=True``.

* CUDA Runtime API, ``cudaError`` (group__CUDART__TYPES), ``cudaErrorIllegalAddress`` and ``cudaErrorLaunchFailure``:
  after such a kernel fault the process is left in an inconsistent state, every later CUDA call returns the same
  error, and only a new process can use the GPU again. :meth:`FakeCuda.fault` makes the context sticky: every later
  launch, record, synchronize, allocation or read-back raises that error (:meth:`FakeCuda.check_context`).

* One hardware queue (``FakeCuda(hardware_queues=1)``). CUDA C++ Programming Guide, "CUDA Environment Variables":
  ``CUDA_DEVICE_MAX_CONNECTIONS`` sets the number of work queues from the host to each device (default 8);
  torch's streams are mapped onto those queues, and with one queue every stream's work is executed in the order
  the host submitted it, whatever its stream (the false dependencies Hyper-Q was introduced to remove; Transformer
  Engine's communication-overlap examples set it to 1). An MPS client can get fewer than it asks for (MPS
  documentation, "Appendix: Environment Variables", ``CUDA_DEVICE_MAX_CONNECTIONS``: a server's clients share one
  pool of connections, and the driver may allocate fewer than requested). Here a kernel submitted on any stream while a
  spin kernel holds a stream of the device queues behind that spin, the release included: the spin runs to its give-up.
  (``CUDA_LAUNCH_BLOCKING=1``, which makes each launch wait for its kernel, is refused by name before any spin is
  launched and is not modelled.)

The simulated clock
-------------------
One host clock and, per stream, the time its queued work completes. An eager kernel launch costs the host
:data:`LAUNCH_S`; the kernel starts when both its stream is free and the host has launched it. A graph replay costs
the host one :data:`GRAPH_LAUNCH_S` and runs its captured kernels back to back. An event completes when its stream
reaches it. Costs are illustrative orders of magnitude (microseconds per launch), not measurements; tests assert
relations they imply (launch gaps in eager timing, none in replays), never the constants themselves. Anything this
fake does not model raises :class:`Unmodelled` rather than pretend.

Device memory (PyTorch's caching allocator over ``cudaMalloc``)
----------------------------------------------------------------
:meth:`FakeCuda.alloc` stands for a tensor a call allocates (its output): a :class:`FakeBlock` that goes back to the
cache when Python drops its last reference, as a tensor's storage does. The rules:

* PyTorch's caching allocator (docs/source/notes/cuda.rst, "Memory management"; c10/cuda/CUDACachingAllocator.cpp,
  ``DeviceCachingAllocator::malloc``: ``get_free_block`` first, ``alloc_block`` and so ``cudaMalloc`` only when no
  cached block fits): a freed block is kept and handed to the next request of its size without any CUDA call; a
  request that finds none calls ``cudaMalloc`` (counted in :attr:`FakeCuda.mallocs`). Simplified: blocks are keyed
  by exact size and not by stream, where the real allocator rounds sizes, splits larger cached blocks and keys free
  blocks by stream; so the fake may count a cudaMalloc the real one avoids (splitting), or miss one it makes (a
  block freed on another stream).
* CUDA C++ Programming Guide, "Implicit Synchronization" (Streams): two commands from different streams cannot run
  concurrently if a device memory allocation is issued by the host between them. A ``cudaMalloc`` while a spin
  kernel holds a stream therefore orders every later command, the release on the other stream included, after the
  spin: the spin runs to its give-up (or forever, without one). The guide promises only the ordering, not that the
  host waits; the fake also makes the host wait, which changes nothing the tests judge (the give-up happens either
  way).
* Hardware queues: only ``hardware_queues == 1`` serializes streams here. With CUDA's default of 8 queues two
  streams may still share one (CUDA_DEVICE_MAX_CONNECTIONS, MPS), which the fake does not model.

The L2 cache and the energy counter (what an energy window meters)
------------------------------------------------------------------
* A flush empties the L2. nvbench's cold measurement (NVIDIA/nvbench ``nvbench/detail/l2flush.cuh``) clears the
  cache before each sample with one ``cudaMemsetAsync`` over a buffer of the device's ``cudaDevAttrL2CacheSize``
  bytes on the sample's stream; fp8bench's flush is ``Tensor.zero_()`` of twice that (a fill kernel over every byte
  on the current stream: aten/src/ATen/native/cuda/FillKernel.cu, ``fill_kernel_cuda``, read at pytorch/pytorch
  commit 131c37b; the file is a few lines that register the fill stub, unchanged in substance for years). Here a
  kernel that writes at least the L2's size evicts everything (:meth:`FakeCuda.through_l2`).
* What the L2 holds is named: a kernel's ``name`` stands for the data it touches (CUDA C++ Programming Guide,
  "Device Memory L2 Access Management": global-memory accesses are cached in L2, and a repeated access to data
  still there is a hit). A kernel given ``cold_s`` takes that long when its data is not in the L2 (the first run
  after a flush) and ``seconds`` when it is; kernels without ``cold_s`` take ``seconds`` whatever the L2 holds.
  Simplified: the rule is applied in launch order, which is the order one stream runs its work (two streams
  interleaving in the L2 are not modelled), nothing but a flush evicts (no capacity), and a captured kernel with an
  L2 rule raises :class:`Unmodelled` (its L2 state is known only when the graph replays).
* A total-energy counter (:meth:`FakeCuda.energy_j`): NVML's ``nvmlDeviceGetTotalEnergyConsumption`` counts the
  board's energy since the driver was loaded (nvml.h; ``shared/reference/nvml_and_peaks.md``). Here: joules, idle
  power (:data:`IDLE_W`) over the simulated time, plus each kernel's or replay's power (:data:`KERNEL_W`) and each
  spin's (:data:`SPIN_W`: a spin kernel is a kernel, one warp on one SM, drawing power for as long as it polls) above
  idle over the part of it that has run. A reading after ``torch.cuda.synchronize`` (torch/cuda/__init__.py,
  ``synchronize``, line 1209 of the torch 2.13.0 wheel: waits for every kernel of every stream of the device)
  therefore holds all the work queued before it. The counter is exact (no update period: the window tests of
  NVML's steps use tests/fake_nvml.py) and its watts are illustrative, like the launch costs: tests assert
  relations (joules of the timed call), never the constants.

Held streams (the ``blocked_stream`` timing mode, fp8bench/measure/blocking.py)
-----------------------------------------------------------------------
:class:`FakeStreamHold` stands for the Triton spin and release kernels. CUDA's rules for them: a stream runs its work
in order, so work launched behind a spinning kernel waits until the spin ends (CUDA programming guide, "Streams":
operations issued to one stream execute in issue order); the release runs on another stream, which does not wait
for the held one (torch's streams are ``cudaStreamNonBlocking``, as above); the host's launches return at once while
the work waits (launches are asynchronous); a host wait for held work (a device or stream synchronize, an event
synchronize, ``.item()``) lasts until the spin ends; querying it returns "not ready". A spin kernel with no give-up
rule that never sees its release therefore **hangs the host for real** here (the thread blocks until a test sets
:attr:`FakeCuda.unstick`); one with a give-up time ends that long after it started, and says it gave up.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode

LAUNCH_S = 5e-6  # host seconds per eager kernel launch (Python dispatch + cudaLaunchKernel)
GRAPH_LAUNCH_S = 5e-6  # host seconds per cudaGraphLaunch
EVENT_RECORD_S = 1e-6  # host seconds per cudaEventRecord
EVENT_CREATE_S = 3e-6  # host seconds per cudaEventCreateWithFlags (made on an event's first record)
FLUSH_BYTES_PER_S = 3e12  # bytes per second the L2-flush kernel writes (HBM3 class)
IDLE_W = 70.0  # board watts with nothing running ("The energy counter", module docstring)
KERNEL_W = 500.0  # board watts while a kernel (or a graph replay's kernels) runs
SPIN_W = 90.0  # board watts while a one-warp spin kernel polls its flag (one SM busy)
H100_L2_BYTES = 50 * 2**20  # NVIDIA H100 SXM5: 50 MB L2

# cudaError_t -> (cudaGetErrorName, cudaGetErrorString) for the errors this fake raises.
_CUDA_ERRORS = {
    101: ("cudaErrorInvalidDevice", "invalid device ordinal"),
    700: ("cudaErrorIllegalAddress", "an illegal memory access was encountered"),
    719: ("cudaErrorLaunchFailure", "unspecified launch failure"),
    900: ("cudaErrorStreamCaptureUnsupported", "operation not permitted when stream is capturing"),
    901: ("cudaErrorStreamCaptureInvalidated", "operation failed due to a previous error during capture"),
    907: ("cudaErrorCapturedEvent", "operation not permitted on an event last recorded in a capturing stream"),
}
CAPTURE_UNSUPPORTED, CAPTURE_INVALIDATED, CAPTURED_EVENT, INVALID_DEVICE = 900, 901, 907, 101
ILLEGAL_ADDRESS, LAUNCH_FAILURE = 700, 719  # a kernel's runtime failures: the "sticky" errors of a broken context


class Unmodelled(AssertionError):
    """The code under test did something this fake does not model: extend the fake, from the vendor's source."""


def cuda_error(code: int, before_2_8: bool = False) -> RuntimeError:
    """The exception torch raises for a failing CUDA call (module docstring, last rule): ``torch.AcceleratorError``,
    or with ``before_2_8`` the plain ``RuntimeError`` of torch 2.7 and older, with the same message."""
    name, text = _CUDA_ERRORS[code]
    # Only the first line is torch's form ("CUDA error: " and cudaGetErrorString's text), the prefix fp8bench
    # matches (fp8bench.core.pipeline); the lines after it stand for torch's help text in the fake's own words.
    hint = "(fake) no such device index" if code == INVALID_DEVICE else f"(fake) runtime code {name}"
    message = f"CUDA error: {text}\n{hint}\n(fake) torch's debugging hints would follow here\n"
    if before_2_8:
        return RuntimeError(message)
    exc = torch.AcceleratorError(message)
    exc.error_code = code  # type: ignore[attr-defined]
    return exc


@dataclass
class Op:
    """One entry of the fake's log: what ran (or was captured) where, and when on the simulated clock."""

    kind: str  # kernel | captured | replay | event | sync | capture_begin | capture_end | spin | release
    device: int
    stream: int  # stream id; 0 is the device's default stream
    name: str = ""
    start_s: float = 0.0
    end_s: float = 0.0
    watts: float = 0.0  # board power while it runs (kernels, replays, spins); 0: it draws nothing of its own


class FakeStream:
    _cuda: FakeCuda

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        self._setup(self._cuda.index(device), self._cuda.new_stream_id())

    def _setup(self, index: int, stream_id: int) -> None:
        self.device_index, self.stream_id, self.device_type = index, stream_id, 1
        self.device = torch.device("cuda", index)
        self.ready_s = 0.0  # simulated time at which the work queued on this stream completes
        self.capture: FakeGraph | None = None
        self.spin: _Spin | None = None  # a spin kernel holding this stream (FakeStreamHold)
        self.pending: list[tuple[str, Any, float]] = []  # work queued behind it: (kind, name or event, seconds)
        self._cuda.streams.append(self)

    @property
    def is_default(self) -> bool:
        return self.stream_id == 0

    def wait_stream(self, other: FakeStream) -> None:
        if other.capture is not None or self.capture is not None:
            raise Unmodelled("cross-stream dependencies during a capture")
        if other.spin is not None or self.spin is not None:
            raise Unmodelled("cross-stream dependencies on a held stream")
        self.ready_s = max(self.ready_s, other.ready_s)

    def synchronize(self) -> None:
        self._cuda.check_context()
        if self.capture is not None:
            self.capture.invalidated = True
            raise cuda_error(CAPTURE_UNSUPPORTED)
        self._cuda.wait_for_spin(self)
        self._cuda.host_s = max(self._cuda.host_s, self.ready_s)

    def query(self) -> bool:
        if self.capture is not None:
            self.capture.invalidated = True
            raise cuda_error(CAPTURE_UNSUPPORTED)
        return self.spin is None and self.ready_s <= self._cuda.host_s

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FakeStream) and (other.device_index, other.stream_id) == (self.device_index,
                                                                                            self.stream_id)

    def __hash__(self) -> int:
        return hash((self.device_index, self.stream_id))

    def __repr__(self) -> str:
        return f"<fake Stream device=cuda:{self.device_index} id={self.stream_id}>"


class FakeEvent:
    _cuda: FakeCuda

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False,
                 external: bool = False) -> None:
        self.enable_timing = enable_timing
        self.device_index: int | None = None  # set by the first recording stream (CUDAEvent::createEvent)
        self.time_s: float | None = None
        self.in_capture = False
        self.created = False  # c10's CUDAEvent creates the CUDA event lazily, on its first record

    def record(self, stream: FakeStream | None = None) -> None:
        if stream is None:
            stream = torch.cuda.current_stream()  # torch/cuda/streams.py, Event.record
        if self.device_index is None:
            self.device_index = stream.device_index
        if self.device_index != stream.device_index:
            raise RuntimeError(f"fake CUDA: an event of device {self.device_index} recorded on a stream of device "
                               f"{stream.device_index}")
        cuda = self._cuda
        cuda.check_context()
        if not self.created:  # CUDAEvent::record: createEvent() on first use, on the recording host thread
            self.created = True
            cuda.host_s += EVENT_CREATE_S
            cuda.events_created += 1
        cuda.host_s += EVENT_RECORD_S
        if stream.capture is not None:
            self.in_capture, self.time_s = True, None
            stream.capture.nodes.append(("event_record", 0.0))
            return
        self.in_capture = False
        self.stream = stream
        if stream.spin is not None:  # queued behind the spin: its time is known when the stream drains
            self.time_s = None
            stream.pending.append(("event", self, 0.0))
            return
        self.time_s = max(stream.ready_s, cuda.host_s)
        stream.ready_s = self.time_s
        cuda.log.append(Op("event", stream.device_index, stream.stream_id, start_s=self.time_s, end_s=self.time_s))

    def query(self) -> bool:
        if self.in_capture:
            raise cuda_error(CAPTURED_EVENT)
        if self._held():
            return False
        return self.time_s is None or self.time_s <= self._cuda.host_s

    def _held(self) -> bool:
        stream = getattr(self, "stream", None)
        return stream is not None and stream.spin is not None and any(e is self for _, e, _ in stream.pending)

    def synchronize(self) -> None:
        self._cuda.check_context()
        if self.in_capture:
            raise cuda_error(CAPTURED_EVENT)
        if self._held():
            self._cuda.wait_for_spin(self.stream)
        if self.time_s is not None:
            self._cuda.host_s = max(self._cuda.host_s, self.time_s)

    def elapsed_time(self, end_event: FakeEvent) -> float:
        """Milliseconds from this event to ``end_event`` (CUDAEvent::elapsed_time's checks, in its order)."""
        if not (self.enable_timing and end_event.enable_timing):
            raise ValueError("fake CUDA: elapsed time needs two events made with enable_timing")
        if self.device_index is None or end_event.device_index is None:
            raise ValueError("fake CUDA: elapsed time needs two recorded events")
        if not (self.query() and end_event.query()):
            raise RuntimeError("fake CUDA: elapsed time needs two completed events")
        assert self.time_s is not None and end_event.time_s is not None
        return (end_event.time_s - self.time_s) * 1e3


class FakeGraph:
    _cuda: FakeCuda

    def __init__(self, keep_graph: bool = False) -> None:
        self.nodes: list[tuple[str, float]] = []  # (kernel name, seconds) in capture order
        self.stream: FakeStream | None = None
        self.device: int | None = None
        self.mode: str | None = None
        self.invalidated = False
        self.has_exec = False
        self.replays = 0

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global",
                      check_input_liveness: bool = False) -> None:
        if capture_error_mode not in ("global", "thread_local", "relaxed"):
            raise RuntimeError(f"fake CUDA: capture error mode {capture_error_mode!r} is none of global, "
                               "thread_local, relaxed")
        if self.has_exec:
            raise RuntimeError("fake CUDA: this graph already holds a capture; a new capture needs a new graph")
        cuda = self._cuda
        stream = cuda.currents[cuda.current]
        if stream.is_default:
            raise RuntimeError("fake CUDA: capture on the default stream (a capture needs a side stream; replay may "
                               "run on any)")
        if cuda.capturing is not None:
            raise Unmodelled("a second capture while one is underway")
        self.stream, self.device, self.mode = stream, cuda.current, capture_error_mode
        stream.capture, cuda.capturing = self, self
        cuda.log.append(Op("capture_begin", cuda.current, stream.stream_id))

    def capture_end(self) -> None:
        cuda = self._cuda
        stream = cuda.currents[cuda.current]
        if stream is not self.stream:
            raise RuntimeError("fake CUDA: a capture ended on another stream than the one it began on")
        stream.capture, cuda.capturing = None, None
        cuda.log.append(Op("capture_end", cuda.current, stream.stream_id))
        if self.invalidated:
            raise cuda_error(CAPTURE_INVALIDATED)
        if not self.nodes:
            warnings.warn("The CUDA Graph is empty. This usually means that the graph was attempted to be captured "
                          "on wrong device or stream.", UserWarning, stacklevel=2)
        self.has_exec = True

    def replay(self) -> None:
        if not self.has_exec:
            raise RuntimeError("fake CUDA: replay of a graph with no successful capture")
        cuda = self._cuda
        assert self.device is not None
        stream = cuda.currents[self.device]  # device guard to the capture device, then its current stream
        if stream.capture is not None:
            raise Unmodelled("replaying a graph into a capture")
        cuda.host_s += GRAPH_LAUNCH_S
        start = max(stream.ready_s, cuda.host_s)
        stream.ready_s = start + sum(seconds for _, seconds in self.nodes)
        self.replays += 1
        cuda.log.append(Op("replay", self.device, stream.stream_id, "+".join(n for n, _ in self.nodes), start,
                           stream.ready_s, KERNEL_W))

    def reset(self) -> None:
        self.has_exec, self.nodes = False, []
        self._cuda.graphs_reset += 1


class DeviceBuffer:
    """What ``torch.empty(..., device="cuda:N")`` returns under the fake: device memory whose ``zero_()`` is a kernel
    on the device's current stream, as torch runs an op on a tensor (on its device's current stream)."""

    def __init__(self, cuda: FakeCuda, index: int, nbytes: int) -> None:
        self._cuda, self.device, self.nbytes = cuda, torch.device("cuda", index), nbytes

    def zero_(self) -> DeviceBuffer:
        self._cuda.kernel(self.nbytes / FLUSH_BYTES_PER_S, device=self.device.index, name="zero_",
                          writes=self.nbytes)
        return self


class _DeviceAllocations(TorchFunctionMode):
    """Routes ``torch.empty(..., device=<cuda>)`` to :class:`DeviceBuffer`; every other call runs as usual."""

    def __init__(self, cuda: FakeCuda) -> None:
        super().__init__()
        self.cuda = cuda

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        device = kwargs.get("device")
        if func is torch.empty and device is not None and torch.device(device).type == "cuda":
            sizes = args[0] if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)) else args
            numel = 1
            for s in sizes:
                numel *= int(s)
            dtype = kwargs.get("dtype") or torch.get_default_dtype()
            return DeviceBuffer(self.cuda, self.cuda.index(device), numel * dtype.itemsize)
        return func(*args, **kwargs)


@dataclass
class FakeCuda:
    """The fake runtime: ``device_count`` GPUs (H100-like properties), one host thread."""

    device_count: int = 2
    hardware_queues: int = 8  # work queues per device (CUDA_DEVICE_MAX_CONNECTIONS); 1: streams serialize
    l2_bytes: int = H100_L2_BYTES
    name: str = "NVIDIA H100 80GB HBM3"
    host_s: float = 0.0
    current: int = 0
    log: list[Op] = field(default_factory=list)
    streams: list[FakeStream] = field(default_factory=list)
    properties_read: list[int] = field(default_factory=list)  # device indices whose properties were queried
    graphs_reset: int = 0
    events_created: int = 0  # cudaEventCreate calls made (first records)
    cached: dict[tuple[int, int], int] = field(default_factory=dict)  # (device, bytes) -> free cached blocks
    sticky: int | None = None  # the cudaError_t of a kernel fault that broke the context (fault())
    mallocs: int = 0  # cudaMalloc calls (allocations no cached block served)
    mallocs_while_held: int = 0  # of which, issued while a spin kernel held a stream of the device
    capturing: FakeGraph | None = None
    idle_w: float = IDLE_W  # board watts with nothing running ("The energy counter")
    # Per device, the named working sets the L2 holds since its last flush ("The L2 cache").
    l2_holds: dict[int, set[str]] = field(default_factory=dict)
    unstick: threading.Event = field(default_factory=threading.Event)  # set by a test to end a hang
    hung: bool = False  # a host wait on a held stream that nothing will ever release

    def __post_init__(self) -> None:
        self._next_id = 1
        self.Stream = type("Stream", (FakeStream,), {"_cuda": self})
        self.Event = type("Event", (FakeEvent,), {"_cuda": self})
        self.CUDAGraph = type("CUDAGraph", (FakeGraph,), {"_cuda": self})
        self.defaults = []
        for i in range(self.device_count):
            stream = self.Stream.__new__(self.Stream)
            stream._setup(i, 0)
            self.defaults.append(stream)
        self.currents: list[FakeStream] = list(self.defaults)

    # -- what torch.cuda exposes ------------------------------------------------------------------------------
    def index(self, device: Any) -> int:
        """A device argument as torch resolves it (``None`` or ``cuda`` without an index: the current device)."""
        if device is None:
            return self.current
        if isinstance(device, str):
            device = torch.device(device)
        if isinstance(device, torch.device):
            if device.type != "cuda":
                raise ValueError(f"fake CUDA: not a cuda device: {device}")
            device = self.current if device.index is None else device.index
        index = int(device)
        if not 0 <= index < self.device_count:
            raise cuda_error(INVALID_DEVICE)
        return index

    def new_stream_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def exchange_device(self, index: int) -> int:
        """``torch.cuda._exchange_device``: make ``index`` current, return the previous one (-1 is a no-op)."""
        if index < 0:
            return -1
        previous, self.current = self.current, self.index(index)
        return previous

    def set_device(self, device: Any) -> None:
        self.exchange_device(self.index(device))

    def current_stream(self, device: Any = None) -> FakeStream:
        return self.currents[self.index(device)]

    def default_stream(self, device: Any = None) -> FakeStream:
        return self.defaults[self.index(device)]

    def set_stream(self, stream: FakeStream | None) -> None:
        if stream is None:
            return
        self.current = stream.device_index  # THCPModule_setStream_wrap also sets the device
        self.currents[stream.device_index] = stream

    def synchronize(self, device: Any = None) -> None:
        """``cudaDeviceSynchronize`` on ``device``: refused while a stream of that device captures."""
        self.check_context()
        index = self.index(device)
        if self.capturing is not None and self.capturing.device == index:
            self.capturing.invalidated = True
            raise cuda_error(CAPTURE_UNSUPPORTED)
        for stream in [s for s in self.streams if s.device_index == index and s.spin is not None]:
            self.wait_for_spin(stream)
        self.host_s = max([self.host_s] + [s.ready_s for s in self.streams if s.device_index == index])
        self.log.append(Op("sync", index, -1, start_s=self.host_s, end_s=self.host_s))

    def get_device_properties(self, device: Any = None) -> SimpleNamespace:
        index = self.index(device)
        self.properties_read.append(index)
        return SimpleNamespace(name=self.name, L2_cache_size=self.l2_bytes, total_memory=80 * 2**30, major=9,
                               minor=0, multi_processor_count=132, uuid=f"fake-uuid-{index}")

    # -- what tests call for the work a pipeline does -----------------------------------------------------------
    def kernel(self, seconds: float, device: Any = None, name: str = "kernel", cold_s: float | None = None,
               writes: int = 0) -> None:
        """One op on a tensor of ``device`` (``None``: the current device, as ``device="cuda"`` tensors are): a
        kernel on that device's current stream, or a node of the capture running on it. ``name`` also names the
        data it touches: it takes ``cold_s`` instead of ``seconds`` where that data is not in the L2 ("The L2
        cache"); ``writes`` bytes of ``writes >= L2`` evict the whole L2."""
        self.check_context()
        index = self.index(device)
        stream = self.currents[index]
        self.host_s += LAUNCH_S
        if stream.capture is not None:
            if stream.capture.invalidated:
                raise cuda_error(CAPTURE_INVALIDATED)
            if cold_s is not None or writes:
                raise Unmodelled("the L2 state of a captured kernel (it is known only when the graph replays)")
            stream.capture.nodes.append((name, seconds))
            self.log.append(Op("captured", index, stream.stream_id, name))
            return
        seconds = self.through_l2(index, name, seconds, cold_s, writes)
        held = stream if stream.spin is not None else self.queue_blocker(index)
        if held is not None:
            held.pending.append(("kernel", name, seconds))
            return
        start = max(stream.ready_s, self.host_s)
        stream.ready_s = start + seconds
        self.log.append(Op("kernel", index, stream.stream_id, name, start, stream.ready_s, KERNEL_W))

    # -- the L2 cache and the energy counter (module docstring) -------------------------------------------------
    def through_l2(self, index: int, name: str, seconds: float, cold_s: float | None, writes: int) -> float:
        """The seconds a kernel of ``name`` takes on device ``index`` given what the L2 holds, which it updates."""
        holds = self.l2_holds.setdefault(index, set())
        if writes >= self.l2_bytes:  # a write of the whole cache's size leaves nothing else in it
            holds.clear()
            return seconds
        cold = cold_s is not None and name not in holds
        holds.add(name)
        return cold_s if cold and cold_s is not None else seconds

    def energy_j(self, device: Any = None) -> float:
        """Device ``device``'s total-energy counter, joules since the fake started: idle power over the host's
        simulated time, plus each kernel's, replay's and spin's power above idle over the part of it run so far."""
        index, now = self.index(device), self.host_s
        busy = sum((op.watts - self.idle_w) * max(0.0, min(op.end_s, now) - op.start_s)
                   for op in self.log if op.device == index and op.watts)
        return self.idle_w * now + busy

    def host_work(self, seconds: float) -> None:
        """The host spends ``seconds`` on work that launches nothing (Python between launches, a busy wait)."""
        self.host_s += seconds

    # -- held streams (module docstring) --------------------------------------------------------------------------
    def drain(self, stream: FakeStream, spin_end_s: float) -> None:
        """The spin on ``stream`` ends at ``spin_end_s``: its queued work runs back to back from then (it was all
        launched before, so nothing waits for the host)."""
        if stream.spin is not None and stream.spin.op is not None:
            stream.spin.op.end_s = spin_end_s  # the spin polled, drawing power, until now
        stream.spin = None
        stream.ready_s = spin_end_s
        for kind, what, seconds in stream.pending:
            if kind == "event":
                what.time_s = stream.ready_s
                self.log.append(Op("event", stream.device_index, stream.stream_id, start_s=stream.ready_s,
                                   end_s=stream.ready_s))
            else:
                start, stream.ready_s = stream.ready_s, stream.ready_s + seconds
                self.log.append(Op("kernel", stream.device_index, stream.stream_id, what, start, stream.ready_s,
                                   KERNEL_W))
        stream.pending = []

    def wait_for_spin(self, stream: FakeStream) -> None:
        """A host wait for work behind a spin kernel: it lasts until the spin gives up, or forever."""
        spin = stream.spin
        if spin is None:
            return
        if spin.give_up_s is None:
            self.hung = True
            self.unstick.wait()  # the host thread blocks, as cudaStreamSynchronize would, until a test ends it
            raise Unmodelled("a host wait on a stream held by a spin kernel that nothing releases (a hang)")
        spin.gave_up = True
        self.drain(stream, spin.start_s + spin.give_up_s)
        self.host_s = max(self.host_s, stream.ready_s)

    def alloc(self, nbytes: int, device: Any = None) -> FakeBlock:
        """A device allocation of ``nbytes`` on ``device`` (module docstring, "Device memory")."""
        self.check_context()
        index = self.index(device)
        key = (index, int(nbytes))
        if self.cached.get(key, 0) > 0:  # get_free_block: a cached block of the size, no CUDA call
            self.cached[key] -= 1
            return FakeBlock(self, key)
        self.mallocs += 1  # alloc_block: cudaMalloc, an implicit synchronization
        for stream in [s for s in self.streams if s.device_index == index and s.spin is not None]:
            self.mallocs_while_held += 1
            self.wait_for_spin(stream)
        return FakeBlock(self, key)

    def item(self, device: Any = None) -> float:
        """``Tensor.item()`` of a CUDA tensor (aten/src/ATen/native/cuda/CUDAScalar.cu, ``_local_scalar_dense_cuda``):
        a pinned host buffer, then ``at::cuda::memcpy_and_sync``, a copy and a synchronize of the current stream;
        the synchronize is what CUDA refuses during a capture."""
        self.check_context()
        stream = self.currents[self.index(device)]
        if stream.capture is not None:
            stream.capture.invalidated = True
            raise cuda_error(CAPTURE_UNSUPPORTED)
        self.wait_for_spin(stream)
        self.host_s = max(self.host_s, stream.ready_s)
        return 0.0

    def count_launches(self, call: Any, device: Any) -> int:
        """What the profiler's CUDA activity counts for one unheld ``call``: the kernels it ran (fp8bench.measure.
        blocking.count_launches on a GPU)."""
        before = len(self.ops("kernel"))
        call()
        return len(self.ops("kernel")) - before

    def queue_blocker(self, index: int) -> FakeStream | None:
        """With one hardware queue, the held stream of device ``index`` that every later submission waits behind."""
        if self.hardware_queues > 1:
            return None
        return next((s for s in self.streams if s.device_index == index and s.spin is not None), None)

    def fault(self, code: int = ILLEGAL_ADDRESS) -> None:
        """A kernel of the current call faults (an illegal address, a launch failure): the error is raised now, and
        the context stays broken for every later call (module docstring, sticky errors)."""
        if code not in (ILLEGAL_ADDRESS, LAUNCH_FAILURE):
            raise Unmodelled(f"a kernel fault with cudaError_t {code}")
        self.sticky = code
        raise cuda_error(code)

    def check_context(self) -> None:
        """Any CUDA call after a sticky fault returns that fault's error."""
        if self.sticky is not None:
            raise cuda_error(self.sticky)

    def ops(self, kind: str) -> list[Op]:
        return [op for op in self.log if op.kind == kind]

    # -- installing it --------------------------------------------------------------------------------------------
    def install(self, monkeypatch: pytest.MonkeyPatch) -> _DeviceAllocations:
        """Put the fake under ``torch.cuda``; returns the allocation mode, which the caller enters."""
        patches: dict[str, Any] = {
            "is_available": lambda: True,
            "device_count": lambda: self.device_count,
            "current_device": lambda: self.current,
            "set_device": self.set_device,
            "_exchange_device": self.exchange_device,
            "_maybe_exchange_device": self.exchange_device,
            "current_stream": self.current_stream,
            "default_stream": self.default_stream,
            "set_stream": self.set_stream,
            "synchronize": self.synchronize,
            "empty_cache": lambda: None,
            "get_device_properties": self.get_device_properties,
            "get_device_name": lambda device=None: self.name,
            "get_device_capability": lambda device=None: (9, 0),
            "Stream": self.Stream,
            "Event": self.Event,
            "CUDAGraph": self.CUDAGraph,
        }
        for name, value in patches.items():
            monkeypatch.setattr(torch.cuda, name, value)
        # torch.cuda.graph.__enter__ empties the pinned-host cache too; the CPU build has no such binding.
        monkeypatch.setattr(torch._C, "_host_emptyCache", lambda: None, raising=False)
        return _DeviceAllocations(self)


class FakeBlock:
    """Device memory a call allocated: back to the allocator's cache when its last reference goes, as a tensor's
    storage is (``CUDACachingAllocator::free`` keeps the block for reuse)."""

    def __init__(self, cuda: FakeCuda, key: tuple[int, int]) -> None:
        self._cuda, self._key = cuda, key

    def __del__(self) -> None:
        self._cuda.cached[self._key] = self._cuda.cached.get(self._key, 0) + 1


@dataclass
class _Spin:
    start_s: float  # when the spin kernel started polling
    generation: int  # the release it waits for
    give_up_s: float | None  # seconds of polling before it gives up; None: never
    gave_up: bool = False
    op: Op | None = None  # its entry in the log, whose end is set when it stops polling


class FakeStreamHold:
    """fp8bench.measure.blocking's ``StreamHold`` on the fake runtime: a spin kernel on the held stream, a release
    kernel on a side stream of the same device (module docstring, "Held streams"). ``give_up_s=None`` models a spin
    kernel without a give-up rule."""

    def __init__(self, cuda: FakeCuda, device: int, give_up_s: float | None = 1.0) -> None:
        self.cuda, self.device, self.give_up_s = cuda, device, give_up_s
        self.side = cuda.Stream(device)
        self.flag = 0
        self.last: _Spin | None = None
        self.holds = self.releases = 0

    def hold(self, stream: FakeStream, generation: int) -> None:
        cuda = self.cuda
        if stream.capture is not None:
            raise Unmodelled("holding a capturing stream")
        if stream.spin is not None:
            raise Unmodelled("a second spin kernel behind a spinning one")
        cuda.host_s += LAUNCH_S
        start = max(stream.ready_s, cuda.host_s)
        self.holds += 1
        self.last = _Spin(start, generation, self.give_up_s)
        if self.flag >= generation:  # already released: the spin reads the flag once and ends
            stream.ready_s = start
            return
        stream.spin = self.last
        self.last.op = Op("spin", stream.device_index, stream.stream_id, "spin", start, start, SPIN_W)
        cuda.log.append(self.last.op)

    def release(self, generation: int) -> None:
        cuda = self.cuda
        blocker = cuda.queue_blocker(self.device)
        if blocker is not None:  # one hardware queue: the release waits behind the spin it should end
            cuda.host_s += LAUNCH_S
            blocker.pending.append(("kernel", "release", 0.0))
            return
        cuda.host_s += LAUNCH_S
        at = max(self.side.ready_s, cuda.host_s)
        self.side.ready_s = at
        self.flag = max(self.flag, generation)
        self.releases += 1
        cuda.log.append(Op("release", self.device, self.side.stream_id, "release", at, at))
        for stream in cuda.streams:
            if stream.spin is not None and stream.device_index == self.device and stream.spin.generation <= self.flag:
                cuda.drain(stream, max(stream.spin.start_s, at))

    def gave_up(self) -> bool:
        return self.last is not None and self.last.gave_up
