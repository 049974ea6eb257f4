"""CUDA conformance without a GPU: every scaled GEMM fp8bench issues, replayed against CUDA's rules on the CPU.

A scaled GEMM that CUDA refuses only fails on a GPU, so a suite run on CPU machines could accept a call that the
first H100 rejects. Two sources of truth close that gap:

1. **PyTorch's meta functions.** ``torch._scaled_mm`` and ``torch.nn.functional.scaled_mm`` (which dispatches to
   ``aten._scaled_mm_v2``) have meta implementations that check what CUDA checks about layouts and shapes:
   ``a`` row-major and ``b`` column-major, dimensions multiple of 16, the scale dtypes, shapes and strides of each
   scaling type, and the swizzle of block scales. The CPU build of torch creates *fake* CUDA tensors under
   ``FakeTensorMode``, and calling the op on them runs exactly those checks. Fake tensors carry shape, stride and
   dtype only, so the real computation runs on small CPU tensors and each scaled GEMM's arguments are replayed as
   fakes (``torch.empty_strided(shape, stride, dtype, device="cuda")``).
2. **The rules the meta functions lack** (architecture, CUDA and torch versions, operand dtypes per kernel, output
   dtypes): :data:`fp8bench.hardware.capabilities.SCALED_GEMM_RULES`, each with the CUDA source that enforces it, judged
   against a :class:`~fp8bench.hardware.capabilities.CudaTarget` (an H100 with CUDA 12.9, a B200, an L4 ...).

The MoE grouped GEMM ``torch._scaled_grouped_mm`` is replayed the same way (its meta function checks int32 offsets,
column-major ``mat_b``, 16-byte strides and the rowwise or MX scale shapes), and judged by its own kernels' rules,
:data:`fp8bench.hardware.grouped_rules.GROUPED_RULES`: architecture, BF16 output, ``N`` multiple of 16, and the
alignment of the group offsets, whose *values* the replay reads from the real CPU tensor. (``torch.nn.functional
.scaled_grouped_mm``'s op, ``_scaled_grouped_mm_v2``, has no meta function in torch 2.13, so fp8bench calls
``torch._scaled_grouped_mm``.)

:class:`CudaConformance` is a ``TorchDispatchMode``: torch's dispatcher is the one interception point, so every
caller is covered (fp8bench's :mod:`fp8bench.numerics.scaled_gemm` and FP8 linear layer, and vendor libraries such as
torchao that call ``torch._scaled_mm`` themselves). For each scaled GEMM it records the call, replays it on fake
CUDA tensors, applies the rules, and then behaves like the target GPU would: a refused call raises the error type
PyTorch raises (``RuntimeError`` from a meta check, ``NotImplementedError`` for an architecture, ``ValueError`` for
a dtype rule), an accepted one returns zeros of the output's shape and dtype (the values are not the point, and no
slow CPU kernel runs). Everything else runs on the CPU as usual.

:func:`emulating` also makes :func:`fp8bench.hardware.capabilities.capabilities_for` answer for the target, so backends'
support checks, builders and the replay all see one simulated GPU.

What this cannot see: code that Inductor generates (under a dispatch mode Dynamo runs the eager path, so the
``compiled`` backend's calls are checked as its Python code builds them, not with strides Inductor might pick),
kernels that do not go through PyTorch's scaled-GEMM ops (Transformer Engine's own cuBLAS calls, Triton kernels),
numerical results, and anything about a real GPU's speed.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from fp8bench.hardware import capabilities
from fp8bench.hardware.capabilities import (
    CudaTarget,
    ScaledGemmSpec,
    ScaleLayout,
    parse_version,
    scaled_gemm_reason,
)
from fp8bench.hardware.grouped_rules import ARCH_RULES as GROUPED_ARCH_RULES
from fp8bench.hardware.grouped_rules import GROUPED_RULES, GroupedGemmSpec, grouped_gemm_reason
from fp8bench.numerics import torch_api

if TYPE_CHECKING:
    from fp8bench.core.precisions import Precision

_aten = torch.ops.aten
# The dispatcher ops behind torch._scaled_mm, torch.nn.functional.scaled_mm and torch._scaled_grouped_mm.
SCALED_GEMM_OPS = {_aten._scaled_mm.default: "_scaled_mm", _aten._scaled_mm_v2.default: "_scaled_mm_v2",
                   _aten._scaled_grouped_mm.default: "_scaled_grouped_mm"}
# Grouped ops are judged by fp8bench.hardware.grouped_rules (their own kernels' rules) instead of SCALED_GEMM_RULES.
GROUPED_OPS = ("_scaled_grouped_mm",)

# ``ScalingType`` values of aten._scaled_mm_v2 (torch.nn.functional.ScalingType) and the layouts they name.
_V2_LAYOUTS = {0: ScaleLayout.TENSORWISE, 1: ScaleLayout.ROWWISE, 2: ScaleLayout.NV_1X16,
               3: ScaleLayout.MX_1X32, 4: ScaleLayout.BLOCK_1X128, 5: ScaleLayout.BLOCK_128X128}

# Frames of these packages are the call sites worth naming (fp8bench's own code, its kernels and workloads, and the
# vendor libraries it drives); the funnel every fp8bench call goes through is skipped, so a site names who asked.
_SITE_ROOTS = ("fp8bench", "torchao")
_FUNNELS = ("cuda_replay.py", "scaled_gemm.py", "torch_api.py")
# The FP8 layer's one GEMM call: its caller is the forward or backward.
_FUNNEL_FUNCTIONS = {("fp8_linear.py", "matmul")}


@dataclass(frozen=True)
class TensorMeta:
    """What a fake tensor needs: shape, stride and dtype."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    @classmethod
    def of(cls, t: torch.Tensor) -> TensorMeta:
        return cls(tuple(t.shape), tuple(t.stride()), t.dtype)

    def fake_cuda(self) -> torch.Tensor:
        """An empty CUDA tensor with this layout; call inside ``FakeTensorMode``."""
        return torch.empty_strided(self.shape, self.stride, dtype=self.dtype, device="cuda")

    def __str__(self) -> str:
        return f"{str(self.dtype).removeprefix('torch.')}{list(self.shape)} stride {list(self.stride)}"


