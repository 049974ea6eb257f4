"""The regression gate, one module per concern: how strict it is (:mod:`.config`), each side's runs as per-case
samples (:mod:`.sides`), the verdict of each case and the outcome (:mod:`.decision`), the report and its JSON
(:mod:`.report`), the metrics a gate can compare (:mod:`.metrics`) and the sequential A/B's confidence sequences
(:mod:`.sequential`). The report's Markdown and its plain table are renderers: :mod:`fp8bench.render.gate_markdown`
and :mod:`fp8bench.render.gate_table`.
"""
