"""Shared test setup: GPU tests skip without CUDA; service tests skip without their service unless CI requires it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

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


# A pytest-xdist worker process finds COLUMNS=80 and LINES=24 in its environment although the run was started
# without them (they are set while the worker starts); the product's tables read $COLUMNS as a terminal's width, so
# a worker would draw them 80 columns wide where a plain run draws them for a log. Each worker gets back the values
# the run was started with.
TERMINAL_SIZE_ENV = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    node.workerinput["terminal_size_env"] = {k: os.environ[k] for k in TERMINAL_SIZE_ENV if k in os.environ}


def pytest_configure(config: pytest.Config) -> None:
    given = getattr(config, "workerinput", {}).get("terminal_size_env")
    if given is None:
        return
    for key in TERMINAL_SIZE_ENV:
        if key in given:
            os.environ[key] = given[key]
        else:
            os.environ.pop(key, None)


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


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The temporary folder of the whole test run. ``scripts/test`` runs the suite on pytest-xdist workers; each
    worker's base folder is ``popen-<worker>`` inside the run's, which the controller made. A plain ``pytest`` has
    one base folder."""
    base = tmp_path_factory.getbasetemp()
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return base.parent if worker and base.name == f"popen-{worker}" else base


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str,
               build: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """``build(folder)``'s JSON-able result, built on first use in the test run into ``folder`` (``name`` in
    :func:`run_folder`) and read back by every later caller, whichever worker process it runs in: one worker
    builds while the others that need it wait on a file lock. A build that raised is tried again, in an emptied
    folder, by the next caller."""
    from filelock import FileLock

    folder = run_folder(tmp_path_factory) / name
    made = folder / "made.json"
    with FileLock(f"{folder}.lock"):
        if not made.is_file():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            made.write_text(json.dumps(build(folder), default=str))
    return json.loads(made.read_text())


def outside_xdist(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` without pytest-xdist's worker variables, for a test's child processes that run pytest themselves
    (the benchmark suites): pytest-benchmark turns itself off where it sees ``PYTEST_XDIST_WORKER``."""
    return {k: v for k, v in env.items() if not k.startswith("PYTEST_XDIST_")}


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
