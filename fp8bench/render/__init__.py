"""The renderers: each module turns one report's values into text for one place it goes, and does nothing else.

Measuring, comparing and searching happen elsewhere (``measure``, ``analysis``, ``orchestration``); a renderer is
handed their results (records, a :class:`~fp8bench.analysis.gate.report.GateReport`, a
:class:`~fp8bench.analysis.bisect.BisectResult`, export rows) and returns text or prints it on the console it is
given. It opens no file, store or process: the verb decides where the text goes (stdout, report.md, the job
summary, an issue body). So a report's wording is in one module, tested against golden files
(``tests/test_render.py``), and the two forms of a report (Markdown for GitHub, a plain table for a
terminal or a log) share their cells.

* :mod:`~fp8bench.render.run_table`: ``fp8bench run``'s table, its bandwidth table and its profile lines.
* :mod:`~fp8bench.render.gate_markdown`: the gate's report.md, job summary and pull-request comment; the wording
  (headline, sides, method, cells) the terminal table shares.
* :mod:`~fp8bench.render.gate_table`: the gate's verdicts as a plain table (``gate``, ``compare``, ``ab``).
* :mod:`~fp8bench.render.bisect_markdown`: bisect's issue body (bisect.md, ``--markdown``, the job summary).
* :mod:`~fp8bench.render.bisect_table`: bisect's finding as a plain table on stdout.
* :mod:`~fp8bench.render.export`: the export formats (CSV, Parquet, github-action-benchmark, Bencher).

This package imports nothing at its top, so a verb that renders one report loads that renderer alone.
"""
