"""`fp8bench converge` keeps its curves the way `fp8bench run` keeps its records: each one streamed to the run file
and the store as it finishes, a recipe that fails to train kept as a ``failed`` record with its reason, and Ctrl-C
ending the run with every finished curve kept and the run marked ``interrupted``."""

from __future__ import annotations

import json

import pytest

from fp8bench.cli import main
from fp8bench.commands.verb_interface import EXIT_CASE_FAILED, EXIT_INTERRUPTED
from fp8bench.measure import convergence
from fp8bench.results.runfile import read_run_file
from fp8bench.results.store import open_store

SHORT = "tiny,layers=1,seq=32"  # 128 tokens per step


def _summary(capsys: pytest.CaptureFixture[str]) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _stored(results_dir, run_id: str) -> dict[str, dict]:
    frame = open_store(results_dir).records_frame(with_data=True)
    frame = frame[frame["run_id"] == run_id]
    data = [json.loads(d) if isinstance(d, str) else d for d in frame["data"]]
    return {d["precision"]: d for d in data}


def test_a_recipe_that_fails_to_train_reaches_the_run_file_and_the_store(results_dir, capsys):
    """mxfp8 through the torch backend on the CPU: torch refuses E8M0 block scales there (the swizzled layout), so
    the recipe fails on its first step. Its curve is a failed record, beside the BF16 one, in both places."""
    code = main(["converge", "--shape", SHORT, "--steps", "4", "--window", "2", "--precision", "bf16", "mxfp8",
                 "--backend", "torch", "--device", "cpu", "--no-control", "--results-dir", str(results_dir),
                 "--json"])
    summary = _summary(capsys)
    assert code == EXIT_CASE_FAILED, summary
    assert [(c["precision"], c["verdict"]) for c in summary["curves"]] == [("bf16", "baseline"), ("mxfp8", "failed")]
    saved = read_run_file(results_dir / "runs" / f"{summary['run_id']}.json")
    assert saved["run"]["status"] == "complete" and saved["run"]["n_records"] == 2
    in_file = {r["precision"]: r for r in saved["records"]}
    assert sorted(in_file) == ["bf16", "mxfp8"], [r["precision"] for r in saved["records"]]
    failed = in_file["mxfp8"]
    assert failed["status"] == "failed" and failed["valid"] is False
    assert failed["reason"] == summary["curves"][1]["reasons"][0] and failed["reason"].startswith("ValueError: ")
    assert (failed["workload"], failed["backend"], failed["device"], failed["seq"]) == (
        "transformer_step", "torch", "cpu", 1)
    assert failed["shape"] == in_file["bf16"]["shape"] and failed["fp8_format"] == "e4m3"
    stored = _stored(results_dir, summary["run_id"])
    assert sorted(stored) == ["bf16", "mxfp8"]
    assert stored["mxfp8"]["status"] == "failed" and stored["mxfp8"]["reason"] == failed["reason"]


def test_ctrl_c_mid_converge_keeps_the_finished_curves(results_dir, capsys, monkeypatch):
    """Ctrl-C while the second curve trains: the BF16 curve stays in the run file and the store, the run says
    ``interrupted`` and the verb exits with its interrupted code."""
    real = convergence.train_curve

    def interrupted_on_the_second(shape, precision, *args, **kwargs):
        if getattr(precision, "name", precision) != "bf16":
            raise KeyboardInterrupt  # what Ctrl-C raises in the training loop
        return real(shape, precision, *args, **kwargs)

    monkeypatch.setattr(convergence, "train_curve", interrupted_on_the_second)
    code = main(["converge", "--shape", SHORT, "--steps", "4", "--window", "2", "--precision", "bf16",
                 "fp8_rowwise", "--device", "cpu", "--results-dir", str(results_dir), "--json"])
    summary = _summary(capsys)
    assert code == EXIT_INTERRUPTED, summary
    assert summary["interrupted"] is True and [c["precision"] for c in summary["curves"]] == ["bf16"]
    saved = read_run_file(results_dir / "runs" / f"{summary['run_id']}.json")
    assert saved["run"]["status"] == "interrupted"
    assert [(r["precision"], r["status"]) for r in saved["records"]] == [("bf16", "ok")]
    assert len(saved["records"][0]["extra"]["losses"]) == 4
    assert sorted(_stored(results_dir, summary["run_id"])) == ["bf16"]
    assert open_store(results_dir).count_records(summary["run_id"]) == 1
