"""fp8bench: does FP8 pay off on this device, for these shapes, and at what cost in accuracy and energy?

The engine, in sub-packages by role, each importing only those before it: :mod:`fp8bench.core` (registries,
plugin base classes, pipelines, records, shapes, devices), :mod:`fp8bench.results` (run files and the store),
:mod:`fp8bench.numerics` (formats, recipes, quantizers, accuracy), :mod:`fp8bench.energy` (meters and telemetry),
:mod:`fp8bench.hardware` (capabilities, peaks, environment), :mod:`fp8bench.measure` (the runner and its timers),
:mod:`fp8bench.analysis` (report, payoff, changes, the gate) and :mod:`fp8bench.commands` with the CLI
(:mod:`fp8bench.cli`). Workloads live in ``workloads/``, backends in ``kernels/`` and the dashboard in
``dashboard/``, installed as ``fp8bench.workloads``, ``fp8bench.kernels`` and ``fp8bench.dashboard``
(docs/development.md, "Layers").
"""

__version__ = "0.1.0"
