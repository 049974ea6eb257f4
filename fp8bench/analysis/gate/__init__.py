"""The regression gate: verdicts per case (:mod:`.verdicts`), the metrics a gate can compare (:mod:`.metrics`) and
interleaved base/head A/B rounds (:mod:`.ab`).
"""
