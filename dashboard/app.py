"""fp8bench dashboard: does FP8 pay off, where, by how much, at what accuracy and energy cost.

Run it with ``fp8bench dashboard`` (or ``streamlit run dashboard/app.py -- --store PATH_OR_URL``). This entry
script reads the store once per rerun (cached), draws the sidebar filters, and hands the filtered records to the
page the user picked; each page lives in ``views/`` and reads the shared view from :mod:`widgets`.

A page that raises shows one line (the error, redacted) and a hint, never a traceback: a reader cannot act on
source paths, and they tell a stranger where the server keeps its code. The whole traceback goes to the server's
log (the terminal that runs ``fp8bench dashboard``), where whoever runs it can read it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import streamlit as st

from fp8bench.core.redact import error_line
from fp8bench.dashboard.data import (
    FILL_COMMAND,
    LatestRead,
    StoreProblem,
    clear_caches,
    load_records,
    load_snapshot,
    store_target,
)
from fp8bench.dashboard.filters import render_filters
from fp8bench.dashboard.login import require_login
from fp8bench.dashboard.safe_text import md_text
from fp8bench.dashboard.widgets import View, clear_view, set_view

LOG = logging.getLogger("fp8bench.dashboard")

# Not named `pages/`: Streamlit would treat that folder as an automatic multipage app beside st.navigation.
PAGES_DIR = Path(__file__).parent / "views"
# (file, title, icon); the first is the landing page.
PAGES = (
    ("overview.py", "Overview", ":material/grid_view:"),
    ("roofline.py", "Roofline", ":material/show_chart:"),
    ("phases.py", "Phases", ":material/stacked_bar_chart:"),
    ("energy.py", "Energy", ":material/bolt:"),
    ("numerics.py", "Numerics", ":material/functions:"),
    ("history.py", "History", ":material/history:"),
    ("regressions.py", "Regressions", ":material/trending_up:"),
    ("payoff.py", "Payoff", ":material/paid:"),
    ("compare.py", "Compare", ":material/compare_arrows:"),
    ("environment.py", "Environment", ":material/memory:"),
)


# What the pages that read fewer latest records than all read (every other page reads every subset of
# fp8bench.analysis.selection.LATEST_CLASSES with its phases): the Overview compares the speed-comparable records,
# counts the cases left out (the latest record of each case, any status) and shows no phase.
PAGE_READS = {"Overview": LatestRead(("any", "speed"), phases=False)}

PAGE_ERROR_HINT = ("Reload the store (sidebar) or narrow the filters; if it happens again, the server's log (the "
                   "terminal running `fp8bench dashboard`) holds the details to report.")


def page_error(title: str, exc: Exception) -> str:
    """The one-line message of a page that raised, with what to do next."""
    return f"The {title} page could not be drawn: {md_text(error_line(exc))}\n\n{PAGE_ERROR_HINT}"


def show(page: st.Page, target: str) -> None:
    """Read the store, draw the filters and run the chosen page."""
    try:
        snapshot = load_snapshot(target)
    except StoreProblem as exc:
        st.title(page.title)
        st.error(f"The store could not be read, so there is nothing to show.\n\n{md_text(exc)}\n\n"
                 "Point the dashboard at a valid store (`fp8bench dashboard --store PATH_OR_URL`), or move the "
                 f"damaged file aside and fill a new one with `{FILL_COMMAND}`.")
        st.stop()
    if snapshot.empty:
        st.title(page.title)
        st.info(f"The store {md_text(target)} holds no records yet. Fill it with:")
        st.code(FILL_COMMAND, language="bash")
        st.caption("or pick another store: `fp8bench dashboard --store PATH_OR_URL`")
        st.stop()
    filters = render_filters(snapshot.options, snapshot.runs)
    query = filters.query()
    try:
        records = load_records(snapshot, query, PAGE_READS.get(page.title, LatestRead()))
    except StoreProblem as exc:
        st.error(md_text(exc))
        st.stop()
    set_view(View(snapshot, filters, query, records))
    page.run()


def main() -> None:
    st.set_page_config(page_title="fp8bench", page_icon=":material/speed:", layout="wide")
    require_login()  # only where Streamlit's [auth] is configured; see docs/security.md
    page = st.navigation([st.Page(PAGES_DIR / f, title=t, icon=i, default=n == 0)
                          for n, (f, t, i) in enumerate(PAGES)])
    clear_view()  # a page must never see the view of a previous rerun
    target = store_target()
    st.sidebar.caption(f"Store: {md_text(target)}")
    if st.sidebar.button("Reload store", icon=":material/refresh:"):
        clear_caches()
    try:
        show(page, target)
    except Exception as exc:  # st.stop() and reruns are BaseExceptions: they pass through
        LOG.exception("dashboard page %s failed", page.title)
        st.error(page_error(page.title, exc))


main()
