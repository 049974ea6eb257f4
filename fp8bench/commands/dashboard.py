"""`fp8bench dashboard`: serve the Streamlit dashboard on a store, on this machine only unless told otherwise."""

from __future__ import annotations

import argparse
import functools
import importlib.util
import ipaddress
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

from fp8bench.commands.verb_interface import (
    BAD_INPUT,
    EXIT_CASE_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    ExitCodes,
    UsageError,
    add_json_flag,
    add_store_flags,
    print_json,
    store_target,
)
from fp8bench.core.redact import redact
from fp8bench.measure.interrupts import die_with_parent

DESCRIPTION = """Serve the dashboard: speedups per device, roofline, phases, energy, numerics, history by commit
with the gate's verdicts, regressions (change points, newest first), where FP8 pays off, run-to-run comparison and
environments, read from a store.

examples:
  fp8bench dashboard                                   # ./results/fp8bench.sqlite on http://127.0.0.1:8501
  fp8bench dashboard --results-dir /data/fp8 --port 8600
  fp8bench dashboard --store postgresql://user@db/fp8bench --host 0.0.0.0   # reachable from other machines
  fp8bench dashboard --repo-url https://github.com/org/repo           # commit links on History and Regressions

The dashboard has no login: anyone who can reach the address reads every stored result. Any --host other than
loopback prints a warning; docs/security.md shows how to put it behind authentication (Streamlit's st.login
with an OIDC provider, or a reverse proxy). Give a PostgreSQL password through $PGPASSWORD or ~/.pgpass, not in
the URL; a password in a URL is masked wherever it is shown.

Needs the dashboard extra: pip install 'fp8bench[dashboard]'. Stop it with Ctrl-C, SIGTERM or SIGHUP; the
Streamlit server stops with it."""
EXIT_CODES = ExitCodes((
    (EXIT_OK, "the server was stopped with Ctrl-C, SIGTERM or SIGHUP (or --print-command printed the command)"),
    (EXIT_CASE_FAILED, "the Streamlit server stopped with an error (its message is above)"),
    (EXIT_USAGE, BAD_INPUT + "; or the dashboard extra is not installed"),
))
DOC = "docs/dashboard.md"

# Seconds Streamlit gets to stop after SIGTERM before it is killed.
STOP_GRACE_S = 10.0

# The app reads its store from this variable (see fp8bench.dashboard.data.STORE_ENV; not imported here so that
# `fp8bench --help` never needs streamlit).
STORE_ENV = "FP8BENCH_DASHBOARD_STORE"
REPO_URL_ENV = "FP8BENCH_REPO_URL"  # fp8bench.dashboard.data.REPO_URL_ENV


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_store_flags(p)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0 exposes it)")
    p.add_argument("--port", type=int, default=8501, help="TCP port (default 8501)")
    p.add_argument("--repo-url", default=None,
                   help="commit links: a template with {commit} (https://git.example.com/fp8/commit/{commit}) or a "
                        "repository address (/commit/HASH is appended); default: the git remote the runs recorded")
    p.add_argument("--print-command", action="store_true",
                   help="print the streamlit command line and environment instead of starting the server")
    add_json_flag(p)


def app_path() -> Path:
    return Path(str(resources.files("fp8bench.dashboard").joinpath("app.py")))


def streamlit_command(args: argparse.Namespace) -> list[str]:
    """The ``streamlit run`` command line that serves the app with these options, through
    :mod:`fp8bench.dashboard.serve` (the read side's libraries imported before the server listens)."""
    if not 1 <= args.port <= 65535:
        raise UsageError(f"--port {args.port}: accepted ports are 1..65535")
    return [sys.executable, "-m", "fp8bench.dashboard.serve", "run", str(app_path()),
            "--server.address", args.host, "--server.port", str(args.port), "--server.headless", "true",
            "--browser.gatherUsageStats", "false", "--global.developmentMode", "false",
            "--client.toolbarMode", "viewer",
            # Pages show their own one-line errors; anything that escapes them is named in the browser without its
            # message or traceback (both go to this terminal).
            "--client.showErrorDetails", "none"]


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server on this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


NO_LOGIN_WARNING = ("fp8bench dashboard: warning: --host {host} makes the dashboard reachable from other machines, "
                    "and it has no login: anyone who can reach it reads every stored result. Put it behind "
                    "authentication (docs/security.md: Streamlit's st.login with OIDC, or a reverse proxy)")


def serve(cmd: list[str], env: dict[str, str]) -> int:
    """Run Streamlit until it exits or this process is asked to stop; the server never outlives this process
    (it stops on Ctrl-C, SIGTERM or SIGHUP here, and Linux signals it if this process is killed outright)."""
    proc = subprocess.Popen(cmd, env=env, preexec_fn=functools.partial(die_with_parent, os.getpid()))
    try:
        return EXIT_OK if proc.wait() == 0 else EXIT_CASE_FAILED
    except KeyboardInterrupt:
        proc.terminate()
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return EXIT_OK


def execute(args: argparse.Namespace) -> int:
    cmd = streamlit_command(args)
    target = str(store_target(args))
    app_env = {STORE_ENV: target, **({REPO_URL_ENV: args.repo_url} if args.repo_url else {})}
    env = {**os.environ, **app_env}
    shown_env = {k: redact(v) for k, v in app_env.items()}
    if not is_loopback(args.host):
        print(NO_LOGIN_WARNING.format(host=args.host), file=sys.stderr)
    if args.print_command or args.json:
        if args.json:
            print_json({"command": cmd, "env": shown_env, "url": f"http://{args.host}:{args.port}/"})
        else:
            print(" ".join(f"{k}={v}" for k, v in shown_env.items()) + " " + " ".join(cmd))
        if args.print_command:
            return EXIT_OK
    if importlib.util.find_spec("streamlit") is None or importlib.util.find_spec("plotly") is None:
        raise UsageError("the dashboard needs streamlit and plotly: pip install 'fp8bench[dashboard]'")
    print(f"fp8bench dashboard: serving store {shown_env[STORE_ENV]} on http://{args.host}:{args.port}/ (Ctrl-C stops)",
          file=sys.stderr)
    return serve(cmd, env)
