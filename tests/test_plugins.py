"""The registries' loading and a backend's dispatch: its own builders, or a workload's own pipeline."""

from __future__ import annotations

import pkgutil
import sys

import torch

import fp8bench.kernels
import fp8bench.workloads
from fp8bench.core import plugins
from fp8bench.core.devices import Device
from fp8bench.core.pipeline import BuildContext, Pipeline
from fp8bench.core.plugins import BACKENDS, WORKLOADS, Backend, Workload, load_all
from fp8bench.core.precisions import resolve_precision
from fp8bench.core.shapes import Shape

CPU = Device("cpu")


def test_load_all_imports_every_module_of_the_two_folders() -> None:
    load_all()
    in_folders = [f"{package.__name__}.{module.name}" for package in (fp8bench.workloads, fp8bench.kernels)
                  for module in pkgutil.iter_modules(package.__path__)]
    assert all(name in sys.modules for name in in_folders)
    assert set(plugins._ORDERED_MODULES) <= set(in_folders)  # the order list names no module that is gone


class _Scale(Workload):
    """y = 2x in plain PyTorch: a workload with a pipeline of its own and no builder in any backend."""

    name = "scale_test"
    phases = ("scale",)
    description = "y = 2x"
    default_shape = "n=8"

    def parse_shape(self, text: str) -> Shape:
        return {"n": int(text.removeprefix("n="))}

    def flops(self, shape: Shape) -> int:
        return shape["n"]

    def min_bytes(self, shape: Shape, precision) -> int:  # type: ignore[no-untyped-def]
        return 2 * precision.operand_bytes(shape["n"])

    def make_inputs(self, shape: Shape, device: Device, seed: int) -> dict[str, torch.Tensor]:
        return {"x": torch.arange(shape["n"], dtype=torch.float32, device=device.torch)}

    def reference(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        return 2 * inputs["x"].double()

    def memory_reason(self, shape, precision, device):  # type: ignore[no-untyped-def]
        return None

    def eager_pipeline(self, ctx: BuildContext) -> Pipeline:
        x = ctx.inputs["x"].to(ctx.precision.dtype)
        return Pipeline(end_to_end=lambda: 2 * x, phases={"scale": lambda: 2 * x}, output=lambda: 2 * x)


def test_a_backend_that_runs_own_pipelines_runs_a_workload_without_a_builder(monkeypatch) -> None:
    monkeypatch.setattr(WORKLOADS, "_items", {**WORKLOADS._items, "scale_test": _Scale()})
    torch_backend, emulated = BACKENDS.get("torch"), BACKENDS.get("emulated")
    bf16, fp8 = resolve_precision("bf16"), resolve_precision("fp8_tensorwise")
    assert "scale_test" in torch_backend.workloads() and "scale_test" not in emulated.workloads()
    assert torch_backend.unsupported_reason("scale_test", bf16, CPU) is None
    assert "own pipeline runs float precisions" in torch_backend.unsupported_reason("scale_test", fp8, CPU)
    assert emulated.unsupported_reason("scale_test", bf16, CPU) == "backend emulated has no scale_test implementation"
    ctx = BuildContext("scale_test", {"n": 4}, bf16, CPU, _Scale().make_inputs({"n": 4}, CPU, 0))
    out = torch_backend.build(ctx).output()
    assert out.dtype == torch.bfloat16 and out.tolist() == [0.0, 2.0, 4.0, 6.0]


def test_a_backend_without_the_flag_never_runs_own_pipelines() -> None:
    assert not Backend("plain", "custom", "test").workloads()
    assert not WORKLOADS.get("gemm").has_eager_pipeline()
