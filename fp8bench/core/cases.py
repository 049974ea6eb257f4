"""A case: one thing a run measures, the product of a workload at one shape, a precision and a backend.

A run expands its spec (suite file or flags) into cases (:func:`fp8bench.measure.runner.expand_cases`) and measures
each into one record; a case that cannot run on the device is still a case, recorded ``skipped`` with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from fp8bench.core.precisions import Precision, ScaledRecipe
from fp8bench.core.records import FAST_ACCUM_BY_DEFAULT
from fp8bench.core.shapes import Shape, label


@dataclass(frozen=True)
class Case:
    """One workload at one shape, in one precision (a resolved recipe, with its options), on one backend."""

    workload: str
    shape: Shape
    precision: Precision
    backend: str

    def describe(self) -> str:
        """The case as people read it: ``gemm[m=1024,n=1024,k=1024] fp8_tensorwise torch`` (``full-accum`` for an
        FP8 recipe whose default fast accumulation was turned off)."""
        p = self.precision
        full_accum = isinstance(p, ScaledRecipe) and p.name in FAST_ACCUM_BY_DEFAULT and not p.fast_accum
        accum = " full-accum" if full_accum else ""
        return f"{self.workload}[{label(self.shape)}] {self.precision.name}{accum} {self.backend}"
