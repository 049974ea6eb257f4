"""Energy meters: joules per iteration, or ``null`` with the reason when nothing can meter this device.

A meter measures a *window*: it loops a case's end-to-end call until the window is long enough for its counter's
resolution, and divides the window's energy by the iterations. Every meter returns an :class:`EnergyReading`;
a device with no meter yields ``joules=None`` and says why. Energy is never reported as 0 or invented.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from fp8bench.devices import Device


@dataclass(frozen=True)
class EnergyReading:
    """One measurement window. Joules and watts are ``None`` when the meter could not measure."""

    method: str  # nvml_counter | nvml_power | rapl | none
    joules_per_iter: float | None
    avg_power_w: float | None
    window_s: float | None
    iterations: int
    reason: str | None = None  # why joules are missing or approximate
    telemetry: dict[str, Any] = field(default_factory=dict)
    valid: bool = True
    invalid_reasons: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class EnergyMeter(Protocol):
    method: str

    def measure(self, fn: Callable[[], Any], device: Device, seconds_per_call: float) -> EnergyReading:
        """Run ``fn`` in a window long enough for this meter and return the reading."""
        ...


class NullMeter:
    """The meter of a device nothing can meter: a reading with no joules and the reason."""

    method = "none"

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def measure(self, fn: Callable[[], Any], device: Device, seconds_per_call: float) -> EnergyReading:
        return EnergyReading(self.method, None, None, None, 0, self.reason)


_FACTORIES: list[Callable[[Device], EnergyMeter | None]] = []


def register_meter_factory(factory: Callable[[Device], EnergyMeter | None]) -> None:
    """Add a meter factory; factories are tried in order and return ``None`` when they cannot meter a device."""
    _FACTORIES.append(factory)


def meter_for(device: Device) -> EnergyMeter:
    """The best meter for ``device``, or a :class:`NullMeter` saying why there is none."""
    for factory in _FACTORIES:
        meter = factory(device)
        if meter is not None:
            return meter
    if device.is_cuda:
        return NullMeter("no NVML energy meter available (install the nvml extra: nvidia-ml-py)")
    return NullMeter("no CPU energy counter readable here (RAPL /sys/class/powercap absent or unreadable)")
