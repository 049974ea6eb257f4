"""Plotly Express with the dashboard's colours, imported only by the pages that draw with it.

Importing ``plotly.express`` costs a few tenths of a CPU second (it loads its data sets, trendline and colour
modules); the Overview, the landing page, draws with ``plotly.graph_objects`` only, so the first load of the
dashboard does not pay for it. Pages import ``px`` from here, never ``plotly.express`` itself, so every Express
figure gets the same colours.
"""

from __future__ import annotations

import plotly.express as px

# Distinct hues for precisions and backends (the default sequence puts several blues side by side).
px.defaults.color_discrete_sequence = px.colors.qualitative.Bold

__all__ = ["px"]
