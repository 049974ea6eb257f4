"""The dashboard shows typed and stored text as text (Markdown and plotly), and asks for a login where Streamlit's
authentication is configured. The real-browser check is in test_dashboard_browser.py."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit")
pytest.importorskip("plotly")

import plotly.express as px  # noqa: E402
import plotly.graph_objects as go  # noqa: E402
from dashboard_support import as_read  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

import fp8bench.dashboard  # noqa: E402
from fp8bench.dashboard.data import STORE_ENV  # noqa: E402
from fp8bench.dashboard.safe_text import md_text, safe_figure  # noqa: E402
from fp8bench.results.store import open_store  # noqa: E402
from tests.gate_fixtures import payload, record  # noqa: E402

APP = str(Path(fp8bench.dashboard.__file__).parent / "app.py")
HOSTILE = "[Session expired](http://evil.example) ![x](http://host/pixel) :red[hi] $x$ <b>b</b> a@b.co\n# h"


def test_md_text_escapes_every_markup_character_and_breaks_autolinks():
    out = md_text(HOSTILE)
    assert "\n" not in out
    unescaped = [c for i, c in enumerate(out) if c in "[]()!:$<>*_#`@" and (i == 0 or out[i - 1] != "\\")]
    assert unescaped == []
    assert "http\\:\u2060\\/\\/" in out and "\\@\u2060" in out
    assert as_read(out) == HOSTILE.replace("\n", " ")  # the reader's text
    assert md_text("postgresql://u:secret@h/db").count("secret") == 0


def test_safe_figure_escapes_data_strings_but_keeps_templates_and_line_breaks():
    frame = {"device": ['<a href="http://evil.example">x</a>', "CPU<br>model"], "v": [1.0, 2.0]}
    fig = px.bar(frame, x="device", y="v", hover_data=["device"])
    fig.update_traces(hovertemplate="%{x}<br>%{y}<extra></extra>")
    fig.add_annotation(text="gate: <a href='http://evil.example'>pass</a>", x=0, y=0)
    safe = safe_figure(fig)
    assert list(safe.data[0].x) == ['&lt;a href="http://evil.example"&gt;x&lt;/a&gt;', "CPU<br>model"]
    assert safe.data[0].hovertemplate == "%{x}<br>%{y}<extra></extra>"
    assert safe.layout.annotations[0].text == "gate: &lt;a href='http://evil.example'&gt;pass&lt;/a&gt;"
    assert isinstance(safe, go.Figure) and safe.layout.template == fig.layout.template


def open_app(monkeypatch, target: object, query: dict[str, str] | None = None,
             secrets: dict | None = None) -> AppTest:
    monkeypatch.setenv(STORE_ENV, str(target))
    at = AppTest.from_file(APP, default_timeout=120)
    for key, value in (query or {}).items():
        at.query_params[key] = value
    for key, value in (secrets or {}).items():
        at.secrets[key] = value
    at.run()
    return at


def test_url_filter_warning_escapes_what_the_link_says(monkeypatch, tmp_path):
    run = payload("r", [record(64, "bf16", [1e-3, 1.1e-3, 0.9e-3])])
    run["run"]["device"]["name"] = "[Login](http://evil.example/d)"
    open_store(tmp_path).ingest_run(run)
    at = open_app(monkeypatch, tmp_path, {"backend": "[Session expired](http://evil.example)",
                                          "device": "![x](http://host/pixel)"})
    assert not at.exception
    warnings = [w.value for w in at.sidebar.warning]
    assert len(warnings) == 2
    assert all("](" not in w and "![" not in w for w in warnings)  # no link or image syntax left
    assert any(md_text("[Login](http://evil.example/d)") in w for w in warnings)  # the stored name, escaped


AUTH = {"redirect_uri": "http://localhost:8501/oauth2callback", "cookie_secret": "test-only",
        "client_id": "fp8bench", "client_secret": "test-only",
        "server_metadata_url": "https://login.example/.well-known/openid-configuration"}


def test_with_streamlit_auth_configured_nothing_shows_before_login(monkeypatch, tmp_path):
    open_store(tmp_path).ingest_run(payload("r", [record(64, "bf16", [1e-3, 1.1e-3, 0.9e-3])]))
    at = open_app(monkeypatch, tmp_path, secrets={"auth": AUTH})
    assert not at.exception
    assert [b.label for b in at.button] == ["Log in"]
    assert not at.dataframe and not at.sidebar.caption  # no results, not even the store's name
    at = open_app(monkeypatch, tmp_path)  # without [auth]: open, as before
    assert not at.exception and "Log in" not in [b.label for b in at.button] and at.dataframe
