"""The peak table, and the CPU's measured ceilings: when they are measured, cached, refused and flagged.

The host's load is set where fp8bench reads it, ``os.getloadavg``; the ceilings are measured for real, at a small
size.
"""

import json
import os
from datetime import datetime, timedelta, timezone

import pytest

from fp8bench.core.devices import Device
from fp8bench.core.peak_table import above_ceiling, ceiling_advice, device_table, table_peak
from fp8bench.core.precisions import PRECISIONS
from fp8bench.hardware import peaks
from fp8bench.hardware.peaks import (
    CEILING_MAX_AGE,
    Peaks,
    ceiling_staleness,
    cpu_ceilings,
    peak_key,
)


def test_every_table_value_names_a_known_source():
    table = device_table()
    assert table["table_version"] >= 1
    for name, entry in table["devices"].items():
        for key, value in entry.items():
            assert key in table["units"], (name, key)
            assert isinstance(value[0], (int, float)) and value[0] > 0, (name, key)
            assert value[1] in table["sources"], (name, key)
            assert value[2:] in ([], ["unconfirmed"]), (name, key)


def test_dense_figures_are_not_sparsity_figures():
    h100 = table_peak("NVIDIA H100 80GB HBM3", "fp8")
    assert h100.value == 1979  # 3958 "with sparsity" halved
    assert table_peak("NVIDIA H100 80GB HBM3", "fp32").value == 67  # not the TF32 figure
    assert table_peak("NVIDIA H100 80GB HBM3", "mem_bw").value == 3.35


def test_precisions_map_to_columns():
    assert peak_key(PRECISIONS.get("tf32")) == "tf32"
    assert peak_key(PRECISIONS.get("fp8_delayed")) == "fp8"
    assert peak_key(PRECISIONS.get("mxfp8")) == "mxfp8"
    # 4-bit recipes are held to an FP4 rate, which the table does not list: no percentage rather than a wrong one.
    assert peak_key(PRECISIONS.get("nvfp4")) == peak_key(PRECISIONS.get("mxfp4")) == "fp4"
    assert table_peak("NVIDIA B200", "fp4") is None
    # MX falls back to the FP8 rate where no separate figure is listed; unknown devices have no peak.
    assert table_peak("NVIDIA B200", "mxfp8").unconfirmed
    assert table_peak("NVIDIA H100 80GB HBM3", "mxfp8").value == 1979
    assert table_peak("Some Future GPU", "bf16") is None


