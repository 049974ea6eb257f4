"""Shared test setup: GPU tests skip without CUDA; service tests skip without their service unless CI requires it."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Before torch loads its OpenMP runtime, which reads this once. By default an OpenMP thread that finishes its share of
# a parallel region spins, waiting for the next one; on a machine whose cores other processes also want, the
# spinning threads and the threads they wait for take turns at whole scheduler ticks, and a loop of small torch ops
# ran 50x slower (25.6 s instead of 0.5 s with both cores of a 2-core machine busy). Passive threads sleep instead,
# so the suite's speed no longer depends on how busy the machine is. A value set outside is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

# Before any test module is collected: the kernels package decides whether Triton runs interpreted (no CUDA here),
# and that choice is lost once anything imports triton (torch.utils.flop_counter does, through Inductor); and the
# registries are filled in their canonical order (the order `list` and "accepted: ..." messages show), whichever
# test module happens to import a workload or backend first.
from fp8bench.core.plugins import BACKENDS, load_all

load_all()

REQUIRE_SERVICES = os.environ.get("FP8BENCH_REQUIRE_SERVICES") == "1"


def skip_or_fail(reason: str) -> None:
    """Skip on a developer's machine; fail in CI, where every service must be present."""
    if REQUIRE_SERVICES:
        pytest.fail(f"required service missing in CI: {reason}")
    pytest.skip(reason)


# Long end-to-end checks (marker ``long``, minutes each: every documented command) run when asked, and always in
# CI (``.ci/run`` sets this), so that the default run stays quick on a developer's machine.
LONG_ENV = "FP8BENCH_LONG_TESTS"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true",
                     help=f"also run the long end-to-end checks (marker long); CI sets {LONG_ENV}=1 instead")


def long_tests_enabled(config: pytest.Config) -> bool:
    return bool(config.getoption("--long")) or os.environ.get(LONG_ENV) == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    skip_long = pytest.mark.skip(reason=f"long end-to-end check: run with --long or {LONG_ENV}=1 (CI does)")
    run_long = long_tests_enabled(config)
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_gpu)
        if "long" in item.keywords:
            # A long check is a slow one too: `-m "not slow"` stays the quick subset even where long checks run.
            item.add_marker(pytest.mark.slow)
            if not run_long:
                item.add_marker(skip_long)


# The CPU's ceilings (fp8bench.hardware.peaks) are cached per results folder, and most tests run in a fresh one:
# each would measure them again (seconds of large matmuls on a 2-core machine, for every test that runs a case).
# The rates are measured once per session for each size and thread count, for real; what a measurement records
# around them (the load, the time) is read afresh each time, so the cache, staleness and load rules still run.
# A test that is about the measurement itself is marked ``measures_ceilings`` and measures afresh.
_SESSION_RATES: dict[tuple[int, int, int], dict[str, float]] = {}


@pytest.fixture(autouse=True)
def _cpu_rates_measured_once_per_session(request, monkeypatch):
    if request.node.get_closest_marker("measures_ceilings"):
        return
    from fp8bench.hardware import peaks

    measure = peaks.measure_cpu_rates

    def once(n: int, copy_bytes: int) -> dict[str, float]:
        key = (n, copy_bytes, torch.get_num_threads())
        if key not in _SESSION_RATES:
            _SESSION_RATES[key] = measure(n, copy_bytes)
        return dict(_SESSION_RATES[key])

    monkeypatch.setattr(peaks, "measure_cpu_rates", once)


@pytest.fixture(scope="session")
def worker_ceilings_dir(tmp_path_factory) -> Path:
    """A results folder that holds only the CPU ceilings cache, for the worker processes of the session's A/B and
    bisect runs (``--results-dir`` among their run arguments; their run files go to ``--out``): on a quiet machine
    the first worker measures and caches the ceilings and every later one reads them, instead of each measuring
    them again in its own fresh checkout."""
    return tmp_path_factory.mktemp("worker_ceilings")


@pytest.fixture
def results_dir(tmp_path):
    """A fresh results folder per test (run files, store, CPU ceilings cache)."""
    d = tmp_path / "results"
    d.mkdir()
    return d


@pytest.fixture(autouse=True)
def _keep_main_module():
    """Streamlit's AppTest runs the dashboard script as ``__main__`` and leaves it there; a process started later
    with the ``spawn`` method (distributed and sharded runs) would then re-run that script before its target. Each
    test gets back the ``__main__`` it started with."""
    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main


PLUGINS = Path(__file__).resolve().parent / "plugins"


@contextlib.contextmanager
def plugins_in_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """``load(module, **env)``: a test-only plugin of ``tests/plugins`` loaded into this process the way a run loads
    ``$FP8BENCH_PLUGINS`` (:func:`fp8bench.core.plugins.load_all`), with ``env`` set first (the plugins read it when
    imported). On leaving, the backends' builders the plugins wrapped are put back, so nothing later runs through
    them. For a plugin that is about what a run records, not about loading into a fresh interpreter."""
    saved = {name: dict(BACKENDS.get(name).builders) for name in BACKENDS}
    loaded: list[str] = []

    def load(module: str, **env: str) -> None:
        monkeypatch.syspath_prepend(str(PLUGINS))
        monkeypatch.setenv("FP8BENCH_PLUGINS", module)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        sys.modules.pop(module, None)
        loaded.append(module)
        load_all()

    try:
        yield load
    finally:
        for module in loaded:
            sys.modules.pop(module, None)
        for name, builders in saved.items():
            BACKENDS.get(name).builders.clear()
            BACKENDS.get(name).builders.update(builders)


@pytest.fixture
def plugin_in_process(monkeypatch) -> Iterator[Callable[..., None]]:
    """:func:`plugins_in_process` for one test."""
    with plugins_in_process(monkeypatch) as load:
        yield load
