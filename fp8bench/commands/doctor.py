"""`fp8bench doctor`: what this machine can run, and why not."""

from __future__ import annotations

import argparse
import importlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fp8bench.commands.verb_interface import (
    EXIT_OK,
    default_results_dir,
    print_json,
)
from fp8bench.core.devices import Device, resolve_device
from fp8bench.core.plugins import BACKENDS, WORKLOADS, declared_libraries, load_all
from fp8bench.core.precisions import (
    PRECISIONS,
    Fp4Recipe,
    Fp8FormatChoice,
    RunOptions,
    ScaledRecipe,
    resolve_precision,
)
from fp8bench.energy.meters import meter_for
from fp8bench.hardware import cpu_fp8_rate
from fp8bench.hardware.capabilities import (
    MATRIX_KEYS,
    SCALED_GEMM_RULES,
    DeviceCapabilities,
    capabilities_for,
    probe_recipe,
    scaled_mm_api,
)
from fp8bench.hardware.cpu_fp8_rate import CpuFp8Rate
from fp8bench.hardware.environment import software_versions
from fp8bench.hardware.vendor_logs import silenced
from fp8bench.numerics import torch_api
from fp8bench.numerics.torch_api import TorchSurface

# A 4-bit recipe's cell under the FP8 formats it does not take (its elements are E2M1; shown under e4m3).
NO_FP8_FORMAT = "4-bit recipe: E2M1 elements, no FP8 format choice"


def execute(args: argparse.Namespace) -> int:
    """Gather the report (:func:`doctor`), then print it as JSON or as tables."""
    report = doctor(device=args.device)
    if args.json:
        print_json(report.data)
    else:
        render(report, rules=args.rules, verbose=args.verbose)
    return EXIT_OK


@dataclass(frozen=True)
class DoctorReport:
    """What ``doctor`` found: the JSON document (``data``) and the typed values its tables are drawn from."""

    device: Device
    caps: DeviceCapabilities
    surface: TorchSurface
    cpu_rate: CpuFp8Rate | None  # measured only where torch runs FP8 GEMMs on this CPU
    data: dict[str, Any]


def doctor(*, device: str = "auto") -> DoctorReport:
    """What ``device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``) can run here, and why not: library versions,
    torch's scaled-GEMM API, the FP8 capability matrix, backend availability per precision, the energy meter, the
    results folder; on a CPU that runs FP8 GEMMs, their measured rate against BF16's."""
    load_all()
    on = resolve_device(device)
    caps = capabilities_for(on)
    meter = meter_for(on)
    surface = torch_api.detect()
    results_dir = default_results_dir()
    data: dict[str, Any] = {
        "device": str(on), "device_name": caps.name, "compute_capability": caps.compute_capability,
        "cuda_available": torch.cuda.is_available(), "threads": torch.get_num_threads(),
        "software": software_versions(), "torch_api": _torch_api_report(surface), "fp8_variant": caps.fp8_variant,
        "fp8_gemm": {g: r for g, r in caps.fp8_reasons.items()},
        "fp8_training_gemms": _training_reasons(caps),  # recipe -> format -> why its GEMMs cannot run in training
        "cuda_target": caps.target.describe() if caps.target else None,
        "scaled_gemm_rules": [{"name": r.name, "source": r.source} for r in SCALED_GEMM_RULES],
        "backends": {b: BACKENDS.get(b).availability(on) for b in BACKENDS},
        "backend_kinds": {b: BACKENDS.get(b).kind for b in BACKENDS},
        "libraries": {lib.name: {"version": st.version, "reason": st.reason}
                      for lib, st in ((lib, lib.status()) for lib in declared_libraries())},
        "matrix": _backend_matrix(on), "energy": {"method": meter.method, "reason": getattr(meter, "reason", None)},
        "results_dir": str(results_dir.resolve()), "results_dir_writable": _writable(results_dir),
        "silenced_vendor_libraries": _silenced_vendor_libraries(torch.cuda.is_available()),
        "cpu_fp8_gemm": None, "warnings": [], "vendor_limits": vendor_limits(),
    }
    rate = None
    if not on.is_cuda and caps.fp8_reasons.get("tensorwise") is None:  # torch runs FP8 GEMMs on this CPU
        rate = cpu_fp8_rate.measure_cpu_fp8_rate()
        if rate is not None:
            data["cpu_fp8_gemm"] = rate.to_dict()
            data["warnings"] += [w for w in (rate.warning(),) if w]
    return DoctorReport(on, caps, surface, rate, data)


