"""`fp8bench doctor`: what this machine can run, and why not."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from fp8bench.commands.common import (
    EXIT_OK,
    STANDARD_EXIT_CODES,
    add_json_flag,
    default_results_dir,
    print_json,
)

NAME = "doctor"
HELP = "what this machine can run, and why not"
DESCRIPTION = ("Report the device, library versions, the scaled-GEMM API this torch has (entry points, enums, FP8 "
               "and FP4 dtypes, and which entry point each scaling kind takes), the FP8 capability matrix (per "
               "scaling and per recipe and element format, with the reason for each refusal), backend availability "
               "per precision, the energy meter and the results location. --rules lists the CUDA scaled-GEMM rules "
               "behind the matrix, each with the CUDA source that enforces it.")
EXIT_CODES = STANDARD_EXIT_CODES
# A 4-bit recipe's cell under the FP8 formats it does not take (its elements are E2M1; shown under e4m3).
NO_FP8_FORMAT = "4-bit recipe: E2M1 elements, no FP8 format choice"
DOC = "docs/backends.md"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    p.add_argument("--rules", action="store_true",
                   help="also list the CUDA scaled-GEMM rules (architecture, CUDA/torch versions, dtypes) and "
                        "their sources")
    add_json_flag(p)


def execute(args: argparse.Namespace) -> int:
    import torch

    from fp8bench.core.devices import resolve_device
    from fp8bench.core.plugins import BACKENDS, WORKLOADS, load_all
    from fp8bench.energy.meters import meter_for
    from fp8bench.hardware.capabilities import (
        MATRIX_KEYS,
        MIN_VERSIONS,
        SCALED_GEMM_RULES,
        backend_note,
        capabilities_for,
        library_status,
        probe_recipe,
        scaled_mm_api,
    )
    from fp8bench.hardware.cpu_fp8_rate import measure_cpu_fp8_rate
    from fp8bench.hardware.environment import software_versions
    from fp8bench.numerics import torch_api
    from fp8bench.numerics.recipes import PRECISIONS, Fp8FormatChoice, Fp8Recipe, resolve_precision

    load_all()
    device = resolve_device(args.device)
    caps = capabilities_for(device)
    meter = meter_for(device)
    matrix: dict[str, dict[str, dict[str, str | None]]] = {}
    for bname, backend in BACKENDS.items():
        matrix[bname] = {}
        for wname in WORKLOADS:
            matrix[bname][wname] = {p: backend.unsupported_reason(wname, prec, device)
                                    for p, prec in PRECISIONS.items()}
    def training_reason(name: str, prec: Fp8Recipe, fmt: str) -> str | None:
        if prec.is_fp4 and fmt != "e4m3":
            return NO_FP8_FORMAT
        return caps.recipe_reason(resolve_precision(name, fmt), backward=True)  # type: ignore[arg-type]

    recipes = {name: {fmt.value: training_reason(name, prec, fmt.value) for fmt in Fp8FormatChoice}
               for name, prec in PRECISIONS.items() if isinstance(prec, Fp8Recipe)}
    surface = torch_api.detect()
    recorded = torch_api.installed_release()
    torch_report: dict[str, Any] = {
        "present": {name: surface.has(name) for name in (*torch_api.ENTRY_POINTS, *torch_api.ENUM_NAMES)},
        "enums": surface.enums, "dtypes": sorted(surface.dtypes),
        "gemm_entry_points": {key: torch_api.entry_point_name(scaled_mm_api(probe_recipe(key), surface))
                              for key in MATRIX_KEYS},
        "recorded_release": recorded.release if recorded else None,
        "matches_recorded": None if recorded is None else (
            set(surface.functions) == set(recorded.functions) and surface.names == recorded.names
            and surface.enums == recorded.enums and surface.dtypes == recorded.dtypes),
    }
    results_dir = default_results_dir()
    report: dict[str, Any] = {
        "device": str(device), "device_name": caps.name, "compute_capability": caps.compute_capability,
        "cuda_available": torch.cuda.is_available(), "threads": torch.get_num_threads(),
        "software": software_versions(), "torch_api": torch_report, "fp8_variant": caps.fp8_variant,
        "fp8_gemm": {g: r for g, r in caps.fp8_reasons.items()},
        "fp8_training_gemms": recipes,  # recipe -> element format -> why its forward/dgrad/wgrad GEMMs cannot run
        "cuda_target": caps.target.describe() if caps.target else None,
        "scaled_gemm_rules": [{"name": r.name, "source": r.source} for r in SCALED_GEMM_RULES],
        "backends": {b: BACKENDS.get(b).availability(device) for b in BACKENDS},
        "backend_kinds": {b: BACKENDS.get(b).kind for b in BACKENDS},
        "libraries": {name: {"version": st.version, "reason": st.reason}
                      for name, st in ((n, library_status(n)) for n in MIN_VERSIONS)},
        "matrix": matrix, "energy": {"method": meter.method, "reason": getattr(meter, "reason", None)},
        "results_dir": str(results_dir.resolve()), "results_dir_writable": _writable(results_dir),
        "silenced_vendor_libraries": _silenced_vendor_libraries(torch.cuda.is_available()),
        "cpu_fp8_gemm": None, "warnings": [],
    }
    rate = None
    if not device.is_cuda and caps.fp8_reasons.get("tensorwise") is None:  # torch runs FP8 GEMMs on this CPU
        rate = measure_cpu_fp8_rate()
        if rate is not None:
            report["cpu_fp8_gemm"] = rate.to_dict()
            report["warnings"] += [w for w in (rate.warning(),) if w]
    if args.json:
        print_json(report)
        return EXIT_OK
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console()
    sw = report["software"]
    console.print(f"[bold]device[/] {device} - {caps.name}"
                  + (f" (compute capability {caps.compute_capability[0]}.{caps.compute_capability[1]})"
                     if caps.compute_capability else f", {report['threads']} torch threads"))
    console.print(f"[bold]software[/] torch {sw['torch']}, CUDA {sw['cuda_runtime']}, cuDNN {sw['cudnn']}, "
                  f"triton {sw['triton']}, TE {sw['transformer_engine']}, torchao {sw['torchao']}")
    if torch_report["recorded_release"] is None:
        recorded_note = "no recorded surface for this release (scripts/torch_surface.py records one)"
    else:
        recorded_note = (f"as recorded from the torch {torch_report['recorded_release']} wheel"
                         if torch_report["matches_recorded"] else
                         f"DIFFERS from the surface recorded from the torch {torch_report['recorded_release']} wheel")
    t = Table(title=f"scaled-GEMM API of torch {torch.__version__} ({recorded_note})", header_style="bold")
    t.add_column("name")
    t.add_column("present")
    for name, text in torch_api.describe(surface):
        t.add_row(name, text if text == "yes" else f"[dim]{text}[/]")
    console.print(t)
    console.print("[bold]entry point per scaling[/] " + ", ".join(
        f"{key}: {api}" for key, api in torch_report["gemm_entry_points"].items()))
    t = Table(title=f"native FP8 and FP4 GEMM on this device (FP8 variant: {caps.fp8_variant})",
              header_style="bold")
    t.add_column("scaling")
    t.add_column("supported")
    for g, text in caps.as_rows():
        t.add_row(g, text)
    console.print(t)
    t = Table(title="FP8 and 4-bit recipes in training (forward, dgrad and wgrad GEMMs) by element format "
                    "(4-bit recipes: E2M1, listed under e4m3)", header_style="bold")
    t.add_column("recipe")
    for fmt in Fp8FormatChoice:
        t.add_column(fmt.value)
    notes: list[str] = []
    for name, by_fmt in recipes.items():
        cells = []
        for why in by_fmt.values():
            if why == NO_FP8_FORMAT:
                cells.append("[dim]-[/]")
                continue
            if why is not None and why not in notes:
                notes.append(why)
            cells.append("yes" if why is None else f"[dim]no ({notes.index(why) + 1})[/]")
        t.add_row(name, *cells)
    console.print(t)
    for i, why in enumerate(notes, 1):
        console.print(f"  [dim]({i}) {why}[/]")
    if args.rules:
        t = Table(title="CUDA scaled-GEMM rules (beyond PyTorch's meta checks)", header_style="bold")
        t.add_column("rule")
        t.add_column("enforced by")
        for rule in SCALED_GEMM_RULES:
            t.add_row(rule.name, rule.source)
        console.print(t)
    t = Table(title="backends on this device", header_style="bold")
    for col in ("backend", "kind", "available"):
        t.add_column(col)
    for b in BACKENDS:
        why = report["backends"][b]
        note = backend_note(b, device) if why is None else None
        t.add_row(b, report["backend_kinds"][b],
                  ("yes" + (f" ({note})" if note else "")) if why is None else f"no: {why}")
    console.print(t)
    # Precisions down, backends across: eleven precisions would not fit an 80-column log as columns.
    t = Table(title="precision x backend (workload gemm)", header_style="bold")
    t.add_column("precision")
    for b in BACKENDS:
        t.add_column(b, justify="center")
    for p in PRECISIONS:
        t.add_row(p, *["yes" if matrix[b].get("gemm", {}).get(p) is None else "[dim]no[/]" for b in BACKENDS])
    console.print(t)
    for b in BACKENDS:
        reasons = {r for r in matrix[b].get("gemm", {}).values() if r}
        for r in sorted(reasons):
            console.print(f"  [dim]{b}: {r}[/]")
    console.print(f"[bold]energy[/] {meter.method}" + (f" - {report['energy']['reason']}" if meter.method == "none"
                                                     else ""))
    if report["silenced_vendor_libraries"]:
        console.print("[bold]torchao[/] CUDA extension libraries not loaded, as expected without CUDA: "
                      f"{', '.join(report['silenced_vendor_libraries'])} (their load warnings are silenced)")
    console.print(f"[bold]results[/] {report['results_dir']} "
                  f"({'writable' if report['results_dir_writable'] else 'NOT writable'})")
    if rate is not None:
        console.print(f"[bold]CPU GEMM rates[/] {escape(rate.describe())}")
    for warning in report["warnings"]:
        console.print(f"[yellow]warning:[/] {escape(warning)}")
    return EXIT_OK


def _silenced_vendor_libraries(cuda_available: bool) -> list[str]:
    """Import torchao (when installed and no CUDA is here) and name the CUDA libraries whose load warnings
    :mod:`fp8bench.hardware.vendor_logs` silenced; said once here instead of on every run."""
    import importlib

    from fp8bench.hardware.capabilities import library_status
    from fp8bench.hardware.vendor_logs import silenced

    if cuda_available or library_status("torchao").reason:
        return []
    try:
        importlib.import_module("torchao")
    except Exception:  # noqa: BLE001 - a broken torchao is reported by the backend table, not here
        return []
    return silenced()


def _writable(folder: Path) -> bool:
    probe = folder if folder.exists() else folder.parent
    return os.access(probe if str(probe) else ".", os.W_OK)
