"""The SQNR that round-to-nearest to a given number of mantissa bits reaches: the band the numerics tests hold
measured SQNRs to."""

from __future__ import annotations

import math


def rounding_sqnr_db(mantissa_bits: int) -> float:
    """Expected SQNR (dB) of round-to-nearest to ``mantissa_bits`` for values whose mantissas are spread evenly.

    The relative error of one rounding is uniform in ``+-2**-(m+1)``, so its power relative to the signal is
    ``2**-(2m+2) / 3`` and the SQNR is ``6.02*(m+1) + 4.77`` dB. Real tensors deviate by a few dB (mantissas are
    not uniform, and a GEMM adds the noise of both operands), so tests compare against a band, not this point.
    """
    return 20 * math.log10(2.0 ** (mantissa_bits + 1)) + 10 * math.log10(3.0)