def _meta_tree(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return TensorMeta.of(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_meta_tree(v) for v in value)
    return value


def _fake_tree(value: Any) -> Any:
    if isinstance(value, TensorMeta):
        return value.fake_cuda()
    if isinstance(value, (list, tuple)):
        return type(value)(_fake_tree(v) for v in value)
    return value


def _bind(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The op's arguments by schema name (positional ones named, defaults filled in)."""
    bound: dict[str, Any] = {}
    for i, arg in enumerate(op._schema.arguments):
        if i < len(args):
            bound[arg.name] = args[i]
        elif arg.name in kwargs:
            bound[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
    return bound


def _v1_layout(scale: TensorMeta, rows: int, k: int) -> ScaleLayout:
    """How ``torch._scaled_mm`` reads a scale of an operand with ``rows`` rows and reduction length ``k``."""
    if scale.dtype == torch.float8_e8m0fnu:
        return ScaleLayout.MX_1X32
    if scale.dtype == torch.float8_e4m3fn:
        return ScaleLayout.NV_1X16  # single-level NVFP4 (E4M3 block scales, no tensor scale)
    n = 1
    for d in scale.shape:
        n *= d
    if n == 1:
        return ScaleLayout.TENSORWISE
    if scale.shape == (rows, 1) or scale.shape == (1, rows):
        return ScaleLayout.ROWWISE
    if len(scale.shape) == 2 and -(-rows // 128) in scale.shape and rows not in scale.shape:
        return ScaleLayout.BLOCK_128X128
    return ScaleLayout.BLOCK_1X128


def _grouped_layout(scale: TensorMeta, rows: int) -> ScaleLayout:
    """How ``torch._scaled_grouped_mm`` reads a scale (``infer_scaling_type`` in ATen's grouped GEMM): E8M0 is
    MX; FP32 with one value per row of the operand (``[M]`` for a 2-D ``A``, ``[G, N]`` for a 3-D ``B``) is
    rowwise. Anything else has no grouped kernel in this release."""
    if scale.dtype == torch.float8_e8m0fnu:
        return ScaleLayout.MX_1X32
    if scale.dtype == torch.float32 and scale.shape[-1] == rows:
        return ScaleLayout.ROWWISE
    raise ValueError(f"grouped scale {scale} matches no grouped kernel (rowwise FP32 or MX E8M0)")


def grouped_spec(bound: dict[str, Any], offsets: tuple[int, ...] | None) -> GroupedGemmSpec:
    """The :class:`GroupedGemmSpec` of one recorded ``_scaled_grouped_mm`` call: ``A`` ``[M, K]``, ``B``
    ``[G, K, N]``; the output defaults to BF16, as ATen's does."""
    a, b = bound["self"], bound["mat2"]
    m, k = a.shape[-2], a.shape[-1]
    n = b.shape[-1]
    out = bound.get("out_dtype") or torch.bfloat16
    gemm = ScaledGemmSpec(a.dtype, b.dtype, _grouped_layout(bound["scale_a"], m),
                          _grouped_layout(bound["scale_b"], n), out, bool(bound.get("use_fast_accum", False)))
    return GroupedGemmSpec(gemm, n, k, offsets)


def gemm_spec(op_name: str, bound: dict[str, Any]) -> ScaledGemmSpec:
    """The :class:`ScaledGemmSpec` of one recorded call (its arguments as :class:`TensorMeta`)."""
    a, b = bound["self"], bound["mat2"]
    m, k = a.shape
    n = b.shape[1]
    out = bound.get("out_dtype") or a.dtype
    if op_name == "_scaled_mm":
        layout_a = _v1_layout(bound["scale_a"], m, k)
        layout_b = _v1_layout(bound["scale_b"], n, k)
    else:  # aten::_scaled_mm_v2(self, mat2, scale_a[], recipe_a[], swizzle_a[], scale_b[], recipe_b[], ...)
        layout_a = _V2_LAYOUTS[int(bound["recipe_a"][0])]
        layout_b = _V2_LAYOUTS[int(bound["recipe_b"][0])]
    return ScaledGemmSpec(a.dtype, b.dtype, layout_a, layout_b, out, bool(bound.get("use_fast_accum", False)),
                          op_name)


def release_reason(op_name: str, bound: dict[str, Any], surface: torch_api.TorchSurface) -> str | None:
    """Why the torch release of ``surface`` cannot make this dispatched call: its op, a dtype or a ``ScalingType``
    / ``SwizzleType`` value it lacks (a call's Python arguments are checked where it is made,
    :func:`fp8bench.numerics.torch_api.as_release`)."""
    entry = torch_api.OP_ENTRY_POINTS.get(op_name, f"torch.{op_name}")
    if not surface.has(entry):
        return f"torch {surface.release} has no {entry} (aten.{op_name})"
    for value in _leaves(bound):
        if isinstance(value, TensorMeta):
            name = str(value.dtype).removeprefix("torch.")
            if name in torch_api.DTYPES and name not in surface.dtypes:
                return f"torch {surface.release} has no dtype torch.{name}"
    for arg, enum in (("recipe_a", "ScalingType"), ("recipe_b", "ScalingType"), ("swizzle_a", "SwizzleType"),
                      ("swizzle_b", "SwizzleType")):
        known = set(surface.enums.get(enum, {}).values())
        unknown = [int(v) for v in bound.get(arg) or () if int(v) not in known]
        if unknown:
            return f"torch {surface.release}'s {enum} has no value {unknown[0]} (members: {surface.enums.get(enum)})"
    return None


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


_MX_1X32 = 3  # ScalingType.BlockWise1x32 (at::blas::ScalingType in ATen/BlasBackend.h)
_SWIZZLE_32_4_4 = 1  # SwizzleType.SWIZZLE_32_4_4


def _is_mxfp4_v2(op_name: str, bound: dict[str, Any]) -> bool:
    return (op_name == "_scaled_mm_v2" and bound["self"].dtype == torch.float4_e2m1fn_x2
            and [int(v) for v in bound.get("recipe_a") or ()] == [_MX_1X32])


def mxfp4_layout_reason(bound: dict[str, Any]) -> str | None:
    """CUDA's layout rule for MXFP4 through ``F.scaled_mm`` (``ScaledBlas.cpp``: ``_scaled_mxfp4_mxfp4``): E8M0 scales,
    contiguous, ``SWIZZLE_32_4_4``, counted on the *unpacked* K (two FP4 values per byte): ``round_up(M, 128) *
    round_up(ceil(2*K_packed / 32), 4)`` for ``a``, ``round_up(N, 128) * ...`` for ``b``.

    The installed meta function (torch 2.10 to 2.13, ``_check_scaled_mm_sizes_v2``) counts the packed K and would
    refuse the layout CUDA takes, so the replay checks these rules itself and the meta function the rest."""
    a, b = bound["self"], bound["mat2"]
    k = 2 * a.shape[1]
    need_a = _round_up(a.shape[0], 128) * _round_up(-(-k // 32), 4)
    need_b = _round_up(b.shape[1], 128) * _round_up(-(-k // 32), 4)
    sa, sb = bound["scale_a"][0], bound["scale_b"][0]
    for name, scale, need in (("scale_a", sa, need_a), ("scale_b", sb, need_b)):
        numel = 1
        for d in scale.shape:
            numel *= d
        if scale.dtype != torch.float8_e8m0fnu or numel != need:
            return f"MXFP4 {name} must be {need} float8_e8m0fnu scales, got {scale}"
        if list(scale.stride) != [_contiguous_stride(scale.shape, i) for i in range(len(scale.shape))]:
            return f"MXFP4 {name} must be contiguous, got {scale}"
    swizzles = [int(v) for v in (bound.get("swizzle_a") or [])] + [int(v) for v in (bound.get("swizzle_b") or [])]
    if swizzles != [_SWIZZLE_32_4_4, _SWIZZLE_32_4_4]:
        return f"MXFP4 scales must be swizzled SWIZZLE_32_4_4, got {swizzles}"
    return None


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _contiguous_stride(shape: tuple[int, ...], dim: int) -> int:
    stride = 1
    for d in shape[dim + 1:]:
        stride *= d
    return stride


def _meta_counted_mx_scales(bound: dict[str, Any]) -> dict[str, Any]:
    """The call with its (CUDA-checked) MXFP4 scales replaced by contiguous ones of the count the installed meta
    function expects, so that it checks everything else (operand layouts, dimensions, swizzle)."""
    a, b = bound["self"], bound["mat2"]
    kb = _round_up(-(-a.shape[1] // 32), 4)
    fixed = dict(bound)
    for key, rows in (("scale_a", a.shape[0]), ("scale_b", b.shape[1])):
        n = _round_up(rows, 128) * kb
        fixed[key] = [TensorMeta((n,), (1,), torch.float8_e8m0fnu), *bound[key][1:]]
    return fixed


def _call_site() -> str:
    """The innermost frame of fp8bench (or a vendor library) that asked for this GEMM: ``file.py:line in function``."""
    frame = sys._getframe(1)
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        name = Path(frame.f_code.co_filename).name
        if module.split(".")[0] in _SITE_ROOTS and name not in _FUNNELS \
                and (name, frame.f_code.co_name) not in _FUNNEL_FUNCTIONS:
            return f"{name}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back  # type: ignore[assignment]
    return "unknown"


@dataclass
class ReplayedCall:
    """One scaled GEMM: where it came from, its arguments, and whether the target CUDA device accepts it."""

    op: str
    site: str
    args: dict[str, Any]
    spec: ScaledGemmSpec | None
    refusal: str | None = None  # why the target refuses it (a meta check's message or a rule's)
    refused_by: str | None = None  # "meta" or the name of the rule
    grouped: GroupedGemmSpec | None = None  # grouped GEMMs: dimensions and group offsets as well

    @property
    def accepted(self) -> bool:
        return self.refusal is None

    def describe(self) -> str:
        tensors = ", ".join(f"{k}={v}" for k, v in self.args.items() if isinstance(v, TensorMeta))
        what = self.grouped.describe() if self.grouped else self.spec.describe() if self.spec else self.op
        verdict = "accepted" if self.accepted else f"REFUSED by {self.refused_by}: {self.refusal}"
        return f"{self.op} at {self.site}: {what} [{tensors}] -> {verdict}"


class CudaRefusal(RuntimeError):
    """Raised where CUDA would raise; ``call`` says which call and why. Subclasses carry torch's error types."""

    def __init__(self, call: ReplayedCall) -> None:
        super().__init__(f"CUDA would refuse {call.describe()}")
        self.call = call


class CudaReleaseRefusal(CudaRefusal, TypeError):
    """A call the target's torch release does not have or does not take (torch raises ``AttributeError`` or
    ``TypeError`` for these, before any kernel)."""


class CudaArchRefusal(CudaRefusal, NotImplementedError):
    """An architecture or library-version rule (torch raises ``NotImplementedError`` for these)."""


class CudaValueRefusal(CudaRefusal, ValueError):
    """A dtype or value rule (torch raises ``ValueError`` for these)."""


_GROUPED_RULE_NAMES = frozenset(rule.name for rule in GROUPED_RULES)
_ARCH_RULES = ("architecture", "1x128/128x128 blocks", "MXFP8", "FP4", "MXFP4 entry point")


class CudaConformance(TorchDispatchMode):
    """Replays every scaled GEMM on fake CUDA tensors for ``target`` and acts as that GPU would (see module doc)."""

    def __init__(self, target: CudaTarget) -> None:
        super().__init__()
        self.target = target
        self.surface = torch_api.release_surface(target.torch)  # a target's torch is a recorded release
        self.calls: list[ReplayedCall] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func not in SCALED_GEMM_OPS:
            if any(t is not torch.Tensor and t is not torch.nn.Parameter for t in types):
                # A tensor subclass (torchao's FP8 tensors) implements this op itself and calls the scaled GEMM
                # from inside; handing the op back lets its __torch_dispatch__ run with this mode still active.
                return NotImplemented
            return func(*args, **kwargs)
        op_name = SCALED_GEMM_OPS[func]
        raw = _bind(func, args, kwargs)
        bound = {k: _meta_tree(v) for k, v in raw.items()}
        call = ReplayedCall(op_name, _call_site(), bound, None)
        self.calls.append(call)
        why = release_reason(op_name, bound, self.surface)
        if why:
            call.refusal, call.refused_by = why, f"torch {self.surface.release}"
            raise CudaReleaseRefusal(call)
        out = self._replay_meta(func, bound, call)
        if op_name in GROUPED_OPS:
            # The offsets' values are real here (a fake tensor has none): the group-alignment rule reads them.
            offs = raw.get("offs")
            self._judge_grouped(call, bound, tuple(offs.tolist()) if isinstance(offs, torch.Tensor) else None)
            assert out is not None
            return torch.zeros(out.shape, dtype=out.dtype, device=args[0].device)
        try:
            call.spec = gemm_spec(op_name, bound)
        except (KeyError, ValueError) as exc:  # a scaling type the rules do not know: refuse, naming it
            call.refusal, call.refused_by = f"unclassified scaled GEMM: {exc}", "fp8bench"
            raise CudaRefusal(call) from exc
        why = scaled_gemm_reason(call.spec, self.target)
        if why:
            call.refusal = why
            call.refused_by = next(r.name for r in capabilities.SCALED_GEMM_RULES if r.check(call.spec, self.target))
            raise (CudaArchRefusal if call.refused_by in _ARCH_RULES else CudaValueRefusal)(call)
        assert out is not None
        return torch.zeros(out.shape, dtype=out.dtype, device=args[0].device)

    def _judge_grouped(self, call: ReplayedCall, bound: dict[str, Any], offsets: tuple[int, ...] | None) -> None:
        """Apply :data:`fp8bench.hardware.grouped_rules.GROUPED_RULES`; raise as CUDA would when one refuses."""
        try:
            call.grouped = grouped_spec(bound, offsets)
        except (KeyError, ValueError) as exc:
            call.refusal, call.refused_by = f"unclassified grouped GEMM: {exc}", "fp8bench"
            raise CudaRefusal(call) from exc
        call.spec = call.grouped.gemm
        found = grouped_gemm_reason(call.grouped, self.target)
        if found:
            call.refused_by, call.refusal = found
            raise (CudaArchRefusal if call.refused_by in GROUPED_ARCH_RULES else CudaValueRefusal)(call)

    @staticmethod
    def _replay_meta(func: Any, bound: dict[str, Any], call: ReplayedCall) -> Any:
        """Run the op's meta function on fake CUDA tensors; return the (fake) output, or raise as CUDA would."""
        if _is_mxfp4_v2(call.op, bound):
            why = mxfp4_layout_reason(bound)
            if why:
                call.refusal, call.refused_by = why, "MXFP4 layout"
                raise CudaValueRefusal(call)
            bound = _meta_counted_mx_scales(bound)
        # No torch-function mode (an audit's, say) may touch the fakes: they must stay CUDA tensors.
        with torch._C.DisableTorchFunction(), FakeTensorMode():
            positional, keywords = [], {}
            for arg in func._schema.arguments:
                if arg.name in bound:
                    value = _fake_tree(bound[arg.name])
                    if arg.kwarg_only:
                        keywords[arg.name] = value
                    else:
                        positional.append(value)
            try:
                return func(*positional, **keywords)
            except (RuntimeError, ValueError, NotImplementedError, TypeError) as exc:
                call.refusal, call.refused_by = str(exc).strip().splitlines()[0], "meta"
                raise CudaRefusal(call) from exc


@dataclass
class Emulation:
    """What :func:`emulating` yields: the target and every scaled GEMM replayed so far."""

    target: CudaTarget
    mode: CudaConformance = field(repr=False)

    @property
    def calls(self) -> list[ReplayedCall]:
        return self.mode.calls


@contextlib.contextmanager
def emulating(target: CudaTarget) -> Iterator[Emulation]:
    """Within the block, scaled GEMMs are judged as ``target`` would judge them, and the capability matrix
    answers for ``target`` whenever a CUDA device is asked about (its support checks and refusals)."""
    mode = CudaConformance(target)
    with capabilities.simulated_cuda_target(target), torch_api.as_release(mode.surface), mode:
        yield Emulation(target, mode)


@dataclass
class CaseReplay:
    """One case replayed for one target: fp8bench's own verdict, the calls, and what the build raised."""

    target: CudaTarget
    skip_reason: str | None  # why fp8bench skips the case on the target (None: it runs it)
    calls: list[ReplayedCall]
    error: BaseException | None  # the build's refusal, if the replay refused a call

    @property
    def conforms(self) -> bool:
        """A case fp8bench runs issues scaled GEMMs and the target accepts every one."""
        return self.skip_reason is None and self.error is None and all(c.accepted for c in self.calls)

    @property
    def refused(self) -> bool:
        return self.error is not None or any(not c.accepted for c in self.calls)

    @property
    def refused_by_builder(self) -> bool:
        """Every refusal is a grouped-kernel rule, which the ``grouped_gemm`` builder applies itself before calling
        on a GPU (``kernels/torch_grouped.py``; on the CPU tensors of the replay it leaves the call to be refused
        here): on the target the case is skipped, not run."""
        refused = [c for c in self.calls if not c.accepted]
        return bool(refused) and all(c.grouped is not None and c.refused_by in _GROUPED_RULE_NAMES for c in refused)


def replay_case(workload: str, shape_text: str, precision: Precision, backend: str, target: CudaTarget,
                builder_backend: str | None = None) -> CaseReplay:
    """Build one case on CPU tensors as if on ``target``: its skip verdict there, and every scaled GEMM replayed.

    A case fp8bench skips is still built (with ``builder_backend``, default: the ``torch`` backend, which issues
    the same scaled GEMMs as the others that go through :mod:`fp8bench.numerics.scaled_gemm`), so that a refusal can be
    confirmed as one CUDA really makes.
    """
    from fp8bench.core.devices import Device
    from fp8bench.core.pipeline import BuildContext, Unsupported
    from fp8bench.core.plugins import BACKENDS, WORKLOADS, load_all

    load_all()
    cpu = Device("cpu")
    wl = WORKLOADS.get(workload)
    shape = wl.parse_shape(shape_text)
    inputs = wl.make_inputs(shape, cpu, 0)
    error: BaseException | None = None
    with emulating(target) as emulation:
        why = BACKENDS.get(backend).unsupported_reason(workload, precision, Device("cuda", 0))
        why = why or wl.shape_reason(shape, precision)
        build_with = backend if why is None else (builder_backend or "torch")
        try:
            BACKENDS.get(build_with).build(BuildContext(workload, shape, precision, cpu, inputs))
        except (Unsupported, CudaRefusal) as exc:
            error = exc
        except (NotImplementedError, RuntimeError, ValueError) as exc:
            if why is None:
                raise
            error = exc
    return CaseReplay(target, why, list(emulation.calls), error)


# Devices the conformance tests judge every call site against: the first GPUs users bring, an H100 (Hopper: FP32
# block scales) and a B200 (Blackwell: MX and FP4) on every supported torch release with the CUDA 12.9 toolkit, plus
# older toolkits and GPUs (CUDA 12.4 predates cuBLASLt's block scales; an L4 is Ada, an A100 has no FP8).
def _release_targets() -> dict[str, CudaTarget]:
    targets = {}
    for release in torch_api.recorded():
        version = parse_version(release)[:2]
        if version < torch_api.TORCH_FLOOR:
            continue
        tag = ".".join(map(str, version))
        targets[f"h100-torch{tag}"] = CudaTarget("NVIDIA H100 80GB HBM3", (9, 0), (12, 9), version)
        targets[f"b200-torch{tag}"] = CudaTarget("NVIDIA B200", (10, 0), (12, 9), version)
    return targets


TARGETS: dict[str, CudaTarget] = {
    **_release_targets(),
    "h100-cuda12.4-torch2.9": CudaTarget("NVIDIA H100 80GB HBM3", (9, 0), (12, 4), (2, 9)),
    "l4-cuda12.4": CudaTarget("NVIDIA L4", (8, 9), (12, 4), (2, 13)),
    "a100-cuda12.4": CudaTarget("NVIDIA A100-SXM4-80GB", (8, 0), (12, 4), (2, 13)),
}
