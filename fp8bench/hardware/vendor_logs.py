"""Vendor libraries' import-time messages that say nothing to an fp8bench user.

torchao's prebuilt wheels carry CUDA extension libraries (``torchao/_C_mxfp8*.so``, ``torchao/_C_cutlass_90a*.so``)
and ``import torchao`` tries to load each of them, logging ``Failed to load FILE: ...`` at WARNING level on the
``torchao`` logger for every one that does not load (``torchao/__init__.py``, the ``torch.ops.load_library`` loop).
On a machine without CUDA none of them can load, so every CPU run that touches torchao printed the same lines,
which read like a broken install. :func:`quiet_vendor_imports` drops exactly those records when this process has
no usable CUDA device, and remembers what it dropped so that ``fp8bench doctor`` can say it once. On a machine
with CUDA nothing is filtered: there a library that fails to load is a real problem.

torch 2.13 deprecated ``torch.utils._pytree.register_constant`` on Enum classes (they are now opaque values to
``torch.compile``) and logs a WARNING on the ``torch.utils._pytree`` logger for each call; torchao's
``register_as_pytree_constant`` decorator (``torchao/utils.py``) makes that call at import for its Enum
``KernelPreference`` (``torchao/quantization/quantize_/common/kernel_preference.py``), so every verb that loads the
torchao backend printed it. The message is addressed to torchao's authors; :func:`quiet_vendor_imports` drops
exactly it, and nothing else that logger says.
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

# torch/utils/_pytree.py, _private_register_pytree_node: the warning logged when an Enum subclass is registered as a
# constant (deprecated since torch.compile takes Enums natively); matched by its opening words alone.
_ENUM_CONSTANT_DEPRECATION = "is an Enum subclass and is now natively supported by torch.compile"


class _EnumConstantDeprecationFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return _ENUM_CONSTANT_DEPRECATION not in record.getMessage()


_PYTREE_FILTER = _EnumConstantDeprecationFilter()


def quiet_vendor_imports(cuda_available: bool) -> None:
    """Install the filters (idempotent): torchao's CUDA-library messages when ``cuda_available`` is false, and
    torch's Enum-constant deprecation always. Call before importing torchao."""
    logger = logging.getLogger("torchao")
    if not cuda_available and _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    pytree = logging.getLogger("torch.utils._pytree")
    if _PYTREE_FILTER not in pytree.filters:
        pytree.addFilter(_PYTREE_FILTER)


def silenced() -> list[str]:
    """Extension libraries whose load failure was silenced in this process (file names, in order seen)."""
    return list(_silenced)
