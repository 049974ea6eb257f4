"""The claim-to-probe table (fp8bench.measure.claims) and the selfcheck's `claims` check.

On this CPU the check can only list what it would run; the dispatch (a claim confirmed by its own probe, by another
check, or by nothing) runs here on the simulated GPU of tests/test_selfcheck.py, with probes of the test's own. The
real probes need CUDA and NVML: the `gpu` test at the end runs every one of them and fails on any claim that does not
hold, so the first GPU run of the suite turns the table into verdicts.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_selfcheck import FAST, simulated_gpu

from fp8bench.core.devices import Device
from fp8bench.measure import claims
from fp8bench.measure.claims import CLAIMS, Claim, Outcome, ProbeContext, ProbeResult, run_probe
from fp8bench.measure.selfcheck import Verdict, probe_for, run_selfcheck

ROOT = Path(__file__).resolve().parents[1]


def _held(ctx: ProbeContext) -> ProbeResult:
    """a probe that measured what the claim says"""
    return ProbeResult(Outcome.HELD, "42 ms, under the 50 ms limit")


def _broken(ctx: ProbeContext) -> ProbeResult:
    """a probe whose code path breaks on the device"""
    raise RuntimeError("CUDA error: operation not supported\nsecond line")


TEST_CLAIMS = (
    Claim("timer", "events time what they bracket", "every GPU time", "timing.py", check="timer_vs_wall"),
    Claim("measured", "a figure holds", "figure A", "a.py", probe=_held),
    Claim("breaks", "a path runs", "figure B", "b.py", probe=_broken),
    Claim("unprobed", "several nodes agree", "figure C", "c.py", no_probe="needs several nodes"),
)


def by_subject(outcome) -> dict:
    return {r.subject: r for r in outcome.results if r.check == "claims"}


def test_a_claim_names_exactly_one_way_to_confirm_it():
    with pytest.raises(ValueError, match="exactly one"):
        Claim("x", "s", "r", "m", check="sqnr", no_probe="why")
    with pytest.raises(ValueError, match="exactly one"):
        Claim("x", "s", "r", "m")
    assert len({c.name for c in CLAIMS}) == len(CLAIMS)


def test_on_the_cpu_every_claim_is_listed_with_its_probe_and_none_passes(tmp_path):
    out = run_selfcheck(probe_for(Device("cpu")), replace(FAST, checks=("claims",)), tmp_path / "run.json")
    rows = by_subject(out)
    assert list(rows) == [c.name for c in CLAIMS]
    assert {r.verdict for r in rows.values()} == {Verdict.NEEDS_GPU}
    probe_rows = [rows[c.name].detail for c in CLAIMS if c.probe]
    assert probe_rows and all(d.startswith("would run probe `") and "do not trust" in d for d in probe_rows)
    assert "would run the `sqnr` check" in rows["scale_layouts"].detail
    assert out.records == []  # listing measures nothing


def test_on_a_gpu_each_claim_is_judged_by_its_own_probe_or_by_its_check(monkeypatch):
    monkeypatch.setattr(claims, "CLAIMS", TEST_CLAIMS)
    monkeypatch.setattr("fp8bench.measure.selfcheck.CLAIMS", TEST_CLAIMS)
    out = run_selfcheck(simulated_gpu(), replace(FAST, checks=("timer_vs_wall", "claims")))
    rows = by_subject(out)
    assert rows["timer"].verdict is Verdict.PASS and rows["timer"].detail.startswith("held: the `timer_vs_wall`")
    assert rows["measured"].verdict is Verdict.PASS and rows["measured"].detail == "held: 42 ms, under the 50 ms limit"
    assert rows["breaks"].verdict is Verdict.FAIL
    assert rows["breaks"].detail == "failed: RuntimeError: CUDA error: operation not supported"
    assert rows["unprobed"].verdict is Verdict.NOT_RUN and "needs several nodes" in rows["unprobed"].detail
    assert out.verdict is Verdict.FAIL  # a claim that fails on the device fails the selfcheck


def test_a_claim_whose_check_fails_names_the_figures_not_to_trust(monkeypatch):
    monkeypatch.setattr("fp8bench.measure.selfcheck.CLAIMS", TEST_CLAIMS[:1])
    out = run_selfcheck(simulated_gpu(event_scale=0.5), replace(FAST, checks=("timer_vs_wall", "claims")))
    row = by_subject(out)["timer"]
    assert row.verdict is Verdict.FAIL and row.detail.endswith("do not trust every GPU time")


def test_a_claim_whose_check_did_not_run_stays_unverified(monkeypatch):
    monkeypatch.setattr("fp8bench.measure.selfcheck.CLAIMS", TEST_CLAIMS[:1])
    out = run_selfcheck(simulated_gpu(), replace(FAST, checks=("claims",)))
    row = by_subject(out)["timer"]
    assert row.verdict is Verdict.NOT_RUN and "`--check timer_vs_wall claims`" in row.detail


def test_the_docs_table_lists_every_claim_and_how_it_is_confirmed():
    text = (ROOT / "docs" / "gpu-claims.md").read_text()
    rows = dict(re.findall(r"^\| `([a-z_0-9]+)` \|[^|]*\|[^|]*\| ([^|]+) \|$", text, flags=re.M))
    assert list(rows) == [c.name for c in CLAIMS]
    for c in CLAIMS:
        expected = f"`{c.check}` check" if c.check else "none" if c.no_probe else f"probe `{c.name}`"
        assert rows[c.name].strip().startswith(expected), (c.name, rows[c.name])


@pytest.mark.gpu
def test_every_claim_with_a_probe_holds_on_this_gpu():
    from fp8bench.measure.runner import CaseMeasurer
    from fp8bench.measure.settings import EnergySettings, RunSettings, TimingSettings

    device = Device("cuda", 0)
    measurer = CaseMeasurer(RunSettings(device="cuda:0", timing=TimingSettings(phases=False),
                                        energy=EnergySettings(enabled=False)), device)
    ctx = ProbeContext(device, measurer.measure)
    failed = {c.name: r.figure for c in CLAIMS if c.probe
              for r in [run_probe(c, ctx)] if r.outcome is Outcome.FAILED}
    assert not failed


# -- the verdicts of the energy and clock probes, on the fake NVML ------------------------------------------------
def _per_call_reading(name: str, mj: float, bound: float, changes: int = 5):
    from fp8bench.energy.meters import EnergyReading

    return EnergyReading("nvml_counter", mj * 1e-3, None, 2.0, 1000, name=name, window_j=2.0, error_bound=bound,
                         subtracted_what="the wrapping", subtracted_j=1.0, subtracted_s=changes * 0.1,
                         subtracted_iterations=1000, subtracted_counter_changes=changes, counter_update_s=0.1)


def test_the_cold_l2_verdict_holds_where_cold_costs_more_and_is_inconclusive_within_the_bounds():
    warm = _per_call_reading("warm_l2", 1.0, 0.02)
    assert claims.cold_versus_warm(_per_call_reading("cold_l2", 1.2, 0.02), warm).outcome is Outcome.HELD
    assert claims.cold_versus_warm(_per_call_reading("cold_l2", 0.8, 0.02), warm).outcome is Outcome.FAILED
    close = claims.cold_versus_warm(_per_call_reading("cold_l2", 1.03, 0.02), warm)  # within 0.02 + 0.0206 mJ
    assert close.outcome is Outcome.NOT_APPLICABLE and "inconclusive within" in close.figure, close.figure
    assert "5 counter periods" in close.figure  # how long each subtracted window lasted, in counter periods
    steady = replace(_per_call_reading("cold_l2", 1.2, 0.02), subtracted_counter_changes=1)  # 5 periods, one change
    still = claims.cold_versus_warm(steady, warm)
    assert still.outcome is Outcome.NOT_APPLICABLE
    assert "cold_l2 saw the counter change fewer than 2 times" in still.figure


def test_the_subtracted_window_verdict_needs_joules_within_the_target_and_a_moving_counter():
    # A subtracted window as the meter writes it (the measuring itself: tests/test_energy_windows.py): sized for a
    # 10 % bound, it reached 9.1 % and saw the counter move 15 times; the verdict is judged at 20 %. Built, not
    # measured here: how often a loaded machine lets the counter be seen moving is not what this test is about.
    reading = replace(_per_call_reading("dominant_gemm", 1.2, 0.091, changes=15), name="dominant_gemm")
    assert claims.subtracted_verdict(reading, 0.2).outcome is Outcome.HELD, reading.reason
    still = replace(reading, subtracted_counter_changes=1)  # long enough by its size, yet the counter moved once
    assert claims.subtracted_verdict(still, 0.2).outcome is Outcome.FAILED
    assert claims.subtracted_verdict(replace(reading, error_bound=0.3), 0.2).outcome is Outcome.FAILED
    assert claims.subtracted_verdict(replace(reading, joules_per_iter=None), 0.2).outcome is Outcome.FAILED


def test_the_clock_refresh_verdict_holds_or_is_inconclusive_at_the_readback_spacing():
    from fp8bench.hardware.clocks import READBACK_SPACING_S

    assert claims.CLOCK_REFRESH_S == READBACK_SPACING_S  # the claim: readings that far apart are fresh
    assert claims.refresh_verdict([0.0, 0.04, 0.08, 0.12, 0.16], READBACK_SPACING_S).outcome is Outcome.HELD
    # 80 ms between changes: the reading may refresh every 20 ms on a clock that moves every 80 ms, so this shows no
    # stale reading; inconclusive, never failed.
    slow = claims.refresh_verdict([0.0, 0.08, 0.16, 0.24, 0.32], READBACK_SPACING_S)
    assert slow.outcome is Outcome.NOT_APPLICABLE and "may move less often" in slow.figure, slow.figure
    assert claims.refresh_verdict([0.0, 0.5, 1.0], READBACK_SPACING_S).outcome is Outcome.NOT_APPLICABLE


class _Clocks:
    """NVML readings of a clock that moves at every reading, and a load that drains after ``runs`` of them."""

    def __init__(self, runs: int):
        self.clock, self.runs, self.topped = 1000, runs, []

    def keep_busy(self, seconds: float) -> None:
        self.topped.append(seconds)

    def sample(self):
        self.clock += 15
        return SimpleNamespace(sm_clock_mhz=self.clock)

    def running(self) -> bool:
        self.runs -= 1
        return self.runs >= 0


def test_clock_changes_count_only_readings_taken_while_the_load_runs():
    fake = _Clocks(runs=3)
    changes = claims.clock_changes(fake, fake, seconds=5.0)
    # The first reading is the start (1015), not a change; the three taken while the load ran are; the readings
    # after the load drained are an idle GPU's.
    assert len(changes) == 3


def test_lock_readback_clocks_are_spaced_and_taken_while_the_load_runs(monkeypatch):
    from fp8bench.hardware.clocks import READBACK_SPACING_S

    slept: list[float] = []
    monkeypatch.setattr(claims.time, "sleep", slept.append)
    fake = _Clocks(runs=2)
    assert claims.lock_readings(fake, fake, reads=5) == [1015, 1030]  # the third came after the load drained
    assert slept and all(s == READBACK_SPACING_S for s in slept)
    # The load is topped up before each reading: the driver's queue may hold less than was asked for.
    assert fake.topped == [READBACK_SPACING_S] * 3
