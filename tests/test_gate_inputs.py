"""What the gate refuses to judge, through the command line as a CI job calls it: damaged samples, unfinished
runs, missing cases, a run gated against itself, and a bootstrap that must stay in bounded memory."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np

from fp8bench.analysis.stats import BOOTSTRAP_CHUNK_VALUES, compare_batch
from fp8bench.cli import main
from fp8bench.exit_codes import EXIT_HARNESS_ERROR, EXIT_PASS, EXIT_REGRESSION
from tests.gate_fixtures import payload, record

SAMPLES = [1.0e-3, 1.01e-3, 0.99e-3, 1.0e-3, 1.02e-3, 0.98e-3] * 3


def write(path: Path, data: dict, allow_nan: bool = False) -> Path:
    path.write_text(json.dumps(data, allow_nan=allow_nan))
    return path


def cases(n: int, samples: list[float] = SAMPLES) -> list[dict]:
    return [record(64 * (i + 1), "bf16", list(samples)) for i in range(n)]


def gate_cli(capsys, *args: object) -> tuple[int, str, str]:
    code = main(["gate", *map(str, args), "--no-store-report"])
    out, err = capsys.readouterr()
    return code, out, err


def test_negative_or_zero_samples_are_refused_naming_file_and_case(tmp_path, capsys):
    base = write(tmp_path / "base.json", payload("b", cases(2)))
    bad = cases(2)
    bad[1]["samples_s"] = [-0.0585, -0.06, 0.0] * 6  # the probe: this once read as 58x faster
    cand = write(tmp_path / "cand.json", payload("c", bad))
    code, _, err = gate_cli(capsys, base, cand, "--report-dir", tmp_path / "r")
    assert code == EXIT_HARNESS_ERROR
    assert str(cand) in err and "gemm[m=128,n=128,k=128] bf16" in err and "sample 0 is -0.0585" in err
    # Negative samples in the base once made every case "same".
    code, _, err = gate_cli(capsys, cand, base, "--report-dir", tmp_path / "r2")
    assert code == EXIT_HARNESS_ERROR and str(cand) in err


def test_nan_and_null_samples_give_a_clear_error(tmp_path, capsys):
    base = write(tmp_path / "base.json", payload("b", cases(1)))
    nan = cases(1)
    nan[0]["samples_s"] = [*SAMPLES[:5], float("nan")]
    cand = write(tmp_path / "nan.json", payload("c", nan), allow_nan=True)
    code, _, err = gate_cli(capsys, base, cand, "--report-dir", tmp_path / "r")
    assert code == EXIT_HARNESS_ERROR and "sample 5 is nan" in err and "nan.json" in err
    assert "Traceback" not in err
    null = cases(1)
    null[0]["samples_s"] = [*SAMPLES[:3], None]
    cand = write(tmp_path / "null.json", payload("c", null))
    code, _, err = gate_cli(capsys, base, cand, "--report-dir", tmp_path / "r2")
    assert code == EXIT_HARNESS_ERROR and "sample 3 is None" in err


def test_killed_candidate_is_refused_then_its_missing_cases_fail(tmp_path, capsys):
    base = write(tmp_path / "base.json", payload("b", cases(24)))
    killed = payload("c", cases(20))
    killed["run"].update(status="interrupted", n_records=20, n_cases=24)
    cand = write(tmp_path / "cand.json", killed)
    code, _, err = gate_cli(capsys, base, cand, "--report-dir", tmp_path / "r1")
    assert code == EXIT_HARNESS_ERROR
    assert "did not finish" in err and "'interrupted'" in err and "20 of 24" in err and "--allow-partial" in err
    code, out, _ = gate_cli(capsys, base, cand, "--allow-partial", "--report-dir", tmp_path / "r2", "--json")
    report = json.loads(out)
    assert code == EXIT_REGRESSION and report["counts"]["missing"] == 4
    assert len(report["slower_cases"]) == 4
    code, out, _ = gate_cli(capsys, base, cand, "--allow-partial", "--allow-missing", "--report-dir",
                            tmp_path / "r3", "--json")
    assert code == EXIT_PASS and json.loads(out)["counts"]["removed"] == 4


def test_a_finished_candidate_without_some_cases_fails_unless_allowed(tmp_path, capsys):
    base = write(tmp_path / "base.json", payload("b", cases(3)))
    cand = write(tmp_path / "cand.json", payload("c", cases(2)))
    code, out, _ = gate_cli(capsys, base, cand, "--report-dir", tmp_path / "r1")
    assert code == EXIT_REGRESSION and "missing" in out
    code, _, _ = gate_cli(capsys, base, cand, "--allow-missing", "--report-dir", tmp_path / "r2")
    assert code == EXIT_PASS


def test_running_base_is_refused_too(tmp_path, capsys):
    running = payload("b", cases(2))
    running["run"]["status"] = "running"
    base = write(tmp_path / "base.json", running)
    cand = write(tmp_path / "cand.json", payload("c", cases(2)))
    code, _, err = gate_cli(capsys, base, cand, "--report-dir", tmp_path / "r")
    assert code == EXIT_HARNESS_ERROR and "the base" in err and "'running'" in err


def test_gating_a_run_against_itself_warns(tmp_path, capsys):
    run = write(tmp_path / "a.json", payload("a", cases(2)))
    code, out, err = gate_cli(capsys, run, run, "--report-dir", tmp_path / "r", "--json")
    assert code == EXIT_PASS
    assert "warning" in err and "compared with themselves" in err
    assert any("compared with themselves" in n for n in json.loads(out)["notes"])
    other = write(tmp_path / "b.json", payload("b", cases(2)))
    _, _, err = gate_cli(capsys, run, other, "--report-dir", tmp_path / "r2")
    assert "warning" not in err


def test_bootstrap_of_a_huge_case_stays_in_bounded_memory():
    """The probe: a 100,000-sample case once took 6.4 GB in the bootstrap. Resampling in chunks keeps the peak
    near a chunk's size (here 400 resamples: drawn at once they would need 2 x 320 MB of indices alone)."""
    rng = np.random.default_rng(0)
    base = rng.lognormal(0, 0.05, size=(1, 100_000))
    cand = base * 1.02
    tracemalloc.start()
    try:
        (est,) = compare_batch(base, cand, n_boot=400)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    chunk_bytes = BOOTSTRAP_CHUNK_VALUES * 16  # values and their int64 indices
    assert peak < 3 * chunk_bytes, f"bootstrap peak {peak / 2**20:.0f} MiB"
    assert 1.015 < est.ci_low < est.ratio < est.ci_high < 1.025
