"""pytest plugin: benchmark suites as ordinary pytest files, measured by fp8bench, reported to pytest-benchmark.

A CI suite is a plain test module::

    @pytest.mark.parametrize("precision", ["bf16", "fp8_rowwise"])
    def test_gemm(fp8bench_case, precision):
        record = fp8bench_case("gemm", "4096x4096x4096", precision, backend="torch")
        assert record["status"] in ("ok", "skipped"), record["reason"]

``fp8bench_case`` measures the case with fp8bench's own runner: device-synchronized timer (CUDA events on a GPU),
warm-up outside the timed region, adaptive sampling to a spread target under a time budget, numerics against the
FP64 reference. It then hands the raw samples to pytest-benchmark as that test's statistics and puts the whole
fp8bench record into ``extra_info["fp8bench"]``; the run's environment (device, driver, torch, settings) goes into
``machine_info["fp8bench"]``. ``pytest --benchmark-enable --benchmark-json=out.json`` therefore writes a file that
``fp8bench ingest`` stores and ``fp8bench gate`` compares exactly like an ``fp8bench run`` file.

With benchmarks disabled (``--benchmark-disable``, the project's own default) or without pytest-benchmark, each case
runs with a minimal policy (3 samples) so that the suite still checks that every case builds and is numerically
sane, quickly. The plugin imports nothing heavy until a test uses the fixture, so it costs the project's normal
test run nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import pytest

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


def _settings(config: pytest.Config, quick: bool) -> Any:
    from fp8bench.measure.runner import RunSettings
    from fp8bench.measure.timing import SamplingPolicy

    if quick:  # benchmarks disabled: prove the case runs and is sane, do not measure it
        policy = SamplingPolicy(min_samples=3, max_samples=3, min_time_s=0.0, max_time_s=0.5)
        return RunSettings(device=config.getoption("fp8bench_device"), budget_s=config.getoption("fp8bench_budget"),
                           policy=policy, warmup_s=0.0, warmup_iters=1, phases=False, energy=False,
                           threads=config.getoption("fp8bench_threads"))
    policy = SamplingPolicy(min_samples=config.getoption("fp8bench_min_samples"),
                            target_rse=config.getoption("fp8bench_target_rse"),
                            max_time_s=config.getoption("fp8bench_max_time"))
    return RunSettings(device=config.getoption("fp8bench_device"), budget_s=config.getoption("fp8bench_budget"),
                       policy=policy, threads=config.getoption("fp8bench_threads"))


def _measurer(config: pytest.Config, quick: bool) -> Any:
    """One measurer per session and mode (inputs and references are cached inside it)."""
    import torch

    from fp8bench.core.devices import resolve_device
    from fp8bench.measure.runner import CaseMeasurer, run_header

    state = config.stash[_STATE_KEY]
    if quick not in state["measurers"]:
        settings = _settings(config, quick)
        if settings.threads:
            torch.set_num_threads(settings.threads)
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


@pytest.fixture
def fp8bench_case(request: pytest.FixtureRequest) -> Callable[..., dict[str, Any]]:
    """Measure one fp8bench case (see the module docstring); returns its record as a dict."""
    try:
        bench = request.getfixturevalue("benchmark")
    except pytest.FixtureLookupError:  # pytest-benchmark not installed: measure quickly, report nothing
        bench = None
    quick = bench is None or bool(getattr(bench, "disabled", True))
    used: list[bool] = []

    def measure(workload: str, shape: str, precision: str, backend: str = "torch", fp8_format: str | None = None,
                **extra: Any) -> dict[str, Any]:
        from fp8bench.measure.runner import expand_cases

        if used:
            raise RuntimeError("fp8bench_case measures one case per test; parametrize the test for more cases")
        used.append(True)
        if bench is not None:
            bench._mode = "fp8bench_case(...)"  # tells pytest-benchmark its fixture was used (even on failure)
        measurer = _measurer(request.config, quick)
        settings = measurer.settings
        if fp8_format != settings.fp8_format:
            from dataclasses import replace

            settings = replace(settings, fp8_format=fp8_format)
        case = expand_cases([(workload, [shape])], [precision], [backend], settings)[0]
        record = measurer.measure(case).to_dict()
        if extra:
            record["extra"] = {**record.get("extra", {}), "case_definition": _json_safe(extra)}
        record = _json_safe(record)
        if bench is not None and not quick:
            bench.extra_info["fp8bench"] = record
            if record["samples_s"]:
                stats = bench._make_stats(1)  # one call per sample: fp8bench times single calls
                for seconds in record["samples_s"]:
                    stats.update(seconds)
        return record

    return measure


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """Put the run header of the measured cases (device, driver, torch, settings) into the JSON's machine_info."""
    state = config.stash.get(_STATE_KEY, None)
    if state and state.get("header"):
        header = dict(state["header"])
        header["settings"] = _json_safe(header.get("settings") if isinstance(header.get("settings"), dict)
                                        else asdict(header["settings"]))
        machine_info["fp8bench"] = _json_safe(header)
