"""One rule for errors at every backend's vendor boundary (:func:`fp8bench.core.pipeline.refusals`):

* a documented refusal of the library is ``skipped`` with the library's own message;
* running out of device memory is ``failed: out of memory``, with the allocator's cache emptied and the run going on;
* a CUDA runtime error (an illegal address, a launch failure) is ``failed`` with CUDA's error, never a refusal;
* anything else is ``failed`` with the error.

Each backend is driven to its vendor call and the call raises what the library raises; the backend's own code, the
refusal rule and the runner are the real ones.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from fake_cuda_runtime import ILLEGAL_ADDRESS, LAUNCH_FAILURE, cuda_error

from fp8bench.core.devices import Device
from fp8bench.core.pipeline import BuildContext, Pipeline, Unsupported, refusals
from fp8bench.core.plugins import BACKENDS, Backend, load_all
from fp8bench.core.precisions import RunOptions, resolve_precision
from fp8bench.measure.runner import CaseMeasurer, expand_cases
from fp8bench.measure.settings import EnergySettings, RunSettings, TimingSettings
from fp8bench.measure.timing import SamplingPolicy
from fp8bench.workloads.gemm import GEMM

load_all()
CPU = Device("cpu")
OOM = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.11 GiB total)")


# -- the rule itself --------------------------------------------------------------------------------------------

def test_a_documented_refusal_is_unsupported_with_the_librarys_message():
    refused = pytest.raises(Unsupported, match=r"^lib refused fp8: Invalid scaling configuration\.$")
    with refused, refusals("lib refused fp8", (ValueError,)):
        raise ValueError("Invalid scaling configuration.\nmore detail on the next line")


@pytest.mark.parametrize("errors", [(RuntimeError,), (Exception,)])
def test_out_of_memory_is_never_a_refusal(errors):
    with pytest.raises(torch.cuda.OutOfMemoryError), refusals("lib refused fp8", errors):
        raise OOM


def test_cuda_out_of_memory_reported_as_a_plain_runtime_error_is_out_of_memory_too():
    """Libraries that call CUDA themselves report cudaErrorMemoryAllocation with CUDA's string, 'out of memory'."""
    from fp8bench.core.pipeline import is_out_of_memory

    plain = RuntimeError("CUDA Error: out of memory")
    assert is_out_of_memory(plain) and is_out_of_memory(OOM)
    assert not is_out_of_memory(RuntimeError("CUDA error: an illegal memory access was encountered"))
    with pytest.raises(RuntimeError, match="out of memory"), refusals("lib refused fp8", (RuntimeError,)):
        raise plain


# A kernel's runtime failure as each source reports it: torch 2.8+ (``torch.AcceleratorError``), torch 2.7 and older
# (the same message in a plain RuntimeError), and Transformer Engine's NVTE_CHECK_CUDA (a std::runtime_error through
# pybind11: "<file>:<line> in function <f>: CUDA Error: <cudaGetErrorString>", common/util/logging.h).
CUDA_RUNTIME_ERRORS = {
    "torch>=2.8 illegal address": cuda_error(ILLEGAL_ADDRESS),
    "torch>=2.8 launch failure": cuda_error(LAUNCH_FAILURE),
    "torch<=2.7 illegal address": cuda_error(ILLEGAL_ADDRESS, before_2_8=True),
    "te illegal address": RuntimeError("/opt/te/transformer_engine/common/gemm/cublaslt_gemm.cu:606 in function "
                                       "cublas_gemm: CUDA Error: an illegal memory access was encountered"),
    # Triton's launcher (backends/nvidia/driver.c ``gpuAssert``, in the installed triton 3.9.0 wheel)
    "triton illegal address": RuntimeError("Triton Error [CUDA]: an illegal memory access was encountered"),
}


@pytest.mark.parametrize("error", list(CUDA_RUNTIME_ERRORS.values()), ids=list(CUDA_RUNTIME_ERRORS))
@pytest.mark.parametrize("errors", [(RuntimeError,), (Exception,)])
def test_a_cuda_runtime_error_is_never_a_refusal(errors, error):
    """An illegal address or a launch failure is the kernel breaking, not the library declining the case: it must
    reach the runner as an error (``failed``), whatever types the backend lists as its library's refusals."""
    with pytest.raises(type(error)) as raised, refusals("lib refused fp8", errors):
        raise error
    assert raised.value is error


