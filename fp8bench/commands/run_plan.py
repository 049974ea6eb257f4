"""`fp8bench run`'s plan and wall budget: the run order, `--plan` (expected wall times, nothing measured) and the
budget that fits a run into `--wall-budget` (fp8bench.measure.plan, fp8bench.measure.budget)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from fp8bench.commands.verb_interface import UsageError, print_json
from fp8bench.core.cases import Case
from fp8bench.core.devices import Device
from fp8bench.core.noise import host_load
from fp8bench.energy.meters import meter_for
from fp8bench.hardware.environment import device_properties
from fp8bench.hardware.peaks import cached_cpu_ceilings
from fp8bench.measure.budget import SuiteBudget, budget_plan, parse_duration, prioritised
from fp8bench.measure.plan import CostModel, Plan, case_history, case_key_of, device_ceilings, plan_run
from fp8bench.measure.settings import RunSettings
from fp8bench.results.store import StoreError, open_store


def wall_budget_s(args: argparse.Namespace) -> float | None:
    """Seconds of ``--wall-budget`` (``None``: no budget); a bad value is a usage error naming it."""
    if args.wall_budget is None:
        return None
    try:
        return parse_duration(args.wall_budget)
    except ValueError as exc:
        raise UsageError(f"--wall-budget: {exc}") from exc


def ordered(cases: list[Case], priorities: list[int], args: argparse.Namespace) -> list[Case]:
    """``cases`` in run order (:func:`fp8bench.measure.budget.prioritised`)."""
    try:
        order = prioritised(cases, priorities, args.priority or [])
    except ValueError as exc:
        raise UsageError(f"--priority: {exc}") from exc
    return [cases[i] for i in order]


def cost_model(device: Device, results_dir: Path, store: str | None, no_store: bool,
               cases: list[Case]) -> CostModel:
    """The cost model of ``device``, with the history the store holds for ``cases`` (none with ``no_store`` or
    where no store exists yet: nothing is created)."""
    name = str(device_properties(device)["name"])
    model = CostModel(device, device_ceilings(device, name, results_dir), meter_for(device),
                      ceilings_cached=device.is_cuda or cached_cpu_ceilings(results_dir) is not None,
                      load=host_load())
    if no_store:
        return model
    try:
        opened = open_store(store or results_dir, read_only=True)
    except StoreError:
        return model
    model.history = case_history(opened, [case_key_of(c, device) for c in cases], name)
    opened.engine.dispose()
    return model


def make_budget(seconds: float | None, cases: list[Case], settings: RunSettings, model: CostModel,
                started: float) -> SuiteBudget | None:
    return None if seconds is None else SuiteBudget.for_cases(seconds, cases, settings, model, started)


def show_plan(cases: list[Case], settings: RunSettings, model: CostModel, budget: SuiteBudget | None,
              as_json: bool, console: Console) -> int:
    """Print the plan (a table, or with ``as_json`` one JSON object) and return the exit code (0)."""
    plan = plan_run(cases, settings, model)
    out = plan.to_dict()
    if budget is not None:
        rows = budget_plan(budget, plan)
        for case, row in zip(out["cases"], rows, strict=True):
            case["budget"] = row
        out["wall_budget"] = {**budget.header(), "fitted_s": plan.fixed_s + sum(r["expected_s"] for r in rows)}
    if as_json:
        print_json(out)
    else:
        _render(out, plan, console)
    return 0


def _render(out: dict[str, Any], plan: Plan, console: Console) -> None:
    table = Table(title=f"plan: {out['n_cases']} cases, {_duration(out['total_s'])} expected "
                        f"({out['from_history']} from history, {out['from_model']} from the model)")
    for column in ("#", "case", "expected", "from", "expect", *(["budget"] if "wall_budget" in out else [])):
        table.add_column(column)
    for i, row in enumerate(out["cases"]):
        budget = row.get("budget")
        table.add_row(str(i), row["case"], _duration(row["expected_s"]), row["source"], row["expect"],
                      *([f"{budget['level']} {_duration(budget['expected_s'])}"] if budget else []))
    console.print(table)
    console.print(f"run start (environment, ceilings): {_duration(plan.fixed_s)}; total {_duration(out['total_s'])}",
                  markup=False)
    if "wall_budget" in out:
        wb = out["wall_budget"]
        console.print(f"wall budget {_duration(wb['budget_s'])}: fitted plan {_duration(wb['fitted_s'])}",
                      markup=False)
    print_json({k: v for k, v in out.items() if k != "cases"})


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.3g} s"
