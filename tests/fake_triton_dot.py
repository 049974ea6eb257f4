"""What Triton's sm_90 compiler makes of each ``tl.dot`` an interpreted kernel issues.

Under the interpreter (``TRITON_INTERPRET=1``) a ``tl.dot`` is a NumPy matmul: its accumulation mode is never
exercised, so a kernel that leaves the Hopper accumulation to Triton's default passes every numerical test on the
CPU. This fake records the arguments each ``tl.dot`` reaches Triton's semantic layer with and applies the rules
the CUDA backend applies to them on compute capability 9.0 (Triton 3.9.0, paths inside the ``triton`` wheel or
repository):

* ``language/semantic.py`` ``dot``: ``max_num_imprecise_acc=None`` with FP8 operands takes the backend's
  ``max_num_imprecise_acc_default``; an explicit value above the dot's K is a ``ValueError`` (3.2+; 3.0.0 and
  3.1.0 have no such check). The fake records and does not raise it: fp8bench passes at most the K tile.
* ``backends/nvidia/compiler.py`` ``CUDABackend.parse_options``: that default is ``2**30`` when the capability is
  90, else 0 (the same line exists since Triton 3.0's ``third_party/nvidia/backend/compiler.py``).
* ``WarpGroupDotOp::needsPartialAccumulator`` (``lib/Dialect/TritonNvidiaGPU/IR/Ops.cpp``) with the WGMMA lowering
  (``third_party/nvidia/lib/TritonNVIDIAGPUToLLVM/DotOpToLLVM/WGMMA.cpp`` ``convertDot``): an FP8 dot with an FP32
  accumulator and ``max_num_imprecise_acc <= K`` accumulates its wgmma instructions into a separate zeroed
  register set and adds it to the accumulator with FP32 adds every ``max_num_imprecise_acc`` elements (and at the
  dot's end); otherwise the wgmma instructions accumulate straight into the carried accumulator, in the tensor
  cores' reduced precision, for as long as the kernel's K loop carries it.

:attr:`DotCall.imprecise_span` is the outcome: how many K elements a product sum runs in reduced precision before an
FP32 add, or ``None`` for the whole reduction (a loop-carried accumulator that is never promoted). A dot without an
accumulator starts from zero, so its result is one partial sum of its K elements, which the kernel itself adds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SM90_DEFAULT = 2**30  # compiler.py: max_num_imprecise_acc_default on capability 90


def _int(v: Any) -> int:
    return int(getattr(v, "value", v))


@dataclass(frozen=True)
class DotCall:
    """One ``tl.dot`` as Triton's semantic layer received it."""

    lhs: str  # Triton dtype names, e.g. fp8e4nv
    rhs: str
    out: str  # the accumulator dtype the dot produces (out_dtype, else the accumulator's, else fp32)
    k: int  # the dot's reduction depth (the K tile)
    carried: bool  # an accumulator was passed in (a loop-carried sum), not a zero start
    max_num_imprecise_acc: int | None  # as given; None leaves it to the backend's default

    @property
    def fp8(self) -> bool:
        return self.lhs.startswith("fp8") and self.rhs.startswith("fp8")

    @property
    def imprecise_span(self) -> int | None:
        """K elements summed in reduced precision before an FP32 add on sm_90 (``None``: the whole reduction)."""
        limit = self.max_num_imprecise_acc if self.max_num_imprecise_acc is not None else SM90_DEFAULT
        if not self.fp8 or self.out != "fp32":
            return 0  # the rule applies to FP8 x FP8 -> FP32 only
        if limit <= self.k:
            return limit
        return None if self.carried else self.k


def _record(calls: list[DotCall], lhs: Any, rhs: Any, acc: Any, max_num_imprecise_acc: Any, out_dtype: Any) -> None:
    out = out_dtype if out_dtype is not None else (acc.type.element_ty if acc is not None else "fp32")
    calls.append(DotCall(str(lhs.dtype), str(rhs.dtype), str(out), _int(lhs.shape[-1]), acc is not None,
                         None if max_num_imprecise_acc is None else _int(max_num_imprecise_acc)))


def record_dots(monkeypatch: Any) -> list[DotCall]:
    """Record every ``tl.dot`` interpreted kernels issue for the rest of the test (undone after it).

    ``tl.dot`` (``language/core.py``) reaches the semantic layer in one of two shapes, checked in the wheel of every
    release from 3.0.0 to 3.9.0 (``triton/language/semantic.py`` and ``core.py``):

    * 3.4.0 to 3.9.0: a method, ``TritonSemantic.dot(self, lhs, rhs, acc, input_precision, max_num_imprecise_acc,
      out_dtype)``, which ``core.dot`` calls as ``_semantic.dot(...)`` (3.9.0: semantic.py line 1548, core.py
      line 2314);
    * 3.0.0 to 3.3.1: a module-level function, ``dot(lhs, rhs, acc, input_precision, max_num_imprecise_acc,
      out_dtype, builder)``, which ``core.dot`` calls as ``semantic.dot(...)``, looked up on the module at each call
      (3.0.0: semantic.py line 1319, core.py line 1534; 3.3.1: lines 1539 and 1814).

    Whichever the installed release has is wrapped; the arguments pass on unchanged.
    """
    from triton.language import semantic

    calls: list[DotCall] = []
    owner = getattr(semantic, "TritonSemantic", None)
    if owner is not None:
        method = owner.dot

        def dot_method(self: Any, lhs: Any, rhs: Any, acc: Any, input_precision: Any, max_num_imprecise_acc: Any,
                       out_dtype: Any) -> Any:
            _record(calls, lhs, rhs, acc, max_num_imprecise_acc, out_dtype)
            return method(self, lhs, rhs, acc, input_precision, max_num_imprecise_acc, out_dtype)

        monkeypatch.setattr(owner, "dot", dot_method)
        return calls
    function = getattr(semantic, "dot", None)
    if function is None:
        raise RuntimeError("triton.language.semantic has neither TritonSemantic.dot (Triton 3.4+) nor a module-level "
                           "dot (Triton 3.0-3.3): an API shape this recorder does not know")

    def dot_function(lhs: Any, rhs: Any, acc: Any, input_precision: Any, max_num_imprecise_acc: Any, out_dtype: Any,
                     builder: Any) -> Any:
        _record(calls, lhs, rhs, acc, max_num_imprecise_acc, out_dtype)
        return function(lhs, rhs, acc, input_precision, max_num_imprecise_acc, out_dtype, builder)

    monkeypatch.setattr(semantic, "dot", dot_function)
    return calls
