"""The dashboard in a real headless Chromium: served by `fp8bench dashboard` on loopback, every page opened.

Each page must draw its plotly chart in the DOM (``.js-plotly-plot``) without a Streamlit exception box; a
screenshot of each is saved (under the test's tmp dir, or ``$FP8BENCH_SCREENSHOT_DIR``, e.g.
``results/screenshots``, which git ignores). Needs Debian's ``/usr/bin/chromium`` and the Python ``playwright``
package; without them the tests skip, or fail where CI requires every service.
"""

from __future__ import annotations

import http.server
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import skip_or_fail
from dashboard_support import every_record_store, shared_store

CHROMIUM = os.environ.get("FP8BENCH_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
# url path -> title on the page (url paths are the page files' names, set by st.Page)
PAGES = {"overview": "Overview: does FP8 pay off?", "roofline": "Roofline", "phases": "Phases", "energy": "Energy",
         "numerics": "Numerics", "history": "History by commit", "payoff": "Where FP8 pays off",
         "compare": "Compare two runs", "environment": "Environment"}
# Sidebar link texts that are not the first word of the page's heading.
LINKS = {"payoff": "Payoff"}
ALL_PAGES = {**PAGES, "regressions": "Regressions"}
RENDER_TIMEOUT_MS = 90_000  # a busy 2-core machine: first load reads the store and imports plotly
SETTLE_MS, SETTLE_CHECKS = 1000, 20  # a page is drawn when its script shows no "Stop" for SETTLE_MS

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


def wait_rendered(page: object, title: str, chart: bool = True) -> None:
    """Wait until the page titled ``title`` finished its script run and (``chart``) drew a plotly chart."""
    page.get_by_role("heading", name=title).wait_for(timeout=RENDER_TIMEOUT_MS)
    # Streamlit marks elements of the previous run stale until the new run replaces them.
    page.wait_for_function("() => !document.querySelector('[data-stale=\"true\"]')", timeout=RENDER_TIMEOUT_MS)
    if chart:
        page.locator(".js-plotly-plot .main-svg").first.wait_for(state="visible", timeout=RENDER_TIMEOUT_MS)
    # The toolbar shows "Stop" while the script runs, but only a moment after the run starts: the page is complete
    # when "Stop" stays away for a while.
    stop_button = page.get_by_role("button", name="Stop")
    for _ in range(SETTLE_CHECKS):
        stop_button.wait_for(state="hidden", timeout=RENDER_TIMEOUT_MS)
        page.wait_for_timeout(SETTLE_MS)
        if stop_button.count() == 0:
            break


def picture(page: object, path: Path) -> None:
    """A full-page screenshot once plotly finished its transitions (a blank page would be a few kB)."""
    page.wait_for_timeout(500)
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000, path.name


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
            picture(page, shots / f"{name}.png")
    finally:
        page.close()


@pytest.fixture(scope="module")
def every_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    return every_record_store(tmp_path_factory)


def test_a_store_of_every_record_opens_on_every_page_without_a_traceback(browser, every_store, shots):
    """Every workload, precision, backend family and status the product writes (dashboard_support), each page
    opened from the sidebar: no exception box, no traceback text, a chart wherever the page draws one (Regressions
    has a one-commit history and says so instead), and a screenshot ``every_record_<page>.png`` of each."""
    proc, base = serve(every_store["dir"])
    page = browser.new_page(viewport={"width": 1400, "height": 2200})
    try:
        page.goto(base)
        for name, title in ALL_PAGES.items():
            if name != "overview":
                page.get_by_role("link", name=LINKS.get(name, title.split()[0])).click()
            wait_rendered(page, title, chart=name != "regressions")
            if name == "regressions":  # no chart to wait for: its answer
                page.get_by_text("Not enough history").wait_for(timeout=RENDER_TIMEOUT_MS)
            assert page.locator('[data-testid="stException"]').count() == 0, name
            text = page.locator("body").inner_text()
            assert "Traceback" not in text and 'File "' not in text and "could not be drawn" not in text, name
            assert "No open regression" not in text, name
            picture(page, shots / f"every_record_{name}.png")
    finally:
        page.close()
        stop(proc)


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


class _PixelHandler(http.server.BaseHTTPRequestHandler):
    """Counts requests: an image rendered from hostile Markdown would make the browser fetch from here."""

    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - the http.server hook's name
        type(self).hits.append(self.path)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


LINK_TARGETS = """() => Array.from(document.querySelectorAll('a'))
    .map(a => a.getAttribute('href') || a.getAttribute('xlink:href') || '')"""


def test_url_parameters_and_stored_names_render_as_text_not_markup(browser, tmp_path):
    """The probes: `?backend=[Session expired](http://evil.example)` once showed a live link, `![x](http://host/
    pixel)` made the browser fetch it, and a stored device name did the same through the filter warning; the
    same name in plotly's HTML (`<a href>`) became a link on the heatmap."""
    from fp8bench.results.store import open_store
    from tests.gate_fixtures import payload, record

    pixel = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _PixelHandler)
    threading.Thread(target=pixel.serve_forever, daemon=True).start()
    host = f"http://127.0.0.1:{pixel.server_address[1]}"
    stored_name = (f"![d]({host}/px) [Login](http://evil.example/d) :red[x] "  # within the 128-character column
                   '<a href="http://evil.example/c">chart link</a>')
    run = payload("hostile", [record(128, "bf16", [1e-3, 1.1e-3, 0.9e-3]),
                              record(128, "fp8_rowwise", [0.8e-3, 0.9e-3, 0.7e-3])])
    run["run"]["device"]["name"] = stored_name
    open_store(tmp_path).ingest_run(run)
    typed_backend = "[Session expired](http://evil.example/url) :red[typed]"
    typed_device = f"![x]({host}/pixel-url)"
    proc, base = serve(tmp_path)
    page = browser.new_page(viewport={"width": 1400, "height": 1200})
    try:
        page.goto(f"{base}/?" + urllib.parse.urlencode({"backend": typed_backend, "device": typed_device}))
        page.get_by_text("matches no record").nth(1).wait_for(timeout=RENDER_TIMEOUT_MS)
        page.wait_for_timeout(1000)  # give any image a moment to be requested
        sidebar = page.locator('[data-testid="stSidebar"]')
        text = sidebar.inner_text().replace("\u2060", "")  # the invisible joiners that stop GFM autolinks
        assert typed_backend in text and typed_device in text and stored_name in text
        assert not [t for t in page.evaluate(LINK_TARGETS) if "evil" in t]
        assert page.locator(f'img[src^="{host}"]').count() == 0
        page.goto(base)  # no filter: the stored name labels the heatmap's row
        wait_rendered(page, PAGES["overview"])
        assert page.locator(".js-plotly-plot").get_by_text("chart link", exact=False).count() >= 1
        assert not [t for t in page.evaluate(LINK_TARGETS) if "evil" in t]
        assert _PixelHandler.hits == []
    finally:
        page.close()
        stop(proc)
        pixel.shutdown()


