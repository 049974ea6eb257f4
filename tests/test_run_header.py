"""Run headers through the one loader (``fp8bench.core.run_header.load_header``): the headers of real run files of
both schemas and of a store written before its schema 3 read into typed parts and write back the JSON they were read
from, byte for byte; keys a header was written without read as ``None``; a newer schema and a nested object of the
wrong type are refused by name."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from old_data import DATA, RUN_FILES, schema2_rows

from fp8bench.core.run_header import (
    GitInfo,
    HostInfo,
    RunHeader,
    SoftwareVersions,
    header_of,
    load_header,
    payload_header,
    stored_schema_version,
)
from fp8bench.results.runfile import read_run_file


def _store_runs() -> list[tuple[Any, ...]]:
    """(run id, schema version, header JSON) of every run of the schema-2 store."""
    return schema2_rows("SELECT run_id, schema_version, data FROM runs ORDER BY run_id")


@pytest.mark.parametrize("path", RUN_FILES, ids=lambda p: p.name)
def test_every_header_of_a_run_file_writes_back_the_json_it_was_read_from(path: Path) -> None:
    data = read_run_file(path)
    header = load_header(data["run"], data["schema_version"])
    assert json.dumps(header.to_json()) == json.dumps(data["run"])  # same keys, order and values
    assert (header.run_id, header.status, header.git.commit) == (data["run"]["run_id"], data["run"]["status"],
                                                                  data["run"]["git"]["commit"])
    assert header.device.name == data["run"]["device"]["name"] and header.settings == data["run"]["settings"]
    assert header.finished == ("finished_at" in data["run"])


def test_the_first_line_of_a_schema_2_file_reads_as_well_as_its_closing_header() -> None:
    for line in (DATA / "runfiles" / "schema2-complete.json").read_text().splitlines()[::3]:
        stored = json.loads(line)["run"]
        assert json.dumps(load_header(stored, 2).to_json(), separators=(",", ":")) == \
            json.dumps(stored, separators=(",", ":"))


def test_every_header_of_an_old_store_writes_back_the_bytes_it_was_stored_as() -> None:
    runs = _store_runs()
    assert len(runs) == 3
    for run_id, version, text in runs:
        header = load_header(json.loads(text), version)
        assert header.run_id == run_id
        assert json.dumps(header.to_json()) == text
    # Written before host loads, commit depths and remotes were recorded: those read as None and stay absent.
    header = load_header(json.loads(runs[0][2]), runs[0][1])
    assert "load" not in json.loads(runs[0][2])["host"] and header.host.load is None
    assert header.git.first_parent_depth is None and header.git.remote is None
    assert "first_parent_depth" not in (header.git.to_json() or {})


def test_a_header_lacking_keys_written_later_reads_them_as_none() -> None:
    # A run killed mid-way never wrote its final header; a header of an old fp8bench has no git or GPU object.
    header = load_header({"run_id": "r1", "started_at": "2026-01-01T00:00:00+00:00", "status": "running"}, 1)
    assert (header.finished_at, header.n_records, header.wall_budget, header.settings) == (None, None, None, None)
    assert header.git == GitInfo() and header.git.commit is None and header.host.load is None
    assert header.gpu.clock_policy is None and header.world_size == 1 and not header.finished
    assert header.setting("strict_clocks") is None  # no settings object at all
    assert load_header({"settings": {"budget_s": 2.0}}).setting("strict_clocks") is None  # before the setting
    assert list(header.to_json() or {}) == ["run_id", "started_at", "status"]


def test_a_schema_newer_than_this_fp8bench_reads_is_refused_by_name() -> None:
    stored = read_run_file(DATA / "runfiles" / "schema1-complete.json")["run"]
    assert load_header(stored, 1) == load_header(stored, 2)
    with pytest.raises(ValueError, match=r"run header of schema version 3, newer than this fp8bench reads \(1 to 2\)"):
        load_header(stored, 3)
    with pytest.raises(ValueError, match=r"run header schema version '2'; accepted: an integer from 1 to 2"):
        load_header(stored, "2")  # type: ignore[arg-type]


def test_a_nested_object_of_the_wrong_type_is_refused_naming_the_key() -> None:
    with pytest.raises(ValueError, match=r"run header field 'git' is int '5'; accepted: an object \(keys commit, "
                                         r"branch, dirty, .*\), or null"):
        load_header({"run_id": "r1", "git": 5})
    with pytest.raises(ValueError, match=r"run header is list .*; accepted: an object \(keys run_id, started_at"):
        load_header([1, 2])  # type: ignore[arg-type]


def test_null_and_unknown_keys_are_carried_through() -> None:
    stored = {"run_id": "r1", "git": None, "host": {"alias": "h", "rack": 7}, "workers": [{"pid": 1}],
              "status": "complete"}
    header = load_header(stored)
    assert header.git == GitInfo() and header.git.commit is None
    assert header.host.alias == "h" and header.host.other == {"rack": 7} and header.other == {"workers": [{"pid": 1}]}
    assert json.dumps(header.to_json()) == json.dumps(stored)
    # A value set since is added after the stored keys.
    changed = replace(header, finished_at="2026-01-01T00:00:01+00:00", host=replace(header.host, cpu_model="x"))
    assert list(changed.to_json() or {}) == [*stored, "finished_at"]
    assert (changed.to_json() or {})["host"] == {"alias": "h", "rack": 7, "cpu_model": "x"}


def test_a_header_built_in_code_writes_the_objects_it_holds() -> None:
    header = RunHeader(run_id="r1", software=SoftwareVersions(torch="2.6.0"), host={"alias": "h"})
    assert isinstance(header.host, HostInfo)
    assert header.to_json() == {"run_id": "r1", "host": {"alias": "h"}, "software": {"torch": "2.6.0"}}
    assert header_of(header) is header and header_of(None) == RunHeader() and header_of({"run_id": "r1"}).run_id == "r1"


def test_the_ranks_of_a_run_under_torchrun_are_read_from_its_spec() -> None:
    header = load_header({"spec": {"suite": None, "distributed": {"world_size": 4, "ranks_per_node": 2}}})
    assert header.world_size == 4 and header.distributed["ranks_per_node"] == 2
    assert load_header({"spec": {"distributed": {"world_size": True}}}).world_size == 1


def test_a_payload_and_a_store_row_name_the_schema_their_header_is_read_at() -> None:
    data = read_run_file(DATA / "runfiles" / "schema1-complete.json")
    assert payload_header(data) == load_header(data["run"], 1)
    with pytest.raises(ValueError, match=r"run header of schema version 3, newer than this fp8bench reads"):
        payload_header({**data, "schema_version": 3})
    # A data frame gives the column's integers as numpy integers, or floats with NaN where some are null.
    assert [stored_schema_version(v) for v in (None, float("nan"), np.int64(1), 2.0)] == [2, 2, 1, 2]
    with pytest.raises(ValueError, match=r"run header of schema version 9, newer than this fp8bench reads"):
        stored_schema_version(9)
