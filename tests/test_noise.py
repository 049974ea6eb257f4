"""The one noise rule: relative spread, the host's load, and where a run records and shows them.

The load comes from the OS (``os.getloadavg``); tests set it there, at the boundary, so that the project's own
code reads it as it would on a loaded machine.
"""

from __future__ import annotations

import json
import os

import pytest
from rich.console import Console

from fp8bench.cli import main
from fp8bench.core.noise import (
    NOISY_SPREAD,
    HostLoad,
    host_load,
    is_noisy,
    overload_warning,
    record_spread,
    relative_spread,
    run_load,
)
from fp8bench.render.run_table import render_table
from fp8bench.results.runfile import read_run_file
from tests.gate_fixtures import record


def test_relative_spread_is_iqr_over_median():
    assert relative_spread([1.0, 1.0, 1.0, 1.0]) == 0.0
    assert relative_spread([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(2.0 / 3.0)  # IQR 4 - 2, median 3
    assert relative_spread([1.0]) is None and relative_spread([]) is None
    # A single outlier moves neither the median nor the quartiles: it is not noise the median suffers from.
    assert relative_spread([1.0] * 9 + [100.0]) == 0.0
    assert record_spread({"iqr_s": 0.002, "median_s": 0.010}) == pytest.approx(0.2)
    assert record_spread({"iqr_s": None, "median_s": 0.010}) is None
    assert record_spread({"iqr_s": 0.1, "median_s": 0.0}) is None


def test_is_noisy_is_load_or_spread_over_the_band():
    assert not is_noisy(None) and not is_noisy(NOISY_SPREAD)
    assert is_noisy(NOISY_SPREAD * 1.01)
    assert is_noisy(0.0, loaded=True) and is_noisy(None, loaded=True)
    assert is_noisy(0.3, band=0.2) and not is_noisy(0.3, band=0.5)


def test_host_load_comes_from_the_os(monkeypatch):
    monkeypatch.setattr(os, "getloadavg", lambda: (5.25, 3.0, 1.0))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    load = host_load()
    assert load == HostLoad(5.25, 2) and load.overloaded
    assert load.to_dict() == {"load_avg_1m": 5.25, "logical_cpus": 2, "overloaded": True}
    assert "load average 5.25 on 2 CPU(s)" in overload_warning(load)
    assert "fp8bench ab" in overload_warning(load)
    assert overload_warning(HostLoad(2.0, 2)) is None  # as many runnable processes as CPUs: nobody waits
    assert overload_warning(None) is None

    def unsupported():
        raise OSError("no load average here")

    monkeypatch.setattr(os, "getloadavg", unsupported)
    assert host_load() is None


def test_run_load_reads_the_header_and_tolerates_old_files():
    assert run_load({"host": {"load": {"load_avg_1m": 3.5, "logical_cpus": 2}}}) == HostLoad(3.5, 2)
    for header in ({}, {"host": {}}, {"host": {"load": None}}, {"host": {"load": {"load_avg_1m": "high"}}},
                   {"host": {"load": {"load_avg_1m": 1.0, "logical_cpus": 0}}}):
        assert run_load(header) is None


def test_a_loaded_run_warns_records_its_load_and_flags_every_case(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(os, "getloadavg", lambda: (6.0, 4.0, 2.0))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    out = tmp_path / "run.json"
    rc = main(["run", "--shape", "32x32x32", "--precision", "bf16", "fp32", "--no-store", "--out", str(out),
               "--results-dir", str(tmp_path / "results"), "--min-samples", "3", "--max-time", "0.05"])
    assert rc == 0
    captured = capsys.readouterr()
    assert "warning: load average 6.00 on 2 CPU(s): other processes compete for the cores" in captured.err
    summary = json.loads(captured.out.strip().splitlines()[-1])
    assert summary["load"] == {"load_avg_1m": 6.0, "logical_cpus": 2, "overloaded": True}
    header = read_run_file(out)["run"]
    assert header["host"]["load"] == summary["load"]
    # Every measured case is flagged, and the note under the table says why.
    table = captured.out
    assert table.count("noisy") >= 3
    assert "noisy: 2 case(s), the run started at load average 6.00 on 2 CPU(s)" in " ".join(table.split())


def test_the_table_shows_the_spread_and_flags_a_noisy_case():
    tight = {**record(64, "bf16", [1.0e-3, 1.01e-3, 0.99e-3, 1.0e-3]), "iqr_s": 0.01e-3}
    wide = {**record(64, "fp32", [1e-3, 5e-3, 2e-3, 9e-3]), "iqr_s": 4.5e-3, "median_s": 3.5e-3}
    console = Console(width=200, record=True, color_system=None)
    render_table([tight, wide], "bf16", console)
    text = console.export_text()
    rows = {line.split("│")[3].strip(): line for line in text.splitlines() if "│ gemm" in line}
    assert "│         1% │" in rows["bf16"] and "noisy" not in rows["bf16"]
    assert "│ 129% noisy │" in rows["fp32"]
    assert "noisy: 1 case(s), their samples spread more than 10% (IQR / median)" in text


def test_a_ratio_within_either_sides_noise_is_noisy():
    """Compare's rule: a difference smaller than a side's spread, or read from a run under load, is noisy."""
    from fp8bench.core.noise import difference_is_noisy

    tight, wide = [1.0, 1.001, 0.999, 1.0], [1.0, 1.4, 0.7, 1.1]
    quiet, loaded = HostLoad(0.5, 2), HostLoad(9.0, 2)
    assert not difference_is_noisy(1.2, [(tight, quiet), (tight, None)])
    assert difference_is_noisy(1.2, [(tight, quiet), (wide, quiet)])  # a 24% spread hides a 20% change
    assert difference_is_noisy(1.2, [(tight, loaded), (tight, quiet)])
    assert not difference_is_noisy(1.5, [(wide, quiet), (tight, quiet)])  # clear of the spread