def test_regressions_page_lists_the_step_and_draws_its_history(browser, tmp_path, shots):
    """A nightly history whose bf16 case slows 30% from its 17th commit: the Regressions page, opened in the
    browser, lists that change with its first bad commit and draws the series around it."""
    from test_changes import commit_of, nightly_store

    store = tmp_path / "store"
    nightly_store(store, n=24, slow_from=16)
    proc, base = serve(store)
    page = browser.new_page(viewport={"width": 1400, "height": 2200})
    try:
        page.goto(f"{base}/regressions")
        wait_rendered(page, "Regressions")
        assert page.locator('[data-testid="stException"]').count() == 0
        # The table is drawn on a canvas: read the count above it and the chart of the change below it.
        metric = page.locator('[data-testid="stMetric"]').filter(has_text="Open regressions")
        assert metric.locator('[data-testid="stMetricValue"]').inner_text().strip() == "1"
        page.get_by_text("gemm[m=64,n=64,k=64] bf16 torch cpu · Test CPU").wait_for(timeout=RENDER_TIMEOUT_MS)
        csv = page.get_by_role("button", name="Download regressions as CSV")
        with page.expect_download() as download:
            csv.click()
        rows = Path(download.value.path()).read_text().splitlines()
        assert len(rows) == 2 and commit_of(16) in rows[1] and commit_of(15) in rows[1]
        page.wait_for_timeout(300)
        shot = shots / "regressions.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
    finally:
        page.close()
        stop(proc)
