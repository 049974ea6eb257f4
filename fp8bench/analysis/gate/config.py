"""How strict the gate is: the threshold ``T`` per case, the significance level, what fails the job.

The threshold is a fraction of the base's time (0.05 is 5%), with per-case overrides (an fnmatch pattern on the case
key; the last match wins), and never under :data:`AA_NOISE_MULTIPLE` times the A/A noise measured on the same
runner: two runs of one commit differ by that much, so a smaller threshold would call noise a regression.
``fail_on`` (``--fail-on``) says which outcomes fail the job: ``inconclusive`` (the default) fails on an undecided
case as well as on a regression, ``regression`` lets an undecided outcome pass while still reporting it.

A gate report holds its config (:meth:`GateConfig.to_json`), so a stored report says how strict it was;
:meth:`GateConfig.from_json` reads that back, a report from before a field existed getting the field's default.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any

from fp8bench.analysis.gate.metrics import DEFAULT_SQNR_TOLERANCE_DB, METRICS
from fp8bench.core.units import parse_fraction

# --fail-on: which outcomes fail the job. "inconclusive" (the default) fails on an undecided case as well.
FAIL_ON = ("inconclusive", "regression")

# The noise floor: T is never set under this multiple of the A/A noise measured on the same runner.
AA_NOISE_MULTIPLE = 3.0


class GateError(ValueError):
    """Bad gate input: a threshold out of range, an override that does not parse, sides without runs."""


@dataclass(frozen=True)
class GateConfig:
    """How strict the gate is. ``threshold`` and override values are fractions (0.05 is 5%)."""

    threshold: float = 0.05
    overrides: tuple[tuple[str, float], ...] = ()  # (fnmatch pattern on the case key, threshold); last match wins
    alpha: float = 0.01  # after Benjamini-Hochberg
    confidence: float = 0.95  # of the bootstrap interval
    aa_noise: float | None = None  # typical |ratio - 1| of an A/A comparison on this runner
    n_boot: int = 2000
    min_samples: int = 3  # per side; fewer cannot show anything
    seed: int = 0
    paired: bool = False  # round i of both sides ran back to back: compare round by round
    fail_on: str = "inconclusive"  # or "regression": an undecided outcome then exits 0 (see FAIL_ON)
    allow_missing: bool = False  # a base case absent from the candidate is "removed" (informational), not "missing"
    allow_partial: bool = False  # accept runs that did not finish (interrupted, running, failed)
    metric: str = "median_s"  # what is compared: a key of fp8bench.analysis.gate.metrics.METRICS
    sqnr_tolerance_db: float = DEFAULT_SQNR_TOLERANCE_DB  # sqnr_db: a larger drop is a regression
    sqnr_floors: tuple[tuple[str, float], ...] = ()  # sqnr_db: (fnmatch pattern on the precision, dB); last wins

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise GateError(f"metric {self.metric!r}; accepted: {', '.join(METRICS)}")
        if not self.sqnr_tolerance_db >= 0:
            raise GateError(f"SQNR tolerance must be >= 0 dB, got {self.sqnr_tolerance_db}")
        if self.fail_on not in FAIL_ON:
            raise GateError(f"fail_on {self.fail_on!r}; accepted: {', '.join(FAIL_ON)}")
        for name, t in (("threshold", self.threshold), *((f"override {p!r}", v) for p, v in self.overrides)):
            if not 0 <= t < 1:
                raise GateError(f"{name} must be a fraction in [0, 1) (0.05 means 5%), got {t}")
        if not 0 < self.alpha < 1:
            raise GateError(f"alpha must be in (0, 1), got {self.alpha}")
        if not 0 < self.confidence < 1:
            raise GateError(f"confidence must be in (0, 1), got {self.confidence}")
        if self.aa_noise is not None and not 0 <= self.aa_noise < 1:
            raise GateError(f"A/A noise must be a fraction in [0, 1), got {self.aa_noise}")
        if self.min_samples < 2:
            raise GateError(f"min_samples must be >= 2, got {self.min_samples}")

    def threshold_for(self, case: str) -> tuple[float, str]:
        """The effective threshold of a case and where it came from."""
        t, source = self.threshold, "default"
        for pattern, value in self.overrides:
            if fnmatch.fnmatchcase(case, pattern):
                t, source = value, f"override {pattern}"
        if self.aa_noise is not None and AA_NOISE_MULTIPLE * self.aa_noise > t:
            t, source = AA_NOISE_MULTIPLE * self.aa_noise, f"{AA_NOISE_MULTIPLE:g}x A/A noise"
        return t, source


    def to_json(self) -> dict[str, Any]:
        """The config as a report holds it (the seed is not reported: it only fixes the bootstrap's draws)."""
        return {"threshold": self.threshold, "overrides": [list(o) for o in self.overrides],
                "alpha": self.alpha, "confidence": self.confidence, "aa_noise": self.aa_noise,
                "n_boot": self.n_boot, "min_samples": self.min_samples, "paired": self.paired,
                "fail_on": self.fail_on, "allow_missing": self.allow_missing,
                "allow_partial": self.allow_partial, "metric": self.metric,
                "sqnr_tolerance_db": self.sqnr_tolerance_db,
                "sqnr_floors": [list(f) for f in self.sqnr_floors]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GateConfig:
        """A report's config, old or new: a field the report predates takes its default."""
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        for pairs in ("overrides", "sqnr_floors"):
            if pairs in known:
                known[pairs] = tuple((str(p), float(v)) for p, v in known[pairs] or ())
        return cls(**known)


DEFAULT_CONFIG = GateConfig()  # the gate's defaults: a 5% threshold, alpha 0.01, a 95% interval


def parse_override(text: str) -> tuple[str, float]:
    """``PATTERN=T`` (T a fraction or a percentage such as ``8%``) -> ``(pattern, fraction)``."""
    pattern, sep, value = text.rpartition("=")
    if not sep or not pattern:
        raise GateError(f"threshold override {text!r} must look like PATTERN=T, e.g. 'gemm*fp8_rowwise*=0.08'")
    try:
        return pattern, parse_fraction(value, f"threshold override {text!r}:")
    except ValueError as exc:
        raise GateError(str(exc)) from exc

