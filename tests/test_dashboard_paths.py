"""No dashboard page shows where things are on the server, or a store URL's password.

A page is read on other machines. The store's absolute path (sidebar, empty-store and error messages), a run
header's suite file, a failure reason quoting a file and a profile trace's path name the server's folders: each is
shown relative to the server's working directory or by its last component only. Every page is drawn with
Streamlit's AppTest over a store whose folder has a name found nowhere else, and every text the page holds (each
element's content, the tables' cells) is searched for it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
pytest.importorskip("plotly")

from streamlit.testing.v1 import AppTest  # noqa: E402

import fp8bench.dashboard  # noqa: E402
from fp8bench.core.redact import hide_paths, shown_path  # noqa: E402
from fp8bench.dashboard.data import STORE_ENV  # noqa: E402
from fp8bench.results.store import open_store  # noqa: E402
from tests.gate_fixtures import payload, record  # noqa: E402

APP_DIR = Path(fp8bench.dashboard.__file__).parent
PAGES = sorted(p.name for p in (APP_DIR / "views").glob("*.py"))
SECRET_FOLDER = "srv-private-7f3a"  # the server's folder a visitor must never learn
PASSWORD = "hunter2-pw"


def _store(root: Path) -> Path:
    """A store under ``root/SECRET_FOLDER`` whose run header, failure reason and trace path name files there."""
    store = root / SECRET_FOLDER / "results"
    inside = str(root / SECRET_FOLDER)
    samples = [1e-3 * (1 + i / 100) for i in range(5)]
    for i in range(2):
        failed = record(128, "fp8_rowwise", None, status="failed",
                        reason=f"OSError: cannot open {inside}/kernels/cache.bin")
        ok = record(64, "bf16", samples)
        ok["profile_trace"] = f"{inside}/results/run{i}.profile/gemm.pt.trace.json"
        run = payload(f"run{i}", [ok, record(64, "fp32", samples), failed], commit=f"c{i}" * 4,
                      started_at=f"2026-11-2{i}T00:00:00+00:00")
        run["run"]["spec"] = {"suite": "ci", "suite_path": f"{inside}/workloads/suites/ci.yaml"}
        open_store(store).ingest_run(run)
    return store


def _texts(at: AppTest) -> str:
    """Everything a page holds, backslashes removed: each element's message (markdown, captions, JSON, code,
    widget labels and options, chart specs) and every cell of its tables."""
    out: list[str] = []

    def walk(node: object) -> None:
        proto = getattr(node, "proto", None)
        if proto is not None:
            out.append(str(proto))
        for child in (getattr(node, "children", None) or {}).values():
            walk(child)

    walk(at._tree)
    out += [frame.value.to_csv() for frame in at.dataframe]
    # Markdown is backslash-escaped ("srv\\-private"): the text as a reader sees it has no backslashes.
    return "\n".join(out).replace("\\", "").replace("\u2060", "")


def _page(monkeypatch: pytest.MonkeyPatch, target: str, page: str) -> AppTest:
    monkeypatch.setenv(STORE_ENV, target)
    at = AppTest.from_file(str(APP_DIR / "app.py"), default_timeout=120)
    at.run()
    if page != "overview.py":
        at.switch_page(f"views/{page}")
        at.run()
    return at


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _store(tmp_path_factory.mktemp("paths"))


@pytest.mark.parametrize("page", PAGES)
def test_no_page_shows_a_server_path(monkeypatch, store, page):
    at = _page(monkeypatch, str(store), page)
    assert not at.exception, [e.value for e in at.exception]
    text = _texts(at)
    assert SECRET_FOLDER not in text
    assert "fp8bench.sqlite" in text or "results" in text  # the store is still named, by its last component


def test_environment_page_shows_the_run_header_and_reasons_with_short_paths(monkeypatch, store):
    at = _page(monkeypatch, str(store), "environment.py")
    text = _texts(at)
    # The header is shown as JSON, which writes "…" as \u2026 (its backslash removed by _texts).
    assert "u2026/ci.yaml" in text and "workloads/suites" not in text
    assert "…/cache.bin" in text and SECRET_FOLDER not in text


@pytest.mark.parametrize("target", [
    f"postgresql://fp8:{PASSWORD}@127.0.0.1:9/fp8bench",  # nothing listens on port 9: the store cannot be read
    "/srv-private-7f3a/results/fp8bench.sqlite",  # a SQLite file that does not exist: the empty store's message
])
def test_store_messages_show_no_password_and_no_server_folder(monkeypatch, target):
    at = _page(monkeypatch, target, "overview.py")
    text = _texts(at)
    assert PASSWORD not in text and SECRET_FOLDER not in text
    assert not at.exception, [e.value for e in at.exception]


def test_shown_paths_are_relative_below_the_working_directory_else_their_last_component(tmp_path):
    cwd = str(tmp_path / "server")
    assert shown_path(f"{cwd}/results/fp8bench.sqlite", cwd) == "results/fp8bench.sqlite"
    assert shown_path("/home/alice/secret/fp8bench.sqlite", cwd) == "…/fp8bench.sqlite"
    assert shown_path("/", cwd) == "…"
    assert hide_paths(f"sqlite:///{cwd}/s.sqlite and /etc/passwd; see http://host/a/b, a/b, 1/2", cwd) == \
        "sqlite:///s.sqlite and …/passwd; see http://host/a/b, a/b, 1/2"
    assert hide_paths("postgresql://u:pw@db:5432/x", cwd) == "postgresql://u:***@db:5432/x"