def test_anything_else_propagates_unchanged():
    with pytest.raises(KeyError), refusals("lib refused fp8", (ValueError, RuntimeError)):
        raise KeyError("scale_b")
    only_scaled_mm = refusals("lib refused fp8", (RuntimeError,), when=lambda e: "scaled_mm" in str(e))
    with pytest.raises(RuntimeError, match="illegal memory access"), only_scaled_mm:  # the predicate rejects it
        raise RuntimeError("CUDA error: an illegal memory access was encountered")


# -- the runner's buckets -----------------------------------------------------------------------------------------

def _backend(name: str, error: BaseException) -> Backend:
    backend = Backend(name=name, kind="custom", description=f"test backend raising {type(error).__name__}")

    @backend.builder("gemm")
    def build(ctx: BuildContext) -> Pipeline:
        with refusals(f"{name} refused {ctx.precision.name}", (ValueError,)):
            raise error

    return backend


@pytest.fixture
def raising_backends():
    made = [_backend("test_oom", OOM), _backend("test_refuses", ValueError("Invalid scaling configuration.")),
            _backend("test_breaks", ZeroDivisionError("division by zero"))]
    for b in made:
        BACKENDS.add(b.name, b)
    yield
    for b in made:
        BACKENDS.remove(b.name)


def test_runner_buckets_and_goes_on_after_out_of_memory(raising_backends, monkeypatch):
    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    settings = RunSettings(device="cpu",
                           timing=TimingSettings(budget_s=5, policy=SamplingPolicy(min_samples=3, min_time_s=0.0),
                                                 warmup_s=0.0),
                           energy=EnergySettings(enabled=False))
    measurer = CaseMeasurer(settings, CPU)
    cases = expand_cases([("gemm", ["32x32x32"])], ["fp32"], ["test_oom", "test_refuses", "test_breaks", "torch"],
                         settings)
    records = {c.backend: measurer.measure(c) for c in cases}
    assert records["test_oom"].status == "failed"
    assert records["test_oom"].reason.startswith("out of memory on cpu: CUDA out of memory. Tried to allocate")
    assert emptied == [True]
    assert (records["test_refuses"].status, records["test_refuses"].reason) == (
        "skipped", "test_refuses refused fp32: Invalid scaling configuration.")
    assert records["test_breaks"].status == "failed"
    assert records["test_breaks"].reason.startswith("ZeroDivisionError: division by zero")
    assert records["torch"].status == "ok"  # the run went on


def test_runner_fails_a_case_whose_kernel_hits_a_cuda_runtime_error():
    backend = Backend(name="test_illegal_address", kind="custom", description="raises a CUDA runtime error")

    @backend.builder("gemm")
    def build(ctx: BuildContext) -> Pipeline:
        with refusals("torch refused fp32", (ValueError, RuntimeError, NotImplementedError, TypeError)):
            raise cuda_error(ILLEGAL_ADDRESS)

    BACKENDS.add(backend.name, backend)
    try:
        settings = RunSettings(device="cpu",
                               timing=TimingSettings(budget_s=5, policy=SamplingPolicy(min_samples=3, min_time_s=0.0),
                                                     warmup_s=0.0),
                               energy=EnergySettings(enabled=False))
        case = expand_cases([("gemm", ["32x32x32"])], ["fp32"], [backend.name], settings)[0]
        record = CaseMeasurer(settings, CPU).measure(case)
    finally:
        BACKENDS.remove(backend.name)
    assert (record.status, record.reason.splitlines()[0]) == (
        "failed", "AcceleratorError: CUDA error: an illegal memory access was encountered")


# -- every backend applies the rule at its vendor call ------------------------------------------------------------

def _gemm_ctx(precision: str, fmt: str = "e4m3", shape: str = "32x32x64") -> BuildContext:
    sh = GEMM.parse_shape(shape)
    return BuildContext("gemm", sh, resolve_precision(precision, RunOptions(fp8_format=fmt)), CPU,
                        GEMM.make_inputs(sh, CPU, seed=0))


def _raiser(error: BaseException):
    def call(*args: Any, **kwargs: Any) -> Any:
        raise error
    return call


def _torch_gemm(monkeypatch, error):
    from fp8bench.kernels import torch_backend
    from fp8bench.numerics.scaled_gemm import ScaledGemm

    monkeypatch.setattr(ScaledGemm, "__call__", _raiser(error))  # the kernel launch
    return torch_backend.build_gemm(_gemm_ctx("fp8_rowwise"))


def _torch_layers(monkeypatch, error):
    from fp8bench.kernels import torch_layers

    def build(ctx: BuildContext, convert: Any) -> Pipeline:
        raise error

    return torch_layers._guarded(build, _gemm_ctx("fp8_rowwise"))


