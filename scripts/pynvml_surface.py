"""Record the public surface of one nvidia-ml-py release, for tests that check fp8bench against it.

fp8bench declares the oldest nvidia-ml-py it supports in ``pyproject.toml`` (the ``nvml`` extra). CI installs the
newest release, so a name that only newer releases have would pass every test there and fail on a user's machine
with the oldest. This script downloads one release's wheel from PyPI (``pip download``), imports its ``pynvml.py``
in isolation (importing it does not touch a driver), and writes what a caller can rely on as JSON:

* ``functions``: each public function's parameters (name, kind, whether it has a default);
* ``constants``: each public int, float or str constant with its value (field ids and reason bits do change
  between releases, so values are kept, not just names);
* ``errors``: the ``NVMLError_*`` classes the release generates.

The file records the distribution, version, wheel file name and its SHA-256, so anyone can check where it came
from. ``tests/test_nvml_versions.py`` reads the file whose version equals the floor in ``pyproject.toml``.

Usage::

    .venv/bin/python scripts/pynvml_surface.py 12.535.77          # writes tests/data/pynvml/nvidia-ml-py-12.535.77.json
    .venv/bin/python scripts/pynvml_surface.py 12.535.77 --out FILE
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import inspect
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "pynvml"


def download(version: str, into: Path) -> Path:
    """The wheel of nvidia-ml-py ``version`` from the package index pip is configured with."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "-d", str(into), f"nvidia-ml-py=={version}"], check=True)
    wheels = sorted(into.glob("nvidia_ml_py-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"expected one nvidia-ml-py wheel in {into}, found {[w.name for w in wheels]}")
    return wheels[0]


def load_module(wheel: Path, into: Path) -> Any:
    """Import the wheel's ``pynvml.py`` under a private name (the installed release stays untouched)."""
    with zipfile.ZipFile(wheel) as zf:
        zf.extract("pynvml.py", into)
    name = "_pynvml_surface_release"
    spec = importlib.util.spec_from_file_location(name, into / "pynvml.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # the module registers its generated error classes on itself by name
    spec.loader.exec_module(module)
    return module


def surface(module: Any) -> dict[str, Any]:
    functions: dict[str, list[list[Any]]] = {}
    constants: dict[str, Any] = {}
    errors: list[str] = []
    for name in sorted(vars(module)):
        if name.startswith("_"):
            continue
        value = getattr(module, name)
        if isinstance(value, type) and issubclass(value, BaseException):
            errors.append(name)
        elif inspect.isfunction(value) and value.__module__ == module.__name__:
            params = inspect.signature(value).parameters.values()
            functions[name] = [[p.name, p.kind.name, p.default is not inspect.Parameter.empty] for p in params]
        elif isinstance(value, (bool, int, float, str)):
            constants[name] = value
    return {"functions": functions, "constants": constants, "errors": errors}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", help="nvidia-ml-py release, e.g. 12.535.77")
    parser.add_argument("--out", type=Path, default=None, help="output JSON (default tests/data/pynvml/...)")
    args = parser.parse_args(argv)
    out = args.out or DATA / f"nvidia-ml-py-{args.version}.json"
    with tempfile.TemporaryDirectory() as tmp:
        wheel = download(args.version, Path(tmp))
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        found = surface(load_module(wheel, Path(tmp)))
    payload = {"distribution": "nvidia-ml-py", "version": args.version, "wheel": wheel.name,
               "wheel_sha256": digest, "generated_by": "scripts/pynvml_surface.py", **found}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
    print(f"{out}: {len(found['functions'])} functions, {len(found['constants'])} constants, "
          f"{len(found['errors'])} error classes from {wheel.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
