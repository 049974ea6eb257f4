"""Run settings for tests that pin the sampler (a fixed number of samples, a short minimum time)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fp8bench.measure.settings import RunSettings


def with_policy(settings: RunSettings, **changes: Any) -> RunSettings:
    """A copy of ``settings`` with sampling-policy fields changed (``min_samples=...``)."""
    return settings.with_timing(policy=replace(settings.timing.policy, **changes))
