"""Profile traces where a case is shown: the path of each record's ``torch.profiler`` trace, a download of it, and
the viewer that opens it.

``fp8bench run --profile`` writes one Chrome trace-event JSON file per case beside the run file and the store keeps
its path (``records.profile_trace``, :mod:`fp8bench.profiling`). A browser cannot follow a ``file://`` link from a
web page, and Perfetto UI (https://ui.perfetto.dev) opens a trace the user hands it ("Open trace file"), so the
page shows the path as text and, when the dashboard's own machine can read the file, offers it for download.

A stored path comes from whatever run was written or ingested into the store, so the dashboard reads only what
looks like a trace fp8bench wrote: a regular file (not a link) named ``*.pt.trace.json`` in a ``*.profile`` folder,
of bounded size. Any other path is shown, never read.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from fp8bench.dashboard.safe_text import md_text
from fp8bench.paths import PROFILE_DIR_SUFFIX, TRACE_SUFFIX

PERFETTO_URL = "https://ui.perfetto.dev"
MAX_TRACE_BYTES = 512 * 2**20  # Perfetto UI itself loads traces of a few hundred MB in the browser


def readable_trace(path: object) -> Path | None:
    """``path`` when the dashboard may read it as a trace (see the module's rules), else ``None``."""
    if not isinstance(path, str) or not path.endswith(TRACE_SUFFIX):
        return None
    file = Path(path)
    try:
        if file.is_symlink() or not file.is_file() or not file.parent.name.endswith(PROFILE_DIR_SUFFIX):
            return None
        return file if file.stat().st_size <= MAX_TRACE_BYTES else None
    except OSError:
        return None


def show_traces(rows: pd.DataFrame, labels: pd.Series) -> None:
    """A "Profile traces" section for ``rows`` (records with a ``profile_trace`` column), each named by ``labels``."""
    traced = rows[rows["profile_trace"].notna()] if "profile_trace" in rows else rows.iloc[0:0]
    st.subheader("Profile traces")
    if traced.empty:
        st.caption("No profile trace for this case. `fp8bench run --profile ...` writes a torch.profiler trace per "
                   "case, taken after its timed samples.")
        return
    st.caption("torch.profiler traces (Chrome trace JSON) of a pass after the timed samples, one range per phase. "
               "Open one in Perfetto UI (Open trace file) or chrome://tracing.")
    st.link_button("Open Perfetto UI", PERFETTO_URL, icon=":material/open_in_new:")
    for i in traced.index:
        record_id, path, label = traced.at[i, "id"], traced.at[i, "profile_trace"], str(labels[i])
        st.text(f"{label}: {path}")  # plain text: a stored path is never markup
        file = readable_trace(path)
        if file is None:
            st.caption("Not readable as a trace from the dashboard's machine; copy it from where the run wrote it.")
            continue
        st.download_button(f"Download the trace of {md_text(label)}", lambda f=file: f.read_bytes(),
                           file_name=file.name, mime="application/json", key=f"trace_{record_id}",
                           on_click="ignore")
