"""Outputs checked after timing: the last timed call must have computed what a fresh call computes.

Why: numerics come from an untimed call (:meth:`fp8bench.core.pipeline.Pipeline.output`), so a kernel could be correct
when called once and do less when called back to back: return a stale or partly written buffer, skip work it
believes it has already done, race with a stream it never waits for. Kernel leaderboards have been gamed exactly so
(kernels that cache or skip work on repeated calls). The timed figure of such a kernel describes work it did not do.

Which calls are checked: every pipeline declares what its timed call returns
(:class:`fp8bench.core.pipeline.TimedReturn`). Where that is the workload's output (every GEMM, grouped GEMM,
attention block and collective, whichever backend built it, and whatever plugin wrapped its call), the timed value,
brought into ``output()``'s form by the declaration's ``as_output`` after timing, is compared with a fresh
``output()``. The check follows the declaration, not the function objects: a plugin that replaces ``end_to_end`` with
a call of its own keeps the backend's ``output()``, and its timed calls are compared with it all the same.

The check, per case:

1. **Fresh reference.** Right after the pipeline is built, before any warm-up or timed call, one call of the
   pipeline's output is kept (a copy). Where the timed call is ``output`` itself (the same function, with no
   ``as_output``), that call is the first warm-up call: its value is kept after it returns
   (:meth:`OutputWatch.first_call`), so the check costs no call of its own.
2. **Timed output.** The end-to-end call is sampled through :class:`LastOutput`, which keeps what each call
   returns (one reference assignment, ~0.1 us of host time inside each sample: nothing the GPU waits for); the
   value left after the last sample is the output of the last timed call, copied before any other call runs.
3. **Compared.** ``bitwise`` where the case is deterministic: the same kernel on the same inputs with no state
   carried between calls must return the same bits (cuBLAS: "all cuBLAS API routines from a given toolkit version
   generate the same bit-wise results at every run when executed on GPUs with the same architecture and the same
   number of SMs", cuBLAS documentation, "Results reproducibility"; CPU kernels on a fixed thread count likewise).
   ``sqnr`` where the recipe carries state between calls (delayed scaling's amax history moves the scale between
   the first call and the last), or where the pipeline declares a kernel that does not return the same bits twice
   (``TimedReturn.bitwise``: attention's backward on CUDA): the SQNR of the timed output against the fresh one must
   reach :func:`sqnr_threshold_db`, derived from the fresh output's own SQNR against the FP64 reference.

A timed output that fails makes the record ``invalid``, with the reason, whatever its speed; so does a call declared
to return the workload's output that returns no tensor (returning ``None`` must not be a way around the check).

An interpreted case (Triton's CPU interpreter) is not timed, but its calls are checked the same way: after the fresh
output its end-to-end call runs twice, once where a timed case warms up and once where it samples, and the second
value is compared (:func:`check_repeat`). A kernel right only on its first call is wrong under the interpreter too.

Where the check cannot apply it says why in the record (``output_check.reason``) and nothing is invalidated: a
pipeline that declares its timed call returns something else (a training step's loss, with the pipeline's reason),
a CUDA-graph replay (the runner keeps no value from replays). What this check cannot see: a kernel that caches its
result keyed on its inputs returns the right values, from the same inputs, every time; only changing the inputs
between calls would reveal it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from fp8bench.core.pipeline import TimedReturn
from fp8bench.numerics.accuracy import compare

BITWISE, SQNR = "bitwise", "sqnr"
# SQNR check: the difference of two outputs that each carry the recipe's own quantization error has up to twice
# that error's power (3 dB) when the errors are uncorrelated; 3 dB more leaves room for a scale that moved between
# the two calls (delayed scaling). A corrupted output misses by tens of dB.
SQNR_TOLERANCE_DB = 6.0
# The threshold never asks more than this: above it two outputs differ by rounding in the last bits only (FP32 is
# ~140 dB), which a kernel with a different accumulation order legitimately produces.
SQNR_CEILING_DB = 60.0


class LastOutput:
    """A call that keeps what it returned last (``value``); used around the timed end-to-end call."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.value: Any = None

    def __call__(self) -> Any:
        self.value = self.fn()
        return self.value


