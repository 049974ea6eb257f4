"""No secret shown: a password in a store URL never reaches stderr, the JSON summary or the dashboard; the dashboard
warns when it is reachable from other machines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fp8bench.cli import main
from fp8bench.commands.dashboard import is_loopback
from fp8bench.core.redact import error_line, has_password, redact
from tests.gate_fixtures import payload, record

SECRET = "PASSWORD-3x4mple"
# Port 1 on loopback refuses connections at once: every command fails fast at the connection.
REFUSING = f"postgresql://bench:{SECRET}@127.0.0.1:1/fp8bench"


@pytest.mark.parametrize("text, expected", [
    (f"postgresql://user:{SECRET}@db.example/fp8", "postgresql://user:***@db.example/fp8"),
    (f"postgresq://u:{SECRET}@h:5432/db", "postgresq://u:***@h:5432/db"),  # a mistyped scheme too
    (f"cannot open 'postgresql+psycopg://u:{SECRET}@h/db': boom",
     "cannot open 'postgresql+psycopg://u:***@h/db': boom"),
    (f"postgresql://u:pa@ss{SECRET}@h/db", "postgresql://u:***@h/db"),  # an unencoded @ in the password
    ("postgresq://bench:se/cret@h/db", "postgresq://bench:***@h/db"),  # a / that no URL parser takes there
    ("postgresq://bench:se cret@h/db", "postgresq://bench:***@h/db"),  # an unencoded space
    ("cannot open 'postgresq://u:a/b c@d@h/db': unknown scheme",
     "cannot open 'postgresq://u:***@h/db': unknown scheme"),
    (f"host=db user=u password={SECRET} dbname=x", "host=db user=u password=*** dbname=x"),
    (f"postgresql://u@h/db?password={SECRET}&sslmode=require", "postgresql://u@h/db?password=***&sslmode=require"),
    ("postgresql://u@h/db", "postgresql://u@h/db"),
    ("http://127.0.0.1:8501/", "http://127.0.0.1:8501/"),
    ("/data/results?x/fp8bench.sqlite", "/data/results?x/fp8bench.sqlite"),
])
def test_redact_masks_passwords_in_urls_and_connection_strings(text, expected):
    assert redact(text) == expected
    assert has_password(text) == (expected != text)


def test_error_line_is_the_drivers_first_line_without_statement_or_parameters():
    import sqlalchemy as sa

    orig = RuntimeError(f"value too long for type character varying(64)\nDETAIL: postgresql://u:{SECRET}@h")
    exc = sa.exc.DataError("INSERT INTO runs (run_id) VALUES (%(run_id)s)", {"run_id": "x" * 100}, orig)
    assert error_line(exc) == "RuntimeError: value too long for type character varying(64)"
    assert error_line(ValueError(f"bad url postgresql://u:{SECRET}@h")) == "ValueError: bad url postgresql://u:***@h"


def run_cli(capsys, *args: object) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_mistyped_scheme_and_refused_connection_never_echo_the_password(tmp_path, capsys):
    run = tmp_path / "run.json"
    run.write_text(json.dumps(payload("r", [record(64, "bf16", [1e-3, 1.1e-3])])))
    for store in (REFUSING.replace("postgresql", "postgresq"), REFUSING, REFUSING.replace(":1/", ":notaport/")):
        code, out, err = run_cli(capsys, "ingest", run, "--store", store)
        assert code == 2 and "cannot open store" in err
        assert SECRET not in out + err and "***" in err
        assert "warning: the store URL carries a password" in err and "~/.pgpass" in err
    code, out, err = run_cli(capsys, "run", "--shape", "64x64x64", "--precision", "bf16", "--store", REFUSING,
                             "--results-dir", tmp_path)
    assert code == 2 and SECRET not in out + err


def test_dashboard_command_masks_the_password_and_warns_off_loopback(capsys):
    code, out, err = run_cli(capsys, "dashboard", "--store", REFUSING, "--print-command")
    assert code == 0 and SECRET not in out + err and "bench:***@127.0.0.1" in out
    assert "no login" not in err
    code, out, err = run_cli(capsys, "dashboard", "--store", REFUSING, "--host", "0.0.0.0", "--print-command", "--json")
    assert SECRET not in out + err
    assert "0.0.0.0" in err and "no login" in err and "docs/security.md" in err


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("127.0.0.2", True), ("localhost", True),
                                            ("::1", True), ("[::1]", True), ("0.0.0.0", False), ("::", False),
                                            ("10.1.2.3", False), ("bench.example.com", False)])
def test_loopback_hosts(host, loopback):
    assert is_loopback(host) == loopback


def test_dashboard_sidebar_and_error_show_no_password(monkeypatch):
    pytest.importorskip("streamlit")
    pytest.importorskip("plotly")
    from dashboard_support import as_read
    from streamlit.testing.v1 import AppTest

    import fp8bench.dashboard
    from fp8bench.dashboard.data import STORE_ENV

    monkeypatch.setenv(STORE_ENV, REFUSING)
    at = AppTest.from_file(str(Path(fp8bench.dashboard.__file__).parent / "app.py"), default_timeout=120)
    at.run()
    shown = [as_read(v) for v in [c.value for c in at.sidebar.caption] + [e.value for e in at.error]]
    assert any("127.0.0.1" in s for s in shown) and at.error  # the store and why it failed are shown...
    assert not any(SECRET in s for s in shown)  # ...without the password


@pytest.mark.parametrize("args", [["changes", "--sotre", REFUSING], ["changes", "--alert-nights", REFUSING],
                                  ["gate", "--base", "x.json", "--candidate", "y.json", "--stroe", REFUSING]])
def test_a_usage_error_never_echoes_the_password_of_the_argument_it_quotes(capsys, args):
    code = main(args)
    err = capsys.readouterr().err
    assert code != 0 and "error:" in err
    assert SECRET not in err and "***" in err
