"""Where records go and how they come back: run files, the record stream, ingest, export and the store.

This layer knows a record by its fields alone (:mod:`fp8bench.core.records`), never how it was measured: it imports
only :mod:`fp8bench.core`, so the runner, the CPU ceilings cache and the analysis all write or read through it.
"""