@dataclass(frozen=True)
class OutputCheck:
    """The outcome, as stored in ``Record.output_check``. ``passed`` is ``None`` when the check did not apply."""

    method: str | None  # bitwise | sqnr | None (not checked)
    passed: bool | None
    reason: str | None = None  # why it failed, or why it was not checked
    differing_frac: float | None = None  # share of elements whose bits differ (bitwise)
    sqnr_db: float | None = None  # timed output against the fresh one
    threshold_db: float | None = None  # what ``sqnr_db`` had to reach (sqnr)

    def to_dict(self) -> dict[str, Any]:
        # JSON has no infinities: an SQNR of +inf (identical outputs) or -inf is stored as null.
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}


def not_checked(reason: str) -> OutputCheck:
    return OutputCheck(None, None, reason)


def applicability(returns: TimedReturn, graph: bool) -> str | None:
    """Why the timed output cannot be compared with a fresh output of this pipeline, or ``None`` when it can."""
    if not returns.is_output:
        return f"not checked: the timed call returns {returns.reason}"
    if graph:
        return "not checked: CUDA-graph replays hand back no output (the graph's kernels write their own buffers)"
    return None


def snapshot(value: Any) -> torch.Tensor | None:
    """A copy of ``value`` that later calls cannot overwrite, or ``None`` when it is not one tensor."""
    return value.detach().clone() if isinstance(value, torch.Tensor) else None


def sqnr_threshold_db(fresh_sqnr_db: float | None) -> float:
    """The SQNR (dB) a timed output must reach against the fresh one: the fresh output's SQNR against the FP64
    reference less :data:`SQNR_TOLERANCE_DB`, at most :data:`SQNR_CEILING_DB`, at least 0 dB."""
    if fresh_sqnr_db is None or math.isnan(fresh_sqnr_db):
        return SQNR_CEILING_DB
    return max(0.0, min(SQNR_CEILING_DB, fresh_sqnr_db - SQNR_TOLERANCE_DB))


def returned_no_tensor(value: Any) -> OutputCheck:
    """The failed check of a call declared to return the workload's output that returned ``value``, not a tensor."""
    return OutputCheck(None, False, "timed output differs from a fresh call's: the timed call is declared to return "
                       f"the workload's output but returned {type(value).__name__}, not a tensor")


def check(timed: torch.Tensor | None, fresh: torch.Tensor | None, exact: bool,
          fresh_sqnr_db: float | None | Callable[[], float | None]) -> OutputCheck:
    """Compare the last timed output with the fresh one (module docstring, step 3). ``fresh_sqnr_db`` (dB, or a
    call that computes it) sets the sqnr threshold; it is computed only where the outputs' bits differ."""
    if fresh is None:
        return returned_no_tensor(None) if timed is None else not_checked(
            "not checked: the fresh output() returned no tensor")
    if timed is None:
        return returned_no_tensor(None)
    if timed.shape != fresh.shape or timed.dtype != fresh.dtype:
        return OutputCheck(BITWISE if exact else SQNR, False,
                           f"timed output differs from a fresh call's: {tuple(timed.shape)} {timed.dtype} against "
                           f"{tuple(fresh.shape)} {fresh.dtype}")
    a, b = timed.detach().cpu(), fresh.detach().cpu()
    frac = _differing_frac(a, b)
    if frac == 0:
        return OutputCheck(BITWISE if exact else SQNR, True, differing_frac=0.0)
    if exact:
        return OutputCheck(BITWISE, False, f"timed output differs from a fresh call's: {frac:.3%} of elements "
                           "differ bitwise (a deterministic kernel on the same inputs)", differing_frac=frac)
    threshold = sqnr_threshold_db(fresh_sqnr_db() if callable(fresh_sqnr_db) else fresh_sqnr_db)
    sqnr = compare(a, b).sqnr_db
    if sqnr is not None and sqnr >= threshold:
        return OutputCheck(SQNR, True, sqnr_db=sqnr, threshold_db=threshold)
    shown = "non-finite values" if sqnr is None else f"SQNR {sqnr:.1f} dB"
    return OutputCheck(SQNR, False, f"timed output differs from a fresh call's: {shown} against it, under the "
                       f"{threshold:.1f} dB the recipe's own error allows", sqnr_db=sqnr, threshold_db=threshold)


