"""Showing text that somebody else wrote (a URL parameter, a stored device name, a failure reason) in Streamlit
without it turning into markup.

``st.markdown``, ``st.caption``, ``st.info``/``warning``/``error`` and widget and metric labels all render
GitHub-flavoured Markdown plus Streamlit's own directives. In such text a ``[label](url)`` is a live link, an
``![x](url)`` image makes every visitor's browser fetch that URL, a bare ``http://...`` or ``www.`` address is
linked automatically, and ``:red[...]``, ``:material/...:`` and ``$...$`` are colours, icons and LaTeX. The page
URL is typed by whoever sends the link, and a device name or a reason comes from whatever run file was ingested,
so every such value passes through :func:`md_text` before it is placed in Markdown.

Whoever opens a page sees it from another machine: the server's own paths (the store's file, a run file, a trace, a
suite file in a run header) are shown relative to the server's working directory or as their last component only,
and passwords in store URLs never (:func:`shown`, which :func:`md_text` and the tables apply).

:func:`md_text` backslash-escapes every ASCII punctuation character: CommonMark allows that escape for each of
them and an escaped character is always literal text, so no link, image, emphasis, directive, math or HTML can
start, and the reader sees the original characters. Line breaks become spaces, so the value stays one inline run
of text and cannot open a heading, list or block quote.

Escaping alone does not stop GFM's *autolink literals*: remark-gfm finds ``http://...``, ``www.`` and
``name@host.tld`` in the text left after parsing (mdast-util-gfm-autolink-literal), so escaped characters are
plain text again by then and the address is linked. An invisible WORD JOINER (U+2060) after the ``:`` of ``://``,
between ``www`` and its dot, and after an ``@`` breaks those patterns; the text reads the same.

Charts have their own markup: plotly.js renders a subset of HTML in every text it draws (axis categories, legend
entries, facet titles, hover labels, annotations), and its ``<a href>`` becomes a live link, so a device name
``<a href="http://evil.example">...</a>`` on a heatmap row would be one. :func:`safe_figure` HTML-escapes every
string of a figure (plotly decodes ``&lt;`` back to ``<`` for display) except its hover and text templates,
which the pages write, and then allows one tag back, ``<br>``, the line break the pages use in labels. A link a
page means to draw (a commit's web page) is made with :func:`plot_link`, which escapes its parts, accepts only an
``http``/``https`` address, and marks the result as the page's own so that :func:`safe_figure` keeps it.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

import numpy as np
import plotly.graph_objects as go

from fp8bench.core import escaping
from fp8bench.core.redact import hide_paths


def md_text(value: object) -> str:
    """``value`` as Markdown that renders as exactly its text (passwords in URLs masked, one line) with the
    server's absolute paths shortened (:func:`shown`); the escaping rule is the one gate reports use,
    :func:`fp8bench.core.escaping.md_text`."""
    return escaping.md_text(hide_paths(value))


def shown(value: Any) -> Any:
    """``value`` (a string, or lists and dicts of them, such as a run header) with every password masked and every
    absolute path of the server replaced by a name relative to its working directory or by its last component
    (:func:`fp8bench.core.redact.hide_paths`): a page is read on other machines, and the store's path, a run
    file's or a suite file's tell them about the server's folders. Other values are returned as they are."""
    if isinstance(value, str):
        return hide_paths(value)
    if isinstance(value, dict):
        return {k: shown(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [shown(v) for v in value]
    return value


def md_join(values: Iterable[object], sep: str = ", ") -> str:
    """Several values, each escaped, joined by ``sep`` (itself Markdown, written by the caller)."""
    return sep.join(md_text(v) for v in values)


# Link markup made by plot_link: strings the pages built from escaped parts, kept as they are by safe_figure.
_PAGE_LINKS: set[str] = set()


def plot_link(url: str | None, text: str) -> str:
    """A plotly ``<a href>`` to ``url`` labelled ``text`` (both escaped), or just the escaped text when ``url`` is
    not an http(s) address."""
    label = html.escape(text, quote=False)
    if escaping.web_url(url) is None:
        return label
    link = f"<a href='{html.escape(url, quote=True)}'>{label}</a>"
    _PAGE_LINKS.add(link)
    return link


def _plot_text(value: str) -> str:
    if value in _PAGE_LINKS:
        return value
    return html.escape(value, quote=False).replace("&lt;br&gt;", "<br>")


def _escape_strings(value: Any) -> Any:
    if isinstance(value, str):
        return _plot_text(value)
    if isinstance(value, dict):
        # Templates (hovertemplate, texttemplate) are the pages' own markup around %{...} placeholders.
        return {k: v if k.endswith("template") else _escape_strings(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_escape_strings(v) for v in value]
    if isinstance(value, np.ndarray) and value.dtype.kind in "OUS":
        return np.array([_escape_strings(v) for v in value.ravel().tolist()], dtype=object).reshape(value.shape)
    return value


def safe_figure(fig: go.Figure) -> go.Figure:
    """``fig`` with every string in its data and layout shown as text by plotly (see the module docstring)."""
    return go.Figure(_escape_strings(fig.to_dict()))
