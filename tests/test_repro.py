"""Repro commands: every record carries the `fp8bench run` command of its case, and running it measures the same
case with the same settings."""

from __future__ import annotations

import shlex

import pytest

from fp8bench.analysis.gate.config import GateConfig
from fp8bench.analysis.gate.report import gate, merge_rerun
from fp8bench.cli import main
from fp8bench.core.records import load_record
from fp8bench.core.repro import frame_commands, repro_command, repro_of
from fp8bench.render.gate_markdown import render_markdown
from fp8bench.results.runfile import read_run_file
from fp8bench.results.store import open_store
from tests.gate_fixtures import payload, record

CASE_ARGS = ["--shape", "16x32x48", "--precision", "fp8_rowwise", "--backend", "emulated", "--fast-accum", "off",
             "--no-phases", "--threads", "1", "--min-samples", "5", "--max-time", "0.02", "--budget", "5",
             "--seed", "3", "--no-energy"]
CASE_FIELDS = ("workload", "shape", "precision", "backend", "device", "fp8_format", "accumulation", "case_key")


def test_the_stored_command_reproduces_the_stored_case(tmp_path, capsys):
    assert main(["run", *CASE_ARGS, "--results-dir", str(tmp_path / "results"), "--json"]) == 0
    capsys.readouterr()
    store = open_store(tmp_path / "results")
    run_id = store.runs_frame()["run_id"].iloc[0]
    stored = store.run_payload(run_id)
    [rec] = stored["records"]
    argv = shlex.split(rec["repro"])
    assert argv[:2] == ["fp8bench", "run"] and "--fast-accum" in argv and argv[argv.index("--fast-accum") + 1] == "off"
    # The dashboard derives the same text from the store's typed columns and the run's settings.
    headers = {run_id: stored["run"]}
    assert frame_commands(store.records_frame(), headers) == [rec["repro"]]
    # Pasted into a shell (the verb's own entry point here), it measures the same case with the same settings.
    out = tmp_path / "again.json"
    assert main([*argv[1:], "--out", str(out), "--no-store", "--json"]) == 0
    capsys.readouterr()
    again = read_run_file(out)
    [rec2] = again["records"]
    from fp8bench.core.records import case_key

    assert {k: rec2.get(k) for k in CASE_FIELDS if k != "case_key"} == \
        {k: rec.get(k) for k in CASE_FIELDS if k != "case_key"}
    assert case_key(rec2) == case_key(rec)
    first, second = dict(stored["run"]["settings"]), dict(again["run"]["settings"])
    assert first.pop("device") == "auto" and second.pop("device") == "cpu"  # the command names the device it ran on
    assert first == second
    assert rec2["repro"] == rec["repro"]


def test_records_written_before_commands_were_stored_get_the_same_one():
    rec = {"workload": "gemm", "shape": {"m": 8, "n": 8, "k": 8}, "precision": "bf16", "backend": "torch",
           "device": "cpu"}
    settings = {"budget_s": 2.0, "policy": {"min_samples": 10, "max_time_s": 0.5, "target_rse": 0.005},
                "phases": False, "flush_l2": True, "cuda_graph": False, "energy": True, "threads": None}
    derived = repro_of(rec, {"settings": settings})
    assert derived == ("fp8bench run --workload gemm --shape m=8,n=8,k=8 --precision bf16 --backend torch --device cpu "
                       "--min-samples 10 --target-rse 0.005 --max-time 0.5 --budget 2 --no-phases")
    # A stored command is never shown: the command is derived again from the typed fields.
    assert repro_of({**rec, "repro": "stored text"}, {"settings": settings}) == derived
    assert repro_of(rec, None).startswith("fp8bench run --workload gemm")


def test_a_collective_of_several_ranks_starts_with_torchrun():
    rec = {"workload": "collective", "shape": {"op": "all_reduce", "n": 1024}, "precision": "bf16",
           "backend": "torch", "device": "cuda"}
    cmd = repro_command(rec, {"cuda_graph": True}, world_size=4, ranks_per_node=4)
    assert cmd.startswith("torchrun --nproc-per-node 4 -m fp8bench run --workload collective "
                          "--shape op=all_reduce,n=1024")
    assert cmd.endswith("--cuda-graph")


