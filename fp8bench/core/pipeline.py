"""What a backend hands the runner for one case: named phases, an end-to-end call, and numerics inputs.

A backend *builds* a :class:`Pipeline` from a :class:`BuildContext` (the case plus its inputs on the device). The
runner then times ``end_to_end`` (the headline time: everything from the workload's input dtype to its output) and
each phase alone. A phase closure works on state left by the previous phase, so ``gemm`` times the kernel on
operands that are already quantized: that is the "pre-quantized" number vendors quote, and fp8bench always reports
it *next to* the end-to-end one, never alone.

A pipeline also declares what its timed call returns (:class:`TimedReturn`). Wherever that is the workload's output,
the runner checks the last timed call's value against a fresh ``output()`` (:mod:`fp8bench.measure.output_check`),
whoever built or wrapped the pipeline: the declaration is the default and survives ``dataclasses.replace``, so a
plugin that swaps ``end_to_end`` for its own call is checked like the backend it wraps. Only a call that returns
something else (a training step returns its loss and moves the weights) opts out, and says why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

import torch

from fp8bench.core.devices import Device
from fp8bench.core.shapes import Shape

if TYPE_CHECKING:
    from fp8bench.core.precisions import Precision
    from fp8bench.numerics.quantize import CastStats


def first_line(exc: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message, bounded, for a record's ``reason`` (the type if it has none)."""
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:limit]


class Unsupported(Exception):
    """A backend refuses this case on this device; the message is the reason stored with the skipped record."""


# CUDA's message for cudaErrorMemoryAllocation is "out of memory"; libraries that call CUDA themselves (rather than
# allocating through torch's caching allocator, which raises torch.OutOfMemoryError) put it in a RuntimeError.
_OOM_TEXT = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED")


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says the device ran out of memory: ``torch.cuda.OutOfMemoryError``, or a ``RuntimeError``
    carrying CUDA's or cuBLAS's allocation-failure text."""
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(exc, RuntimeError) and any(t.lower() in str(exc).lower() for t in _OOM_TEXT)


# How a CUDA runtime failure reads once it reaches Python, matched without case. torch's CUDA check
# (c10/cuda/CUDAException.cpp, ``c10_cuda_check_implementation``) starts its message "CUDA error: " in every release;
# Transformer Engine's NVTE_CHECK_CUDA (common/util/logging.h) writes "CUDA Error: "; Triton's launcher
# (backends/nvidia/driver.c, ``gpuAssert``, 3.x) raises RuntimeError("Triton Error [CUDA]: <cuGetErrorString>").
_CUDA_ERROR_TEXTS = ("cuda error: ", "triton error [cuda]: ")


def is_cuda_runtime_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a kernel or driver failure at run time (an illegal memory access, a launch failure), as
    opposed to a library declining the case.

    torch 2.8 and newer raise ``torch.AcceleratorError`` (a ``RuntimeError``; first in the 2.8.0 wheel's
    ``torch/_C/__init__.pyi``); older releases raise a plain ``RuntimeError`` from the same check with the same
    "CUDA error: ..." message, and Transformer Engine a ``RuntimeError`` carrying "CUDA Error: ...". Out of memory
    is reported the same way and is told apart first (:func:`is_out_of_memory`). Triton's launcher reports a failing
    driver call as a ``RuntimeError`` carrying "Triton Error [CUDA]: ...".
    """
    accelerator_error = getattr(torch, "AcceleratorError", None)  # torch >= 2.8
    if accelerator_error is not None and isinstance(exc, accelerator_error):
        return True
    return isinstance(exc, RuntimeError) and any(t in str(exc).lower() for t in _CUDA_ERROR_TEXTS)


