"""The dashboard's server process: ``streamlit run``, with the read side's libraries imported before it listens.

Streamlit imports an app's modules when the first reader's session runs the app script, so the first reader of a
newly started server waits for pandas, PyArrow (Streamlit's table serialisation), SQLAlchemy, plotly's graph objects
and the dashboard's own modules to import: about half a second of CPU on this project's 2-core machine, more than the
Overview's own work at 100,000 records (docs/store.md). A server has nothing else to do before its first reader
connects, so this module imports them first (:func:`warm_up`), then hands its command line to Streamlit's, as
``python -m streamlit`` does: the server starts that much later, and every reader's first page that much sooner.
Nothing here imports torch (``tests/test_dashboard_imports.py``).

    python -m fp8bench.dashboard.serve run APP.py --server.port 8501 ...   # what `fp8bench dashboard` starts
"""

from __future__ import annotations

import importlib
import sys

# What the first session of the Overview imports, heaviest first; each is imported by the app anyway.
WARM_IMPORTS = ("pandas", "pyarrow", "sqlalchemy", "plotly.graph_objects", "fp8bench.dashboard.data",
                "fp8bench.dashboard.filters", "fp8bench.dashboard.widgets")


def warm_up() -> None:
    """Import :data:`WARM_IMPORTS` (a missing optional one, such as PyArrow, is left to the app to report)."""
    for name in WARM_IMPORTS:
        try:
            importlib.import_module(name)
        except ImportError:
            continue


def main() -> None:
    warm_up()
    from streamlit.web.cli import main as streamlit_main

    # The same program name as ``python -m streamlit``, so the server sees the command line it expects.
    sys.exit(streamlit_main(prog_name="streamlit"))


if __name__ == "__main__":
    main()
