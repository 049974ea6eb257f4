"""A run's settings in parts: each part refuses its bad values, the recipe part makes the options a recipe takes,
and the stored form (one flat object in every run header) is unchanged, so run files and stores written before the
parts existed read into them.

``tests/data/runfiles/`` holds real run files of both run-file schemas (see tests/test_runfile_schemas.py), and
``tests/data/store_schema2.sqlite`` a real store of schema 2 whose runs predate half of today's settings.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict

import pytest
from old_data import DATA, SCHEMA2_STORE

from fp8bench.cli import main
from fp8bench.core.precisions import PRECISIONS, RunOptions, resolve_precision
from fp8bench.core.repro import repro_of
from fp8bench.exit_codes import EXIT_USAGE
from fp8bench.measure.runner import expand_cases
from fp8bench.measure.settings import (
    HEADER_KEYS,
    ClockSettings,
    EnergySettings,
    RecipeSettings,
    RunSettings,
    TimingSettings,
)
from fp8bench.measure.timing import SamplingPolicy
from fp8bench.results.runfile import read_run_file
from fp8bench.results.store import open_store

RUN_FILES = ["schema1-complete.json", "schema1-killed.json", "schema2-complete.json", "schema2-killed.json"]


def _json(value: object) -> object:
    return json.loads(json.dumps(value))


# -- the stored form -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", RUN_FILES)
def test_an_old_run_files_settings_read_into_the_parts_and_write_back_the_same(name):
    stored = read_run_file(DATA / "runfiles" / name)["run"]["settings"]
    settings = RunSettings.from_header(stored)
    assert _json(settings.to_header()) == stored
    assert list(settings.to_header()) == list(stored)  # the same keys, in the order run files have them
    assert (settings.timing.budget_s, settings.timing.policy.max_time_s) == (stored["budget_s"],
                                                                          stored["policy"]["max_time_s"])
    assert (settings.energy.enabled, settings.recipe.fast_accum) == (stored["energy"], tuple(stored["fast_accum"]))


def test_a_header_written_now_has_the_form_of_the_old_run_files():
    stored = read_run_file(DATA / "runfiles" / "schema2-complete.json")["run"]["settings"]
    now = RunSettings().to_header()
    assert list(now) == list(stored) == list(HEADER_KEYS)
    assert {k: type(v) for k, v in _json(now).items() if v is not None} == \
        {k: type(v) for k, v in stored.items() if v is not None}


def test_the_repro_command_of_an_old_record_is_the_same_from_a_header_written_now():
    """repro_of reads the stored settings (core/repro.py): an old run's, and the same settings written today."""
    data = read_run_file(DATA / "runfiles" / "schema2-complete.json")
    run = data["run"]
    rewritten = {**run, "settings": _json(RunSettings.from_header(run["settings"]).to_header())}
    for record in data["records"]:
        assert repro_of(record, rewritten) == repro_of(record, run)
        assert "--budget 0.5" in repro_of(record, rewritten)


def test_an_old_stores_runs_read_into_the_parts_with_todays_defaults_for_what_they_lack(tmp_path):
    """The schema-2 store's runs predate fast_accum, cuda_graph, strict_clocks, the throttle check and more: those
    take their defaults, and every key the store has keeps its value."""
    shutil.copy(SCHEMA2_STORE, tmp_path / "store.sqlite")
    store = open_store(tmp_path / "store.sqlite")
    runs = store.runs_frame()["run_id"].tolist()
    read = 0
    for run_id in runs:
        stored = store.run_payload(run_id)["run"].get("settings")
        if not stored:  # a converge or gate entry may store no run settings
            continue
        assert "throttle_threshold" not in stored and "fast_accum" not in stored
        settings = RunSettings.from_header(stored)
        back = _json(settings.to_header())
        assert {k: back[k] for k in stored} == stored
        assert settings.clocks == ClockSettings() and settings.recipe.fast_accum == (True,)
        assert settings.recipe.fp8_format == stored["fp8_format"] == "e4m3"
        read += 1
    assert read >= 2


def test_from_header_leaves_out_keys_it_does_not_know_and_refuses_bad_values():
    stored = {**RunSettings().to_header(), "a_later_setting": 3}
    stored["policy"] = {**stored["policy"], "a_later_policy_field": 1}
    assert RunSettings.from_header(stored) == RunSettings()
    with pytest.raises(ValueError, match="clock floor must be a fraction of the reference clock in \\[0, 1\\], got 2"):
        RunSettings.from_header({**RunSettings().to_header(), "clock_floor": 2})


# -- each part checks its own values ---------------------------------------------------------------------------------

