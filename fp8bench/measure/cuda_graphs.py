"""CUDA graphs for timing: capture a call once, then time replays of it (the ``cuda_graph`` timing mode).

Why: a call of several kernels, timed eagerly with CUDA events, includes the time the GPU waits while Python
dispatches and launches each next kernel. For the small and medium shapes where FP8 is decided (quantize, GEMM,
epilogue: three to ten kernels of microseconds each) those gaps can be most of the figure. A CUDA graph records the
kernels of one call with their arguments; a replay submits them all with a single ``cudaGraphLaunch``, so the GPU runs
them back to back (PyTorch, ``docs/source/notes/cuda.rst``, "CUDA Graphs").

How (PyTorch's API, torch 2.13; the rules are cited where they are enforced):

1. **Warm up on a side stream, then capture on it.** PyTorch's CUDA notes (``notes/cuda.rst``, "PyTorch API") ask
   for a few eager iterations before a capture, run on a side stream: lazy
   initialization (cuBLAS handles and workspaces, autotuning, allocator growth) must not happen inside a capture.
   One side stream per device is created here and reused, bound explicitly to the case's GPU: ``torch.cuda.graph``
   would otherwise create its class-wide default side stream once, on whichever GPU was current the first time
   (``torch/cuda/graphs.py``, ``graph.__init__``), and ``CUDAGraph::capture_begin`` refuses the default stream
   (``aten/src/ATen/cuda/CUDAGraph.cpp``).
2. **Capture with** ``torch.cuda.graph(graph, stream=side_stream, capture_error_mode="global")``. ``"global"`` is
   torch's default and CUDA's strictest mode (``cudaStreamCaptureModeGlobal``): a potentially unsafe call from any
   thread fails the capture instead of corrupting it silently.
3. **Replay on the device's current stream** ("after capture, it's ok to replay them on the default stream",
   ``CUDAGraph::capture_begin``); :class:`fp8bench.measure.timing.CudaTimer` flushes the L2 and records its events on
   that stream around ``graph.replay()``, so the flush is never inside the timed replay.

What cannot be captured is refused with the reason (:class:`CaptureRefused`, a
:class:`fp8bench.core.pipeline.Unsupported`: the runner records a ``skipped`` case, or a phase that is not timed, never
an eager figure in its place):

* a call that synchronizes with the host inside it (``.item()``, ``float(tensor)``, ``.cpu()``,
  ``torch.cuda.synchronize()``): CUDA refuses it with ``cudaErrorStreamCaptureUnsupported`` ("operation not permitted
  when stream is capturing"), which invalidates the capture, so ``capture_end`` then fails with
  ``cudaErrorStreamCaptureInvalidated`` (``CUDAGraph::capture_end``: ``AT_CUDA_CHECK(cudaStreamEndCapture(...))``);
  torch raises both as ``torch.AcceleratorError`` (``c10/cuda/CUDAException.cpp``). The reason reported is the first
  error, not the follow-up one;
* a library that checks for capture itself (an optimizer whose ``capturable`` is False raises ``RuntimeError``,
  ``torch/optim/optimizer.py``, ``_cuda_graph_capture_health_check``);
* a capture that recorded no GPU work: the work went to another device or stream (or ran on the host). Torch only
  warns ("The CUDA Graph is empty...", ``CUDAGraph::capture_end``); replaying it would time nothing, so it is refused.

``torch.cuda.graph.__exit__`` ends the capture before it restores the previous stream, so when ``capture_end`` raises
the capture stream stays current (``torch/cuda/graphs.py``); :meth:`GraphCapturer.capture` restores it itself.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from fp8bench.core.devices import Device
from fp8bench.core.pipeline import Unsupported, first_line

# Eager calls on the side stream before capture: the three of the whole-network example in PyTorch's CUDA-graph notes.
WARMUP_CALLS = 3
# torch's default and CUDA's strictest capture mode (module docstring, step 2).
CAPTURE_ERROR_MODE = "global"
# cudaError_t values (CUDA runtime API, ``cudaError``) that say why a capture failed; torch.AcceleratorError carries
# the code as ``error_code`` (torch/csrc/Exceptions.cpp, ``_new_accelerator_error_object``).
_CAPTURE_ERROR_HINTS = {
    900: "the call synchronizes with the host (.item(), float(tensor), .cpu(), a synchronize) or makes another call "
         "CUDA forbids while capturing",  # cudaErrorStreamCaptureUnsupported
    906: "the call uses the legacy default stream while capturing",  # cudaErrorStreamCaptureImplicit
    907: "the call waits on or queries an event recorded during the capture",  # cudaErrorCapturedEvent
}
# The warning CUDAGraph::capture_end issues (TORCH_WARN, a Python UserWarning) when the graph has no nodes.
_EMPTY_GRAPH_WARNING = "The CUDA Graph is empty"


class CaptureRefused(Unsupported):
    """A call that cannot be captured in a CUDA graph; the message is the one-line reason."""


def _root_cause(exc: BaseException) -> BaseException:
    """The first error of a chain: an error inside a capture is followed by the one ``capture_end`` raises."""
    seen = {id(exc)}
    while exc.__context__ is not None and id(exc.__context__) not in seen:
        exc = exc.__context__
        seen.add(id(exc))
    return exc


def refusal_reason(name: str, exc: BaseException) -> str:
    """One line: which call could not be captured, the first error's message and, for CUDA's codes, what it means."""
    root = _root_cause(exc)
    hint = _CAPTURE_ERROR_HINTS.get(getattr(root, "error_code", None) or -1)
    kind = type(root).__name__
    return f"cannot capture {name} in a CUDA graph: {kind}: {first_line(root)}" + (f" ({hint})" if hint else "")


@dataclass
class CapturedCall:
    """A call captured once; :meth:`replay` reruns its kernels on the capturing device's current stream."""

    name: str
    graph: Any  # torch.cuda.CUDAGraph
    capture_s: float  # wall seconds of warm-up, capture and the first replay (setup, not measurement)

    def replay(self) -> None:
        self.graph.replay()

    def release(self) -> None:
        """Free the graph's executable and memory pool (tensors it allocated stay valid while referenced)."""
        self.graph.reset()


