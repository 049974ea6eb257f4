"""What a backend hands the runner for one case: named phases, an end-to-end call, and numerics inputs.

A backend *builds* a :class:`Pipeline` from a :class:`BuildContext` (the case plus its inputs on the device). The
runner then times ``end_to_end`` (the headline time: everything from the workload's input dtype to its output) and
each phase alone. A phase closure works on state left by the previous phase, so ``gemm`` times the kernel on
operands that are already quantized: that is the "pre-quantized" number vendors quote, and fp8bench always reports
it *next to* the end-to-end one, never alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from fp8bench.devices import Device
from fp8bench.recipes import Precision
from fp8bench.shapes import Shape

if TYPE_CHECKING:
    from fp8bench.quantize import CastStats


def first_line(exc: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message, bounded, for a record's ``reason`` (the type if it has none)."""
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:limit]


class Unsupported(Exception):
    """A backend refuses this case on this device; the message is the reason stored with the skipped record."""


@contextmanager
def refusals(prefix: str, errors: tuple[type[BaseException], ...] = (Exception,),
             with_type: bool = False) -> Iterator[None]:
    """Turn a vendor library's own exceptions inside the block into :class:`Unsupported` (``prefix: message``).

    Vendor libraries refuse a layout or a recipe with assorted exception types; to the runner each is a skipped
    case with the library's first line as the reason. ``with_type`` keeps the exception's class name in the reason.
    """
    try:
        yield
    except Unsupported:
        raise
    except errors as exc:
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
