"""Phase purity and capture purity (:mod:`fp8bench.verify.phase_audit`): every timed region holds only what its name
says.

Two classes of defect are caught here, on a CPU, for every backend x precision x workload that runs:

* **non-GEMM work timed as the GEMM** (packing E2M1 pairs, swizzling or transposing scales, per-expert scale loops, a
  concatenation of per-expert outputs inside the pre-quantized ``gemm`` phase): that phase must dispatch its GEMM
  op(s), views and uninitialized allocations only;
* **timed regions a CUDA graph cannot capture**: a host-to-device copy (a module-level constant or a host-built
  matrix moved with ``.to(device)`` on every call) or a host synchronization (``.item()``, ``float(t)``, a loss
  scaler reading found-inf) in any timed region, end to end or a phase; the 4-bit cases must pass a simulated
  capture.

The first tests check the audit itself: each kind of violation is seen, and legitimate code is not flagged.
"""

from __future__ import annotations

import functools

import pytest
import torch

import fp8bench.numerics.quantize
from fp8bench.core.plugins import BACKENDS, load_all
from fp8bench.core.precisions import PRECISIONS
from fp8bench.verify.phase_audit import AUDIT_SHAPES, Auditor, CaseAudit, RegionAudit, audit_case

load_all()


def _audit(fn, name: str = "gemm") -> RegionAudit:
    with Auditor() as auditor:
        x = torch.randn(8, 16).to(torch.device("cpu"))  # a case's input: moved to the device outside any region
        return auditor.region(name, lambda: fn(x))


# --- the audit itself -----------------------------------------------------------------------------------------

def test_a_gemm_with_views_is_pure_and_a_concatenation_is_not() -> None:
    pure = _audit(lambda x: x @ x.t())
    assert pure.non_gemm_ops() == [] and "aten.mm" in pure.ops and pure.capture_refusal() is None
    impure = _audit(lambda x: torch.cat([x @ x.t(), x @ x.t()]))
    assert impure.non_gemm_ops() == ["aten.cat"]


@pytest.mark.parametrize("read", [lambda x: x.sum().item(), lambda x: float(x.max()), lambda x: x.tolist(),
                                  lambda x: x[x > 0], lambda x: x.cpu()],
                         ids=["item", "float", "tolist", "bool-index", "cpu"])
def test_every_way_of_reading_a_device_value_is_a_host_synchronization(read) -> None:
    region = _audit(read)
    assert [v.kind for v in region.violations] == ["sync"], region.violations
    assert "host synchronization" in (region.capture_refusal() or "")


def test_host_tensors_moved_in_a_timed_region_are_host_to_device_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fp8bench.numerics.quantize, "_AUDIT_TEST_TABLE", torch.arange(8.0), raising=False)
    constant = _audit(lambda x: fp8bench.numerics.quantize._AUDIT_TEST_TABLE.to(x.device))  # a module-level constant
    built = _audit(lambda x: torch.ones(16, 16).to(x.device) @ x.t())  # a factory call without device=
    literal = _audit(lambda x: torch.tensor([0.5, 1.0], device=x.device))  # device data from Python values
    for region in (constant, built, literal):
        assert [v.kind for v in region.violations] == ["h2d"], region.violations


def test_device_buffers_and_host_bookkeeping_are_not_flagged() -> None:
    def legitimate(x: torch.Tensor) -> torch.Tensor:
        y = torch.zeros(8, 16, device=x.device) + x  # allocated on the device
        step = torch.tensor(0.0, device="cpu")  # a host counter, as PyTorch's optimizers keep theirs
        return y * (1 - 0.9 ** step.item())

    assert _audit(legitimate).violations == []


class _CopiesInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad * torch.full((16,), 2.0).to(grad.device)  # a host tensor copied on every backward


def test_a_host_copy_inside_a_custom_backward_is_seen() -> None:
    def step(x: torch.Tensor) -> None:
        _CopiesInBackward.apply(x.requires_grad_()).sum().backward()

    region = _audit(step, "backward")
    assert [v.kind for v in region.violations] == ["h2d"], region.violations


# --- every case of the matrix -----------------------------------------------------------------------------------