class GraphCapturer:
    """Captures calls on one CUDA device, warming each up on one side stream and capturing on the same stream."""

    def __init__(self, device: Device, warmup_calls: int = WARMUP_CALLS) -> None:
        if warmup_calls < 1:
            raise ValueError(f"warm-up calls before a capture must be >= 1, got {warmup_calls}")
        self.device, self.index, self.warmup_calls = device, device.cuda_index, warmup_calls
        with device.guard():
            self.stream = torch.cuda.Stream(device=self.index)
        self.captured: list[CapturedCall] = []

    def capture(self, name: str, fn: Callable[[], Any]) -> CapturedCall:
        """Warm ``fn`` up on the side stream, capture one call of it, replay it once; :class:`CaptureRefused` with the
        reason when it cannot be captured. Errors of ``fn`` itself during the eager warm-up propagate unchanged."""
        started = time.perf_counter()
        with self.device.guard():
            caller = torch.cuda.current_stream(self.index)
            self.stream.wait_stream(caller)  # the side stream starts after everything already queued
            with torch.cuda.stream(self.stream):
                for _ in range(self.warmup_calls):
                    fn()
            caller.wait_stream(self.stream)
            graph = torch.cuda.CUDAGraph()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    with torch.cuda.graph(graph, stream=self.stream, capture_error_mode=CAPTURE_ERROR_MODE):
                        fn()
                except Exception as exc:
                    raise CaptureRefused(refusal_reason(name, exc)) from exc
                finally:
                    torch.cuda.set_stream(caller)  # graph.__exit__ leaves the capture stream current when it raises
            if any(_EMPTY_GRAPH_WARNING in str(w.message) for w in caught):
                graph.reset()
                raise CaptureRefused(f"cannot capture {name} in a CUDA graph: it recorded no GPU work on "
                                     f"{self.device} (its kernels ran on another device or stream, or on the host)")
            graph.replay()  # the first launch uploads the graph; it stays out of the samples
            torch.cuda.synchronize(self.index)
        call = CapturedCall(name, graph, time.perf_counter() - started)
        self.captured.append(call)
        return call

    def release(self) -> None:
        """Free every graph captured so far (call after the case's last replay, energy windows included)."""
        with self.device.guard():
            for call in self.captured:
                call.release()
        self.captured.clear()
