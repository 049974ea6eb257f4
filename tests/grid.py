"""How the parametrized grids of the test suite are sized: a representative cover by default, every point on request.

A grid of independent axes (recipe x element format x CUDA target) grows as a product, while the defects it is there
to catch are almost always in one value or in the meeting of two: a recipe a GPU refuses, a format a recipe does not
take. So the default run covers every *pair* of values of any two axes at least once (pairwise, or all-pairs,
testing) and every CUDA target that differs in what the rules read from it; ``FP8BENCH_FULL_MATRIX=1`` runs the full
product, as the nightly workflow (``.github/workflows/tests-nightly.yml``) does.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

FULL_MATRIX_ENV = "FP8BENCH_FULL_MATRIX"
FULL_MATRIX = os.environ.get(FULL_MATRIX_ENV) == "1"


def _pairs(row: Sequence[Hashable]) -> set[tuple[int, Hashable, int, Hashable]]:
    return {(i, row[i], j, row[j]) for i, j in itertools.combinations(range(len(row)), 2)}


def pairwise(*axes: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Rows of the product of ``axes`` that hold every pair of values of any two axes at least once.

    Greedy and deterministic: each step takes the product row that covers the most pairs not yet covered (the
    first such row in product order), until none is left. For two axes this is the whole product; with a third it
    is typically the size of the largest two-axis product, not of all three. Every value of every axis appears.
    """
    if len(axes) < 2:
        return list(itertools.product(*axes))
    rows = list(itertools.product(*axes))
    missing = set().union(*(_pairs(r) for r in rows))
    chosen = []
    while missing:
        best = max(rows, key=lambda r: len(_pairs(r) & missing))
        chosen.append(best)
        missing -= _pairs(best)
    return chosen


def grid(*axes: Sequence[Any]) -> list[tuple[Any, ...]]:
    """The full product under ``FP8BENCH_FULL_MATRIX=1``, else its pairwise cover."""
    return list(itertools.product(*axes)) if FULL_MATRIX else pairwise(*axes)


def one_per_kind(names: Iterable[str], kind: Any, preferred: Iterable[str] = ()) -> list[str]:
    """The first name of each ``kind(name)`` (``preferred`` names first), in the order of ``names``; all of them
    under ``FP8BENCH_FULL_MATRIX=1``."""
    names = list(names)
    if FULL_MATRIX:
        return names
    preferred = [n for n in preferred if n in names]
    keep, seen = set(), set()
    for name in [*preferred, *names]:
        if kind(name) not in seen:
            seen.add(kind(name))
            keep.add(name)
    return [n for n in names if n in keep]
