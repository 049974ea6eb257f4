"""Noise: when a timing cannot carry the difference it is read for, said one way everywhere.

A median is only as good as the samples under it. Two things make samples unfit to compare:

* **Spread.** The relative spread of a case's samples is their interquartile range over their median (IQR /
  median, a fraction: 0.05 is 5%). It ignores a few outliers, as the median does, but not a multimodal timing:
  a multithreaded CPU GEMM whose threads wait for a core that another process holds takes 1x, 3x or 10x its
  quiet time at random, and its IQR says so. A difference smaller than the spread of the samples it is read
  from is within their noise.
* **Load.** The host's 1-minute load average (runnable processes, as ``uptime`` prints it) above its number of
  logical CPUs means processes were queueing for cores while the run measured. A run under such load can be
  uniformly slow, its samples tight around a wrong median, so its spread does not show the problem; only the
  load does. The load is read when the run starts, before fp8bench itself adds to it, and recorded in the run
  header (``host.load``).

:func:`is_noisy` is the one rule: a measurement is noisy when it was taken under load, or when its spread exceeds
the band a difference must clear to be read from it. A history reads it per commit (:func:`mostly_noisy`): a step
in a nightly series (:mod:`fp8bench.analysis.changes`) that most of the nights on one side of it measured noisy is
shown as ``noisy`` and never alerts, and a commit measured both quiet and noisy is valued by its quiet runs. The run
table and the dashboard flag a case whose spread exceeds :data:`NOISY_SPREAD`; the gate, which reads a measured
difference, passes that difference as the band (:mod:`fp8bench.analysis.gate.decision`): comparing one run per side, it
never calls a regression that lies within a side's noise, and says ``noisy`` instead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fp8bench.core.records import Record, fields_of
from fp8bench.core.run_header import RunHeader, header_of

# The gate's default threshold is 5%: samples spread over twice that cannot show a change of that size from one
# run, so the run table and the dashboard flag them.
NOISY_SPREAD = 0.10


@dataclass(frozen=True)
class HostLoad:
    """The host's load when a measurement started."""

    load_1m: float  # 1-minute load average: runnable processes, averaged (os.getloadavg)
    cpus: int  # logical CPUs the scheduler shares among them

    @property
    def overloaded(self) -> bool:
        """More runnable processes than CPUs: processes were waiting for a core."""
        return self.load_1m > self.cpus

    def describe(self) -> str:
        return f"load average {self.load_1m:.2f} on {self.cpus} CPU(s)"

    def to_dict(self) -> dict[str, Any]:
        return {"load_avg_1m": round(self.load_1m, 2), "logical_cpus": self.cpus, "overloaded": self.overloaded}

    @classmethod
    def from_dict(cls, data: Any) -> HostLoad | None:
        """The load a run header or ceiling cache recorded, or ``None`` when it recorded none (older files)."""
        if not isinstance(data, Mapping):
            return None
        load, cpus = data.get("load_avg_1m"), data.get("logical_cpus")
        if not isinstance(load, int | float) or not isinstance(cpus, int) or cpus < 1:
            return None
        return cls(float(load), cpus)

    @classmethod
    def parse(cls, text: object) -> HostLoad | None:
        """The load a text names in :meth:`describe`'s words (a stored ceiling's source, written before records
        carried their ceiling's load as a field), or ``None`` when it names none."""
        found = _DESCRIBED.search(text) if isinstance(text, str) else None
        return cls(float(found[1]), int(found[2])) if found and int(found[2]) >= 1 else None


_DESCRIBED = re.compile(r"load average (\d+(?:\.\d+)?) on (\d+) CPU\(s\)")


def host_load() -> HostLoad | None:
    """This host's load now, or ``None`` where the OS has no load average (Windows)."""
    try:
        load_1m = os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
    return HostLoad(load_1m, os.cpu_count() or 1)


def overload_warning(load: HostLoad | None) -> str | None:
    """One line for the user when ``load`` is over the CPU count, else ``None``."""
    if load is None or not load.overloaded:
        return None
    return (f"{load.describe()}: other processes compete for the cores, so timings are noisy (see the noise "
            f"column); measure on a quiet machine, or compare two versions with `fp8bench ab`, whose interleaved "
            f"rounds share the load")


def run_load(run: RunHeader | Mapping[str, Any]) -> HostLoad | None:
    """The load a run header recorded when the run started (``host.load``), or ``None``."""
    return HostLoad.from_dict(header_of(run).host.load)


def relative_spread(samples: Sequence[float] | np.ndarray) -> float | None:
    """IQR / median of ``samples`` (a fraction), or ``None`` with fewer than 2 samples or a zero median."""
    values = np.asarray(samples, dtype=float)
    if values.size < 2:
        return None
    median = float(np.median(values))
    if median <= 0:
        return None
    q1, q3 = np.percentile(values, [25, 75])
    return float(q3 - q1) / median


def record_spread(record: Record | Mapping[str, Any]) -> float | None:
    """A record's relative spread from its stored IQR and median (``iqr_s / median_s``), or ``None``."""
    iqr, median = fields_of(record, "iqr_s", "median_s")
    if iqr is None or not median:
        return None
    try:
        value = float(iqr) / float(median)
    except (TypeError, ValueError):
        return None
    return value if np.isfinite(value) else None


def is_noisy(spread: float | None, loaded: bool = False, band: float = NOISY_SPREAD) -> bool:
    """Whether a measurement is too noisy to read a difference of ``band`` (a fraction) from: it was taken under
    load, or its relative spread exceeds the band."""
    return loaded or (spread is not None and spread > band)


def mostly_noisy(flags: Sequence[bool]) -> bool:
    """Whether a stretch of measurements (the commits on one side of a change) cannot carry a difference: more than
    half of them were noisy (:func:`is_noisy`)."""
    return len(flags) > 0 and 2 * sum(bool(f) for f in flags) > len(flags)


def difference_is_noisy(ratio: float, sides: Sequence[tuple[Sequence[float], HostLoad | None]]) -> bool:
    """Whether the ratio of two measurements (``sides``: each one's samples, seconds, and the load its run started
    under) lies within the noise of either (:func:`is_noisy` with the band ``|ratio - 1|``)."""
    band = abs(ratio - 1)
    return any(is_noisy(relative_spread(samples), bool(load and load.overloaded), band) for samples, load in sides)
