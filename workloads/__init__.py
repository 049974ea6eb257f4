"""Workloads (installed as ``fp8bench.workloads``): one module per workload, plus suite files in ``suites/``."""