@contextmanager
def refusals(prefix: str, errors: tuple[type[BaseException], ...] = (Exception,), with_type: bool = False,
             when: Callable[[BaseException], bool] | None = None) -> Iterator[None]:
    """The one error rule of every backend's vendor call: a library's documented refusal inside the block becomes
    :class:`Unsupported` (``prefix: first line of the message``), i.e. a ``skipped`` record with the library's
    reason.

    * ``errors`` are the exception types the library refuses with (ATen: ``ValueError``, ``NotImplementedError``,
      ``RuntimeError`` from ``TORCH_CHECK``; Transformer Engine: ``AssertionError``, ``RuntimeError``,
      ``ValueError``); ``when`` narrows them further (for example to messages naming the refusing kernel).
    * Running out of device memory is never a refusal, whatever ``errors`` says: it propagates, and the runner
      records ``failed: out of memory``, empties the allocator's cache and goes on (:func:`is_out_of_memory`).
    * Nor is a CUDA runtime error (an illegal memory access, a launch failure: :func:`is_cuda_runtime_error`),
      although torch and TE raise it as a ``RuntimeError``: the kernel broke, so the case is ``failed``.
    * Anything else propagates unchanged and the runner records ``failed`` with the error.

    ``with_type`` keeps the exception's class name in the reason.
    """
    try:
        yield
    except Unsupported:
        raise
    except errors as exc:
        if is_out_of_memory(exc) or is_cuda_runtime_error(exc) or (when is not None and not when(exc)):
            raise
        kind = f"{type(exc).__name__}: " if with_type else ""
        raise Unsupported(f"{prefix}: {kind}{first_line(exc)}") from exc


@dataclass
class BuildContext:
    workload: str
    shape: Shape
    precision: Precision
    device: Device
    inputs: dict[str, torch.Tensor]  # FP32 source tensors on the device
    options: dict[str, Any] = field(default_factory=dict)  # workload-specific knobs (for example bias on/off)


class Returns(Enum):
    """What a pipeline's timed call (``end_to_end``) returns."""

    OUTPUT = "output"  # the workload's output: what ``output()`` returns, in ``output()``'s form after ``as_output``
    OTHER = "other"  # something else, named with the reason (a training step's loss): never compared


@dataclass(frozen=True)
class TimedReturn:
    """The declaration of what ``end_to_end`` returns, read by the runner's output check.

    ``as_output`` turns the timed call's value into ``output()``'s form (a flattening, a concatenation of the
    output and its gradient); the runner applies it after timing, so its cost never enters a sample. ``None``: the
    value is already in that form. ``reason`` says what the call returns instead; it is required for ``OTHER``
    and refused for ``OUTPUT``. ``bitwise`` is ``False`` where a kernel of the call is documented not to return the
    same bits twice on the same inputs (the outputs are then compared by SQNR, as delayed scaling's are).
    """

    kind: Returns = Returns.OUTPUT
    reason: str | None = None
    as_output: Callable[[Any], torch.Tensor] | None = None
    bitwise: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.kind, Returns):
            raise ValueError(f"TimedReturn kind {self.kind!r}; accepted: {', '.join(r.name for r in Returns)}")
        if self.kind is Returns.OTHER and not self.reason:
            raise ValueError("TimedReturn.other needs a reason: what the timed call returns instead of the "
                             "workload's output, and why it cannot be compared with output()")
        if self.kind is Returns.OUTPUT and self.reason is not None:
            raise ValueError(f"TimedReturn.output takes no reason, got {self.reason!r}")
        if self.kind is Returns.OTHER and self.as_output is not None:
            raise ValueError("TimedReturn.other takes no as_output: its value is never compared")

    @classmethod
    def output(cls, as_output: Callable[[Any], torch.Tensor] | None = None, bitwise: bool = True) -> TimedReturn:
        """The timed call returns the workload's output (``as_output`` maps it into ``output()``'s form;
        ``bitwise``: its kernels return the same bits on the same inputs)."""
        return cls(Returns.OUTPUT, as_output=as_output, bitwise=bitwise)

    @classmethod
    def other(cls, reason: str) -> TimedReturn:
        """The timed call returns something else; ``reason`` says what, and why it is not compared."""
        return cls(Returns.OTHER, reason=reason)

    @property
    def is_output(self) -> bool:
        return self.kind is Returns.OUTPUT


WORKLOAD_OUTPUT = TimedReturn.output()


@dataclass
class Pipeline:
    end_to_end: Callable[[], Any]
    phases: dict[str, Callable[[], Any]]
    output: Callable[[], torch.Tensor]  # a fresh result for numerics (not timed)
    prequantized_phases: tuple[str, ...] = ()  # phases whose sum is the "pre-quantized" time
    cast_stats: Callable[[], dict[str, CastStats]] = lambda: {}
    notes: list[str] = field(default_factory=list)
    interpreted: bool = False  # timings are not comparable (for example Triton's CPU interpreter)
    extra: dict[str, Any] = field(default_factory=dict)  # fields merged into the record (compile_s, ...)
    scale_format: str | None = None  # the library's scale factors, where it can vary them (Record.scale_format)
    returns: TimedReturn = WORKLOAD_OUTPUT  # what end_to_end returns: checked against output() unless OTHER
