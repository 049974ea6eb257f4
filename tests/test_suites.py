import pytest

from fp8bench.core.precisions import PRECISIONS
from fp8bench.measure.suites import SuiteError, builtin_suites, load_suite
from fp8bench.workloads.shape_sets import SHAPE_SETS, llm_projections


def test_builtin_suites_load_and_expand():
    assert {"smoke", "ci", "square", "llm"} <= set(builtin_suites())
    smoke = load_suite("smoke")
    (entry,) = smoke.entries
    assert entry.workload == "gemm" and len(entry.shapes) >= 2
    assert entry.precisions == PRECISIONS.names() and entry.backends == ["torch", "emulated"]  # "all"
    assert smoke.settings["budget_s"] > 0


def test_shape_sets():
    assert SHAPE_SETS["square"][0] == "256x256x256" and SHAPE_SETS["square"][-1] == "16384x16384x16384"
    # Llama-3 8B at 1024 tokens: fused QKV 6144x4096, O 4096x4096, gate/up 28672x4096, down 4096x14336.
    assert llm_projections((1024,))[:4] == ["1024x6144x4096", "1024x4096x4096", "1024x28672x4096",
                                            "1024x4096x14336"]
    assert len(load_suite("llm").entries[0].shapes) == 24


def test_bad_suites_are_explained(tmp_path):
    with pytest.raises(SuiteError, match="unknown suite 'nope'; built-in suites: ci, "):
        load_suite("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nsettings: {budget: 3}\ncases: []\n")
    with pytest.raises(SuiteError, match="unknown settings budget; accepted: budget_s"):
        load_suite(str(bad))
    bad.write_text("cases:\n  - workload: gemm\n    shapes: []\n")
    with pytest.raises(SuiteError, match="'shapes' must be a non-empty list"):
        load_suite(str(bad))
    bad.write_text("cases:\n  - workload: conv\n")
    with pytest.raises(SuiteError, match=r"unknown workload 'conv'; accepted: .*\bgemm\b"):
        load_suite(str(bad))
    bad.write_text("cases: [")
    with pytest.raises(SuiteError, match="cannot read suite"):
        load_suite(str(bad))


def test_energy_settings_of_a_suite_reach_the_run(tmp_path):
    """The energy and clock settings `run` reads from a suite are accepted by the suite loader."""
    import argparse

    from fp8bench.commands import run as run_verb
    from fp8bench.commands import run_flags

    suite = tmp_path / "energy.yaml"
    suite.write_text("name: energy\nsettings: {budget_s: 2, energy: false, clock_floor: 0.8, strict_clocks: true,"
                     " cooldown_s: 0.5}\ncases:\n  - {workload: gemm, shapes: [64x64x64], precisions: [bf16],"
                     " backends: [torch]}\n")
    loaded = load_suite(str(suite))
    assert loaded.settings["clock_floor"] == 0.8 and loaded.settings["energy"] is False
    parser = argparse.ArgumentParser()
    run_flags.add_arguments(parser)
    args = parser.parse_args(["--suite", str(suite)])
    _, overrides, _ = run_verb._plan(args)
    settings = run_verb._settings(args, overrides)
    energy, clocks = settings.energy, settings.clocks
    assert (energy.enabled, clocks.floor, clocks.strict, energy.cooldown_s) == (False, 0.8, True, 0.5)


def test_an_entry_without_shapes_runs_the_workloads_default(tmp_path):
    path = tmp_path / "defaults.yaml"
    path.write_text("cases:\n  - workload: gemm\n  - workload: transformer_step\n    precisions: [bf16]\n")
    gemm, step = load_suite(str(path)).entries
    assert gemm.shapes == ["1024x1024x1024"] and step.shapes == ["tiny"]


def test_a_suite_whose_aliases_expand_past_the_bound_is_refused_before_expanding(tmp_path):
    """Nine levels of nine aliases: 300 bytes that stand for 9**7 (4.8 million) strings once expanded."""
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 7)]
    lines.append("cases: [{workload: gemm, shapes: *a6}]")
    path = tmp_path / "laughs.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SuiteError, match="expand to more than 100,000 YAML nodes"):
        load_suite(str(path))
    recursive = tmp_path / "recursive.yaml"
    recursive.write_text("cases: &x [*x]\n")
    with pytest.raises(SuiteError, match="refers to a node that contains it"):
        load_suite(str(recursive))


def _run_settings(*argv: str):
    from fp8bench.cli import build_parser
    from fp8bench.commands.run import _plan, _settings

    args = build_parser().parse_args(["run", *argv])
    return _settings(args, _plan(args)[1])


def test_the_smoke_suite_runs_one_thread_and_far_inside_its_budget():
    """Under load (1-minute load average 7 on 2 CPUs) torch's two-thread pool made a 1 ms GEMM call take 100-170 ms
    (a thread waits for its preempted peer), the 128^3 probe's time extrapolated 64-fold to 512^3 then read over
    the 4 s budget, and 9 of the suite's 34 measurable cases were skipped; one thread kept every call at 1-6 ms and
    all 34 ran. The suite pins one thread and a budget that even a 4x-inflated probe estimate stays inside."""
    settings = _run_settings("--suite", "smoke")
    assert settings.threads == 1
    assert settings.timing.budget_s >= 10
    assert _run_settings("--suite", "smoke", "--threads", "2").threads == 2  # the flag still wins


def test_a_suite_threads_setting_must_be_a_positive_count(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text("name: s\nsettings:\n  threads: 0\ncases:\n  - workload: gemm\n    shapes: [64x64x64]\n")
    with pytest.raises(SuiteError, match="threads must be a whole number of CPU threads >= 1, got 0"):
        load_suite(str(suite))
