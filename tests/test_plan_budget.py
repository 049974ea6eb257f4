"""The plan of a run (expected wall times before measuring) and its wall budget (shorten, then skip)."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest

from fp8bench.core.devices import Device
from fp8bench.core.plugins import load_all
from fp8bench.measure.budget import (
    FIRST_WRITE_S,
    LEVELS,
    RUN_END_S,
    SKIP_REASON,
    SuiteBudget,
    level_settings,
    parse_duration,
    prioritised,
    process_age_s,
)
from fp8bench.measure.harness_cost import Step
from fp8bench.measure.plan import (
    REFUSED_S,
    SAMPLE_LOOP_S,
    CostModel,
    History,
    case_history,
    case_key_of,
    plan_run,
    sampled_s,
)
from fp8bench.measure.runner import expand_cases, run_cases
from fp8bench.measure.settings import EnergySettings, RunSettings, TimingSettings
from fp8bench.measure.suites import SuiteError, load_suite
from fp8bench.measure.timing import SamplingPolicy
from fp8bench.results.runfile import read_run_file
from fp8bench.results.store import open_store

load_all()
CPU = Device("cpu")
CEILINGS = {"fp32": 0.1, "bf16": 0.1, "mem_bw": 0.01}
FAST = RunSettings(device="cpu",
                   timing=TimingSettings(budget_s=5,
                                         policy=SamplingPolicy(min_samples=3, min_time_s=0.0, max_time_s=0.01),
                                         warmup_s=0.0),
                   energy=EnergySettings(enabled=False))


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("45m", 2700), ("6h", 21600),
                                               ("1.5h", 5400), (" 2m ", 120)])
def test_durations_in_seconds_minutes_or_hours(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["6x", "-1h", "0", "", "h", "6 hours"])
def test_a_bad_duration_is_refused_by_name(text: str) -> None:
    with pytest.raises(ValueError, match=f"wall budget {text!r}: give a positive duration"):
        parse_duration(text)


def test_sampling_time_lies_between_the_stop_rules() -> None:
    policy = SamplingPolicy(min_samples=10, min_time_s=0.1, max_time_s=5.0)
    quick = sampled_s(1e-3, policy, cap_s=100)
    assert 0.1 <= quick <= 5.0 * 1.01  # at least min_time_s, at most max_time_s (+ the loop's own time)
    assert sampled_s(1.0, policy, cap_s=100) >= 10.0  # min_samples calls whatever max_time_s says
    capped = 0.12 + 0.12 / 1e-3 * SAMPLE_LOOP_S  # the cap's samples and the loop's own time around each
    assert quick > 0.12 and sampled_s(1e-3, policy, cap_s=0.12) == pytest.approx(capped)
    assert sampled_s(1e-3, policy, cap_s=0) == 0


def test_refused_and_over_budget_cases_are_expected_as_skipped() -> None:
    model = CostModel(CPU, CEILINGS)
    settings = FAST.with_timing(budget_s=0.5)
    tf32, big = expand_cases([("gemm", ["64x64x64"])], ["tf32"], ["torch"], settings) + expand_cases(
        [("gemm", ["4096x4096x4096"])], ["fp32"], ["torch"], settings)
    refused = model.estimate(tf32, settings)
    assert refused.seconds == REFUSED_S and refused.expect.startswith("skipped: torch does not run tf32")
    assert refused.refused and not model.estimate(big, settings).refused
    over = model.estimate(big, settings)
    assert over.expect.startswith("skipped: over budget") and over.seconds < settings.timing.budget_s


def test_a_cold_plan_stretches_with_the_hosts_load() -> None:
    """The cold model knew nothing of load: on 2 CPUs at load 8 the work per call and per case (setup, numerics'
    comparisons, the record's write) takes 4 times its quiet time (each process gets a quarter of a core), and
    noisy samples run to ``max_time_s``; warm-up and sampling stop on wall-clock rules, so they are not stretched."""
    from fp8bench.core.noise import HostLoad
    from fp8bench.measure.harness_cost import Step

    (case,) = expand_cases([("gemm", ["64x64x64"])], ["fp32"], ["torch"], FAST)
    quiet = CostModel(CPU, CEILINGS, load=HostLoad(1.0, 2)).estimate(case, FAST)
    loaded = CostModel(CPU, CEILINGS, load=HostLoad(8.0, 2)).estimate(case, FAST)
    for step in (Step.SETUP, Step.NUMERICS, Step.BOOKKEEPING):
        assert loaded.parts[step] == pytest.approx(4 * quiet.parts[step])
    assert loaded.parts[Step.SAMPLING] >= quiet.parts[Step.SAMPLING] and loaded.seconds > quiet.seconds
    assert quiet.parts[Step.SETUP] > 0 and quiet.parts[Step.NUMERICS] > 2 * quiet.call_s


def test_history_gives_the_median_wall_time_and_scales_with_the_settings() -> None:
    (case,) = expand_cases([("gemm", ["256x256x256"])], ["bf16"], ["torch"], FAST)
    settings = RunSettings(device="cpu", energy=EnergySettings(enabled=False))
    model = CostModel(CPU, CEILINGS, history={case_key_of(case, CPU): History((3.0, 5.0, 4.0, 100.0), 0.01)})
    full = model.estimate(case, settings)
    assert full.source == "history" and full.seconds == 4.0 and full.history_runs == 3
    shorter = model.estimate(case, level_settings(settings)[1], base=settings)
    assert shorter.seconds < full.seconds  # fewer samples: the recorded time scaled by the model's ratio


def test_every_level_costs_no_more_than_the_one_before() -> None:
    cases = expand_cases([("gemm", ["512x512x512"])], ["fp32", "fp8_tensorwise"], ["emulated"], FAST)
    model = CostModel(CPU, CEILINGS)
    totals = [plan_run(cases, s, model).total_s for s in level_settings(RunSettings(device="cpu"))]
    assert totals == sorted(totals, reverse=True) and totals[0] > totals[-1]


def _budget(estimates: list[list[float]], budget_s: float) -> SuiteBudget:
    return SuiteBudget(budget_s, RunSettings(device="cpu"), estimates, started=0.0)


def test_the_budget_shortens_before_it_skips_and_skips_from_the_end() -> None:
    estimates = [[10.0, 6.0, 5.0, 3.0]] * 4  # per case, the seconds of each level
    assert _budget(estimates, 100).decide(0, 0.0).level == 0
    assert _budget(estimates, 30).decide(0, 0.0).level == 1  # 4 x 6 s fit in 30 s less the reserve
    assert _budget(estimates, 16).decide(0, 0.0).level == 3  # 4 x 5 s do not fit in 13.3 s, 4 x 3 s do
    budget = _budget(estimates, 9)
    decisions = [budget.decide(i, now) for i, now in enumerate([0.0, 3.0, 6.0, 6.5])]
    assert [d.skip for d in decisions] == [False, False, True, True]
    assert decisions[2].reason.startswith(f"{SKIP_REASON}: this case is expected to take 3 s")
    assert decisions[0].to_dict()["shortened"] == [level.what for level in LEVELS[1:]]


def test_a_case_never_gets_more_of_its_own_budget_than_the_run_has_left() -> None:
    decision = _budget([[1.0] * 4], 10).decide(0, 0.0)
    # the budget aimed at, less the time kept aside to write the one record still to come
    assert decision.settings is not None
    assert decision.settings.timing.budget_s == pytest.approx(10 * 0.96 - RUN_END_S - FIRST_WRITE_S)
    assert decision.reason.startswith(f"{SKIP_REASON}: the case's own budget cut to the 7.59 s left")


def test_the_records_still_to_write_are_kept_time_for() -> None:
    budget = _budget([[1.0] * 4] * 10, 22)
    assert budget.decide(0, 0.0).level == 0  # 10 s of cases and 0.1 s of writes fit in 19.1 s
    budget.written(1.0)  # writing a record takes a second: 10 more seconds needed
    assert budget.decide(0, 0.0).level == 3


def test_a_budget_counts_from_the_process_start() -> None:
    assert 0 < process_age_s() < time.monotonic()


def test_slow_cases_so_far_make_the_rest_look_slower() -> None:
    budget = _budget([[1.0, 0.5, 0.5, 0.5]] * 10, 22)
    first = budget.decide(0, 0.0)
    assert first.level == 0  # 10 s expected, 19.1 s aimed at
    budget.done(0, first, wall_s=3.0)  # took three times its estimate
    assert budget.calibration == 3.0
    # 9 x 1 s would fit in the 16.1 s left, but at three times the estimate only the shorter level does
    assert budget.decide(1, 3.0).level == 1


def test_priority_terms_then_suite_priorities_then_suite_order() -> None:
    cases = expand_cases([("gemm", ["64x64x64", "128x128x128"])], ["fp32", "bf16"], ["torch"], FAST)
    order = prioritised(cases, [0, 0, 5, 0], ["precision=bf16"])
    assert [(cases[i].precision.name, cases[i].shape["m"]) for i in order] == [
        ("bf16", 64), ("bf16", 128), ("fp32", 128), ("fp32", 64)]  # the term; then priority 5; then suite order
    with pytest.raises(ValueError, match="priority term 'colour=red'"):
        prioritised(cases, [0] * 4, ["colour=red"])


def test_a_suite_entry_priority_must_be_an_integer(tmp_path) -> None:
    suite = tmp_path / "s.yaml"
    suite.write_text("cases:\n  - workload: gemm\n    shapes: [64x64x64]\n    priority: high\n")
    with pytest.raises(SuiteError, match="'priority' must be an integer"):
        load_suite(str(suite))
    suite.write_text("cases:\n  - workload: gemm\n    shapes: [64x64x64]\n    priority: 3\n")
    assert load_suite(str(suite)).entries[0].priority == 3


def test_a_run_out_of_budget_records_every_case_and_says_so(tmp_path) -> None:
    cases = expand_cases([("gemm", ["64x64x64"])], ["fp32", "bf16"], ["torch"], FAST)
    budget = SuiteBudget(1e-3, FAST, [[1.0] * len(LEVELS)] * len(cases))  # nothing fits in a millisecond
    outcome = run_cases(cases, FAST, CPU, run_file=tmp_path / "run.json", results_dir=tmp_path, budget=budget)
    assert [r.status for r in outcome.records] == ["skipped", "skipped"]
    assert all(r.reason.startswith(f"{SKIP_REASON}: ") and r.extra["suite_budget"]["level"] == "skipped"
               for r in outcome.records)
    header = read_run_file(tmp_path / "run.json")["run"]
    assert header["status"] == "complete" and header["wall_budget"]["reached"] is True
    assert header["wall_budget"]["skipped"] == 2 and outcome.wall_budget == header["wall_budget"]


def test_a_case_refused_by_a_rule_keeps_its_reason_when_the_time_is_up(tmp_path) -> None:
    cases = expand_cases([("gemm", ["64x64x64"])], ["fp32", "tf32"], ["torch"], FAST)
    budget = SuiteBudget.for_cases(1e-3, cases, FAST, CostModel(CPU, CEILINGS))
    outcome = run_cases(cases, FAST, CPU, run_file=None, results_dir=tmp_path, budget=budget)
    assert [r.reason.split(":")[0] for r in outcome.records] == [SKIP_REASON, "torch does not run tf32 on cpu"]


def test_a_run_within_budget_runs_every_case_in_full(tmp_path) -> None:
    cases = expand_cases([("gemm", ["64x64x64"])], ["fp32"], ["torch"], FAST)
    budget = SuiteBudget(3600, FAST, [[0.1] * len(LEVELS)])
    outcome = run_cases(cases, FAST, CPU, run_file=None, results_dir=tmp_path, budget=budget)
    (record,) = outcome.records
    assert record.status == "ok" and "suite_budget" not in record.extra
    assert outcome.wall_budget["reached"] is False and outcome.wall_budget["cases"] == {"full": 1}


def test_history_is_read_from_the_store_for_the_same_device_name(tmp_path) -> None:
    cases = expand_cases([("gemm", ["64x64x64"])], ["fp32"], ["torch"], FAST)
    store = open_store(tmp_path)
    outcome = run_cases(cases, FAST, CPU, run_file=None, store=store, results_dir=tmp_path)
    key = case_key_of(cases[0], CPU)
    name = store.records_frame()["device_name"].iloc[0]
    (history,) = case_history(store, [key], name).values()
    assert history.wall_s == (outcome.records[0].timing.case_wall_s,)
    assert history.call_s == outcome.records[0].samples.median_s
    assert case_history(store, [key], "another device") == {}


def test_plan_command_measures_nothing_and_prints_json(tmp_path, capsys) -> None:
    from fp8bench.cli import main

    code = main(["run", "--workload", "gemm", "--shape", "64x64x64", "--precision", "fp32", "tf32",
                 "--results-dir", str(tmp_path), "--plan", "--json", "--wall-budget", "10m"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["n_cases"] == 2 and out["total_s"] > 0
    assert [c["expect"][:7] for c in out["cases"]] == ["measure", "skipped"]
    assert out["wall_budget"]["budget_s"] == 600 and out["cases"][0]["budget"]["level"] == "full"
    assert not (tmp_path / "runs").exists() and not (tmp_path / "fp8bench.sqlite").exists()


def test_a_bad_wall_budget_is_a_usage_error(capsys) -> None:
    from fp8bench.cli import main
    from fp8bench.commands.verb_interface import EXIT_USAGE

    code = main(["run", "--shape", "64x64x64", "--precision", "fp32", "--wall-budget", "6x", "--plan"])
    assert code == EXIT_USAGE and "--wall-budget: wall budget '6x'" in capsys.readouterr().err


def test_run_command_reports_a_budget_reached(tmp_path, capsys) -> None:
    from fp8bench.cli import main

    # A budget counts from the process's start: this test process is older than a second, so nothing fits.
    code = main(["run", "--shape", "64x64x64", "--precision", "fp32", "bf16", "--backend", "torch", "--no-store",
                 "--out", str(tmp_path / "run.json"), "--wall-budget", "1s", "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and out["wall_budget"]["reached"] is True and out["wall_budget"]["skipped"] == 2
    assert {r["reason"].split(":")[0] for r in out["records"]} == {SKIP_REASON}
    assert read_run_file(tmp_path / "run.json")["run"]["wall_budget"]["skipped"] == 2


@pytest.mark.parametrize(("wrapping", "windows"), [({"flush_l2": True}, 2),
                                                   ({"flush_l2": False, "blocked_stream": True}, 2),
                                                   ({"flush_l2": False}, 1)])
def test_a_gpu_case_whose_samples_wrap_each_call_expects_two_energy_windows(wrapping, windows) -> None:
    """A flushed or held call is metered with its wrapping alone beside it (fp8bench.energy.meters): twice the
    windows of a bare one."""
    from fp8bench.energy.meters import WindowMeter

    meter = WindowMeter("nvml_counter", counter=lambda: 0.0)
    gpu = CostModel(Device("cuda", 0), {"bf16": 500.0, "fp32": 50.0, "mem_bw": 3.0}, meter=meter)
    settings = replace(FAST, device="cuda:0", energy=EnergySettings(error_target=None, window_s=1.0),
                       timing=replace(FAST.timing, budget_s=30, **wrapping))
    (case,) = expand_cases([("gemm", ["256x256x256"])], ["bf16"], ["torch"], settings)
    _, parts = gpu.parts(case, 1e-4, settings, first_of_shape=False)
    assert parts[Step.ENERGY] == pytest.approx(windows * 1.0)
