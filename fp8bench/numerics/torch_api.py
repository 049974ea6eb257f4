"""Which scaled-GEMM entry points a torch release has: the installed one, detected, and every supported release,
as recorded from its wheel.

PyTorch exposes FP8 and FP4 GEMMs through a few entry points that arrived in different releases (read from each
release's wheel by ``scripts/torch_surface.py`` into ``fp8bench/numerics/data/torch_surfaces.json``):

* ``torch._scaled_mm(a, b, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum)``: every recorded
  release, 2.4 to 2.14 (``aten._scaled_mm``). The kernel infers the scaling from the scales' dtypes and shapes: FP32
  tensorwise and rowwise everywhere, E8M0 and E4M3 block scales (MXFP8, single-level NVFP4) where the dtypes exist, FP32
  1x128 and 128x128 blocks on CUDA from 2.9;
* ``torch.nn.functional.scaled_mm(mat_a, mat_b, scale_a, scale_recipe_a, scale_b, scale_recipe_b, swizzle_a,
  swizzle_b, ...)`` with the enums ``ScalingType`` and ``SwizzleType`` (``aten._scaled_mm_v2``): from 2.10. It names
  each operand's scaling explicitly and takes lists of scales, which two-level NVFP4 needs;
* ``torch._scaled_grouped_mm`` from 2.7 (meta function from 2.8) and ``torch._grouped_mm`` from 2.8;
* the dtypes ``float8_e8m0fnu`` (2.7) and ``float4_e2m1fn_x2`` (2.8).

fp8bench never parses a version string to choose among them: :func:`detect` asks the installed torch what it has
(``hasattr`` on ``torch`` and ``torch.nn.functional``, the enums' members), and
:func:`fp8bench.hardware.capabilities.scaled_mm_api` picks the entry point from that answer. The recorded surfaces serve
two purposes: the conformance replay judges every call against its target release's surface (the entry point exists,
the arguments bind to that release's signature, the dtypes and enum values exist), and a refusal names the first
release that has what is missing.

``torch>=`` :data:`TORCH_FLOOR` in ``pyproject.toml`` is the oldest release the conformance matrix replays: 2.8 lacks
the FP32 block-scale kernel, ``torch.nn.functional.scaled_mm`` and the MXFP8 grouped GEMM, and older releases lack the
FP4 dtype fp8bench's modules name at import.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache, wraps
from importlib import resources
from typing import Any

import torch

from fp8bench.core.precisions import Granularity

# The oldest torch release fp8bench supports (pyproject.toml's ``torch>=``); tests keep the two equal.
TORCH_FLOOR = (2, 9)

_F = "torch.nn.functional"
# Python names of the scaled-GEMM surface, each an attribute of ``torch`` or ``torch.nn.functional``.
ENTRY_POINTS = ("torch._scaled_mm", "torch._scaled_mm_v2", "torch._scaled_grouped_mm", "torch._scaled_grouped_mm_v2",
                "torch._grouped_mm", f"{_F}.scaled_mm", f"{_F}.scaled_grouped_mm")
ENUM_NAMES = (f"{_F}.ScalingType", f"{_F}.SwizzleType")
DTYPES = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2")
# The dispatcher op behind each ``torch._*`` entry point (what the conformance replay intercepts).
OP_ENTRY_POINTS = {"_scaled_mm": "torch._scaled_mm", "_scaled_mm_v2": "torch._scaled_mm_v2",
                   "_scaled_grouped_mm": "torch._scaled_grouped_mm", "_grouped_mm": "torch._grouped_mm"}


@dataclass(frozen=True)
class Param:
    """One parameter of an entry point, as ``inspect.Parameter`` describes it."""

    name: str
    kind: str  # POSITIONAL_ONLY, POSITIONAL_OR_KEYWORD, VAR_POSITIONAL, KEYWORD_ONLY, VAR_KEYWORD
    has_default: bool


class _Default:
    """A recorded default (its value is not recorded)."""

    def __repr__(self) -> str:
        return "<default>"


_DEFAULT = _Default()


@dataclass(frozen=True)
class TorchSurface:
    """The scaled-GEMM surface of one torch release (see the module docstring)."""

    release: str
    functions: Mapping[str, tuple[Param, ...] | None]  # entry point -> parameters (None: present, not recorded)
    names: frozenset[str]  # other Python names present (the enums)
    enums: Mapping[str, Mapping[str, int]]  # ScalingType / SwizzleType -> member -> value
    dtypes: frozenset[str]
    meta: Mapping[str, str]  # aten op -> digest of its meta function's source (recorded releases only)

    def has(self, name: str) -> bool:
        """Whether the release has the entry point, enum or dtype ``name`` (``torch.float8_e8m0fnu`` for dtypes)."""
        if name.startswith("torch.") and name.removeprefix("torch.") in DTYPES:
            return name.removeprefix("torch.") in self.dtypes
        return name in self.functions or name in self.names

    def signature(self, name: str) -> inspect.Signature | None:
        """The entry point's recorded signature (defaults shown as ``<default>``)."""
        params = self.functions.get(name)
        if params is None:
            return None
        return inspect.Signature([inspect.Parameter(p.name, getattr(inspect.Parameter, p.kind),
                                                    default=_DEFAULT if p.has_default else inspect.Parameter.empty)
                                  for p in params])

    def call_reason(self, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str | None:
        """Why this release would refuse ``name(*args, **kwargs)`` before any kernel runs (``None``: it binds)."""
        if not self.has(name):
            return f"torch {self.release} has no {name}{_since(name)}"
        sig = self.signature(name)
        if sig is None:
            return None
        try:
            sig.bind(*args, **kwargs)
        except TypeError as exc:
            return f"torch {self.release}'s {name}{sig} does not take this call: {exc}"
        return None


def _params(raw: list[list[Any]]) -> tuple[Param, ...]:
    return tuple(Param(str(name), str(kind), bool(default)) for name, kind, default in raw)


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", release))


@cache
def recorded() -> dict[str, TorchSurface]:
    """Every recorded release, oldest first (``fp8bench/numerics/data/torch_surfaces.json``)."""
    raw = json.loads(resources.files("fp8bench.numerics").joinpath("data/torch_surfaces.json").read_text())["releases"]
    out = {}
    for release in sorted(raw, key=_release_key):
        r = raw[release]
        out[release] = TorchSurface(release, {k: _params(v) for k, v in r["functions"].items()}, frozenset(r["names"]),
                                    {k: dict(v) for k, v in r["enums"].items()}, frozenset(r["dtypes"]),
                                    dict(r["meta"]))
    return out


def release_surface(version: tuple[int, ...]) -> TorchSurface:
    """The recorded surface of the release ``version`` names (``(2, 9)``: the newest recorded 2.9.x)."""
    matches = [s for r, s in recorded().items() if _release_key(r)[:len(version)] == tuple(version)]
    if not matches:
        known = ", ".join(recorded())
        raise ValueError(f"no recorded torch surface for {'.'.join(map(str, version))}; recorded: {known} "
                         "(add one with scripts/torch_surface.py)")
    return matches[-1]


def first_release_with(name: str) -> str | None:
    """The oldest recorded release that has ``name``, or ``None``."""
    return next((r for r, s in recorded().items() if s.has(name)), None)


def _since(name: str) -> str:
    first = first_release_with(name)
    return f" (torch {first} and newer have it)" if first else ""


def _lookup(name: str) -> Any:
    module, _, attr = name.rpartition(".")
    return getattr(torch.nn.functional if module == _F else torch, attr, None)


# Bumped whenever :func:`as_release` changes what torch shows, so that :func:`detect` answers again.
_generation = 0
# The release :func:`as_release` makes torch show (``None``: the installed one).
_shown: TorchSurface | None = None


def generation() -> int:
    """A number that changes whenever :func:`as_release` changes what torch shows (a cache key)."""
    return _generation


def detect() -> TorchSurface:
    """The installed torch's surface, by feature: which names exist, and the enums' members. Signatures of
    functions implemented in C are not introspectable, so they are left out (``None``). Inside :func:`as_release`,
    the release it shows."""
    return _shown if _shown is not None else _detect(_generation)


@cache
def _detect(generation: int) -> TorchSurface:
    functions: dict[str, tuple[Param, ...] | None] = {}
    for name in ENTRY_POINTS:
        fn = _lookup(name)
        if fn is None:
            continue
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            functions[name] = None
            continue
        functions[name] = tuple(Param(p.name, p.kind.name, p.default is not inspect.Parameter.empty)
                                for p in sig.parameters.values())
    names = frozenset(n for n in ENUM_NAMES if _lookup(n) is not None)
    enums = {n.rsplit(".", 1)[-1]: {m: int(v) for m, v in _lookup(n).__members__.items()} for n in names}
    dtypes = frozenset(d for d in DTYPES if isinstance(getattr(torch, d, None), torch.dtype))
    return TorchSurface(f"{torch.__version__} (installed)", functions, names, enums, dtypes, {})


def entry_point_name(api: str | None) -> str:
    """The Python spelling of an entry point (``V1``/``V2``), or ``none`` for ``None``."""
    return {V1: "torch._scaled_mm", V2: f"{_F}.scaled_mm"}.get(api or "", "none")


def installed_release() -> TorchSurface | None:
    """The recorded surface of the installed torch's release, if that release is recorded."""
    version = re.match(r"[\d.]+", torch.__version__)
    return recorded().get(version.group(0).rstrip(".")) if version else None


def describe(surface: TorchSurface) -> list[tuple[str, str]]:
    """``(name, present?)`` rows for ``fp8bench doctor``."""
    rows = [(name, "yes" if surface.has(name) else f"no{_since(name)}") for name in (*ENTRY_POINTS, *ENUM_NAMES)]
    rows += [(f"torch.{d}", "yes" if d in surface.dtypes else f"no{_since('torch.' + d)}") for d in DTYPES]
    return rows


# --- which entry point a recipe's GEMM takes ---------------------------------------------------------------------

V1 = "_scaled_mm"  # torch._scaled_mm
V2 = "_scaled_mm_v2"  # torch.nn.functional.scaled_mm


def gemm_entry_point(granularity: Granularity, fp4: bool, surface: TorchSurface) -> str | None:
    """The entry point a scaled GEMM of ``granularity`` (``fp4``: E2M1 operands) takes on a torch with ``surface``,
    or ``None`` when that torch has none:

    * tensorwise and rowwise FP32 scales: ``torch._scaled_mm`` (every release);
    * block scales (1x128/128x128 FP32, MX E8M0, NVFP4): ``torch.nn.functional.scaled_mm`` where it exists, since it
      names each operand's scaling and takes NVFP4's two scale levels;
    * without it, FP8 block scales still go through ``torch._scaled_mm``, which infers them from the scales (FP32
      1x128/128x128 blocks on CUDA from 2.9, ``get_joint_scaling`` in ``aten/src/ATen/native/cuda/Blas.cpp``; E8M0
      MX blocks), but FP4 has no entry point: NVFP4's tensor scale needs the list form, and ``torch._scaled_mm``
      takes packed FP4 with E8M0 scales on ROCm only (``is_blockwise_1x32_scaling``).
    """
    if granularity in (Granularity.TENSORWISE, Granularity.ROWWISE):
        return V1
    if surface.has(f"{_F}.scaled_mm"):
        return V2
    return None if fp4 else V1


def entry_point_reason(what: str, granularity: Granularity, fp4: bool, surface: TorchSurface) -> str | None:
    """Why a torch with ``surface`` has no entry point for ``what``'s GEMMs (``None``: it has one)."""
    if gemm_entry_point(granularity, fp4, surface) is not None:
        return None
    return (f"{what} GEMMs need {_F}.scaled_mm{_since(f'{_F}.scaled_mm')}; torch {surface.release} has only "
            "torch._scaled_mm, which takes no two-level NVFP4 scales and takes MXFP4 on ROCm only")


# --- making the installed torch answer as another release (the conformance replay) ------------------------------

def entry_point(name: str) -> Any:
    """The function behind the entry point ``name`` (``torch._scaled_mm``, ``torch.nn.functional.scaled_mm``...)
    if this torch has it, else ``None``. fp8bench calls scaled GEMMs through this, so that inside
    :func:`as_release` its calls are held to that release: absent there, ``None``; present, a call its recorded
    signature does not bind raises :class:`TypeError` as the release's binding would."""
    surface = detect()
    if not surface.has(name):
        return None
    fn = _lookup(name)
    if _shown is None or not surface.functions.get(name):
        return fn

    @wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        why = surface.call_reason(name, args, kwargs)
        if why:
            raise TypeError(why)
        return fn(*args, **kwargs)

    return checked


@contextlib.contextmanager
def as_release(surface: TorchSurface) -> Iterator[TorchSurface]:
    """Within the block, :func:`detect` answers with ``surface`` and :func:`entry_point` hands out that release's
    entry points only, checked against its signatures. torch's own modules are left untouched (their internals
    import these names), so a call that bypasses :func:`entry_point` is judged where it reaches the dispatcher
    (:class:`fp8bench.verify.cuda_replay.CudaConformance`)."""
    global _generation, _shown
    previous = _shown
    _shown = surface
    _generation += 1
    try:
        yield surface
    finally:
        _shown = previous
        _generation += 1
