"""The scaled-GEMM API of every supported torch release: the surfaces recorded from the released wheels
(``fp8bench/numerics/data/torch_surfaces.json``, written by ``scripts/torch_surface.py``), feature detection on the
installed torch, and the installed torch made to look like another release for the conformance replay.

Only one torch installs here (2.13), so a call that an older release lacks passes every other test; these checks are
what keep the project's claim of ``torch>=2.9`` honest (the defect they catch: ``torch.nn.functional.scaled_mm``,
``ScalingType`` and ``SwizzleType`` used on torch 2.9, which has none of them).
"""

from __future__ import annotations

import importlib.util
import re
import zipfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from fp8bench.hardware.capabilities import parse_version
from fp8bench.numerics import torch_api
from fp8bench.verify.cuda_replay import TARGETS

ROOT = Path(__file__).resolve().parent.parent
F_SCALED_MM = "torch.nn.functional.scaled_mm"


def _minor_releases() -> list[tuple[int, ...]]:
    return sorted({parse_version(r)[:2] for r in torch_api.recorded()})


def test_pyproject_floor_is_the_floor_the_conformance_matrix_replays() -> None:
    floors = re.findall(r'"torch>=([0-9.]+)"', (ROOT / "pyproject.toml").read_text())
    assert floors == [".".join(map(str, torch_api.TORCH_FLOOR))], floors
    replayed = {t.torch for t in TARGETS.values()}
    supported = [v for v in _minor_releases() if v >= torch_api.TORCH_FLOOR]
    assert supported[0] == torch_api.TORCH_FLOOR and set(supported) <= replayed, (supported, replayed)
    # Every minor release from the floor to the newest recorded one is recorded: no gap a call could hide in.
    assert supported == [(2, m) for m in range(supported[0][1], supported[-1][1] + 1)]


def test_detection_on_the_installed_torch_matches_its_recorded_wheel() -> None:
    """The script's reading of a wheel and live feature detection agree on the release installed here."""
    installed = torch_api.detect()
    recorded = torch_api.release_surface(parse_version(torch.__version__)[:2])
    assert set(installed.functions) == set(recorded.functions)
    assert (installed.names, installed.enums, installed.dtypes) == (recorded.names, recorded.enums, recorded.dtypes)


def test_the_recorded_surfaces_hold_the_release_boundaries() -> None:
    old, new = torch_api.release_surface((2, 9)), torch_api.release_surface((2, 10))
    for name in (F_SCALED_MM, "torch.nn.functional.ScalingType", "torch.nn.functional.SwizzleType",
                 "torch._scaled_mm_v2"):
        assert not old.has(name) and new.has(name), name
        assert torch_api.first_release_with(name) == "2.10.0"
    assert old.has("torch._scaled_mm") and old.has("torch._scaled_grouped_mm") and old.has("torch.float4_e2m1fn_x2")
    assert new.enums["ScalingType"]["BlockWise1x32"] == 3 and new.enums["SwizzleType"]["SWIZZLE_32_4_4"] == 1
    assert [p.name for p in new.functions[F_SCALED_MM]][:6] == ["mat_a", "mat_b", "scale_a", "scale_recipe_a",
                                                                "scale_b", "scale_recipe_b"]
    assert "out_dtype" in {p.name for p in old.functions["torch._scaled_mm"]}


def test_entry_points_follow_what_the_torch_has() -> None:
    from fp8bench.core.precisions import Granularity

    old, new = torch_api.release_surface((2, 9)), torch_api.release_surface((2, 13))
    assert torch_api.gemm_entry_point(Granularity.BLOCKWISE, False, old) == torch_api.V1
    assert torch_api.gemm_entry_point(Granularity.BLOCKWISE, False, new) == torch_api.V2
    assert torch_api.gemm_entry_point(Granularity.ROWWISE, False, new) == torch_api.V1
    assert torch_api.gemm_entry_point(Granularity.MX, True, old) is None
    why = torch_api.entry_point_reason("mxfp4", Granularity.MX, True, old)
    assert why and "torch 2.10.0 and newer" in why and "2.9.1" in why