def test_the_gate_report_gives_each_slower_case_its_command():
    fast, slow = [1e-3 * (1 + 0.001 * i) for i in range(20)], [2e-3 * (1 + 0.001 * i) for i in range(20)]
    base = payload("b", [record(64, "bf16", fast), record(64, "fp32", fast, seq=1)])
    cand = payload("c", [record(64, "bf16", slow), record(64, "fp32", fast, seq=1)])
    report = gate([base], [cand], GateConfig())
    assert report.slower_cases == ["gemm[m=64,n=64,k=64] bf16 torch cpu"]
    assert list(report.repro) == report.slower_cases
    md = render_markdown(report)
    assert "Reproduce a regressed case:" in md
    assert "fp8bench run --workload gemm --shape m=64,n=64,k=64 --precision bf16 --backend torch --device cpu" in md
    assert "--precision fp32" not in md



def test_a_case_the_rerun_finds_slower_gets_its_command_too():
    """``fp8bench ab`` reruns an inconclusive case; when the rerun calls it slower, the merged report names it among
    the regressions and must give its command as it does for a case slower at the first look."""
    fast, slow = [1e-3 * (1 + 0.001 * i) for i in range(20)], [2e-3 * (1 + 0.001 * i) for i in range(20)]
    first = gate([payload("b", [record(64, "bf16", fast[:2])])], [payload("c", [record(64, "bf16", slow[:2])])])
    assert first.cases[0].verdict == "inconclusive" and first.repro == {}  # too few samples
    rerun = gate([payload("b2", [record(64, "bf16", fast)])], [payload("c2", [record(64, "bf16", slow)])])
    merged = merge_rerun(first, rerun)
    assert merged.slower_cases == ["gemm[m=64,n=64,k=64] bf16 torch cpu"]
    assert merged.repro == rerun.repro and list(merged.repro) == merged.slower_cases
    assert "Reproduce a regressed case:" in render_markdown(merged)

# --- records from someone else: a run file or store is input, and its commands are pasted by people -----------

HOSTILE_REPRO = "fp8bench run --workload gemm; touch /tmp/pwned-x; echo $(touch /tmp/pwned-y)"


def pasteable(md: str) -> list[str]:
    """The lines of a report's fenced code blocks: what people copy into a shell."""
    out, inside = [], False
    for line in md.splitlines():
        if line.strip().startswith("```"):
            inside = not inside
        elif inside:
            out.append(line.strip())
    return out


def _regressed_report(slow_record: dict) -> dict:
    fast, slow = [1e-3 * (1 + 0.001 * i) for i in range(20)], [2e-3 * (1 + 0.001 * i) for i in range(20)]
    base = payload("b", [{**slow_record, "samples_s": fast, "median_s": fast[10]}])
    cand = payload("c", [{**slow_record, "samples_s": slow, "median_s": slow[10]}])
    return gate([base], [cand], GateConfig())


def test_a_stored_command_is_never_what_a_report_shows():
    report = _regressed_report({**record(64, "bf16", [1e-3]), "repro": HOSTILE_REPRO})
    md = render_markdown(report)
    assert "touch" not in md and "$(" not in md
    [shown] = pasteable(md)
    assert shown.startswith("fp8bench run --workload gemm --shape m=64,n=64,k=64")
    assert "fp8bench run --workload gemm --shape m=64,n=64,k=64 --precision bf16 --backend torch --device cpu" in md


@pytest.mark.parametrize("field, value", [
    ("device", "cuda:0`;touch /tmp/pwned;`"),
    ("precision", "bf16; touch /tmp/pwned"),
    ("backend", "torch\x1b[2K\rfp8bench run"),  # a terminal escape that hides what precedes it
    ("workload", "gemm\x1b]52;c;dG91Y2ggL3RtcC9wd25lZA==\x07"),  # OSC 52: writes the clipboard
    ("shape", {"m": "64 --out /etc/passwd", "n": 64, "k": 64}),
])
def test_a_field_that_is_no_flag_value_gives_no_command_and_names_the_field(field, value):
    rec = {**record(64, "bf16", [1e-3]), field: value}
    cmd = repro_of(rec, {"settings": {}})
    assert cmd.startswith("# no command: field ") and repr(field) in cmd
    assert "touch" not in cmd and "\x1b" not in cmd and "passwd" not in cmd
    md = render_markdown(_regressed_report(rec))
    assert "\x1b" not in md and "\x07" not in md
    [shown] = pasteable(md)
    assert shown == cmd
    shlex.split(cmd)  # what is shown parses as a shell line (a comment)


