"""Measuring cases: the runner and its timers, CUDA graphs, profiles, interrupts, sharding across devices, the
self-check, the convergence check and suite files.
"""
