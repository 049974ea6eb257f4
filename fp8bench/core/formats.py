"""Number formats: what each element type can represent.

An FP8 number has 1 sign bit, E exponent bits and M mantissa bits. Two layouts matter (OCP FP8 spec, 2023):

* **E4M3** (``float8_e4m3fn``): 4 exponent bits, 3 mantissa bits, exponent bias 7. The largest finite value is
  448 (``1.75 * 2**8``), the smallest normal ``2**-6`` and the smallest subnormal ``2**-9``. There is no infinity; the
  all-ones pattern is NaN (the ``fn`` = *finite, NaN*). Three mantissa bits give a relative rounding error of at
  most ``2**-4`` (6.25 %): good enough for weights and activations.
* **E5M2** (``float8_e5m2``): 5 exponent bits, 2 mantissa bits, bias 15, IEEE-like (has inf). Max 57344, smallest
  normal ``2**-14``, smallest subnormal ``2**-16``. Its wider range and coarser steps suit gradients.

The 4-bit formats of Blackwell-class GPUs use one element layout (OCP MX v1.0, section 5.3.3):

* **E2M1** (``float4_e2m1fn_x2`` in torch, two values packed per byte): 2 exponent bits, 1 mantissa bit, bias 1.
  Its 8 magnitudes are 0, 0.5, 1, 1.5, 2, 3, 4 and 6: max 6, smallest normal 1, one subnormal (0.5), no infinity
  and no NaN. With one mantissa bit the relative rounding error reaches 1/6 (between 1 and 1.5, say), so a 4-bit
  element is only usable with a scale per small block of values (see :mod:`fp8bench.core.precisions`: ``nvfp4``,
  ``mxfp4``). torch has no cast to it: fp8bench rounds to the grid itself (:mod:`fp8bench.numerics.quantize`) and keeps
  the values unpacked, one per element, until a kernel needs the packed bytes.

AMD's MI300 generation uses the ``fnuz`` variants (*finite, NaN, unsigned zero*: no negative zero and a bias one
larger), so E4M3FNUZ tops out at 240 instead of 448.

A value ``|x|`` larger than the format's max **overflows**: in fp8bench's quantizers it saturates to the max
(counted as the overflow fraction). A non-zero value smaller than half the smallest subnormal **underflows**: it
rounds to zero (counted as the underflow fraction). Scaling exists to move a tensor's values into the window
between those two edges.

The higher-precision formats are listed too, by mantissa width, because the width predicts the signal-to-
quantization-noise ratio of rounding: about 6.02 dB per mantissa bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ElementFormat:
    """One narrow (FP8 or FP4) element format. Values in the units of the number itself."""

    name: str  # e4m3 | e5m2 | e4m3fnuz | e5m2fnuz | e2m1
    dtype_name: str  # attribute of torch: float8_e4m3fn, ... (float4_e2m1fn_x2: the packed 4-bit dtype)
    exponent_bits: int
    mantissa_bits: int
    max: float  # largest finite magnitude
    min_normal: float
    min_subnormal: float
    mx_emax: int  # exponent of the largest power of two <= max; OCP MX uses it to pick the shared scale

    @property
    def dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype_name)

    @property
    def bits(self) -> int:
        """Storage bits per element (sign + exponent + mantissa)."""
        return 1 + self.exponent_bits + self.mantissa_bits

    @property
    def is_fp4(self) -> bool:
        return self.bits == 4


E4M3 = ElementFormat("e4m3", "float8_e4m3fn", 4, 3, 448.0, 2.0**-6, 2.0**-9, 8)
E5M2 = ElementFormat("e5m2", "float8_e5m2", 5, 2, 57344.0, 2.0**-14, 2.0**-16, 15)
E4M3FNUZ = ElementFormat("e4m3fnuz", "float8_e4m3fnuz", 4, 3, 240.0, 2.0**-7, 2.0**-10, 7)
E5M2FNUZ = ElementFormat("e5m2fnuz", "float8_e5m2fnuz", 5, 2, 57344.0, 2.0**-15, 2.0**-17, 15)

# OCP MX v1.0, table 5: E2M1 max 6 = 1.5 * 2**2 (emax 2), min normal 1, min subnormal 0.5.
E2M1 = ElementFormat("e2m1", "float4_e2m1fn_x2", 2, 1, 6.0, 1.0, 0.5, 2)

FP8_FORMATS: dict[str, ElementFormat] = {f.name: f for f in (E4M3, E5M2, E4M3FNUZ, E5M2FNUZ)}
FP4_FORMATS: dict[str, ElementFormat] = {E2M1.name: E2M1}

# Mantissa (fraction) bits of the high-precision formats. TF32 keeps FP32's 8-bit exponent and 10 mantissa bits.
MANTISSA_BITS: dict[str, int] = {"fp32": 23, "tf32": 10, "bf16": 7, "fp16": 10, "e4m3": 3, "e5m2": 2, "e2m1": 1}
