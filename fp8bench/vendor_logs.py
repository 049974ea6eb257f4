"""Vendor libraries' import-time messages that only mean "there is no CUDA here".

torchao's prebuilt wheels carry CUDA extension libraries (``torchao/_C_mxfp8*.so``, ``torchao/_C_cutlass_90a*.so``)
and ``import torchao`` tries to load each of them, logging ``Failed to load FILE: ...`` at WARNING level on the
``torchao`` logger for every one that does not load (``torchao/__init__.py``, the ``torch.ops.load_library`` loop).
On a machine without CUDA none of them can load, so every CPU run that touches torchao printed the same lines,
which read like a broken install. :func:`quiet_vendor_imports` drops exactly those records when this process has
no usable CUDA device, and remembers what it dropped so that ``fp8bench doctor`` can say it once. On a machine
with CUDA nothing is filtered: there a library that fails to load is a real problem.
"""

from __future__ import annotations

import logging
import re

# torchao/__init__.py: logger.warning(f"Failed to load {file}: {e}") for each _C*.so it cannot load.
_TORCHAO_SO_FAILURE = re.compile(r"^Failed to load (?P<file>\S+\.so)\b")

_silenced: list[str] = []


class _NoCudaLibraryFilter(logging.Filter):
    """Drops torchao's "Failed to load ...so" records, keeping the library names for :func:`silenced`."""

    def filter(self, record: logging.LogRecord) -> bool:
        match = _TORCHAO_SO_FAILURE.match(record.getMessage())
        if match is None:
            return True
        name = match.group("file").rsplit("/", 1)[-1]
        if name not in _silenced:
            _silenced.append(name)
        return False


_FILTER = _NoCudaLibraryFilter()


def quiet_vendor_imports(cuda_available: bool) -> None:
    """Install the filter (idempotent) when ``cuda_available`` is false; call before importing torchao."""
    logger = logging.getLogger("torchao")
    if not cuda_available and _FILTER not in logger.filters:
        logger.addFilter(_FILTER)


def silenced() -> list[str]:
    """Extension libraries whose load failure was silenced in this process (file names, in order seen)."""
    return list(_silenced)
