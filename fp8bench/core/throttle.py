"""The power-cap rule, written once: which clock limiters invalidate a measurement and which do not.

A GPU's driver reports why it holds the SM clock below its maximum as reason bits (NVML's clock event reasons) and
cumulative violation counters. Thermal limits, hardware slowdowns, an external power brake, a board limit or a
reliability limit describe the machine at that moment, not the kernel, and invalidate what was measured. Power
capping is how a GPU runs a large kernel at its board's power limit: recorded, never invalidating (unless
``--strict-clocks`` asks), and neither is a clock drop that power capping alone explains
(:mod:`fp8bench.energy.telemetry` explains the method and applies it while measuring).

The rule has two readers: the measuring side, which sees reason bits and counters (:func:`power_cap_alone`:
the per-sample check of :mod:`fp8bench.hardware.clocks` and the window check of the telemetry), and the reading
side, which sees the reasons stored in records, worded by older fp8bench versions too (:func:`only_power_capped`:
the gate and the selection rules). Both live here, on the ground floor, so that the two cannot drift apart.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Reason bits (names from :data:`fp8bench.energy.nvml.REASON_BITS`) that make a window invalid, with the words used in
# the record's reasons.
THROTTLE_REASONS: dict[str, str] = {
    "sw_thermal_slowdown": "thermal slowdown (software)",
    "hw_thermal_slowdown": "thermal slowdown (hardware)",
    "hw_slowdown": "hardware slowdown",
    "hw_power_brake_slowdown": "external power brake",
    "sw_power_cap": "power cap",
    "board_limit": "board limit",
    "reliability": "reliability limit",
}


POWER_CAP = "sw_power_cap"


def power_cap_alone(reasons: Iterable[str], growth_ns: dict[str, int | None] | None = None) -> bool:
    """The power-cap rule, the one place it is written: whether power capping was seen (its reason bit, or growth
    of the power violation counter, nanoseconds) and no limiter that invalidates was (no thermal, hardware,
    power-brake, board or reliability bit, and no thermal counter growth). A clock drop such a stretch or sample
    shows is the board at its power limit: recorded with its clock, never discarded, never retaken, never
    invalidating unless ``--strict-clocks`` asks. Used by the per-sample check
    (:class:`fp8bench.hardware.clocks.ClockCheckedTimer`), the window check
    (:class:`fp8bench.energy.telemetry.ThrottlePolicy`), and through :func:`only_power_capped` by the gate and the
    selection rules."""
    growth = growth_ns or {}
    seen = set(reasons) & set(THROTTLE_REASONS)
    capped = POWER_CAP in seen or (growth.get("power") or 0) > 0
    return capped and seen <= {POWER_CAP} and not (growth.get("thermal") or 0) > 0


_POWER_CAP_REASONS = ("throttled: power cap (sw_power_cap)", "throttled: clocks held by the power cap ")
_CLOCK_REASON = "throttled: median SM clock "
_PHASE_PREFIX = re.compile(r"^(phase [^:]+: )")


def _window_and_text(line: str) -> tuple[str, str]:
    """``"phase gemm: throttled: ..."`` -> ``("phase gemm: ", "throttled: ...")``; the end-to-end window's lines
    have no prefix."""
    match = _PHASE_PREFIX.match(line)
    return (match.group(1), line[match.end():]) if match else ("", line)


def only_power_capped(invalid_reasons: list[str], notes: list[str] | tuple[str, ...] = ()) -> bool:
    """Whether windows were invalidated by power capping alone, as older fp8bench versions (and runs with
    ``--strict-clocks``) word it: the power-cap bit or counter (invalid before the power-cap rule), or a median
    clock under the floor in a window that was power-capped and saw no other limiter (invalid before a clock drop
    the power cap explains was let stand; the window's ``power-capped`` note or power-cap reason says it was
    capped). Lets readers of older run files apply today's rule. ``notes`` are the reading's clock notes."""
    capped = {window for window, text in map(_window_and_text, [*notes, *invalid_reasons])
              if text.startswith(("power-capped:", *_POWER_CAP_REASONS))}
    for window, text in map(_window_and_text, invalid_reasons):
        if not (text.startswith(_POWER_CAP_REASONS) or (text.startswith(_CLOCK_REASON) and window in capped)):
            return False
    return bool(invalid_reasons)
