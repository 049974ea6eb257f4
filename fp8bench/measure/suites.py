"""Suite files: named, versioned sets of cases in YAML (``workloads/suites/*.yaml``, or any path).

A suite lists entries, each a workload with shapes (``shapes: [...]``, ``shape_set: NAME``, or neither for the
workload's default shape), precisions and
backends (a list, or ``all``), an optional ``priority`` (an integer, default 0: under a wall budget, entries of
higher priority run first, ``fp8bench run --wall-budget``), and optional ``settings`` that override the run's defaults
(``budget_s``, ``min_samples``, ``min_time_s``, ``max_time_s``, ``target_rse``, ``max_samples``, ``warmup_s``).
``target_rse``, the sampling noise target, is a fraction (``0.005``) or a percentage string (``"0.5%"``). Command-line
flags override suite settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from fp8bench.core.plugins import BACKENDS, WORKLOADS, load_all
from fp8bench.core.precisions import PRECISIONS
from fp8bench.core.units import parse_fraction

SETTING_KEYS = ("budget_s", "min_samples", "min_time_s", "max_time_s", "target_rse", "max_samples", "warmup_s",
                # energy and telemetry settings `fp8bench run` takes from a suite when no flag overrides them
                "energy", "energy_phases", "strict_clocks", "energy_window_s", "idle_baseline_s", "cooldown_s",
                "clock_floor",
                # torch's CPU threads (`--threads`): one thread keeps a small CPU case's calls steady under load,
                # where a thread pool waits on its preempted threads
                "threads")


class SuiteError(ValueError):
    """A suite that cannot be found or read."""


@dataclass(frozen=True)
class SuiteEntry:
    workload: str
    shapes: list[str]
    precisions: list[str]
    backends: list[str]
    priority: int = 0  # higher runs first (fp8bench.measure.budget.prioritised)


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    settings: dict[str, Any]
    entries: list[SuiteEntry]
    path: str


def builtin_suites() -> dict[str, Path]:
    folder = resources.files("fp8bench.workloads").joinpath("suites")
    return {Path(str(p)).stem: Path(str(p)) for p in folder.iterdir() if str(p).endswith(".yaml")}


def _names(value: Any, registry_names: list[str], what: str, origin: str) -> list[str]:
    if value in (None, "all"):
        return list(registry_names)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SuiteError(f"{origin}: {what} must be a list of names or 'all', got {value!r}")
    return value


# Anchors and aliases let a few hundred bytes of YAML stand for billions of nodes once expanded (each alias of an
# alias multiplies); a suite names a few thousand cases at most, so its expanded document is bounded.
MAX_SUITE_NODES = 100_000


def _bounded_yaml(text: str, path: Path) -> Any:
    """``text`` parsed as YAML (safe types only), refused when its aliases expand past :data:`MAX_SUITE_NODES`."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    sizes: dict[int, int] = {}

    def expanded(node: yaml.Node) -> int:  # nodes after expanding every alias; shared nodes are sized once
        if sizes.get(id(node)) == 0:
            raise SuiteError(f"suite {path}: an alias refers to a node that contains it")
        if id(node) not in sizes:
            sizes[id(node)] = 0  # being sized
            children: list[yaml.Node] = []
            if isinstance(node, yaml.SequenceNode):
                children = node.value
            elif isinstance(node, yaml.MappingNode):
                children = [n for pair in node.value for n in pair]
            sizes[id(node)] = 1 + sum(expanded(child) for child in children)
        return sizes[id(node)]

    try:
        too_big = root is not None and expanded(root) > MAX_SUITE_NODES
    except RecursionError:
        raise SuiteError(f"suite {path}: nested too deeply") from None
    if too_big:
        raise SuiteError(f"suite {path}: its anchors and aliases expand to more than {MAX_SUITE_NODES:,} YAML "
                         "nodes; a suite needs far fewer (write its lists out, or use shape_set)")
    return yaml.safe_load(text)


def load_suite(name_or_path: str) -> Suite:
    from fp8bench.workloads.shape_sets import shape_set

    load_all()
    builtins = builtin_suites()
    path = builtins.get(name_or_path) or Path(name_or_path)
    if not path.exists():
        raise SuiteError(f"unknown suite {name_or_path!r}; built-in suites: {', '.join(sorted(builtins))}, "
                         "or give a path to a .yaml file")
    try:
        data = _bounded_yaml(path.read_text(), path)
    except (OSError, yaml.YAMLError) as exc:
        raise SuiteError(f"cannot read suite {path}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list):
        raise SuiteError(f"suite {path}: needs a 'cases' list")
    settings = data.get("settings") or {}
    unknown = sorted(set(settings) - set(SETTING_KEYS))
    if unknown:
        raise SuiteError(f"suite {path}: unknown settings {', '.join(unknown)}; accepted: {', '.join(SETTING_KEYS)}")
    threads = settings.get("threads")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise SuiteError(f"suite {path}: threads must be a whole number of CPU threads >= 1, got {threads!r}")
    if "target_rse" in settings:
        try:
            settings = {**settings, "target_rse": parse_fraction(settings["target_rse"], "target_rse")}
        except ValueError as exc:
            raise SuiteError(f"suite {path}: {exc}") from exc
    entries = []
    for i, raw in enumerate(data["cases"]):
        origin = f"suite {path}, case {i}"
        if not isinstance(raw, dict) or "workload" not in raw:
            raise SuiteError(f"{origin}: needs a 'workload'")
        if "shape_set" in raw:
            shapes = shape_set(raw["shape_set"])
        elif "shapes" not in raw:
            if raw["workload"] not in WORKLOADS:
                raise SuiteError(f"{origin}: unknown workload {raw['workload']!r}; accepted: "
                                 f"{', '.join(WORKLOADS.names())}")
            shapes = [WORKLOADS.get(raw["workload"]).default_shape]
        else:
            shapes = raw.get("shapes")
            if not isinstance(shapes, list) or not shapes:
                raise SuiteError(f"{origin}: 'shapes' must be a non-empty list (or leave it out for the "
                                 "workload's default shape)")
        priority = raw.get("priority", 0)
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise SuiteError(f"{origin}: 'priority' must be an integer (higher runs first), got {priority!r}")
        entries.append(SuiteEntry(raw["workload"], [str(s) for s in shapes],
                                  _names(raw.get("precisions"), PRECISIONS.names(), "precisions", origin),
                                  _names(raw.get("backends"), BACKENDS.names(), "backends", origin), priority))
    return Suite(str(data.get("name", path.stem)), str(data.get("description", "")), settings, entries, str(path))
