"""Checks of fp8bench itself that run without a GPU, apart from the product: nothing that measures imports them.

* :mod:`~fp8bench.verify.cuda_replay`: every scaled GEMM fp8bench issues, replayed against CUDA's rules on fake
  CUDA tensors, for a table of GPU x toolkit x torch targets (docs/gpu-conformance.md).
* :mod:`~fp8bench.verify.phase_audit`: which kernels run in each timed region of each case (docs/phase-purity.md).

The tests and the scripts in ``scripts/`` run them; the layer sits beside the command line, at the top.
"""