@pytest.fixture
def load(monkeypatch):
    """Set the host's 1-minute load average (2 CPUs) that fp8bench reads from the OS."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)

    def set_load(value: float) -> None:
        monkeypatch.setattr(os, "getloadavg", lambda: (value, value, value))

    set_load(0.5)
    return set_load


@pytest.fixture
def measurements(monkeypatch):
    """Every real ceiling measurement made, in order (at 256^3 and a 4 MiB copy, so that each takes milliseconds)."""
    made = []
    real = peaks.measure_cpu_ceilings

    def spy() -> dict:
        made.append(real())
        return made[-1]

    monkeypatch.setattr(peaks, "CEILING_N", 256)
    monkeypatch.setattr(peaks, "_COPY_BYTES", 4 * 2**20)
    monkeypatch.setattr(peaks, "measure_cpu_ceilings", spy)
    monkeypatch.setattr(peaks, "_THIS_PROCESS", {})  # no loaded measurement of an earlier test
    return made


def test_a_quiet_measurement_is_cached_and_reused(tmp_path, load, measurements):
    first = cpu_ceilings(tmp_path)
    assert first["cached"] and first["measured_because"] == "none cached for this host"
    again = cpu_ceilings(tmp_path)
    assert again["cached"] and again["measured_at"] == first["measured_at"] and len(measurements) == 1
    assert first["bf16"] > 0 and first["fp32"] > 0 and first["mem_bw"] > 0
    assert "256^3 matmul, 4 MiB copy" in first["method"] and "load average 0.50 on 2 CPU(s)" in first["method"]
    (entry,) = json.loads((tmp_path / "cpu_ceilings.json").read_text()).values()
    assert entry["load"] == {"load_avg_1m": 0.5, "logical_cpus": 2, "overloaded": False}


def test_a_measurement_under_load_is_used_but_never_cached(tmp_path, load, measurements):
    load(4.2)
    loaded = cpu_ceilings(tmp_path)
    assert not loaded["cached"] and "not cached: measured under load" in loaded["method"]
    assert not (tmp_path / "cpu_ceilings.json").exists()
    assert cpu_ceilings(tmp_path) == loaded and len(measurements) == 1  # still loaded: this process's one reused
    load(0.3)  # the machine quietens: the next run measures again, and that one is kept
    assert cpu_ceilings(tmp_path)["cached"] and len(measurements) == 2


def test_an_old_quiet_ceiling_beats_a_fresh_loaded_one(tmp_path, load, measurements):
    cpu_ceilings(tmp_path)
    path = tmp_path / "cpu_ceilings.json"
    cache = json.loads(path.read_text())
    old = (datetime.now(timezone.utc) - CEILING_MAX_AGE - timedelta(days=1)).isoformat()
    path.write_text(json.dumps({k: {**v, "measured_at": old} for k, v in cache.items()}))
    load(5.0)
    kept = cpu_ceilings(tmp_path)
    assert kept["measured_at"] == old and "not re-measured at load average 5.00" in kept["method"]
    assert len(measurements) == 1
    load(0.5)
    fresh = cpu_ceilings(tmp_path)
    assert len(measurements) == 2 and fresh["measured_because"].startswith("measured 8 days ago")


def test_staleness_rules():
    now = datetime(2026, 11, 26, tzinfo=timezone.utc)
    quiet = {"load_avg_1m": 0.4, "logical_cpus": 2}
    assert ceiling_staleness({"load": quiet, "measured_at": "2026-11-25T00:00:00+00:00"}, now) is None
    # The cache the quickstart wrote before loads were recorded is measured again.
    assert ceiling_staleness({"bf16": 0.3, "method": "measured: best of 5"}, now) == "no load recorded with it"
    assert "load average 3.10" in ceiling_staleness(
        {"load": {"load_avg_1m": 3.1, "logical_cpus": 2}, "measured_at": "2026-11-25T00:00:00+00:00"}, now)
    assert "days ago" in ceiling_staleness({"load": quiet, "measured_at": "2026-10-01T00:00:00+00:00"}, now)
    assert ceiling_staleness({"load": quiet, "measured_at": "yesterday"}, now) == "no measurement time recorded with it"


def test_refresh_measures_now_and_caches_a_quiet_result(tmp_path, load, measurements):
    cpu_ceilings(tmp_path)
    refreshed = Peaks(Device("cpu"), "cpu", tmp_path, refresh=True).cpu_ceilings()
    assert refreshed["measured_because"] == "asked to refresh" and refreshed["cached"] and len(measurements) == 2
    assert cpu_ceilings(tmp_path)["measured_at"] == measurements[1]["measured_at"]


def test_above_100_percent_is_a_ceiling_problem():
    assert above_ceiling(100.5) and not above_ceiling(100.0) and not above_ceiling(None)
    assert "fp8bench selfcheck --check cpu_ceiling" in ceiling_advice("cpu")
    assert "device_peaks.json" in ceiling_advice("cuda:0")


def test_a_ceiling_measured_under_load_is_never_judged_against(tmp_path, load, measurements):
    """With no quiet ceiling cached, a run under load has no CPU ceiling: no % of peak against a rate the load
    lowered (the first run on a busy machine read above 100%), and the peaks say why."""
    load(4.2)
    loaded = Peaks(Device("cpu"), "cpu", tmp_path)
    assert loaded.compute(PRECISIONS.get("bf16")) is None and loaded.bandwidth() is None
    assert "measured under load (load average 4.20 on 2 CPU(s))" in loaded.withheld()
    assert loaded.cpu_ceilings()["bf16"] > 0  # measured all the same, for selfcheck to show
    load(0.5)
    quiet = Peaks(Device("cpu"), "cpu", tmp_path)
    assert quiet.compute(PRECISIONS.get("bf16")).value == quiet.cpu_ceilings()["bf16"] and quiet.withheld() is None
    load(5.0)  # loaded again: the latest quiet ceiling is the one used
    later = Peaks(Device("cpu"), "cpu", tmp_path)
    assert later.compute(PRECISIONS.get("bf16")).value == quiet.cpu_ceilings()["bf16"] and later.withheld() is None
