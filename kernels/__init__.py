"""Backends (installed as ``fp8bench.kernels``): one module per kernel family, vendor, custom and emulated."""
