"""Records and their JSON fields: ``Record.from_dict`` gives back the record ``to_dict`` wrote, for every kind of
record a run produces, and refuses a dict that is not one by naming what is wrong."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fp8bench.core.devices import Device
from fp8bench.core.plugins import WORKLOADS, load_all
from fp8bench.core.records import GROUPS, STORED_KEYS, Record
from fp8bench.measure.convergence import ConvergenceSettings, failed_curve_record
from fp8bench.measure.runner import expand_cases, run_cases
from fp8bench.measure.settings import EnergySettings, RunSettings, TimingSettings
from fp8bench.measure.sharding import crashed_record
from fp8bench.measure.timing import SamplingPolicy

CPU = Device("cpu")
SETTINGS = RunSettings(device="cpu",
                       timing=TimingSettings(budget_s=10, warmup_s=0.0,
                                             policy=SamplingPolicy(min_samples=3, min_time_s=0.0, max_time_s=0.02)),
                       energy=EnergySettings(enabled=False))


@pytest.fixture(scope="module")
def measured() -> list[Record]:
    """A small CPU run: measured (bf16 on torch, fp8_rowwise emulated) and skipped (mxfp8 on torch on the CPU)."""
    load_all()
    cases = expand_cases([("gemm", ["32x32x32"])], ["bf16", "fp8_rowwise", "mxfp8"], ["torch", "emulated"], SETTINGS)
    return run_cases(cases, SETTINGS, CPU, run_file=None).records


def test_every_record_of_a_run_survives_its_json_fields(measured: list[Record]) -> None:
    others = [crashed_record(expand_cases([("gemm", ["32x32x32"])], ["bf16"], ["torch"], SETTINGS)[0], CPU, 9,
                             SETTINGS, "the worker process for cpu (pid 1) was killed by SIGKILL"),
              failed_curve_record("mxfp4", "emulated", "RuntimeError: boom", WORKLOADS.get("transformer_step")
                                  .parse_shape("tiny"), CPU, ConvergenceSettings(), 3, "e2m1")]
    statuses = {r.status for r in measured}
    assert {"ok", "skipped"} <= statuses, statuses
    for record in [*measured, *others]:
        fields = json.loads(json.dumps(record.to_dict()))  # as the run file holds it
        assert Record.from_dict(fields) == record
        assert Record.from_dict(record.to_dict()).to_dict() == record.to_dict()


def test_the_runner_stores_the_repro_command_and_records_without_one_leave_the_key_out(
        measured: list[Record]) -> None:
    assert all(r.repro and r.repro.startswith("fp8bench run ") for r in measured)
    assert all(r.to_dict()["repro"] == r.repro for r in measured)
    bare = Record("gemm", {"m": 8, "n": 8, "k": 8}, "bf16", "torch", "cpu", "ok")
    assert "repro" not in bare.to_dict()
    assert Record.from_dict(bare.to_dict()) == bare


def test_a_dict_that_is_no_record_is_refused_by_name() -> None:
    fields = Record("gemm", {"m": 8, "n": 8, "k": 8}, "bf16", "torch", "cpu", "ok").to_dict()
    with pytest.raises(ValueError, match=r"unknown field\(s\) 'gflops', 'run_id'; accepted: the keys of a stored"):
        Record.from_dict({**fields, "gflops": 1.0, "run_id": "r"})
    del fields["backend"], fields["status"]
    with pytest.raises(ValueError, match=r"lacks the field\(s\) 'backend', 'status'"):
        Record.from_dict(fields)
    with pytest.raises(ValueError, match="record status 'done'; accepted: ok, failed, skipped, invalid"):
        Record.from_dict({**Record("gemm", {}, "bf16", "torch", "cpu", "ok").to_dict(), "status": "done"})


def test_each_stored_key_has_one_home_and_a_runner_record_writes_them_in_the_stored_order(
        measured: list[Record]) -> None:
    """The stored record is flat: every key is either a field of the record or a field of one of its groups
    (samples, throughput, efficiency), never both, and a measured record writes every key in the order every run
    file so far holds them."""
    own = {f.name for f in dataclasses.fields(Record)} - set(GROUPS) - {"stored_keys", "other"}
    grouped = [f.name for group in GROUPS.values() for f in dataclasses.fields(group)]
    assert len(grouped) == len(set(grouped)) and not own & set(grouped)
    assert sorted(STORED_KEYS) == sorted(own | set(grouped)) and len(STORED_KEYS) == len(set(STORED_KEYS))
    ok = next(r for r in measured if r.status == "ok")
    assert tuple(ok.to_dict()) == STORED_KEYS
    assert ok.to_dict()["median_s"] == ok.samples.median_s == ok.stored_value("median_s")
    assert ok.to_dict()["flops"] == ok.throughput.flops == 2 * 32**3
