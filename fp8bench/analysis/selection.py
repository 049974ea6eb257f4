"""Which records a comparison may use: the selection rules every reader of results shares, each written once.

A benchmark store holds far more than comparable timings: skipped and failed cases, records a throttled GPU made
invalid, Triton kernels run by the interpreter (checked for correctness, never timed), several runs of one case,
several backends of one precision. Every page, summary and verdict first picks what it may compare, and when two of
them pick differently the dashboard and the gate disagree about the same store. So each rule lives here, in the
forms its readers need, side by side:

* **speed-comparable** (docs/method.md, docs/energy.md, docs/gate.md): a record whose timings may be compared is
  *measured* (status ``ok`` and ``valid``), not run by an interpreter, and has a median time. Power capping is how
  a GPU runs a large GEMM at its board limit, so it never invalidates a record; a record an older fp8bench marked
  invalid for power capping alone (or for the clock drop power capping alone caused) counts as measured unless its
  run used ``--strict-clocks``. As a dict rule on a record and its run header (:func:`timings_count`,
  :func:`is_speed_comparable`: the gate, which reads record JSON), as SQL on the store's typed columns
  (:func:`speed_comparable_sql`: the store queries of the dashboard, ``payoff`` and ``changes``) and on a frame of
  those columns (:func:`speed_comparable_frame`: the dashboard's pages). The typed columns hold neither a record's
  invalid reasons per window nor its run's ``--strict-clocks`` setting, so the SQL and frame forms read an older
  power-capped record as invalid; the dict form alone re-reads it (the one place the forms differ, asserted by
  ``tests/test_selection.py``).
* **latest per case**: the most recent record of each case on each device label (SQL:
  :data:`LATEST_CLASSES` with :func:`fp8bench.results.store.queries.latest_records`; frame: :func:`latest_per_case`).
* **fastest backend per cell**: one cell per device, workload, shape and precision, its fastest vendor or custom
  backend (the ``emulated`` quantize-dequantize reference is never a way to run a model): :func:`fastest_cells`.
* **scaled low precision**: FP8, MX and 4-bit recipes, the precisions a payoff is asked of (not a substring test on
  ``"fp8"``, which drops ``nvfp4`` and ``mxfp4``): :func:`is_scaled`.

Shape text is not here: its one text <-> dict pair is :func:`fp8bench.core.shapes.label` and
:func:`fp8bench.core.shapes.parse_stored` (``shape_label`` for people), which the layers below analysis need too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd
import sqlalchemy as sa

from fp8bench.core.records import Record
from fp8bench.core.run_header import RunHeader, header_of
from fp8bench.core.throttle import only_power_capped
from fp8bench.results.store.queries import MEASURED, R

# -- speed-comparable ---------------------------------------------------------------------------------------------


def timings_count(record: Record, run: RunHeader | Mapping[str, Any]) -> bool:
    """Whether a record's timings count: an ``ok``, valid record; or one that an older fp8bench marked invalid for
    power capping alone, or for the clock drop power capping alone caused (the normal state of a GPU at full load,
    recorded but no longer invalidating), unless its run asked for ``--strict-clocks``. ``run`` is the run header."""
    if record.status == "ok" and record.valid:
        return True
    strict = bool(header_of(run).setting("strict_clocks"))
    reasons, notes = list(record.energy.invalid_reasons or []), list(record.energy.clock_notes or [])
    return record.status == "invalid" and not strict and only_power_capped(reasons, notes)


def is_speed_comparable(record: Record, run: RunHeader | Mapping[str, Any]) -> bool:
    """The speed-comparable rule on a record (a stored one: :func:`fp8bench.core.records.load_record`) and its run
    header (see the module docstring)."""
    return timings_count(record, run) and not record.interpreted and record.samples.median_s is not None


def _valid() -> sa.ColumnElement[bool]:
    return sa.func.coalesce(R.valid, sa.true()) == sa.true()


def _not_interpreted() -> sa.ColumnElement[bool]:
    return sa.func.coalesce(R.interpreted, sa.false()) == sa.false()


def speed_comparable_sql() -> sa.ColumnElement[bool]:
    """The speed-comparable rule as a condition on the store's ``records`` table (a missing ``valid`` is valid, a
    missing ``interpreted`` is not interpreted: records from before those fields were written)."""
    return sa.and_(R.status == "ok", _valid(), _not_interpreted(), R.median_s.is_not(None))


def speed_comparable_frame(records: pd.DataFrame) -> pd.DataFrame:
    """The rows of a frame of the store's typed columns that are speed-comparable (same rule as
    :func:`speed_comparable_sql`; missing ``valid`` / ``interpreted`` read as SQL's ``coalesce`` does)."""
    valid = records["valid"].astype("boolean").fillna(True).astype(bool)
    interpreted = records["interpreted"].astype("boolean").fillna(False).astype(bool)
    return records[(records["status"] == "ok") & valid & ~interpreted & records["median_s"].notna()]


# -- latest per case ----------------------------------------------------------------------------------------------
# The subsets whose latest record per case a page reads (the dashboard's pages, ``payoff``), as SQL conditions for
# fp8bench.results.store.queries.latest_records.
LATEST_CLASSES: dict[str, sa.ColumnElement[bool]] = {
    "any": sa.true(),
    "speed": speed_comparable_sql(),
    "energy": sa.and_(R.status.in_(MEASURED), R.energy_j.is_not(None), _not_interpreted()),
    "numerics": sa.and_(R.status.in_(MEASURED), sa.or_(R.sqnr_db.is_not(None), R.rel_err.is_not(None))),
    "losses": sa.and_(R.status.in_(MEASURED), R.has_losses == sa.true()),
}


def latest_per_case(records: pd.DataFrame) -> pd.DataFrame:
    """The most recent record of each case on each device label (rows arrive ordered by run start, then position
    in the run; the case key names the device kind, ``cuda``, so the label, which names the model, is added)."""
    return records.drop_duplicates(["device_label", "case_key"], keep="last")


# -- fastest backend per cell -------------------------------------------------------------------------------------
REFERENCE_BACKENDS = ("emulated",)
CELL = ["device_label", "workload", "shape", "precision"]


def fastest_cells(records: pd.DataFrame) -> pd.DataFrame:
    """One cell per (device, workload, shape, precision): the backend with the lowest end-to-end median among the
    vendor and custom kernels (the reference backends are left out), from speed-comparable records."""
    usable = records[~records["backend"].isin(REFERENCE_BACKENDS) & records["median_s"].notna()]
    return usable.sort_values("median_s", kind="stable").drop_duplicates(CELL)


# -- scaled low precision -----------------------------------------------------------------------------------------
# Unscaled precisions: everything else is a scaled low-precision recipe (FP8, MX, 4-bit).
UNSCALED = ("fp32", "tf32", "bf16", "fp16")


def is_scaled(precision: str) -> bool:
    """Whether ``precision`` is a scaled low-precision recipe (FP8, MX or 4-bit: a scale travels with the data),
    as opposed to a plain float type."""
    return precision not in UNSCALED
