"""Every verb that writes a file a user named refuses what `run --out` refuses: a device, a FIFO or a symbolic link,
and an existing file without --force; checked before any work, and again at the moment of writing."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from fp8bench.cli import main
from fp8bench.results.runfile import RunFileError
from tests.gate_fixtures import payload, record

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def run_file(tmp_path) -> Path:
    path = tmp_path / "run.json"
    samples = [1e-3 * (1 + i / 100) for i in range(10)]
    path.write_text(json.dumps(payload("r1", [record(64, "bf16", samples)])))
    return path


def targets(tmp_path: Path) -> dict[str, Path]:
    """A FIFO, a link to a file that must survive, and (as root) a character device like /dev/full."""
    made = {}
    os.mkfifo(tmp_path / "fifo")
    made["a FIFO (named pipe)"] = tmp_path / "fifo"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "link").symlink_to(victim)
    made["a symbolic link"] = tmp_path / "link"
    if os.geteuid() == 0:
        os.mknod(tmp_path / "full", 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        made["a character device"] = tmp_path / "full"
    return made


def unchanged(path: Path, before: os.stat_result) -> bool:
    after = os.lstat(path)
    return (before.st_mode, before.st_ino, before.st_rdev) == (after.st_mode, after.st_ino, after.st_rdev)


def test_export_out_refuses_devices_fifos_and_links_even_with_force(tmp_path, run_file, capsys):
    for kind, target in targets(tmp_path).items():
        before = os.lstat(target)
        code = main(["export", str(run_file), "--format", "csv", "--out", str(target), "--force"])
        err = capsys.readouterr().err
        assert code == 2 and unchanged(target, before), kind
        assert f"refusing to write the export over {target}: it is {kind}" in err
    assert (tmp_path / "victim.txt").read_text() == "keep me"


def test_export_out_keeps_an_existing_file_unless_force(tmp_path, run_file, capsys):
    out = tmp_path / "results.csv"
    out.write_text("earlier export")
    assert main(["export", str(run_file), "--format", "csv", "--out", str(out)]) == 2
    assert "exists (an earlier run?); refusing to overwrite it" in capsys.readouterr().err
    assert out.read_text() == "earlier export"
    assert main(["export", str(run_file), "--format", "csv", "--out", str(out), "--force"]) == 0
    assert out.read_text().startswith("run_id,")
    new = tmp_path / "new.csv"
    assert main(["export", str(run_file), "--format", "csv", "--out", str(new)]) == 0 and new.is_file()
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(new.stat().st_mode) == 0o666 & ~umask  # an ordinary new file's permissions


def test_a_link_that_appears_between_the_check_and_the_write_is_not_replaced(tmp_path, monkeypatch):
    """The no-overwrite write links the new file into place, which fails if anything appeared there meanwhile."""
    import fp8bench.results.runfile as runfile
    from fp8bench.results.runfile import write_user_file

    out = tmp_path / "out.csv"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    real_check = runfile.check_writable

    def check_then_race(path, *args, **kwargs):
        real_check(path, *args, **kwargs)
        path.symlink_to(victim)  # an attacker wins the race

    monkeypatch.setattr(runfile, "check_writable", check_then_race)
    with pytest.raises(RunFileError, match="appeared while the export was being written"):
        write_user_file(out, b"data", overwrite=False, what="the export")
    assert out.is_symlink() and victim.read_text() == "keep me"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.csv.")]  # no temporary file left


def test_gate_report_dir_refuses_linked_reports_and_keeps_existing_ones(tmp_path, run_file, capsys):
    folder = tmp_path / "reports"
    folder.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (folder / "report.md").symlink_to(victim)
    args = ["gate", str(run_file), str(run_file), "--report-dir", str(folder), "--no-store-report"]
    assert main(args) == 3
    assert "refusing to write the report over" in capsys.readouterr().err and victim.read_text() == "keep me"
    (folder / "report.md").unlink()
    assert main(args) == 0 and (folder / "report.json").is_file()
    capsys.readouterr()
    assert main(args) == 3  # a second gate into the same folder keeps the first reports
    assert "report.md exists" in capsys.readouterr().err
    assert main([*args, "--force"]) == 0


def test_ab_refuses_an_earlier_ab_runs_files_before_any_round(tmp_path, capsys):
    out = tmp_path / "ab"
    (out / "head").mkdir(parents=True)
    (out / "head" / "r03.json").write_text("{}")  # a round of an earlier A/B run
    code = main(["ab", "--base", str(ROOT), "--head", str(ROOT), "--rounds", "4", "--out", str(out), "--",
                 "--shape", "64x64x64", "--precision", "bf16", "--backend", "torch"])
    err = capsys.readouterr().err
    assert code == 3 and "r03.json exists" in err and "--force" in err
    assert sorted(out.rglob("*.json")) == [out / "head" / "r03.json"]  # refused before any round ran