def _backend_matrix(device: Device) -> dict[str, dict[str, dict[str, str | None]]]:
    """backend -> workload -> precision -> why the backend cannot run it on ``device`` (``None``: it can)."""
    return {bname: {wname: {p: backend.unsupported_reason(wname, prec, device) for p, prec in PRECISIONS.items()}
                    for wname in WORKLOADS}
            for bname, backend in BACKENDS.items()}


def vendor_limits() -> list[dict[str, str]]:
    """Backend x precision refusals that depend on the GPU, whatever device ``doctor`` runs on (a CPU machine
    preparing a GPU run learns them too)."""
    # The te backend's module registers it when first imported, so it is reached after load_all, which registers
    # every backend in the order listings show; importing it at this module's top would put te first.
    load_all()
    te_backend = importlib.import_module("fp8bench.kernels.te_backend")
    return [{"backend": "te", "precision": p, "where": where, "reason": why}
            for p, where, why in te_backend.KNOWN_LIMITS]


def render_vendor_limits(limits: list[dict[str, str]], console: Console) -> None:
    for limit in limits:
        console.print(f"[bold]vendor limit[/] {limit['backend']} {limit['precision']} on {limit['where']}: "
                      f"skipped: {escape(limit['reason'])}")


def _training_reasons(caps: DeviceCapabilities) -> dict[str, dict[str, str | None]]:
    """Scaled recipe -> FP8 element format -> why its forward, dgrad and wgrad GEMMs cannot run (``None``: they
    can); a 4-bit recipe has E2M1 elements, so only its ``e4m3`` cell is checked."""
    def training_reason(name: str, prec: ScaledRecipe, fmt: str) -> str | None:
        if isinstance(prec, Fp4Recipe) and fmt != "e4m3":
            return NO_FP8_FORMAT
        precision = resolve_precision(name, RunOptions(fp8_format=fmt))
        return caps.recipe_reason(precision, backward=True)  # type: ignore[arg-type]

    return {name: {fmt.value: training_reason(name, prec, fmt.value) for fmt in Fp8FormatChoice}
            for name, prec in PRECISIONS.items() if isinstance(prec, ScaledRecipe)}


def _torch_api_report(surface: TorchSurface) -> dict[str, Any]:
    """The scaled-GEMM API this torch has, which entry point each scaling kind takes, and whether the surface is
    the one recorded from this release's wheel."""
    recorded = torch_api.installed_release()
    return {
        "present": {name: surface.has(name) for name in (*torch_api.ENTRY_POINTS, *torch_api.ENUM_NAMES)},
        "enums": surface.enums, "dtypes": sorted(surface.dtypes),
        "gemm_entry_points": {key: torch_api.entry_point_name(scaled_mm_api(probe_recipe(key), surface))
                              for key in MATRIX_KEYS},
        "recorded_release": recorded.release if recorded else None,
        "matches_recorded": None if recorded is None else (
            set(surface.functions) == set(recorded.functions) and surface.names == recorded.names
            and surface.enums == recorded.enums and surface.dtypes == recorded.dtypes),
    }


def render(report: DoctorReport, *, rules: bool = False, verbose: bool = False, console: Console | None = None) -> None:
    """The report as tables on ``console`` (stdout): the device, its native FP8 GEMMs, the backends and what each
    runs, the footer. ``verbose`` adds torch's scaled-GEMM API, the training matrix, each refusal's reason and the
    vendor limits; ``rules`` the CUDA scaled-GEMM rules and their sources."""
    console = console or Console()
    _render_device(report, console, verbose)
    _render_fp8(report, console, verbose)
    if rules:
        _render_rules(console)
    _render_backends(report, console, verbose)
    if verbose:
        render_vendor_limits(report.data["vendor_limits"], console)
    _render_footer(report, console)
    if not verbose:
        console.print("[dim]fp8bench doctor --verbose: also torch's scaled-GEMM API, the recipes in training, "
                      "each refusal's reason and the vendor limits[/]")


def _render_device(report: DoctorReport, console: Console, verbose: bool) -> None:
    """The device, the library versions and (``verbose``) torch's scaled-GEMM API."""
    data, caps = report.data, report.caps
    sw = data["software"]
    console.print(f"[bold]device[/] {report.device} - {caps.name}"
                  + (f" (compute capability {caps.compute_capability[0]}.{caps.compute_capability[1]})"
                     if caps.compute_capability else f", {data['threads']} torch threads"))
    console.print(f"[bold]software[/] torch {sw['torch']}, CUDA {sw['cuda_runtime']}, cuDNN {sw['cudnn']}, "
                  f"triton {sw['triton']}, TE {sw['transformer_engine']}, torchao {sw['torchao']}")
    if not verbose:
        return
    torch_report = data["torch_api"]
    if torch_report["recorded_release"] is None:
        recorded_note = "no recorded surface for this release (scripts/torch_surface.py records one)"
    else:
        recorded_note = (f"as recorded from the torch {torch_report['recorded_release']} wheel"
                         if torch_report["matches_recorded"] else
                         f"DIFFERS from the surface recorded from the torch {torch_report['recorded_release']} wheel")
    t = Table(title=f"scaled-GEMM API of torch {torch.__version__} ({recorded_note})", header_style="bold")
    t.add_column("name")
    t.add_column("present")
    for name, text in torch_api.describe(report.surface):
        t.add_row(name, text if text == "yes" else f"[dim]{text}[/]")
    console.print(t)
    console.print("[bold]entry point per scaling[/] " + ", ".join(
        f"{key}: {api}" for key, api in torch_report["gemm_entry_points"].items()))


