"""fp8bench: does FP8 pay off on this device, for these shapes, and at what cost in accuracy and energy?

The engine: specs and recipes (:mod:`fp8bench.numerics.recipes`), shared quantizers (:mod:`fp8bench.numerics.quantize`), registries
(:mod:`fp8bench.core.plugins`), the runner (:mod:`fp8bench.measure.runner`) with its timers (:mod:`fp8bench.measure.timing`), numerics
(:mod:`fp8bench.numerics.accuracy`), environment capture, peaks, run files and the store, and the CLI
(:mod:`fp8bench.cli`). Workloads live in ``workloads/`` and backends in ``kernels/``, installed as
``fp8bench.workloads`` and ``fp8bench.kernels``.
"""

__version__ = "0.1.0"