def test_as_release_answers_for_the_release_and_restores_the_installed_one() -> None:
    with torch_api.as_release(torch_api.release_surface((2, 9))):
        assert not torch_api.detect().has(F_SCALED_MM) and torch_api.entry_point(F_SCALED_MM) is None
        assert torch_api.entry_point("torch._scaled_mm") is not None
        assert hasattr(F, "scaled_mm")  # torch's own modules stay whole: its internals import these names
    assert torch_api.detect().has(F_SCALED_MM) and torch_api.entry_point(F_SCALED_MM) is F.scaled_mm


def test_as_release_refuses_a_call_its_signature_does_not_take() -> None:
    a = torch.zeros(16, 32, dtype=torch.float8_e4m3fn)
    with torch_api.as_release(torch_api.release_surface((2, 10))), \
            pytest.raises(TypeError, match=r"torch 2\.10\.0's torch\.nn\.functional\.scaled_mm.*'out_dtype'"):
        torch_api.entry_point(F_SCALED_MM)(a, a.t(), torch.ones(()), F.ScalingType.TensorWise, torch.ones(()),
                                           F.ScalingType.TensorWise, out_dtype=torch.bfloat16)  # it is output_dtype


def test_doctor_rows_say_what_is_missing_and_since_when() -> None:
    rows = dict(torch_api.describe(torch_api.release_surface((2, 9))))
    assert rows[F_SCALED_MM] == "no (torch 2.10.0 and newer have it)"
    assert rows["torch._scaled_mm"] == "yes"


def _script():
    spec = importlib.util.spec_from_file_location("torch_surface_script", ROOT / "scripts" / "torch_surface.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_surface_script_reads_a_wheels_stubs_headers_and_meta_functions(tmp_path: Path) -> None:
    """A miniature wheel with the five files the script reads: each fact comes out as recorded."""
    files = {
        "torch/version.py": "__version__ = '9.9.0'\n",
        "torch/_C/_VariableFunctions.pyi": ("def _scaled_mm(input: Tensor, mat2: Tensor, scale_a: Tensor, "
                                            "bias: Tensor | None = None, *, out: Tensor | None = None) -> Tensor: ...\n"
                                            "def unrelated(x: Tensor) -> Tensor: ...\n"),
        "torch/nn/functional.py": ("from torch._C import _ScalingType as ScalingType\n"
                                   "def scaled_mm(mat_a, mat_b, scale_a, scale_recipe_a, swizzle_a=None):\n"
                                   "    pass\n"),
        "torch/include/ATen/BlasBackend.h": ("enum class ScalingType : std::uint8_t {\n  TensorWise, // fp32\n"
                                             "  RowWise,\n  BlockWise1x32 = 5,\n};\n"),
        "torch/_C/__init__.pyi": "float8_e4m3fn: dtype = ...\nfloat4_e2m1fn_x2: dtype = ...\n",
        "torch/_meta_registrations.py": ("@register_meta([aten._scaled_mm.default])\ndef meta_scaled_mm(a):\n"
                                         "    return _check_scaled_mm_sizes(a)\n"
                                         "def _check_scaled_mm_sizes(a):\n    return a\n"),
    }
    wheel = tmp_path / "torch-9.9.0-cp312-none-macosx_14_0_arm64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    found = _script().surface(wheel)
    assert found["version"] == "9.9.0"
    assert found["functions"] == {
        "torch._scaled_mm": [["input", "POSITIONAL_OR_KEYWORD", False], ["mat2", "POSITIONAL_OR_KEYWORD", False],
                             ["scale_a", "POSITIONAL_OR_KEYWORD", False], ["bias", "POSITIONAL_OR_KEYWORD", True],
                             ["out", "KEYWORD_ONLY", True]],
        "torch.nn.functional.scaled_mm": [["mat_a", "POSITIONAL_OR_KEYWORD", False],
                                          ["mat_b", "POSITIONAL_OR_KEYWORD", False],
                                          ["scale_a", "POSITIONAL_OR_KEYWORD", False],
                                          ["scale_recipe_a", "POSITIONAL_OR_KEYWORD", False],
                                          ["swizzle_a", "POSITIONAL_OR_KEYWORD", True]]}
    assert found["names"] == ["torch.nn.functional.ScalingType"]
    assert found["enums"] == {"ScalingType": {"TensorWise": 0, "RowWise": 1, "BlockWise1x32": 5}}
    assert found["dtypes"] == ["float8_e4m3fn", "float4_e2m1fn_x2"]
    assert list(found["meta"]) == ["aten._scaled_mm"]