def test_a_control_character_in_a_setting_gives_no_command():
    cmd = repro_of(record(64, "bf16", [1e-3]), {"settings": {"amax_compute_algo": "max\x1b[2J"}})
    assert cmd == "# no command: field 'amax_compute_algo' is not a finite number or a name"
    assert repro_of(record(64, "bf16", [1e-3]), {"settings": {"budget_s": float("nan")}}).startswith("# no command")


def test_a_record_of_a_run_under_torchrun_gets_the_torchrun_command():
    # The run header says how many ranks measured under ``spec.distributed`` (fp8bench.hardware.distributed.run_spec),
    # whatever the record is: a typed record built by the runner or a stored one.
    header = {"settings": {}, "spec": {"distributed": {"world_size": 2, "ranks_per_node": 2, "backend": "nccl",
                                                       "launcher": "torchrun"}}}
    rec = {"workload": "gemm", "shape": {"m": 64, "n": 64, "k": 64}, "precision": "bf16", "backend": "torch",
           "device": "cuda:0", "status": "ok"}
    expected = ("torchrun --nproc-per-node 2 -m fp8bench run --workload gemm --shape m=64,n=64,k=64 --precision bf16 "
                "--backend torch --device cuda")
    # Each rank takes its own GPU (cuda becomes cuda:LOCAL_RANK), never rank 0's cuda:0 for all of them.
    assert repro_of(rec, header) == expected
    assert repro_of(load_record(rec), header) == expected
    # A CPU run under torchrun (gloo), launched with the default --device auto, is reproduced on CPUs.
    on_cpu = repro_of({**rec, "device": "cpu"}, {**header, "settings": {"device": "auto"}})
    assert on_cpu.startswith("torchrun --nproc-per-node 2 ") and on_cpu.endswith("--device cpu")
    # A header written before ranks per node were recorded cannot tell one node from several: no command.
    older = {**header, "spec": {"distributed": {"world_size": 16, "backend": "nccl", "launcher": "torchrun"}}}
    assert repro_of(rec, older) == ("# no command: measured by 16 ranks, and the run did not record how many were "
                                    "on each node")


def test_the_flags_written_only_when_changed_take_the_defaults_a_run_has_without_them():
    """Commands leave out --throttle-threshold, --throttle-recovery-delay and --energy-error at their defaults (they
    stay short, and bisect's probes of commits before those flags still parse them); the defaults repro keeps are
    the settings' own."""
    from fp8bench.core.repro import CHANGED_FLAGS
    from fp8bench.measure.settings import RunSettings

    header = RunSettings().to_header()
    assert {key: header[key] for key, _, _ in CHANGED_FLAGS} == {key: default for key, _, default in CHANGED_FLAGS}
    rec = {"workload": "gemm", "shape": {"m": 8, "n": 8, "k": 8}, "precision": "bf16", "backend": "torch",
           "device": "cpu"}
    plain = repro_command(rec, header)
    assert not any(flag in plain for _, flag, _ in CHANGED_FLAGS) and "--blocked-stream" not in plain
    changed = repro_command(rec, {**header, "throttle_threshold": 0.5, "energy_error_target": None,
                                  "blocked_stream": True, "lock_clocks": "base"})
    assert changed.endswith("--throttle-threshold 0.5 --energy-error 0 --blocked-stream") and \
        "--lock-clocks base" in changed


def test_a_run_over_several_nodes_gets_no_command():
    """torchrun --nproc-per-node 16 on one node would start 16 ranks where the run had 8 on each of two nodes (and
    ask for cuda:8 to cuda:15); a run over nodes needs a rendezvous on each, which no one command gives."""
    header = {"settings": {}, "spec": {"distributed": {"world_size": 16, "ranks_per_node": 8, "backend": "nccl",
                                                       "launcher": "torchrun"}}}
    rec = {"workload": "collective", "shape": {"op": "all_reduce", "n": 1024}, "precision": "bf16",
           "backend": "torch", "device": "cuda:0", "status": "ok"}
    assert repro_of(rec, header) == ("# no command: measured by 16 ranks over several nodes (8 each): start torchrun "
                                     "on each node with a rendezvous")
