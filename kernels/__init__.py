"""Backends (installed as ``fp8bench.kernels``): one module per kernel family, vendor, custom and emulated.

Triton fixes interpreted-or-compiled when ``triton.language`` is first imported (its own library functions are
decorated then), so the choice is per process, and more than one backend can trigger that import: the ``triton``
backend itself, and ``torch.compile``'s Inductor (``compiled``). The choice is therefore made here, before any
backend module loads: on a machine without CUDA the interpreter is switched on, unless the user set
``TRITON_INTERPRET`` explicitly or triton is already imported.

Vendor import messages that only mean "no CUDA here" (torchao's CUDA extension libraries failing to load) are
silenced here too, before any backend can import the vendor library (:mod:`fp8bench.hardware.vendor_logs`).
"""

import os
import sys

import torch

from fp8bench.hardware.vendor_logs import quiet_vendor_imports

if "triton" not in sys.modules and "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"
quiet_vendor_imports(torch.cuda.is_available())