def _differing_frac(a: torch.Tensor, b: torch.Tensor) -> float:
    """Share of elements of ``a`` whose bits differ from ``b``'s (same shape and dtype). Bits, not values: NaN != NaN
    and -0.0 == 0.0 would both mislead a value comparison. Equal bytes, the common case, take one pass."""
    if a.numel() == 0:
        return 0.0
    bytes_a, bytes_b = a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)
    if torch.equal(bytes_a, bytes_b):
        return 0.0
    differ = bytes_a.reshape(a.numel(), -1) != bytes_b.reshape(b.numel(), -1)
    return float(differ.any(dim=1).double().mean())


def deterministic(precision: Any, returns: TimedReturn) -> bool:
    """Whether a case's outputs must agree bitwise: its calls carry no state from one call to the next (every
    precision but delayed scaling, whose amax history moves the scale between calls), and its pipeline does not
    declare a kernel that is non-deterministic by design (``TimedReturn.bitwise``)."""
    return not getattr(precision, "delayed", False) and returns.bitwise


class OutputWatch:
    """The check of one case, in the order the runner takes its steps (module docstring).

    ``OutputWatch(pipeline.output, pipeline.returns, graph, exact)`` takes the fresh output at once (before any
    warm-up); :meth:`timed` wraps the end-to-end call the timer samples; :meth:`keep_last` copies the last timed
    output when sampling ends (in ``output()``'s form); :meth:`verdict` compares the two, given the FP64 reference.
    With ``timed_fn``, the end-to-end call, and where it is ``output_fn`` itself with no ``as_output``, no fresh call
    is made here: the caller's first call of :meth:`timed` is the fresh call, kept by :meth:`first_call`.
    """

    def __init__(self, output_fn: Callable[[], Any], returns: TimedReturn, graph: bool, exact: bool,
                 timed_fn: Callable[[], Any] | None = None) -> None:
        self.exact = exact
        self.returns = returns
        self.reason = applicability(returns, graph)
        # The first timed call is a fresh output() call where it calls the same function and needs no mapping.
        self.fresh_from_first = self.reason is None and timed_fn is output_fn and returns.as_output is None
        self.fresh = snapshot(output_fn()) if self.reason is None and not self.fresh_from_first else None
        self._last: LastOutput | None = None
        self.timed_output: torch.Tensor | None = None
        self._returned: Any = None  # what the last timed call returned, where it was no tensor (for the reason)
        self._first_returned: Any = None  # what the first timed call returned (fresh_from_first)

    def timed(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        """What the timer samples for the end-to-end call ``fn``: ``fn`` itself where nothing is checked."""
        if self.reason is not None:
            return fn
        self._last = LastOutput(fn)
        return self._last

    def first_call(self) -> None:
        """Keep the value of the first call of :meth:`timed` as the fresh output, where it is one (called once,
        right after that call, before any other)."""
        if self.fresh_from_first and self._last is not None and self.fresh is None:
            self.fresh = snapshot(self._last.value)
            # Only what is no tensor is kept for the reason: holding the call's own output would keep one more
            # output-sized block alive through every sample (the memory estimate counts CHECKED_OUTPUTS).
            self._first_returned = self._last.value if self.fresh is None else None

    def keep_last(self) -> None:
        """Copy the last timed call's value, in ``output()``'s form; called once sampling ends (outside samples)."""
        if self._last is None:
            return
        value, self._last.value = self._last.value, None
        as_output = self.returns.as_output
        if as_output is not None and value is not None:
            value = as_output(value)
        self.timed_output = snapshot(value)
        self._returned = None if self.timed_output is not None else value

    def verdict(self, reference: torch.Tensor) -> OutputCheck:
        if self.reason is not None:
            return not_checked(self.reason)
        if self.timed_output is None:
            return returned_no_tensor(self._returned)
        fresh = self.fresh
        if fresh is None and self.fresh_from_first:  # the first call returned no tensor
            return returned_no_tensor(self._first_returned)

        def fresh_sqnr() -> float | None:
            return compare(fresh, reference).sqnr_db if fresh is not None and fresh.shape == reference.shape else None

        return check(self.timed_output, fresh, self.exact, fresh_sqnr)

    def repeat(self, fn: Callable[[], Any], reference: torch.Tensor) -> OutputCheck:
        """The check of a case that is never timed (interpreted): ``fn`` called twice after the fresh output, where
        a timed case warms up and where it samples, and the second value compared (module docstring)."""
        call = self.timed(fn)
        call()
        call()
        self.keep_last()
        return self.verdict(reference)
