"""The `ci` benchmark suite as pytest cases: GEMMs a kernel change is judged on, in BF16 and the FP8 recipes.

Run (from the repository root)::

    pytest workloads/suites/ci_bench --benchmark-enable --benchmark-json=results/ci.json
    fp8bench ingest results/ci.json                     # into the store
    fp8bench gate results/base-ci.json results/ci.json  # against a base run of the same suite

Each test measures one case with fp8bench's runner through the ``fp8bench_case`` fixture (the ``fp8bench`` pytest
plugin). Shapes follow the device: the regression-gate shapes of the ``ci`` suite on a GPU, small ones on a CPU,
where the FP8 reference kernels are slow (tensorwise ``torch._scaled_mm`` especially) and only the machinery and
numerics are exercised.
"""

from __future__ import annotations

import pytest

# On a GPU: the `ci` suite's shapes. On a CPU: small enough to finish in seconds.
GPU_SHAPES = ("1024x1024x1024", "2048x2048x2048")
CPU_SHAPES = ("128x128x128", "256x256x256")
PRECISIONS = ("bf16", "fp8_rowwise", "fp8_tensorwise")
# Accuracy is judged by the gate, not here: `fp8bench gate --metric sqnr_db --sqnr-floor bf16=35 --sqnr-floor
# 'fp8_*=20'` (the CI workflow's numerics step) fails a case whose SQNR falls under its floor or drops more than 1 dB
# against the base. The floors sit well under what each format reaches on Gaussian inputs (BF16 ~50 dB; E4M3 with
# scaling ~30 dB): they catch a broken kernel or scale, not a normal rounding difference.


def _on_gpu(config: pytest.Config) -> bool:
    device = config.getoption("fp8bench_device")
    if device.startswith("cuda"):
        return True
    if device != "auto":
        return False
    import torch

    return torch.cuda.is_available()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "shape" in metafunc.fixturenames:
        metafunc.parametrize("shape", GPU_SHAPES if _on_gpu(metafunc.config) else CPU_SHAPES)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_gemm(fp8bench_case, shape: str, precision: str) -> None:
    if precision == "fp8_tensorwise" and shape in CPU_SHAPES:
        pytest.skip("tensorwise torch._scaled_mm on the CPU is a slow reference path (9.3x slower than BF16 at "
                    "128x128x256, `fp8bench doctor`): its time says nothing of FP8 hardware, so it gates nothing")
    record = fp8bench_case("gemm", shape, precision, backend="torch")
    assert record["status"] in ("ok", "skipped"), record["reason"]
    if record["status"] == "ok":
        assert record["valid"], record["notes"]
        assert record["n"] >= 3 and record["median_s"] > 0
