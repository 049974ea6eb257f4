"""pytest plugin: benchmark suites as ordinary pytest files, measured by fp8bench, reported to pytest-benchmark.

A CI suite is a plain test module::

    @pytest.mark.parametrize("precision", ["bf16", "fp8_rowwise"])
    def test_gemm(fp8bench_case, precision):
        record = fp8bench_case("gemm", "4096x4096x4096", precision, backend="torch")
        assert record["status"] in ("ok", "skipped"), record["reason"]

``fp8bench_case`` measures the case with fp8bench's own runner: device-synchronized timer (CUDA events on a GPU),
warm-up outside the timed region, adaptive sampling to a spread target under a time budget, numerics against the
FP64 reference. pytest-benchmark then sees an ordinary benchmark, as its users run it::

    pytest --benchmark-only --benchmark-json=night.json          # only the benchmarks; the JSON fp8bench ingests
    pytest --benchmark-only --benchmark-autosave                 # saved under .benchmarks/ for later nights
    pytest --benchmark-only --benchmark-compare --benchmark-compare-fail=median:10%   # fails on a slower case
    pytest-benchmark compare 0001 0002                           # two saved nights side by side

* The fixture names ``benchmark`` among its own arguments whenever pytest-benchmark is active, because
  pytest-benchmark decides which tests are benchmarks from their fixture names at collection (``--benchmark-only``
  runs these, ``--benchmark-skip`` skips them).
* The samples reach pytest-benchmark through its public API only: the test's ``benchmark`` marker gets the
  ``timer`` option :func:`fp8bench_samples`, which replays fp8bench's samples, and ``benchmark.pedantic`` runs one
  round per sample of a target that does nothing, so pytest-benchmark's statistics are exactly fp8bench's. A case
  that ends without samples, or that raises, is reported as the benchmark's error (left out of the table and JSON).
* ``group`` is the workload and shape (``gemm 4096x4096x4096``), so precisions and backends of one shape sit in
  one table. ``extra_info["fp8bench"]`` is the whole record and ``extra_info["fp8bench_run"]`` the run header
  (device, commit, host and its load, software, settings). ``machine_info["fp8bench"]`` holds only what names the
  machine (host alias, CPU model, the ``--fp8bench-device`` asked for): pytest-benchmark compares machine_info as
  the session starts, before any case has run, and warns on any difference, so nothing that changes between two
  nights may sit there.

``pytest --benchmark-json=out.json`` therefore writes a file that ``fp8bench ingest`` stores and ``fp8bench gate``
compares exactly like an ``fp8bench run`` file. Only pytest-benchmark's public API is used; the plugin's tests pass
with pytest-benchmark 4.0.0 on pytest 8.0 (the oldest the project allows) and 5.3.1 on pytest 9.2 (docs/gate.md).

With benchmarks disabled (``--benchmark-disable``, the project's own default) or without pytest-benchmark, each case
runs with a minimal policy (3 samples) so that the suite still checks that every case builds and is numerically
sane, quickly. The plugin imports nothing heavy until a test uses the fixture, so it costs the project's normal
test run nothing.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

from fp8bench.core.shapes import label, shape_label

if TYPE_CHECKING:  # torch loads only when a benchmark runs
    from fp8bench.measure.runner import CaseMeasurer
    from fp8bench.measure.settings import RunSettings

_STATE_KEY = pytest.StashKey[dict[str, Any]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fp8bench", "fp8bench benchmark cases")
    group.addoption("--fp8bench-device", default="auto", help="device for fp8bench cases (auto, cpu, cuda:N)")
    group.addoption("--fp8bench-budget", type=float, default=30.0, help="wall-clock seconds per case (default 30)")
    group.addoption("--fp8bench-min-samples", type=int, default=10, help="minimum timed samples (default 10)")
    group.addoption("--fp8bench-max-time", type=float, default=2.0,
                    help="most measured seconds per case (default 2)")
    group.addoption("--fp8bench-target-rse", type=float, default=0.005,
                    help="stop sampling at this relative standard error of the median (default 0.005)")
    group.addoption("--fp8bench-threads", type=int, default=None, help="CPU threads for torch")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_STATE_KEY] = {"measurers": {}, "header": None}
    _register_fixture(config)


def _settings(config: pytest.Config, quick: bool) -> RunSettings:
    from fp8bench.measure.settings import EnergySettings, RunSettings, TimingSettings
    from fp8bench.measure.timing import SamplingPolicy

    device, threads = config.getoption("fp8bench_device"), config.getoption("fp8bench_threads")
    budget_s = config.getoption("fp8bench_budget")
    if quick:  # benchmarks disabled: prove the case runs and is sane, do not measure it
        policy = SamplingPolicy(min_samples=3, max_samples=3, min_time_s=0.0, max_time_s=0.5)
        timing = TimingSettings(budget_s=budget_s, policy=policy, warmup_s=0.0, warmup_iters=1, phases=False)
        return RunSettings(device=device, threads=threads, timing=timing, energy=EnergySettings(enabled=False))
    policy = SamplingPolicy(min_samples=config.getoption("fp8bench_min_samples"),
                            target_rse=config.getoption("fp8bench_target_rse"),
                            max_time_s=config.getoption("fp8bench_max_time"))
    return RunSettings(device=device, threads=threads, timing=TimingSettings(budget_s=budget_s, policy=policy))


def _measurer(config: pytest.Config, quick: bool) -> CaseMeasurer:
    """One measurer per session and mode (inputs and references are cached inside it)."""
    import torch

    from fp8bench.core.devices import resolve_device
    from fp8bench.measure.runner import CaseMeasurer, run_header

    state = config.stash[_STATE_KEY]
    if quick not in state["measurers"]:
        settings = _settings(config, quick)
        threads = settings.threads_here()  # more than this machine's CPUs is refused by name
        if threads:
            torch.set_num_threads(threads)
        device = resolve_device(settings.device)
        state["measurers"][quick] = CaseMeasurer(settings, device)
        if state["header"] is None or not quick:
            header = run_header("pytest", device, settings.device, settings, {"source": "pytest-benchmark"})
            state["header"] = {k: v for k, v in header.items() if k not in ("run_id", "started_at", "status")}
    return state["measurers"][quick]


def _json_safe(value: Any) -> Any:
    import math

    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


class _ReplayClock:
    """The timer pytest-benchmark reads for fp8bench cases: it hands back fp8bench's own samples.

    pytest-benchmark times a round as ``end - start`` of two timer readings around one call of its target. Loaded
    with samples, this clock reads 0.0 then the sample for each round, so ``benchmark.pedantic`` (one round per
    sample, one call each, a target that does nothing) records exactly fp8bench's samples, through public API.
    """

    def __init__(self) -> None:
        self.readings: deque[float] = deque()

    def load(self, samples: list[float]) -> None:
        for seconds in samples:
            self.readings.extend((0.0, seconds))

    def __call__(self) -> float:
        if not self.readings:
            raise RuntimeError("the fp8bench sample clock was read more often than it holds samples")
        return self.readings.popleft()


_CLOCK = _ReplayClock()


def fp8bench_samples() -> float:
    """The pytest-benchmark ``timer`` of fp8bench cases (its name is what the JSON's ``options.timer`` shows)."""
    return _CLOCK()


def _no_op() -> None:
    """The target of each replayed round: the work was measured by fp8bench already."""


class NothingMeasured(Exception):
    """A case that ended without samples (skipped, failed): raised inside ``benchmark.pedantic`` so that
    pytest-benchmark marks the benchmark as errored and leaves it out of its table and JSON."""


def _raise(exc: BaseException) -> None:
    raise exc


def _errored(bench: Any, exc: Exception) -> None:
    """Report ``exc`` as the benchmark's error, through ``benchmark.pedantic`` (it marks the benchmark errored,
    leaves it out of its table and JSON, and does not warn that the fixture went unused); re-raises ``exc``."""
    _CLOCK.readings.clear()
    _CLOCK.readings.append(0.0)  # the round's start reading, taken before the target raises
    bench.pedantic(_raise, args=(exc,))


def _report(bench: Any, record: dict[str, Any]) -> None:
    """Hand ``record`` to pytest-benchmark: its samples as the test's rounds, its workload and shape as the group."""
    bench.group = f"{record['workload']} {shape_label(label(record['shape']))}"
    bench.extra_info["fp8bench"] = record
    if not record["samples_s"]:  # the test's own assertions say why; the record is not a benchmark result
        with contextlib.suppress(NothingMeasured):
            _errored(bench, NothingMeasured(record.get("reason")))
        return
    _CLOCK.readings.clear()
    _CLOCK.load(record["samples_s"])
    bench.pedantic(_no_op, rounds=len(record["samples_s"]), iterations=1, warmup_rounds=0)


def _measure_case(request: pytest.FixtureRequest, bench: Any | None) -> Callable[..., dict[str, Any]]:
    """The ``fp8bench_case`` callable: measures one case (see the module docstring); returns its record."""
    quick = bench is None or not bench.enabled
    used: list[bool] = []

    def measure(workload: str, shape: str, precision: str, backend: str = "torch", fp8_format: str | None = None,
                **extra: Any) -> dict[str, Any]:
        from fp8bench.measure.runner import expand_cases

        if used:
            raise RuntimeError("fp8bench_case measures one case per test; parametrize the test for more cases")
        used.append(True)
        measurer = _measurer(request.config, quick)
        settings = measurer.settings
        try:  # a refusal of any kind (a bad format included) is reported as the benchmark's error
            if fp8_format != settings.recipe.fp8_format:
                from dataclasses import replace

                settings = replace(settings, recipe=replace(settings.recipe, fp8_format=fp8_format))
            case = expand_cases([(workload, [shape])], [precision], [backend], settings)[0]
            record = measurer.measure(case).to_dict()
        except Exception as exc:
            if bench is not None:
                _errored(bench, exc)
            raise
        if extra:
            record["extra"] = {**record.get("extra", {}), "case_definition": _json_safe(extra)}
        record = _json_safe(record)
        if bench is not None and not quick:
            bench.extra_info["fp8bench_run"] = _run_environment(request.config)
            _report(bench, record)
        elif bench is not None:  # disabled: pedantic calls its target once and records nothing, but marks the
            bench.pedantic(_no_op)  # fixture used, so pytest-benchmark does not warn that it was not
        return record

    return measure


class _CaseWithBenchmark:
    @pytest.fixture(name="fp8bench_case")
    def case(self, request: pytest.FixtureRequest, benchmark: Any) -> Callable[..., dict[str, Any]]:
        """Measure one fp8bench case and report it to pytest-benchmark (see the module docstring)."""
        return _measure_case(request, benchmark)


class _CaseAlone:
    @pytest.fixture(name="fp8bench_case")
    def case(self, request: pytest.FixtureRequest) -> Callable[..., dict[str, Any]]:
        """Measure one fp8bench case quickly (pytest-benchmark is not active, so nothing is reported)."""
        return _measure_case(request, None)


# pytest-benchmark's name for itself as a pytest plugin (its ``pytest11`` entry point); ``-p no:benchmark`` blocks it.
BENCHMARK_PLUGIN = "benchmark"


def _register_fixture(config: pytest.Config) -> None:
    """Register ``fp8bench_case``, naming ``benchmark`` among its arguments where pytest-benchmark is active.

    pytest-benchmark decides at collection which tests are benchmarks, from the fixture names a test needs
    (``--benchmark-only`` skips the others, ``--benchmark-skip`` these), so the dependency must be declared, not
    asked for while the test runs.
    """
    holder = _CaseWithBenchmark() if config.pluginmanager.hasplugin(BENCHMARK_PLUGIN) else _CaseAlone()
    config.pluginmanager.register(holder, "fp8bench-case-fixture")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Give each fp8bench case the replaying timer (pytest-benchmark's public ``timer`` option of its marker),
    keeping any other option the test's own ``benchmark`` marker sets."""
    if not config.pluginmanager.hasplugin(BENCHMARK_PLUGIN):
        return
    for item in items:
        if "fp8bench_case" in getattr(item, "fixturenames", ()):
            own = item.get_closest_marker("benchmark")
            options = {**(own.kwargs if own else {}), "timer": fp8bench_samples}
            item.add_marker(pytest.mark.benchmark(**options), append=False)


def _header(config: pytest.Config) -> dict[str, Any]:
    """The run header of the measured cases (device, commit, host and its load, software, settings), JSON-safe."""
    header = dict(config.stash[_STATE_KEY]["header"] or {})
    return _json_safe(header)


def _run_environment(config: pytest.Config) -> dict[str, Any]:
    """What each benchmark's ``extra_info["fp8bench_run"]`` holds: the whole run header (:func:`_header`)."""
    return _header(config)


def machine_identity(config: pytest.Config) -> dict[str, str]:
    """What names the machine, known before any case runs: pytest-benchmark compares a saved file's machine_info
    with the current one as the session starts, so it cannot hold the measured device or anything that changes
    from night to night (commit, load, versions: those go to extra_info)."""
    from fp8bench.core.devices import cpu_model
    from fp8bench.hardware.environment import host_alias

    return {"host_alias": host_alias(), "cpu_model": cpu_model(), "device": config.getoption("fp8bench_device")}


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """Add fp8bench's name for the machine (:func:`machine_identity`) to the JSON's machine_info."""
    machine_info["fp8bench"] = machine_identity(config)
