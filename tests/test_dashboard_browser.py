"""The dashboard in a real headless Chromium: served by `fp8bench dashboard` on loopback, every page opened.

Each page must draw its plotly chart in the DOM (``.js-plotly-plot``) without a Streamlit exception box; a
screenshot of each is saved (under the test's tmp dir, or ``$FP8BENCH_SCREENSHOT_DIR``, e.g.
``results/screenshots``, which git ignores). Needs Debian's ``/usr/bin/chromium`` and the Python ``playwright``
package; without them the tests skip, or fail where CI requires every service.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import skip_or_fail
from dashboard_support import shared_store

CHROMIUM = os.environ.get("FP8BENCH_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
# url path -> title on the page (url paths are the page files' names, set by st.Page)
PAGES = {"overview": "Overview: does FP8 pay off?", "roofline": "Roofline", "phases": "Phases", "energy": "Energy",
         "numerics": "Numerics", "history": "History by commit", "payoff": "Where FP8 pays off",
         "compare": "Compare two runs", "environment": "Environment"}
# Sidebar link texts that are not the first word of the page's heading.
LINKS = {"payoff": "Payoff"}
RENDER_TIMEOUT_MS = 90_000  # a busy 2-core machine: first load reads the store and imports plotly

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def cpu_run_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    return shared_store(tmp_path_factory)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    if not shutil.which(CHROMIUM):
        skip_or_fail(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        skip_or_fail("the playwright Python package is not installed (pip install 'fp8bench[dev]')")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


def serve(target: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start `fp8bench dashboard` on a free loopback port; returns the process and its base URL."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "fp8bench.cli", "dashboard", "--results-dir", str(target),
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"dashboard exited {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return proc, base
        except OSError:
            time.sleep(0.3)
    stop(proc)
    raise AssertionError("dashboard did not answer /_stcore/health within 60 s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def server(cpu_run_store) -> Iterator[str]:
    proc, base = serve(cpu_run_store["dir"])
    yield base
    stop(proc)


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = os.environ.get("FP8BENCH_SCREENSHOT_DIR")
    path = Path(out) if out else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def wait_rendered(page: object, title: str) -> None:
    """Wait until the page titled ``title`` finished its script run and drew a plotly chart."""
    page.get_by_role("heading", name=title).wait_for(timeout=RENDER_TIMEOUT_MS)
    # Streamlit marks elements of the previous run stale until the new run replaces them.
    page.wait_for_function("() => !document.querySelector('[data-stale=\"true\"]')", timeout=RENDER_TIMEOUT_MS)
    page.locator(".js-plotly-plot .main-svg").first.wait_for(state="visible", timeout=RENDER_TIMEOUT_MS)
    # The toolbar shows "Stop" while the script runs; the page is complete when it is gone.
    page.get_by_role("button", name="Stop").wait_for(state="hidden", timeout=RENDER_TIMEOUT_MS)


def test_every_page_draws_its_plotly_chart(browser, server, shots):
    """Open the app, then visit every page through the sidebar as a user would; a screenshot of each."""
    # Tall: Streamlit scrolls inside its main container, so a full-page screenshot is the viewport.
    page = browser.new_page(viewport={"width": 1400, "height": 2200})
    try:
        page.goto(server)  # the default page, Overview, lives at "/"
        for name, title in PAGES.items():
            if name != "overview":
                page.get_by_role("link", name=LINKS.get(name, title.split()[0])).click()
            wait_rendered(page, title)
            assert page.locator('[data-testid="stException"]').count() == 0, name
            assert page.get_by_text("Page not found").count() == 0, name
            assert name == "overview" or page.url.split("?")[0].endswith(f"/{name}")
            page.wait_for_timeout(300)  # let plotly finish its transitions before the picture
            shot = shots / f"{name}.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000, name
    finally:
        page.close()


def test_filters_stay_in_the_url_across_pages(browser, server):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(f"{server}/phases?backend=emulated&precision=bf16,fp8_rowwise")
        wait_rendered(page, "Phases")
        page.get_by_role("link", name="Numerics").click()
        wait_rendered(page, "Numerics")
        page.wait_for_function("() => window.location.search.includes('backend=emulated')", timeout=30_000)
        assert "/numerics" in page.url and "precision=bf16%2Cfp8_rowwise" in page.url
    finally:
        page.close()


def test_csv_download_holds_the_table_rows(browser, server, tmp_path):
    page = browser.new_page(viewport={"width": 1400, "height": 2200})
    try:
        page.goto(f"{server}/?workload=gemm")
        wait_rendered(page, PAGES["overview"])
        with page.expect_download(timeout=RENDER_TIMEOUT_MS) as info:
            page.get_by_role("button", name="Download speedups as CSV").click()
        path = tmp_path / "speedups.csv"
        info.value.save_as(path)
        lines = path.read_text().splitlines()
        assert lines[0].startswith("device_label,workload,shape_label,precision,backend,median_s,")
        assert len(lines) == 1 + 5  # bf16, fp8_rowwise on torch and emulated, mxfp8 emulated (torch skips it)
        assert all(",gemm,128x128x128," in line for line in lines[1:])
    finally:
        page.close()


def test_corrupted_store_is_a_message_in_the_browser(browser, tmp_path, shots):
    (tmp_path / "fp8bench.sqlite").write_bytes(b"not a database " * 400)
    proc, base = serve(tmp_path)
    page = browser.new_page()
    try:
        page.goto(base)
        page.get_by_text("could not be read").wait_for(timeout=RENDER_TIMEOUT_MS)
        assert page.locator('[data-testid="stException"]').count() == 0
        page.screenshot(path=str(shots / "corrupted_store.png"))
    finally:
        page.close()
        stop(proc)
