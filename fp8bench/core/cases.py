"""A case: one thing a run measures, the product of a workload at one shape, a precision and a backend.

A run expands its spec (suite file or flags) into cases (:func:`fp8bench.measure.runner.expand_cases`) and measures
each into one record; a case that cannot run on the device is still a case, recorded ``skipped`` with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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

    def stored_fields(self) -> dict[str, Any]:
        """What a record of this case stores of it (fp8bench.core.records.Record): its names, and for an FP8 recipe
        its format label and accumulation mode (``None`` for float precisions)."""
        p = self.precision
        fp8 = p if isinstance(p, ScaledRecipe) else None
        return {"workload": self.workload, "shape": dict(self.shape), "precision": p.name, "backend": self.backend,
                "fp8_format": fp8.format_label if fp8 else None, "accumulation": fp8.accumulation if fp8 else None}

    def describe(self) -> str:
        """The case as people read it: ``gemm[m=1024,n=1024,k=1024] fp8_tensorwise torch`` (``full-accum`` for an
        FP8 recipe whose default fast accumulation was turned off)."""
        p = self.precision
        full_accum = isinstance(p, ScaledRecipe) and p.name in FAST_ACCUM_BY_DEFAULT and not p.fast_accum
        accum = " full-accum" if full_accum else ""
        return f"{self.workload}[{label(self.shape)}] {self.precision.name}{accum} {self.backend}"
