"""torchao's "Failed to load ...so" warnings are silenced without CUDA, kept with it, and named by doctor; torch's
Enum-constant deprecation, which torchao's import triggers, is silenced everywhere, and nothing else from that
logger is."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from fp8bench.hardware import vendor_logs

MESSAGE = ("Failed to load /x/site-packages/torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so: Could not load this "
           "library: /x/site-packages/torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so")


@pytest.fixture
def torchao_logger(monkeypatch):
    logger = logging.getLogger("torchao")
    monkeypatch.setattr(logger, "filters", [])
    monkeypatch.setattr(vendor_logs, "_silenced", [])
    return logger


def test_no_cuda_load_failures_are_dropped_and_remembered(torchao_logger, caplog):
    vendor_logs.quiet_vendor_imports(cuda_available=False)
    vendor_logs.quiet_vendor_imports(cuda_available=False)  # idempotent
    assert torchao_logger.filters.count(vendor_logs._FILTER) == 1
    with caplog.at_level(logging.WARNING, logger="torchao"):
        torchao_logger.warning(MESSAGE)
        torchao_logger.warning("something else went wrong")
    assert [r.getMessage() for r in caplog.records] == ["something else went wrong"]
    assert vendor_logs.silenced() == ["_C_mxfp8.cpython-310-x86_64-linux-gnu.so"]


def test_with_cuda_a_failed_library_load_stays_loud(torchao_logger, caplog):
    vendor_logs.quiet_vendor_imports(cuda_available=True)
    with caplog.at_level(logging.WARNING, logger="torchao"):
        torchao_logger.warning(MESSAGE)
    assert [r.getMessage() for r in caplog.records] == [MESSAGE]
    assert vendor_logs.silenced() == []


@pytest.fixture(scope="module")
def quiet_import():
    """One fresh interpreter importing torchao the way fp8bench does (after ``fp8bench.kernels``), shared by the
    tests that read what a real import prints: only a fresh process shows import-time log lines."""
    pytest.importorskip("torchao")
    code = ("import torch, fp8bench.kernels, torchao; from fp8bench.hardware.vendor_logs import silenced; "
            "print(silenced())")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # a fresh interpreter importing torch
def test_real_torchao_import_prints_no_library_failures_on_this_cpu(quiet_import):
    out = quiet_import
    assert out.returncode == 0, out.stderr
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA present: nothing is silenced")
    assert "Failed to load" not in out.stderr
    assert ".so" in out.stdout  # the silenced libraries are remembered for doctor


def test_torchaos_enum_constant_deprecation_is_dropped_and_nothing_else(monkeypatch, caplog):
    pytree = logging.getLogger("torch.utils._pytree")
    monkeypatch.setattr(pytree, "filters", [])
    vendor_logs.quiet_vendor_imports(cuda_available=True)
    with caplog.at_level(logging.WARNING, logger="torch.utils._pytree"):
        # torch/utils/_pytree.py's own call, with torchao's Enum as its argument.
        pytree.warning("%s is an Enum subclass and is now natively supported by torch.compile as an opaque value "
                       "type. Calling register_constant() on Enum subclasses is deprecated and will be an error in "
                       "a future release.", "<enum 'KernelPreference'>")
        pytree.warning("some other pytree problem")
    assert [r.getMessage() for r in caplog.records] == ["some other pytree problem"]


@pytest.mark.slow  # fresh interpreters importing torch
def test_real_torchao_import_prints_no_pytree_deprecation(quiet_import):
    bare = subprocess.run([sys.executable, "-c", "import torchao"], capture_output=True, text=True, timeout=300)
    quiet = quiet_import
    assert quiet.returncode == 0, quiet.stderr
    if "KernelPreference" not in bare.stderr:
        pytest.skip("this torchao release does not register an Enum as a pytree constant")
    assert "KernelPreference" not in quiet.stderr
