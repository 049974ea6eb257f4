"""Where FP8 pays off: the crossover shape, speedups, SQNR cost and energy, and the `fp8bench payoff` verb."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from fp8bench.analysis.payoff import (
    EMULATED_ONLY,
    NEVER,
    PAYS_OFF,
    WITHIN_NOISE,
    case_size,
    cell_speedups,
    in_reading_order,
    payoff_table,
)
from fp8bench.analysis.selection import is_scaled
from fp8bench.cli import main
from fp8bench.results.store import open_store
from tests.gate_fixtures import payload, record

SIZES = (256, 512, 1024, 2048)


def rows(times: dict[str, list[float]], backend="torch", sqnr=None, energy=None, device="GPU X"):
    out = []
    for precision, seconds in times.items():
        for m, t in zip(SIZES, seconds, strict=True):
            out.append({"device_label": device, "workload": "gemm", "shape": f"m={m},n={m},k={m}",
                        "shape_label": f"{m}x{m}x{m}", "precision": precision, "backend": backend, "median_s": t,
                        "flops": 2.0 * m**3, "sqnr_db": (sqnr or {}).get(precision),
                        "energy_j": (energy or {}).get(precision), "energy_reason": None if energy else "no meter"})
    return pd.DataFrame(out)


def test_pays_off_from_the_smallest_shape_after_which_it_always_wins():
    # Wins at 256 by luck, loses at 512, wins from 1024 on: the payoff starts at 1024.
    frame = rows({"bf16": [1.0, 2.0, 4.0, 8.0], "fp8_rowwise": [0.9, 2.5, 3.0, 4.0]},
                 sqnr={"bf16": 50.0, "fp8_rowwise": 28.5}, energy={"bf16": 2.0, "fp8_rowwise": 1.5})
    [row] = payoff_table(frame).to_dict("records")
    assert row["pays_off_from"] == "1024x1024x1024" and row["speedup_there"] == pytest.approx(4 / 3)
    assert row["largest_shape"] == "2048x2048x2048" and row["speedup_at_largest"] == pytest.approx(2.0)
    assert row["sqnr_cost_db"] == pytest.approx(21.5) and row["energy_ratio"] == pytest.approx(0.75)
    assert row["shapes"] == 4 and row["energy_note"] is None


def test_a_win_inside_the_noise_is_not_a_payoff():
    # At 2048 the recipe's median is 1.25x faster, but the baseline's samples spread over 8 +- 3 s (a busy
    # machine): the quartile ranges overlap, so it does not pay off there, and so not from 1024 either.
    frame = rows({"bf16": [1.0, 2.0, 4.0, 8.0], "fp8_rowwise": [2.0, 3.0, 3.0, 6.4]})
    frame["iqr_s"] = [0.01, 0.01, 0.01, 6.0, 0.01, 0.01, 0.01, 0.1]
    [row] = payoff_table(frame).to_dict("records")
    assert row["pays_off_from"] == NEVER and row["speedup_at_largest"] == pytest.approx(1.25)
    frame.loc[3, "iqr_s"] = 0.2  # the same medians, measured quietly: a clear win from 1024 on
    [row] = payoff_table(frame).to_dict("records")
    assert row["pays_off_from"] == "1024x1024x1024"


def test_never_within_the_measured_shapes_reads_cost_at_the_largest_shape():
    frame = rows({"bf16": [1.0, 2.0, 4.0, 8.0], "fp8_rowwise": [2.0, 3.0, 9.0, 16.0]},
                 sqnr={"bf16": 50.0, "fp8_rowwise": 30.0})
    [row] = payoff_table(frame).to_dict("records")
    assert row["pays_off_from"] == NEVER and row["speedup_there"] is None
    assert row["speedup_at_largest"] == pytest.approx(0.5) and row["measured_at"] == "2048x2048x2048"
    assert row["energy_ratio"] is None and row["energy_note"] == "no energy measurement: no meter"


def test_fastest_backend_per_cell_and_the_reference_backend_is_left_out():
    frame = pd.concat([rows({"bf16": [1, 2, 4, 8], "fp8_rowwise": [2, 3, 5, 9]}),
                       rows({"fp8_rowwise": [0.5, 1, 2, 4]}, backend="emulated"),
                       rows({"fp8_rowwise": [2, 3, 3, 7]}, backend="triton")], ignore_index=True)
    [row] = payoff_table(frame).to_dict("records")
    assert row["pays_off_from"] == "1024x1024x1024" and row["backend_there"] == "triton"


def test_unscaled_precisions_are_not_recipes_and_unpaired_shapes_are_skipped():
    frame = rows({"bf16": [1, 2, 4, 8], "fp32": [2, 4, 8, 16]})
    assert payoff_table(frame).empty
    only_fp8 = rows({"fp8_rowwise": [1, 2, 3, 4]})
    assert payoff_table(only_fp8).empty


def test_payoff_verb_reads_the_latest_valid_records(tmp_path, capsys):
    store = open_store(tmp_path / "store")
    recs = []
    for m, (bf16, fp8) in zip((64, 128), ((1e-3, 2e-3), (4e-3, 3e-3)), strict=True):
        recs += [record(m, "bf16", [bf16] * 3), record(m, "fp8_rowwise", [fp8] * 3)]
    store.ingest_run(payload("r1", recs))
    assert main(["payoff", "--store", str(tmp_path / "store"), "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)["payoff"]
    assert row["pays_off_from"] == "128x128x128" and row["speedup_there"] == pytest.approx(4 / 3)
    assert row["device"] == "Test CPU" and row["workload"] == "gemm"
    assert main(["payoff", "--store", str(tmp_path / "store")]) == 0
    out = capsys.readouterr().out
    assert "128x128x128" in out and json.loads(out.strip().splitlines()[-1])["paying_off"] == 1


def test_cases_read_by_workload_then_flops_not_as_text():
    frame = pd.DataFrame([
        {"device_label": "D", "workload": "collective", "shape": "op=all_gather,m=64,n=32", "flops": 0},
        {"device_label": "D", "workload": "gemm", "shape": "m=1024,n=1024,k=1024", "flops": 2 * 1024**3},
        {"device_label": "D", "workload": "grouped_gemm", "shape": "g=4,tokens=64,route=zipf,alpha=1.5",
         "flops": None},
        {"device_label": "D", "workload": "gemm", "shape": "m=256,n=256,k=256", "flops": 2 * 256**3},
        {"device_label": "D", "workload": "attention", "shape": "b=1,h=2,s=32,d=16", "flops": 1e6}])
    ordered = in_reading_order(frame)
    assert list(ordered["shape"]) == ["m=256,n=256,k=256", "m=1024,n=1024,k=1024", "b=1,h=2,s=32,d=16",
                                      "g=4,tokens=64,route=zipf,alpha=1.5", "op=all_gather,m=64,n=32"]
    assert case_size(None, "g=4,tokens=64,route=zipf,alpha=1.5") == pytest.approx(4 * 64 * 1.5)
    assert case_size(0, "op=all_gather,m=64,n=32") == 64 * 32  # no arithmetic: its element count
    assert case_size(None, "preset=tiny") != case_size(None, "preset=tiny")  # NaN: listed last


def test_fp8_and_4bit_recipes_are_scaled_and_cells_leave_out_the_reference():
    assert [p for p in ("fp32", "tf32", "bf16", "fp16", "fp8_rowwise", "mxfp8", "nvfp4", "mxfp4") if is_scaled(p)] \
        == ["fp8_rowwise", "mxfp8", "nvfp4", "mxfp4"]
    frame = pd.concat([rows({"bf16": [1, 2, 4, 8], "nvfp4": [2, 1, 2, 2]}),
                       rows({"nvfp4": [0.1, 0.1, 0.1, 0.1], "bf16": [9, 9, 9, 9]}, backend="emulated")],
                      ignore_index=True).assign(prequant_median_s=None)
    cells = cell_speedups(frame)
    assert set(cells["backend"]) == {"torch"}
    nvfp4 = cells[cells["precision"] == "nvfp4"]
    assert list(nvfp4["shape_label"]) == [f"{m}x{m}x{m}" for m in SIZES]  # in order of FLOPs
    assert list(nvfp4["speedup"]) == [0.5, 2.0, 2.0, 4.0]


def test_a_win_inside_the_noise_says_so():
    # The medians say 1.25x at the largest shape, the baseline's spread says it could be chance: the row says
    # which, and why, rather than a bare "never".
    frame = rows({"bf16": [1.0, 2.0, 4.0, 8.0], "fp8_rowwise": [2.0, 3.0, 3.0, 6.4]})
    frame["iqr_s"] = [0.01, 0.01, 0.01, 6.0, 0.01, 0.01, 0.01, 0.1]
    [row] = payoff_table(frame).to_dict("records")
    assert row["verdict"] == WITHIN_NOISE
    assert "1.25x" in row["reason"] and "noise" in row["reason"]
    frame.loc[3, "iqr_s"] = 0.2
    [row] = payoff_table(frame).to_dict("records")
    assert row["verdict"] == PAYS_OFF and "1024x1024x1024" in row["reason"]


def test_recipes_measured_only_on_the_emulated_reference_are_listed_as_such():
    frame = pd.concat([rows({"bf16": [1, 2, 4, 8], "fp8_rowwise": [2, 3, 5, 9]}),
                       rows({"mxfp8": [0.5, 1, 2, 4]}, backend="emulated")], ignore_index=True)
    table = payoff_table(frame).set_index("precision")
    assert table.loc["mxfp8", "verdict"] == EMULATED_ONLY
    assert "emulated" in table.loc["mxfp8", "reason"] and table.loc["mxfp8", "shapes"] == 0
    assert table.loc["fp8_rowwise", "verdict"] == NEVER


def test_a_baseline_on_a_slow_path_is_named_as_one():
    # fp16 at 4x fp32's time: a slow path on this device, against which any recipe looks fast.
    frame = rows({"fp16": [4.0, 8.0, 16.0, 32.0], "fp32": [1.0, 2.0, 4.0, 8.0], "fp8_rowwise": [2.0, 4.0, 8.0, 12.0]})
    [row] = payoff_table(frame, "fp16").to_dict("records")
    assert row["verdict"] == PAYS_OFF
    assert "slow path" in row["baseline_note"] and "fp32" in row["baseline_note"]
    times = {"bf16": [1.0, 2.0, 4.0, 8.0], "fp32": [2, 4, 8, 16], "fp8_rowwise": [2, 3, 5, 9]}
    [row] = payoff_table(rows(times)).to_dict("records")
    assert row["baseline_note"] is None


def test_payoff_verb_gives_a_reason_per_row_fits_the_terminal_and_names_a_shared_note_once(tmp_path, capsys,
                                                                                             monkeypatch):
    store = open_store(tmp_path / "store")
    recs = []
    for m, (bf16, fp8) in zip((64, 128), ((1e-3, 2e-3), (4e-3, 3e-3)), strict=True):
        recs += [record(m, "bf16", [bf16] * 3), record(m, "fp8_rowwise", [fp8] * 3),
                 record(m, "fp8_tensorwise", [fp8] * 3), record(m, "mxfp8", [fp8] * 3, backend="emulated")]
    store.ingest_run(payload("r1", recs))
    assert main(["payoff", "--store", str(tmp_path / "store"), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["payoff"]
    assert all(r["reason"] for r in listed) and {r["verdict"] for r in listed} == {PAYS_OFF, EMULATED_ONLY}
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["payoff", "--store", str(tmp_path / "store")]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()[:-1]) <= 100
    assert out.count("no energy measurement") == 1
    assert json.loads(out.strip().splitlines()[-1])["paying_off"] == 2
