"""Record the scaled-GEMM API surface of torch releases, read from their released wheels.

fp8bench calls PyTorch's scaled-GEMM entry points, and which of them exist, with which parameters, enum members and
dtypes, changes from release to release (``torch.nn.functional.scaled_mm``, ``ScalingType`` and ``SwizzleType``
arrived after ``torch._scaled_mm``). Only one torch installs on a machine, so the conformance replay
(``fp8bench.verify.cuda_replay``) judges each call against the surface recorded here for its target's release, and the
tests read this file (CI has no network).

Any platform's wheel holds a release's Python files, stubs and headers; the macOS arm64 ones are the smallest (about
75 MB). For each release this script downloads the wheel with ``pip download`` (or reuses one in ``--wheel-dir``) and
reads, without installing or importing it:

* ``torch/_C/_VariableFunctions.pyi``: the signatures of ``torch._scaled_mm``, ``torch._scaled_mm_v2``,
  ``torch._scaled_grouped_mm``, ``torch._scaled_grouped_mm_v2`` and ``torch._grouped_mm``;
* ``torch/nn/functional.py``: the signatures of ``scaled_mm`` and ``scaled_grouped_mm``, and whether the module binds
  ``ScalingType`` and ``SwizzleType``;
* ``torch/include/ATen/BlasBackend.h``: the members and values of the ``ScalingType`` and ``SwizzleType`` enums;
* ``torch/_C/__init__.pyi``: which FP8 and FP4 dtypes exist;
* ``torch/_meta_registrations.py``: which scaled ops have a meta function, with a digest of its source (and of the
  ``_check_scaled*`` helpers it calls), so a reader can tell where the checks changed.

Only these derived facts are written (no source text), with each wheel's file name and SHA-256.

Usage::

    .venv/bin/python scripts/torch_surface.py                      # every release already in the file
    .venv/bin/python scripts/torch_surface.py 2.15.0               # add or refresh one release
    .venv/bin/python scripts/torch_surface.py --wheel-dir /tmp/whl 2.9.1 2.10.0
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "fp8bench" / "numerics" / "data" / "torch_surfaces.json"
# The releases recorded when the file does not exist yet: the newest patch of every minor release from 2.4.
DEFAULT_RELEASES = ("2.4.1", "2.5.1", "2.6.0", "2.7.1", "2.8.0", "2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.13.0",
                    "2.14.1")
TORCH_FUNCTIONS = ("_scaled_mm", "_scaled_mm_v2", "_scaled_grouped_mm", "_scaled_grouped_mm_v2", "_grouped_mm")
FUNCTIONAL_FUNCTIONS = ("scaled_mm", "scaled_grouped_mm")
FUNCTIONAL_NAMES = ("ScalingType", "SwizzleType")
ENUMS = ("ScalingType", "SwizzleType")
DTYPES = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2")
META_OPS = ("_scaled_mm", "_scaled_mm_v2", "_scaled_grouped_mm", "_scaled_grouped_mm_v2", "_grouped_mm")
# macOS 14 arm64 covers every release (2.12 and newer ship no macOS 11 wheel); pip accepts older tags for it.
PLATFORM, PYTHON = "macosx_14_0_arm64", "3.12"


def wheel_for(release: str, wheel_dir: Path) -> Path:
    """The release's wheel in ``wheel_dir``, downloaded there first if it is missing."""
    found = sorted(wheel_dir.glob(f"torch-{release}-*macosx*arm64.whl"))
    if not found:
        wheel_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                        "--platform", PLATFORM, "--python-version", PYTHON, "-d", str(wheel_dir),
                        f"torch=={release}"], check=True)
        found = sorted(wheel_dir.glob(f"torch-{release}-*macosx*arm64.whl"))
    if not found:
        raise SystemExit(f"no macOS arm64 wheel of torch {release} in {wheel_dir}")
    return found[-1]


def parameters(fn: ast.FunctionDef) -> list[list[Any]]:
    """``[name, kind, has_default]`` per parameter, kinds named as ``inspect.Parameter`` names them."""
    a = fn.args
    positional = [*a.posonlyargs, *a.args]
    first_default = len(positional) - len(a.defaults)
    out: list[list[Any]] = []
    for i, p in enumerate(positional):
        kind = "POSITIONAL_ONLY" if i < len(a.posonlyargs) else "POSITIONAL_OR_KEYWORD"
        out.append([p.arg, kind, i >= first_default])
    if a.vararg:
        out.append([a.vararg.arg, "VAR_POSITIONAL", False])
    for p, default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        out.append([p.arg, "KEYWORD_ONLY", default is not None])
    if a.kwarg:
        out.append([a.kwarg.arg, "VAR_KEYWORD", False])
    return out


