"""Profile traces where a case is shown: the path of each record's ``torch.profiler`` trace, a download of it, and
the viewer that opens it.

``fp8bench run --profile`` writes one Chrome trace-event JSON file per case beside the run file and the store keeps
its path (``records.profile_trace``, :mod:`fp8bench.measure.profiling`). A browser cannot follow a ``file://`` link from
a web page, and Perfetto UI (https://ui.perfetto.dev) opens a trace the user hands it ("Open trace file"), so the
page shows the path as text (relative to the results folder: a visitor learns nothing of the server's folders
above it) and, when the dashboard's own machine can read the file, offers it for download.

A stored path comes from whatever run was written or ingested into the store, so the dashboard reads only what
looks like a trace fp8bench wrote: a regular file named ``*.pt.trace.json`` in a ``*.profile`` folder inside the
dashboard's results folder (:func:`traces_root`), of bounded size. Any other path is shown, never read.

The page is drawn long before the download button is clicked, and whoever can write in the results folder could
swap the file for a link to ``/etc/passwd`` in between. So the check made when drawing only decides whether to
offer the button; the bytes served are read at the click by :func:`read_trace`, which walks from the results
folder one path component at a time with ``O_NOFOLLOW`` (no component, folder or file, may be a link), checks the
opened descriptor (a regular file, not too large), and serves exactly what that one open read.
"""

from __future__ import annotations

import functools
import json
import os
import stat
from pathlib import Path

import pandas as pd
import streamlit as st

from fp8bench.core.redact import hide_paths
from fp8bench.dashboard.data import store_target
from fp8bench.dashboard.safe_text import md_text, shown
from fp8bench.paths import PROFILE_DIR_SUFFIX, TRACE_SUFFIX, default_results_dir
from fp8bench.results.store import normalize_url

PERFETTO_URL = "https://ui.perfetto.dev"
MAX_TRACE_BYTES = 512 * 2**20  # Perfetto UI itself loads traces of a few hundred MB in the browser


def traces_root() -> Path:
    """The results folder traces are served from: the SQLite store's folder, else the default results folder
    (``--results-dir``, ``$FP8BENCH_RESULTS_DIR`` or ``./results``)."""
    target = store_target()
    url = normalize_url(target)
    if url.startswith("sqlite:///"):
        return Path(url.removeprefix("sqlite:///")).parent
    return default_results_dir()


def _inside(path: str, root: Path) -> tuple[str, ...] | None:
    """The components of ``path`` below ``root`` (as given, or with its links resolved), or ``None`` when it is
    not below it or not shaped like a trace (``.../NAME.profile/FILE.pt.trace.json``)."""
    if not isinstance(path, str) or not path.endswith(TRACE_SUFFIX):
        return None
    candidate = os.path.abspath(path)
    for base in {os.path.abspath(root), os.path.realpath(root)}:
        rel = os.path.relpath(candidate, base)
        parts = Path(rel).parts
        if rel != os.curdir and parts[0] != os.pardir and len(parts) >= 2 and \
                parts[-2].endswith(PROFILE_DIR_SUFFIX):
            return (base, *parts)
    return None


def _open_below(parts: tuple[str, ...]) -> int:
    """A descriptor of ``parts[0]/parts[1]/...``, each component after the first opened relative to the one before
    with ``O_NOFOLLOW``: a link anywhere below the root fails the open."""
    fd = os.open(parts[0], os.O_RDONLY | os.O_DIRECTORY)
    try:
        for folder in parts[1:-1]:
            below = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = below
        return os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    finally:
        os.close(fd)


def _open_trace(path: object, root: Path | None) -> int | None:
    """A descriptor of the trace at ``path`` when it is one by the module's rules (below ``root``, default
    :func:`traces_root`, through no link; a regular file of bounded size), else ``None``."""
    parts = _inside(path, traces_root() if root is None else root)  # type: ignore[arg-type]
    if parts is None:
        return None
    try:
        fd = _open_below(parts)
    except OSError:
        return None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_TRACE_BYTES:
        os.close(fd)
        return None
    return fd


def read_trace(path: object, root: Path | None = None) -> bytes | None:
    """The bytes of the trace at ``path``, from one open that follows no link below ``root``; ``None`` when it is
    not a readable trace."""
    fd = _open_trace(path, root)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read(MAX_TRACE_BYTES)


def readable_trace(path: object, root: Path | None = None) -> Path | None:
    """``path`` when the page may offer it for download (the module's rules, checked when drawing), else ``None``.
    The download itself reads with :func:`read_trace`, at the click."""
    fd = _open_trace(path, root)
    if fd is None:
        return None
    os.close(fd)
    return Path(str(path))


def _download(path: str, root: Path) -> bytes:
    """What the download button serves: the trace as it is at the click, or a short JSON error if it is no longer
    a readable trace (replaced, linked elsewhere, grown too large)."""
    data = read_trace(path, root)
    if data is None:
        return json.dumps({"error": f"{shown(path)} is no longer a readable trace; reload the page"}).encode()
    return data


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
    root = traces_root()
    for i in traced.index:
        record_id, path, label = traced.at[i, "id"], traced.at[i, "profile_trace"], str(labels[i])
        # Plain text (a stored path is never markup), relative to the results folder: no server folder above it.
        st.text(f"{label}: {hide_paths(path, str(root))}")
        file = readable_trace(path, root)
        if file is None:
            st.caption("Not readable as a trace from the dashboard's machine (only traces in its results folder "
                       "are served); copy it from where the run wrote it.")
            continue
        # Read at the click, not now: the file may change between drawing the page and the click.
        st.download_button(f"Download the trace of {md_text(label)}", functools.partial(_download, str(path), root),
                           file_name=file.name, mime="application/json", key=f"trace_{record_id}",
                           on_click="ignore")
