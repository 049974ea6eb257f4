"""Lint of the GitHub Actions workflow: structure, expressions, shell syntax, and every fp8bench call parses.

actionlint is not installable here (its wheel downloads a binary), so the checks that matter for this workflow are
done directly: the YAML loads; triggers are the pull request (kernel paths), the nightly schedule and manual runs;
jobs run on self-hosted GPU runners and never for forks; steps are well-formed with pinned actions; ``${{ }}``
expressions use known contexts and existing step ids; every ``run:`` script passes ``bash -n``; and every
``fp8bench`` command in it parses with the real command-line parser, so a renamed flag breaks this test, not CI.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fp8bench.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "fp8bench.yml"
EXPR = re.compile(r"\$\{\{(.*?)\}\}", re.S)
CONTEXTS = {"github", "steps", "secrets", "runner", "env", "vars", "needs", "matrix", "inputs", "job", "always",
            "success", "failure", "cancelled"}
STEP_KEYS = {"name", "id", "if", "uses", "run", "with", "env", "shell", "continue-on-error", "timeout-minutes",
             "working-directory"}


@pytest.fixture(scope="module")
def workflow() -> dict:
    data = yaml.safe_load(WORKFLOW.read_text())
    # YAML 1.1 reads the key `on` as the boolean True.
    data["on"] = data.pop(True, data.get("on"))
    return data


def _steps(workflow):
    for job_name, job in workflow["jobs"].items():
        for step in job["steps"]:
            yield job_name, job, step


def test_triggers(workflow):
    on = workflow["on"]
    assert set(on) == {"pull_request", "schedule", "workflow_dispatch"}
    assert "kernels/**" in on["pull_request"]["paths"]
    (cron,) = on["schedule"]
    assert len(cron["cron"].split()) == 5
    assert workflow["permissions"]["pull-requests"] == "write"


def test_jobs_run_on_self_hosted_gpu_runners_and_not_for_forks(workflow):
    assert set(workflow["jobs"]) == {"ab-gate", "nightly"}
    for job in workflow["jobs"].values():
        assert {"self-hosted", "gpu"} <= set(job["runs-on"])
        assert job["timeout-minutes"] > 0
    assert "head.repo.full_name == github.repository" in workflow["jobs"]["ab-gate"]["if"]
    assert "schedule" in workflow["jobs"]["nightly"]["if"]


def test_steps_are_well_formed_and_actions_pinned(workflow):
    for job_name, _job, step in _steps(workflow):
        assert set(step) <= STEP_KEYS, (job_name, step)
        assert ("uses" in step) != ("run" in step), (job_name, step)
        if "uses" in step:
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+", step["uses"]), step["uses"]
        assert step.get("name"), step


def test_expressions_use_known_contexts_and_existing_step_ids(workflow):
    text = WORKFLOW.read_text()
    assert text.count("${{") == text.count("}}")
    for expr in EXPR.findall(text):
        for word in re.findall(r"(?<![\w.'-])([a-z_]+)(?=[.(])", expr):
            assert word in CONTEXTS, f"unknown context {word!r} in ${{{{{expr}}}}}"
    for job_name, job in workflow["jobs"].items():
        ids = {s["id"] for s in job["steps"] if "id" in s}
        blob = yaml.safe_dump(job)
        for ref in re.findall(r"steps\.([\w-]+)\.outputs", blob):
            assert ref in ids, f"{job_name} refers to missing step id {ref!r}"


def _scripts(workflow):
    for job_name, _job, step in _steps(workflow):
        if "run" in step:
            yield job_name, step["name"], EXPR.sub("EXPR", step["run"])


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_run_scripts_pass_bash_syntax_check(workflow):
    for job_name, name, script in _scripts(workflow):
        out = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
        assert out.returncode == 0, f"{job_name} / {name}: {out.stderr}"


def test_every_fp8bench_command_parses(workflow):
    parser = build_parser()
    seen = set()
    for job_name, name, script in _scripts(workflow):
        for line in script.splitlines():
            for segment in re.split(r"\|\||&&|;", line):
                if not segment.strip().startswith("fp8bench "):
                    continue
                segment = re.split(r"\s(?:\d?>>?|\|)\s", segment)[0]  # the command, without a redirection or pipe
                words = shlex.split(segment.strip())
                if not words or words[0] != "fp8bench":
                    continue
                try:
                    args = parser.parse_args(words[1:])
                except SystemExit as exc:  # argparse's way of refusing
                    pytest.fail(f"{job_name} / {name}: `{segment.strip()}` does not parse ({exc})")
                seen.add(args.verb)
    assert {"ab", "run", "ingest", "doctor", "changes"} <= seen


def test_paths_the_workflow_uses_exist(workflow):
    text = WORKFLOW.read_text()
    assert (ROOT / "workloads" / "suites" / "ci_bench").is_dir() and "workloads/suites/ci_bench" in text
    for suite in re.findall(r"--suite (\w+)", text):
        assert (ROOT / "workloads" / "suites" / f"{suite}.yaml").is_file(), suite


def test_the_report_comment_is_found_by_its_marker_not_by_edit_last(workflow):
    from fp8bench.render.gate_markdown import REPORT_MARKER

    (post,) = [s for _j, _job, s in _steps(workflow) if s["name"] == "Post the report on the pull request"]
    assert post["env"]["MARKER"] == REPORT_MARKER
    assert "--edit-last" not in WORKFLOW.read_text()
    assert "--method PATCH" in post["run"] and "startswith(env.MARKER)" in post["run"]


def test_aa_step_tolerates_inconclusive_by_flag_not_by_exit_code_arithmetic(workflow):
    (aa,) = [s for _j, _job, s in _steps(workflow) if s["name"] == "A/A noise of this runner"]
    assert "--fail-on regression" in aa["run"] and "set +e" not in aa["run"]


def test_ci_suite_sqnr_floors_are_gated_not_asserted(workflow):
    (numerics,) = [s for _j, _job, s in _steps(workflow) if s.get("id") == "numerics"]
    assert "--metric sqnr_db" in numerics["run"] and "--sqnr-floor bf16=35" in numerics["run"]
    assert "--sqnr-floor 'fp8_*=20'" in numerics["run"] and "--paired" in numerics["run"]
    suite = (ROOT / "workloads" / "suites" / "ci_bench" / "test_gemm_ci.py").read_text()
    assert "sqnr_db\"] >=" not in suite and "SQNR_FLOOR" not in suite
    (verdict,) = [s for _j, _job, s in _steps(workflow) if s["name"].startswith("Verdict")]
    assert "NUMERICS_CODE" in verdict["run"]


def test_nightly_runs_every_kind_of_gpu_runner_on_all_its_gpus_into_the_shared_store(workflow):
    nightly = workflow["jobs"]["nightly"]
    labels = nightly["strategy"]["matrix"]["device"]
    assert labels and len(set(labels)) == len(labels) and nightly["strategy"]["fail-fast"] is False
    assert "${{ matrix.device }}" in nightly["runs-on"]
    # The store's URL and its password come from secrets, the password through libpq's PGPASSWORD (docs/security.md).
    assert nightly["env"]["FP8BENCH_STORE"] == "${{ secrets.FP8BENCH_STORE_URL }}"
    assert nightly["env"]["PGPASSWORD"] == "${{ secrets.FP8BENCH_STORE_PASSWORD }}"
    runs = [line.strip() for step in nightly["steps"] for line in step.get("run", "").splitlines()
            if line.strip().startswith("fp8bench run ")]
    assert len(runs) == 3 and all('--devices all --store "$FP8BENCH_STORE"' in line for line in runs)
    (upload,) = [s for s in nightly["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
    assert "matrix.device" in upload["with"]["name"]  # one artifact per runner kind, no name clash
    (selfcheck,) = [s for s in nightly["steps"] if s["name"].startswith("Selfcheck")]
    assert '--device "cuda:$i"' in selfcheck["run"]
    # Last night's run and tonight's regressions are this runner's GPU model's: the other jobs write concurrently.
    (before,) = [s for s in nightly["steps"] if s.get("id") == "before"]
    assert 'runs["device_name"] == name' in before["run"] and "device_name=" in before["run"]
    (new,) = [s for s in nightly["steps"] if s["name"] == "New regressions since last night"]
    assert '--device "$DEVICE_NAME"' in new["run"]
    assert new["env"]["DEVICE_NAME"] == "${{ steps.before.outputs.device_name }}"


def test_nightly_sees_the_whole_history_and_fails_on_a_new_regression(workflow):
    steps = {s["name"]: s for job_name, _job, s in _steps(workflow) if job_name == "nightly"}
    assert steps["Check out main"]["with"]["fetch-depth"] == 0  # History orders by first-parent depth
    assert steps["Latest run of this runner's GPU model in the store before tonight's"]["id"] == "before"
    new = steps["New regressions since last night"]
    assert "--fail-on-new" in new["run"] and new["env"]["SINCE"] == "${{ steps.before.outputs.run_id }}"