@pytest.mark.parametrize("make, message", [
    (lambda: TimingSettings(budget_s=0), "budget must be positive, finite seconds, got 0"),
    (lambda: TimingSettings(budget_s=float("inf")), "budget must be positive, finite seconds, got inf"),
    (lambda: TimingSettings(warmup_s=-1), "warmup_s must be finite seconds >= 0, got -1"),
    (lambda: TimingSettings(warmup_iters=-1), "warmup_iters must be a whole number of calls >= 0, got -1"),
    (lambda: EnergySettings(window_s=0), "energy window must be positive, finite seconds, got 0"),
    (lambda: EnergySettings(cooldown_s=float("nan")), "cooldown_s must be finite seconds >= 0, got nan"),
    (lambda: EnergySettings(idle_baseline_s=-2), "idle_baseline_s must be finite seconds >= 0, got -2"),
    (lambda: EnergySettings(error_target=1.0), "energy error target must be a fraction in \\(0, 1\\), got 1.0"),
    (lambda: ClockSettings(floor=1.5), "clock floor must be a fraction of the reference clock in \\[0, 1\\], got 1.5"),
    (lambda: ClockSettings(throttle_threshold=-0.1), "throttle threshold must be a fraction .* got -0.1"),
    (lambda: ClockSettings(throttle_recovery_s=float("inf")), "throttle recovery delay must be finite seconds"),
    (lambda: ClockSettings(lock="turbo"), "--lock-clocks 'turbo'; accepted: base, max"),
    (lambda: RecipeSettings(fast_accum=()), "fast_accum must list one or more of True/False, got \\(\\)"),
    (lambda: RecipeSettings(fp8_format="e3m4"), "unknown FP8 format 'e3m4'; accepted: e4m3, e5m2, hybrid"),
    (lambda: RecipeSettings(amax_history_len=0), "amax_history_len must be >= 1, got 0"),
    (lambda: RecipeSettings(margin=9), "margin is a power-of-two headroom in \\[-8, 8\\], got 9"),
    (lambda: RecipeSettings(amax_compute_algo="mean"), "amax_compute_algo 'mean'; accepted: max, most_recent"),
    (lambda: RunSettings(profile="perf"), "unknown --profile value 'perf'; accepted: torch, nvtx, nsys"),
    (lambda: RunSettings(threads=0), "threads must be a whole number of at least 1, got 0"),
])
def test_each_part_refuses_a_bad_value_naming_it_and_what_is_accepted(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_bad_recipe_option_is_refused_even_when_no_scaled_recipe_is_measured():
    """The options are checked when the settings are made, not when an FP8 recipe first takes them: a bf16-only run
    with --margin 99 used to run and store a margin no recipe could take."""
    with pytest.raises(ValueError, match="margin is a power-of-two headroom in \\[-8, 8\\], got 99"):
        RunOptions(margin=99)
    with pytest.raises(ValueError, match="fast_accum is on \\(True\\), off \\(False\\) or the recipe's own"):
        RunOptions(fast_accum="yes")  # type: ignore[arg-type]


def test_the_copies_change_one_part_only():
    base = RunSettings(device="cpu", timing=TimingSettings(budget_s=5, policy=SamplingPolicy(min_samples=3)))
    shorter = base.with_timing(budget_s=2)
    assert (shorter.timing.budget_s, shorter.timing.policy, shorter.energy) == (2, base.timing.policy, base.energy)
    quiet = base.with_energy(enabled=False)
    assert not quiet.energy.enabled and quiet.timing == base.timing and quiet.clocks == base.clocks


# -- the recipe part and resolve_precision ---------------------------------------------------------------------------

def test_the_recipe_part_makes_the_options_one_recipe_takes():
    recipe = RecipeSettings(fp8_format=None, fast_accum=(True, False), amax_history_len=16, margin=1,
                            amax_compute_algo="most_recent")
    options = recipe.options(False, trains=True)
    assert options == RunOptions(fp8_format=None, amax_history_len=16, margin=1, fast_accum=False,
                                 amax_compute_algo="most_recent", trains=True)
    delayed = resolve_precision("fp8_delayed", options)
    assert (delayed.fp8_format.value, delayed.amax_history_len, delayed.margin, delayed.fast_accum) == (
        "hybrid", 16, 1, False)  # no format named: TE's hybrid on a training workload
    assert resolve_precision("bf16", options) is PRECISIONS.get("bf16")
    assert resolve_precision("fp8_rowwise") == resolve_precision("fp8_rowwise", RunOptions())


def test_expand_cases_sweeps_the_recipe_parts_accumulation_modes():
    settings = RunSettings(recipe=RecipeSettings(fast_accum=(True, False), fp8_format="e5m2"))
    cases = expand_cases([("gemm", ["32x32x32"])], ["bf16", "fp8_rowwise"], ["torch"], settings)
    assert [(c.precision.name, getattr(c.precision, "fast_accum", None)) for c in cases] == [
        ("bf16", None), ("fp8_rowwise", True), ("fp8_rowwise", False)]
    assert {c.precision.fp8_format.value for c in cases[1:]} == {"e5m2"}


def test_the_header_keys_name_every_field_of_every_part_once():
    fields = {(part, name) for part, name in HEADER_KEYS.values()}
    assert len(fields) == len(HEADER_KEYS)
    expected = {("", f) for f in ("device", "seed", "threads", "profile")}
    for part in ("recipe", "timing", "energy", "clocks"):
        expected |= {(part, f) for f in asdict(getattr(RunSettings(), part))}
    assert fields == expected


def test_a_run_of_float_precisions_refuses_a_bad_recipe_option_before_measuring(tmp_path, capsys):
    """--margin 99 cannot apply to any recipe: refused as the settings are made, even when the run measures only
    bf16 (the options used to be checked only by an FP8 recipe taking them, so this run measured and stored it)."""
    code = main(["run", "--precision", "bf16", "--shape", "16x16x16", "--margin", "99", "--budget", "2",
                 "--device", "cpu", "--no-energy", "--results-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    assert "margin is a power-of-two headroom in [-8, 8], got 99" in err
    assert not (tmp_path / "runs").exists()


def test_a_header_written_on_a_bigger_machine_reads_and_a_run_here_is_refused_its_thread_count():
    """A run header from a 512-CPU runner names 512 threads: reading it (repro commands, suites, the store) must not
    depend on this machine's CPUs; running with them here would oversubscribe this machine's CPUs and is refused."""
    stored = {**RunSettings().to_header(), "threads": 512}
    settings = RunSettings.from_header(stored)
    assert settings.threads == 512 and settings.to_header() == stored
    with pytest.raises(ValueError, match=f"between 1 and this machine's {os.cpu_count()} CPUs, got 512"):
        settings.threads_here()
    assert RunSettings(threads=1).threads_here() == 1 and RunSettings().threads_here() is None
