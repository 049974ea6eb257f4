"""NVML across nvidia-ml-py releases: every ``pynvml`` name fp8bench uses exists in the oldest release
``pyproject.toml`` allows, and the meter works on that release's surface with H100-like readings.

CI installs the newest nvidia-ml-py, so the oldest allowed one is checked through its recorded surface
(``tests/data/pynvml/nvidia-ml-py-<floor>.json``, written by ``scripts/pynvml_surface.py`` from the release's
wheel, with the wheel's SHA-256). Raising or lowering the floor in ``pyproject.toml`` without recording that
release fails :func:`test_floor_release_is_recorded`.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pynvml
import pytest
from fake_nvml import RELEASES, FakeGpu, make_pynvml, release_surface

from fp8bench.core.devices import Device
from fp8bench.energy import meters as energy
from fp8bench.energy import nvml
from fp8bench.energy.meters import WindowPolicy, nvml_meter
from fp8bench.hardware import environment

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [Path(m.__file__) for m in (nvml, energy, environment)]
CPU, GPU = Device("cpu"), Device("cuda", 0)


def floor_version() -> str:
    """The oldest nvidia-ml-py the ``nvml`` extra allows (``nvidia-ml-py>=X``). Read with a pattern: ``tomllib``
    is not in Python 3.10, which fp8bench supports."""
    specs = re.findall(r'"nvidia-ml-py\s*([^"]*)"', (ROOT / "pyproject.toml").read_text())
    assert len(specs) == 1, f"expected one nvidia-ml-py requirement in pyproject.toml, found {specs}"
    match = re.fullmatch(r">=([0-9.]+)(,<[0-9.]+)?", specs[0].replace(" ", ""))
    assert match, f"the nvml extra must state a floor as nvidia-ml-py>=X, got {specs[0]!r}"
    return match.group(1)


FLOOR = floor_version()


def _owner_is_nv(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "nv") or (isinstance(node, ast.Attribute) and node.attr == "nv")


def names_used_directly() -> set[str]:
    """Every attribute read straight off the pynvml module (``nv.X``, ``self.nv.X``, ``dev.nv.X``) in the modules
    that touch it, plus the topology constants looked up by string."""
    names: set[str] = set()
    for source in SOURCES:
        tree = ast.parse(source.read_text())
        names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and _owner_is_nv(n.value)}
        names |= {c.value for c in ast.walk(tree) if isinstance(c, ast.Constant) and isinstance(c.value, str)
                  and c.value.startswith("NVML_TOPOLOGY_") and not c.value.endswith("_")}
    return names


def names_looked_up() -> set[str]:
    """Names read with ``getattr(nv, "X", ...)``: allowed only for names newer than the floor, with a fallback."""
    names = set()
    for source in SOURCES:
        for node in ast.walk(ast.parse(source.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                    and node.args and _owner_is_nv(node.args[0])):
                assert isinstance(node.args[1], ast.Constant), f"{source.name}: getattr(nv, <non-literal>)"
                names.add(node.args[1].value)
    return names


def test_floor_release_is_recorded() -> None:
    recorded = json.loads((RELEASES / f"nvidia-ml-py-{FLOOR}.json").read_text())
    assert recorded["distribution"] == "nvidia-ml-py" and recorded["version"] == FLOOR
    assert recorded["wheel"] == f"nvidia_ml_py-{FLOOR}-py3-none-any.whl" and len(recorded["wheel_sha256"]) == 64
    # A recording that lost its content would make every check below pass vacuously.
    assert len(recorded["functions"]) > 200 and "nvmlDeviceGetTotalEnergyConsumption" in recorded["functions"]


def test_every_name_used_directly_exists_in_the_floor_and_the_installed_release() -> None:
    used = names_used_directly()
    # The scan must actually see the calls that matter, or this test could pass by finding nothing.
    assert {"nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetClockInfo",
            "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetViolationStatus", "nvmlInit",
            "NVMLError_NotSupported", "nvmlDeviceGetTemperature"} <= used
    floor = release_surface(FLOOR)
    missing_in_floor = sorted(n for n in used if not hasattr(floor, n))
    assert missing_in_floor == [], (f"fp8bench uses names nvidia-ml-py {FLOOR} (the floor in pyproject.toml) "
                                    f"lacks: {missing_in_floor}")
    missing_installed = sorted(n for n in used if not hasattr(pynvml, n))
    assert missing_installed == [], f"names the installed nvidia-ml-py lacks: {missing_installed}"


def test_newer_names_are_only_looked_up_with_a_fallback() -> None:
    """A name newer than the floor is read with ``getattr(nv, name, None)`` and listed in
    :data:`nvml.NEWER_NAMES` with the first release that has it; the installed release must have it."""
    looked_up = names_looked_up()
    assert looked_up == set(nvml.NEWER_NAMES)
    floor = release_surface(FLOOR)
    for name, first in nvml.NEWER_NAMES.items():
        assert not hasattr(floor, name), f"{name} exists in the floor {FLOOR}: call it directly"
        assert hasattr(pynvml, name), f"{name} (said to appear in {first}) is not in the installed release"


def test_reason_bits_agree_with_every_release_that_names_them() -> None:
    floor = release_surface(FLOOR)
    for key, attr, bit in nvml.REASON_BITS:
        for release in (floor, pynvml):
            if hasattr(release, attr):
                assert getattr(release, attr) == bit, f"{key}: {attr} is {getattr(release, attr):#x}, not {bit:#x}"
    # The two highest bits are the ones the floor release does not name.
    assert {k for k, attr, _ in nvml.REASON_BITS if not hasattr(floor, attr)} == {"board_limit", "reliability"}


def test_every_reason_bit_decodes_whatever_the_release_names() -> None:
    assert nvml.decode_reasons(0x4 | 0x200 | 0x400 | 0x1000) == [
        "sw_power_cap", "board_limit", "reliability", "unknown_0x1000"]


def test_meter_on_the_floor_release_with_h100_readings() -> None:
    """An H100 under a large FP8 GEMM: energy counter advancing at 690 W, the power-cap bit set, 1755 MHz."""
    gpu = FakeGpu(power_w=690.0, sm_clock_mhz=1755, temperature_c=67,
                  reasons=pynvml.nvmlClocksEventReasonSwPowerCap)
    nv = make_pynvml(gpu, release=FLOOR)
    policy = WindowPolicy(min_window_s=0.2, max_window_s=0.5, telemetry_interval_s=0.01)
    meter = nvml_meter(GPU, nv=nv, policy=policy)
    reading = meter.measure(lambda: sum(range(50)), CPU, 1e-4)
    assert reading.method == "nvml_counter" and reading.reason is None
    assert reading.joules_per_iter is not None and reading.avg_power_w == pytest.approx(690.0, rel=0.25)
    assert reading.telemetry["temperature_c"]["max"] == 67  # through nvmlDeviceGetTemperature on this release
    assert reading.telemetry["reasons"] == ["sw_power_cap"]
    nv.nvmlDeviceGetTemperature.assert_called()
    meter.close()


def test_environment_info_on_the_floor_release() -> None:
    info = nvml.open_device(0, None, make_pynvml(FakeGpu(), release=FLOOR)).info()
    assert info["name"] == "NVIDIA H100 80GB HBM3" and info["energy_counter"] is True
    assert info["reference_sm_clock_mhz"] == 1755