def functions(source: str, names: tuple[str, ...]) -> dict[str, list[list[Any]]]:
    """Module-level functions among ``names`` (the first definition of each; stubs repeat a name for overloads,
    and none of these has overloads)."""
    found: dict[str, list[list[Any]]] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name in names and node.name not in found:
            found[node.name] = parameters(node)
    return found


def bound_names(source: str, names: tuple[str, ...]) -> list[str]:
    """Which of ``names`` a module binds at top level (import alias, class, assignment)."""
    bound: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            bound.add(node.name)
        elif isinstance(node, ast.Assign):
            bound.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return sorted(bound & set(names))


def enums(header: str) -> dict[str, dict[str, int]]:
    """``enum class Name : type { A, B = 3, ... };`` members with their values, for the enums in :data:`ENUMS`."""
    out: dict[str, dict[str, int]] = {}
    for name in ENUMS:
        m = re.search(rf"enum\s+class\s+{name}\b[^{{]*\{{(.*?)\}};", header, re.S)
        if not m:
            continue
        members: dict[str, int] = {}
        value = -1
        body = re.sub(r"//[^\n]*", "", m.group(1))
        for item in body.split(","):
            item = item.strip()
            if not item:
                continue
            key, _, explicit = item.partition("=")
            value = int(explicit.strip(), 0) if explicit.strip() else value + 1
            members[key.strip()] = value
        out[name] = members
    return out


def dtypes(stub: str) -> list[str]:
    return [d for d in DTYPES if re.search(rf"^{d}\s*:\s*dtype", stub, re.M)]


def meta_functions(source: str) -> dict[str, str]:
    """``op -> sha256`` of the meta function registered for each op of :data:`META_OPS` (its source plus that of
    the ``_check_scaled*`` helpers defined in the module)."""
    tree = ast.parse(source)
    helpers = {n.name: ast.get_source_segment(source, n) or "" for n in tree.body
               if isinstance(n, ast.FunctionDef) and n.name.startswith("_check_scaled")}
    out: dict[str, str] = {}
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            for op in re.findall(r"aten\.(\w+?)(?:\.default)?\b", ast.unparse(deco)):
                if op in META_OPS and op not in out:
                    text = ast.get_source_segment(source, node) or ""
                    used = "".join(body for name, body in sorted(helpers.items()) if name in text)
                    out[op] = hashlib.sha256((text + used).encode()).hexdigest()[:16]
    return out


def surface(wheel: Path) -> dict[str, Any]:
    with zipfile.ZipFile(wheel) as zf:
        def read(path: str) -> str:
            try:
                return zf.read(path).decode()
            except KeyError:
                return ""

        version = re.search(r"__version__\s*=\s*'([^']+)'", read("torch/version.py"))
        functional = read("torch/nn/functional.py")
        found = {f"torch.{k}": v for k, v in functions(read("torch/_C/_VariableFunctions.pyi"),
                                                       TORCH_FUNCTIONS).items()}
        found.update({f"torch.nn.functional.{k}": v for k, v in functions(functional, FUNCTIONAL_FUNCTIONS).items()})
        return {
            "version": version.group(1) if version else None,
            "functions": found,
            "names": [f"torch.nn.functional.{n}" for n in bound_names(functional, FUNCTIONAL_NAMES)],
            "enums": enums(read("torch/include/ATen/BlasBackend.h")),
            "dtypes": dtypes(read("torch/_C/__init__.pyi")),
            "meta": {f"aten.{k}": v for k, v in meta_functions(read("torch/_meta_registrations.py")).items()},
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("releases", nargs="*", help="torch releases, e.g. 2.9.1 (default: those in the file)")
    parser.add_argument("--wheel-dir", type=Path, default=Path("/tmp/whl"), help="where wheels are kept")
    parser.add_argument("--out", type=Path, default=DATA, help=f"output JSON (default {DATA.relative_to(ROOT)})")
    args = parser.parse_args(argv)
    recorded: dict[str, Any] = json.loads(args.out.read_text())["releases"] if args.out.exists() else {}
    for release in args.releases or sorted(recorded, key=_release_key) or DEFAULT_RELEASES:
        wheel = wheel_for(release, args.wheel_dir)
        found = surface(wheel)
        recorded[release] = {"wheel": wheel.name, "wheel_sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
                             **found}
        print(f"torch {release}: {', '.join(sorted(found['functions']))}; enums "
              f"{ {k: len(v) for k, v in found['enums'].items()} }; dtypes {', '.join(found['dtypes'])}")
    payload = {"generated_by": "scripts/torch_surface.py",
               "source": f"PyPI wheels of torch ({PLATFORM}, CPython {PYTHON})",
               "releases": {k: recorded[k] for k in sorted(recorded, key=_release_key)}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    print(f"{args.out}: {len(recorded)} releases")
    return 0


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", release))


if __name__ == "__main__":
    sys.exit(main())
