"""The command line as users meet it: tables, JSON, exit codes and one-line errors."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from subprocess_support import sigint_at_its_default

from fp8bench.cli import main
from fp8bench.results.runfile import read_run_file
from fp8bench.results.store import open_store


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_run_prints_table_then_one_json_line_and_fills_store(capsys, results_dir):
    code, out, err = run_cli(capsys, "run", "--shape", "64x64x64", "--precision", "bf16", "fp8_rowwise",
                             "--backend", "torch", "emulated", "--budget", "5", "--device", "cpu",
                             "--results-dir", str(results_dir))
    assert code == 0, err
    lines = out.strip().splitlines()
    summary = json.loads(lines[-1])
    assert summary["counts"] == {"ok": 4, "skipped": 0, "failed": 0, "invalid": 0}
    assert "fp8_rowwise" in out and "vs bf16" in out
    run = read_run_file(summary["run_file"])
    assert len(run["records"]) == 4 and run["run"]["status"] == "complete"
    assert open_store(results_dir).count_records(summary["run_id"]) == 4


def test_json_mode_prints_only_json(capsys, results_dir):
    code, out, _ = run_cli(capsys, "run", "--shape", "32x32x32", "--precision", "fp32", "--backend", "torch",
                           "--results-dir", str(results_dir), "--no-store", "--json")
    assert code == 0
    (line,) = out.strip().splitlines()
    data = json.loads(line)
    assert data["store"] is None and data["records"][0]["precision"] == "fp32"


def test_misaligned_fp8_shape_is_skipped_with_the_rule(capsys, results_dir):
    code, out, _ = run_cli(capsys, "run", "--shape", "100x100x100", "--precision", "fp8_rowwise", "--backend",
                           "torch", "--results-dir", str(results_dir), "--json")
    assert code == 0
    (record,) = json.loads(out)["records"]
    assert record["status"] == "skipped" and "multiples of 16" in record["reason"]


@pytest.mark.parametrize("argv,message", [
    (["--precision", "fp7"], "unknown precision 'fp7'; accepted: fp32, tf32, bf16"),
    (["--backend", "cublas"], "unknown backend 'cublas'; accepted: torch"),
    (["--workload", "conv"], "unknown workload 'conv'; accepted: gemm"),
    (["--shape", "0x16x16"], "M = 0 must be a positive integer"),
    (["--shape=-16x16x16"], "M = -16 must be a positive integer"),
    (["--device", "cuda"], "CUDA is not available on this machine"),
    (["--device", "tpu"], "unknown device 'tpu'; accepted: auto, cpu, cuda, cuda:N"),
    (["--suite", "nope"], "unknown suite 'nope'"),
    (["--baseline", "fp9"], "unknown precision 'fp9'"),
    (["--budget", "0"], "budget must be positive"),
])
def test_bad_input_is_one_clear_line_and_exit_2(capsys, results_dir, argv, message):
    code, out, err = run_cli(capsys, "run", *argv, "--results-dir", str(results_dir))
    assert code == 2
    assert message in err and err.count("\n") == 1
    assert not (results_dir / "runs").exists() or not any((results_dir / "runs").iterdir())


def test_unwritable_output_path_is_refused_before_measuring(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _, err = run_cli(capsys, "run", "--shape", "32x32x32", "--precision", "fp32", "--out",
                           str(blocker / "run.json"), "--no-store")
    assert code == 2 and "cannot write the run file" in err


def test_doctor_and_list_json(capsys):
    code, out, _ = run_cli(capsys, "doctor", "--json")
    report = json.loads(out)
    assert code == 0 and report["device"] == "cpu"
    assert report["fp8_gemm"]["rowwise"] is None and "tensorwise and rowwise" in report["fp8_gemm"]["mx"]
    assert report["matrix"]["emulated"]["gemm"]["mxfp8"] is None
    # What this torch has, detected, and that it is what the wheel of its release was recorded to have.
    api = report["torch_api"]
    assert api["present"]["torch.nn.functional.scaled_mm"] and api["matches_recorded"] is True
    assert api["gemm_entry_points"]["rowwise"] == "torch._scaled_mm"
    assert api["gemm_entry_points"]["mxfp4"] == "torch.nn.functional.scaled_mm"
    code, out, _ = run_cli(capsys, "list", "precisions", "--json")
    assert list(json.loads(out)["precisions"])[:2] == ["fp32", "tf32"]


def test_ingest_is_idempotent(capsys, results_dir):
    code, out, _ = run_cli(capsys, "run", "--shape", "32x32x32", "--precision", "fp32", "--backend", "torch",
                           "--results-dir", str(results_dir), "--no-store", "--json")
    run_file = json.loads(out)["run_file"]
    for expected in (1, 0):
        code, out, _ = run_cli(capsys, "ingest", run_file, "--results-dir", str(results_dir), "--json")
        assert code == 0 and json.loads(out.splitlines()[-1])["ingested"][0]["records_added"] == expected
    bad = results_dir / "bad.json"
    bad.write_text("{")
    code, _, err = run_cli(capsys, "ingest", str(bad), "--results-dir", str(results_dir))
    assert code == 2 and "not valid JSON" in err


@pytest.mark.slow  # a run in its own process, interrupted
def test_ctrl_c_keeps_finished_records(tmp_path):
    """A real process, a real SIGINT: exit 130, and the run file holds every record finished before it."""
    results = tmp_path / "results"
    # The third case's build never returns (tests/plugins/fp8bench_test_hang.py), so it is still running when the
    # signal comes, however fast or loaded the machine is.
    plugins = Path(__file__).resolve().parent / "plugins"
    env = {**os.environ, "FP8BENCH_RESULTS_DIR": str(results), "FP8BENCH_PLUGINS": "fp8bench_test_hang",
           "FP8BENCH_TEST_HANG_PRECISIONS": "fp8_tensorwise", "FP8BENCH_TEST_HANG_ANSWERS_SIGNALS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(plugins), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "fp8bench.cli", "run", "--shape", "128x128x128", "--precision", "bf16", "fp32",
         "fp8_tensorwise", "--backend", "torch", "--budget", "60", "--device", "cpu", "--out",
         str(results / "run.json")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=sigint_at_its_default)
    deadline = time.monotonic() + 120
    run_file = results / "run.json"
    while time.monotonic() < deadline:
        if run_file.exists() and len(read_run_file(run_file)["records"]) >= 2:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    data = read_run_file(run_file)
    assert data["run"]["status"] == "interrupted"
    assert len(data["records"]) >= 2 and all(r["status"] == "ok" for r in data["records"][:2])
    assert json.loads(out.strip().splitlines()[-1])["interrupted"] is True
    assert "interrupted" in err


def test_fast_accum_sweep_runs_each_fp8_case_in_both_modes(capsys, results_dir):
    code, out, err = run_cli(capsys, "run", "--shape", "64x64x64", "--precision", "bf16", "fp8_rowwise",
                             "--fast-accum", "on", "off", "--budget", "5", "--device", "cpu", "--no-store",
                             "--results-dir", str(results_dir), "--json")
    assert code == 0, err
    records = json.loads(out.strip().splitlines()[-1])["records"]
    modes = sorted((r["precision"], r["accumulation"]) for r in records)
    assert modes == [("bf16", None), ("fp8_rowwise", "fast_forward"), ("fp8_rowwise", "full")]
    from fp8bench.core.records import case_key

    assert len({case_key(r) for r in records}) == 3 and any("/full-accum" in case_key(r) for r in records)


def test_fast_accum_rejects_unknown_values(capsys, results_dir):
    code, _, err = run_cli(capsys, "run", "--fast-accum", "maybe", "--results-dir", str(results_dir))
    assert code == 2 and "invalid choice: 'maybe'" in err


def test_step_progress_in_a_log_says_the_step_and_the_time_left():
    """Off a terminal, one line per tenth of the work; the time left is the time per step so far times the steps
    to go (a fake clock: 2 s per step)."""
    from rich.console import Console

    from fp8bench.commands.console import StepProgress

    console = Console(width=120, record=True, color_system=None, force_terminal=False)
    now = [0.0]
    with StepProgress("converge", 20, console, clock=lambda: now[0]) as progress:
        progress.start("curve 1 of 2: bf16")
        for _ in range(10):
            now[0] += 2.0
            progress.advance()
        progress.start("curve 2 of 2: fp8_rowwise", announce=False)
        progress.advance(10)
    lines = console.export_text().splitlines()
    assert lines[0] == "converge: curve 1 of 2: bf16 (0 of 20 steps)"
    assert lines[1] == "converge: curve 1 of 2: bf16: 2/20 steps, 4 s spent, about 36 s left"
    assert lines[5] == "converge: curve 1 of 2: bf16: 10/20 steps, 20 s spent, about 20 s left"
    assert lines[-1] == "converge: curve 2 of 2: fp8_rowwise: 20/20 steps, 20 s spent, about 0 s left"
    assert len(lines) == 7  # the announcement and one line per tenth
    progress.extend(20)
    assert progress.total == 40 and progress.remaining_text() == "20 s spent, about 20 s left"


def test_converge_prints_its_progress(capsys, results_dir):
    code = main(["converge", "--steps", "4", "--window", "2", "--precision", "bf16", "--no-control",
                 "--shape", "tiny,layers=1,seq=16,batch=2", "--results-dir", str(results_dir), "--no-store"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "converge: curve 1 of 1: bf16 on emulated (0 of 4 steps)" in err
    assert "converge: curve 1 of 1: bf16 on emulated: 4/4 steps," in err


def test_version_flag_prints_the_package_version(capsys):
    from importlib.metadata import version

    from fp8bench.cli import main as cli_main

    assert cli_main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"fp8bench {version('fp8bench')}"