def _torchao_gemm(monkeypatch, error):
    pytest.importorskip("torchao.float8")
    from fp8bench.kernels import torchao_backend

    monkeypatch.setattr(torch, "_scaled_mm", _raiser(error))  # what Float8Linear's forward calls
    return torchao_backend.build_gemm(_gemm_ctx("fp8_rowwise"))


def _triton_gemm(monkeypatch, error):
    from fp8bench.kernels import triton_backend

    if triton_backend.tk.TRITON_IMPORT_ERROR is not None:
        pytest.skip(triton_backend.tk.TRITON_IMPORT_ERROR)
    monkeypatch.setattr(triton_backend.tk, "scaled_mm", _raiser(error))
    return triton_backend.build_gemm(_gemm_ctx("fp8_rowwise"))


def _compiled_gemm(monkeypatch, error):
    from fp8bench.kernels import compiled

    monkeypatch.setattr(compiled, "compile_fn", lambda fn: _raiser(error))
    return compiled.build_gemm(_gemm_ctx("bf16"))


def _te_gemm(monkeypatch, error):
    from fake_te import install

    from fp8bench.kernels import te_backend

    fake = install(monkeypatch)
    monkeypatch.setattr(fake.te.Linear, "forward", _raiser(error))
    return te_backend.build_gemm(_gemm_ctx("fp8_delayed", "hybrid"))


BUILDERS = {"torch gemm": _torch_gemm, "torch layers": _torch_layers, "torchao gemm": _torchao_gemm,
            "triton gemm": _triton_gemm, "compiled gemm": _compiled_gemm, "te gemm": _te_gemm}
# What each library raises to refuse a case (the type its own check uses).
REFUSALS = {"torch gemm": ValueError("Invalid scaling configuration."),
            "torch layers": ValueError("Invalid scaling configuration."),
            "torchao gemm": RuntimeError("torch._scaled_mm is only supported on CUDA devices with compute "
                                         "capability >= 9.0 or 8.9"),
            "triton gemm": ValueError("the Triton FP8 GEMM writes bfloat16 only"),
            "compiled gemm": NotImplementedError("no Inductor lowering"),
            "te gemm": AssertionError("Device compute capability 8.9 or higher required for FP8 execution.")}


@pytest.mark.parametrize("backend", list(BUILDERS))
def test_every_backend_lets_out_of_memory_through(monkeypatch, backend):
    with pytest.raises(torch.cuda.OutOfMemoryError):
        BUILDERS[backend](monkeypatch, OOM)


@pytest.mark.parametrize("backend", list(BUILDERS))
@pytest.mark.parametrize("error", ["torch>=2.8 illegal address", "torch<=2.7 illegal address",
                                   "triton illegal address"])
def test_every_backend_lets_a_cuda_runtime_error_through(monkeypatch, backend, error):
    with pytest.raises(RuntimeError, match="an illegal memory access was encountered") as raised:
        BUILDERS[backend](monkeypatch, CUDA_RUNTIME_ERRORS[error])
    assert not isinstance(raised.value, Unsupported)


@pytest.mark.parametrize("backend", list(BUILDERS))
def test_every_backend_skips_a_documented_refusal_with_the_librarys_message(monkeypatch, backend):
    error = REFUSALS[backend]
    with pytest.raises(Unsupported) as info:
        BUILDERS[backend](monkeypatch, error)
    assert str(error).splitlines()[0] in str(info.value)


def test_torch_layers_refuse_what_aten_refuses_with_a_value_error():
    """ATen refuses MX block scales on the CPU with a ``ValueError`` (TORCH_CHECK_VALUE: "Invalid scaling
    configuration." or, for swizzled scales, "CPU does not support swizzle."): the layer workloads skip the case
    with ATen's message instead of failing it."""
    from fp8bench.kernels import torch_layers
    from fp8bench.workloads.attention import ATTENTION

    shape = ATTENTION.parse_shape("b=1,h=2,s=32,d=32")
    ctx = BuildContext("attention", shape, resolve_precision("mxfp8"), CPU, ATTENTION.make_inputs(shape, CPU, seed=0))
    assert torch_layers.layer_support(ctx.precision, CPU)  # the runner asks the capability matrix first; the
    # builder is called here directly so that the kernel's own refusal is what is tested
    with pytest.raises(Unsupported) as refused:
        torch_layers.build_attention(ctx)
    cause = refused.value.__cause__
    assert isinstance(cause, ValueError)
    assert str(refused.value) == f"torch refused mxfp8 on cpu: {str(cause).splitlines()[0]}"