def _render_fp8(report: DoctorReport, console: Console, verbose: bool) -> None:
    """Native FP8 and FP4 GEMM per scaling, then (``verbose``) each recipe in training per element format,
    refusals numbered."""
    caps = report.caps
    t = Table(title=f"native FP8 and FP4 GEMM on this device (FP8 variant: {caps.fp8_variant})",
              header_style="bold")
    t.add_column("scaling")
    t.add_column("supported")
    for g, text in caps.as_rows():
        t.add_row(g, text)
    console.print(t)
    if not verbose:
        return
    t = Table(title="FP8 and 4-bit recipes in training (forward, dgrad and wgrad GEMMs) by element format "
                    "(4-bit recipes: E2M1, listed under e4m3)", header_style="bold")
    t.add_column("recipe")
    for fmt in Fp8FormatChoice:
        t.add_column(fmt.value)
    notes: list[str] = []
    for name, by_fmt in report.data["fp8_training_gemms"].items():
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


def _render_rules(console: Console) -> None:
    t = Table(title="CUDA scaled-GEMM rules (beyond PyTorch's meta checks)", header_style="bold")
    t.add_column("rule")
    t.add_column("enforced by")
    for rule in SCALED_GEMM_RULES:
        t.add_row(rule.name, rule.source)
    console.print(t)


def _render_backends(report: DoctorReport, console: Console, verbose: bool) -> None:
    """Each backend's availability, then precision x backend for the GEMM, with each refusal's reason when
    ``verbose``."""
    data, matrix = report.data, report.data["matrix"]
    t = Table(title="backends on this device", header_style="bold")
    for col in ("backend", "kind", "available"):
        t.add_column(col)
    for b in BACKENDS:
        why = data["backends"][b]
        note = BACKENDS.get(b).note(report.device) if why is None else None
        t.add_row(b, data["backend_kinds"][b],
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
    if not verbose:
        return
    for b in BACKENDS:
        reasons = {r for r in matrix[b].get("gemm", {}).values() if r}
        for r in sorted(reasons):
            console.print(f"  [dim]{b}: {r}[/]")


def _render_footer(report: DoctorReport, console: Console) -> None:
    """The energy meter, the silenced vendor libraries, the results folder, the CPU's GEMM rates, warnings."""
    data = report.data
    method = data["energy"]["method"]
    console.print(f"[bold]energy[/] {method}" + (f" - {data['energy']['reason']}" if method == "none" else ""))
    if data["silenced_vendor_libraries"]:
        console.print("[bold]torchao[/] CUDA extension libraries not loaded, as expected without CUDA: "
                      f"{', '.join(data['silenced_vendor_libraries'])} (their load warnings are silenced)")
    console.print(f"[bold]results[/] {data['results_dir']} "
                  f"({'writable' if data['results_dir_writable'] else 'NOT writable'})")
    if report.cpu_rate is not None:
        console.print(f"[bold]CPU GEMM rates[/] {escape(report.cpu_rate.describe())}")
    for warning in data["warnings"]:
        console.print(f"[yellow]warning:[/] {escape(warning)}")


def _silenced_vendor_libraries(cuda_available: bool) -> list[str]:
    """Import torchao (when installed and no CUDA is here) and name the CUDA libraries whose load warnings
    :mod:`fp8bench.hardware.vendor_logs` silenced; said once here instead of on every run."""
    torchao = next(lib for lib in declared_libraries() if lib.name == "torchao")  # registered by load_all
    if cuda_available or torchao.status().reason:
        return []
    try:
        importlib.import_module("torchao")
    except Exception:  # noqa: BLE001 - a broken torchao is reported by the backend table, not here
        return []
    return silenced()


def _writable(folder: Path) -> bool:
    probe = folder if folder.exists() else folder.parent
    return os.access(probe if str(probe) else ".", os.W_OK)
