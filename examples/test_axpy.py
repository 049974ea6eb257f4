"""The axpy workload: shapes, counts, and its own pipeline through the torch backend against FP64."""

from __future__ import annotations

import pytest
import torch

from fp8bench.core.devices import Device
from fp8bench.core.pipeline import BuildContext
from fp8bench.core.plugins import BACKENDS, load_all
from fp8bench.core.precisions import resolve_precision
from fp8bench.core.shapes import ShapeError
from fp8bench.workloads.axpy import AXPY

CPU = Device("cpu")
load_all()


def test_shape_flops_and_bytes() -> None:
    shape = AXPY.parse_shape("n=1024")
    assert shape == {"n": 1024} and AXPY.flops(shape) == 2048
    assert AXPY.min_bytes(shape, resolve_precision("bf16")) == 3 * 2 * 1024
    with pytest.raises(ShapeError):
        AXPY.parse_shape("m=4")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_torch_backend_runs_its_pipeline(precision: str) -> None:
    torch_backend = BACKENDS.get("torch")
    p = resolve_precision(precision)
    assert torch_backend.unsupported_reason("axpy", p, CPU) is None
    inputs = AXPY.make_inputs({"n": 4096}, CPU, seed=1)
    out = torch_backend.build(BuildContext("axpy", {"n": 4096}, p, CPU, inputs)).output()
    assert out.dtype == p.dtype
    torch.testing.assert_close(out.double(), AXPY.reference(inputs), rtol=1e-2 if precision == "bf16" else 1e-6,
                               atol=1e-2 if precision == "bf16" else 1e-6)


def test_scaled_recipes_are_refused_with_the_reason() -> None:
    why = BACKENDS.get("torch").unsupported_reason("axpy", resolve_precision("fp8_tensorwise"), CPU)
    assert "own pipeline runs float precisions" in why