# Without CUDA the Triton kernels run in Triton's interpreter, which executes every program instance in Python: at
# the audit's 256^3 GEMM one case took 45 s on two cores. The ops a timed region dispatches do not depend on how
# many tiles the kernel has, so Triton's GEMMs are audited at 128^3 (still whole 128-wide blocks for blockwise
# scales), 8x fewer tiles.
INTERPRETED_SHAPES = {("gemm", "triton"): ("128x128x128",)}


@functools.cache
def _matrix(workload: str) -> tuple[CaseAudit, ...]:
    """Every backend x precision of ``workload`` (each shape of AUDIT_SHAPES), audited once per test session."""
    return tuple(audit_case(workload, shape, precision, backend) for backend in BACKENDS.names()
                 for shape in INTERPRETED_SHAPES.get((workload, backend), AUDIT_SHAPES[workload])
                 for precision in PRECISIONS.names())


def _audited(workload: str) -> list[CaseAudit]:
    return [c for c in _matrix(workload) if c.status == "audited"]


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["gemm", "grouped_gemm"])
def test_the_pre_quantized_gemm_phase_holds_the_gemm_alone(workload: str) -> None:
    """Packing, scale layout work and per-expert concatenation belong to quantize and epilogue, not to the GEMM."""
    cases = _audited(workload)
    impure = [f"{c.backend}/{c.precision} on {c.device}: {', '.join(c.gemm_phase.non_gemm_ops())}"
              for c in cases if c.gemm_phase is not None and c.gemm_phase.non_gemm_ops()]
    assert not impure, "non-GEMM work in the timed gemm phase:\n" + "\n".join(impure)
    # Not vacuous: every FP8 and 4-bit recipe's GEMM phase was audited through the torch backend.
    on_torch = {c.precision for c in cases if c.backend == "torch" and c.gemm_phase is not None}
    wanted = {"fp32", "bf16", "fp8_rowwise", "mxfp8"} if workload == "grouped_gemm" else set(PRECISIONS.names())
    assert wanted <= on_torch, wanted - on_torch


@pytest.mark.slow
@pytest.mark.parametrize("workload", list(AUDIT_SHAPES))
def test_no_timed_region_synchronizes_or_copies_host_memory(workload: str) -> None:
    """What a CUDA graph cannot capture and an eager timing must not contain, in any region of any case."""
    bad = [f"{c.backend}/{c.precision} {region}: {v.describe()}" for c in _audited(workload)
           for region, v in c.violations()]
    assert not bad, "\n".join(bad)
    assert len(_audited(workload)) >= 8, [c.status for c in _matrix(workload)]


@pytest.mark.slow
@pytest.mark.parametrize("workload", list(AUDIT_SHAPES))
def test_four_bit_cases_pass_a_simulated_capture(workload: str) -> None:
    """The E2M1 grid, its midpoints and the Hadamard matrix are built once per device, never copied in a region."""
    four_bit = [c for c in _audited(workload) if c.precision in ("nvfp4", "mxfp4")]
    if workload != "grouped_gemm":  # the grouped kernels take rowwise and MXFP8 only
        assert {(c.backend, c.precision) for c in four_bit} >= {("torch", "nvfp4"), ("torch", "mxfp4"),
                                                                 ("emulated", "nvfp4"), ("emulated", "mxfp4")}
    refusals = [f"{c.backend}/{c.precision}: {r.capture_refusal()}" for c in four_bit for r in c.regions.values()
                if r.capture_refusal()]
    assert not refusals, "\n".join(refusals)


@pytest.mark.parametrize(("precision", "target", "op"), [
    ("fp8_blockwise", "h100-torch2.9", "aten._scaled_mm"), ("mxfp8", "b200-torch2.9", "aten._scaled_mm"),
    ("fp8_blockwise", "h100-torch2.10", "aten._scaled_mm_v2"), ("nvfp4", "b200-torch2.14", "aten._scaled_mm_v2")])
def test_the_gemm_phase_is_the_kernel_alone_through_either_entry_point(precision: str, target: str, op: str) -> None:
    """On torch 2.9 block scales go through torch._scaled_mm, with their own layouts: prepared in quantize too."""
    from fp8bench.verify.cuda_replay import TARGETS

    case = audit_case("gemm", AUDIT_SHAPES["gemm"][0], precision, "torch", targets=(TARGETS[target],))
    assert case.status == "audited" and case.gemm_phase is not None, case.status
    assert set(case.gemm_phase.ops) == {"aten.t", op} and not case.violations(), case.gemm_phase.describe_ops()
