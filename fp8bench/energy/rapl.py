"""CPU energy through RAPL (Running Average Power Limit) counters under ``/sys/class/powercap``.

Intel CPUs since Sandy Bridge and AMD CPUs since Zen expose cumulative energy counters per *package* (socket) in
microjoules, through Linux's powercap framework: ``/sys/class/powercap/intel-rapl:N/energy_uj`` (the same name is used
on AMD). Each counter wraps at ``max_energy_range_uj`` (a few hundred joules to a few kJ, i.e. minutes at full load),
so a reader must remember the last raw value and add the range when it goes down. Sub-domains
(``intel-rapl:N:M``: cores, uncore, DRAM) are parts of the package and are not added again.

Limits: the package domain counts everything running on the socket (other processes, the OS), so a window on a
shared machine over-counts; since Linux 5.10 ``energy_uj`` is readable only by root (a side channel, CVE-2020-8694),
and virtual machines and containers usually hide it. Where it cannot be read, the CPU has no meter and energy is
``null`` with the reason.

This module only reads the counters; :func:`fp8bench.energy.meters.rapl_meter` turns them into a window meter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

POWERCAP = Path("/sys/class/powercap")
_PACKAGE = re.compile(r"^intel-rapl:\d+$")


class RaplUnavailable(RuntimeError):
    """No RAPL package counter can be read here; the message is the reason."""


@dataclass
class _Domain:
    path: Path
    name: str
    max_range_uj: int
    last_raw_uj: int | None = None
    wrapped_uj: int = 0


class RaplCounter:
    """Cumulative joules over every package domain under ``root``, corrected for counter wrap-around."""

    def __init__(self, root: Path = POWERCAP) -> None:
        if not root.is_dir():
            raise RaplUnavailable(f"no CPU energy counter readable here (RAPL {root} absent)")
        self.domains = []
        for d in sorted(p for p in root.iterdir() if _PACKAGE.match(p.name)):
            try:
                name = (d / "name").read_text().strip()
                max_range = int((d / "max_energy_range_uj").read_text())
                (d / "energy_uj").read_text()
            except PermissionError as exc:
                raise RaplUnavailable(f"RAPL counter {d / 'energy_uj'} is not readable by this user "
                                       f"(root only since Linux 5.10)") from exc
            except (OSError, ValueError) as exc:
                raise RaplUnavailable(f"RAPL domain {d} unreadable: {exc}") from exc
            self.domains.append(_Domain(d, name, max_range))
        if not self.domains:
            raise RaplUnavailable(f"no CPU energy counter readable here (no RAPL package domain under {root})")

    def read_j(self) -> float:
        """Joules counted by all packages since this counter was created (wrap-corrected)."""
        total_uj = 0
        for d in self.domains:
            raw = int((d.path / "energy_uj").read_text())
            if d.last_raw_uj is not None and raw < d.last_raw_uj:
                d.wrapped_uj += d.max_range_uj
            d.last_raw_uj = raw
            total_uj += raw + d.wrapped_uj
        return total_uj / 1e6

