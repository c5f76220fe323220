"""Go's float arithmetic where Python's differs, and cheap reductions over small arrays.

``ratio ** n`` and ``round`` must give Go's values to the bit (bucket boundaries, confidence
multipliers, the decaying histogram's reference timestamp); the reductions serve the hot paths of
the histograms and of the aggregate's sample feeding.
"""

from __future__ import annotations

import math

import numpy as np


# --------------------------------------------------------------------------- small arrays
# On the evaluator's 40-element arrays a ufunc reduction (``a.min()``, ``mask.all()``) costs
# several times more than argmin/argmax plus ``item``, so the hot paths use these.


def lowest_item(a: np.ndarray):
    """``a.min()`` of a non-empty array as a Python scalar; NaN if it holds one (argmin
    returns the first NaN)."""
    return a.item(a.argmin())


def highest_item(a: np.ndarray):
    """``a.max()`` of a non-empty array as a Python scalar; NaN if it holds one."""
    return a.item(a.argmax())


def all_true(mask: np.ndarray) -> bool:
    """``mask.all()`` for a non-empty boolean array: argmin finds the first False, if any."""
    return mask.item(mask.argmin())


# --------------------------------------------------------------------------- Go arithmetic


def go_pow(x: float, y: float) -> float:
    """Go's ``math.Pow`` (src/math/pow.go) for integer-valued ``y``, bit for bit.

    Go multiplies out integer powers (an ``int8`` fast path, else repeated squaring) instead
    of calling a correctly rounded ``pow``, so ``ratio ** n`` may differ from C's in the
    last bit; bucket boundaries and confidence multipliers must use Go's value.
    """
    if y == 0 or x == 1:
        return 1.0
    if y == 1:  # Go: ``case y == 1: return x`` (the upper-bound multiplier's exponent)
        return x
    if math.isnan(x) or math.isnan(y):
        return math.nan
    if x == 0:
        odd = y == int(y) and int(y) % 2 == 1 if math.isfinite(y) else False
        if y < 0:
            return math.copysign(math.inf, x) if odd else math.inf
        return x if odd else 0.0
    if math.isinf(y):
        if x == -1:
            return 1.0
        return 0.0 if (abs(x) < 1) == (y > 0) else math.inf
    if math.isinf(x):
        if x < 0:
            return go_pow(1 / x, -y)
        return 0.0 if y < 0 else math.inf
    if y == 0.5:
        return math.sqrt(x)
    if y == -0.5:
        return 1 / math.sqrt(x)
    if y != int(y):
        raise ValueError("go_pow is only ported for integer exponents")
    if -128 <= y <= 127:  # case float64(int8(y)) == y
        negative = y < 0
        n = int(-y if negative else y)
        r = 1.0
        while n > 1:
            tmp, c = x, 1
            while c <= n // 2:
                tmp *= tmp
                c *= 2
            n -= c
            r *= tmp
        for _ in range(n):
            r *= x
        return 1 / r if negative else r
    # General path with yf == 0: a1 * 2**ae by squaring the mantissa.
    a1, ae = 1.0, 0
    x1, xe = math.frexp(x)
    i = int(abs(y))
    while i != 0:
        if xe < -(1 << 12) or (1 << 12) < xe:
            ae += xe
            break
        if i & 1 == 1:
            a1 *= x1
            ae += xe
        x1 *= x1
        xe <<= 1
        if x1 < 0.5:
            x1 += x1
            xe -= 1
        i >>= 1
    if y < 0:
        a1 = 1 / a1
        ae = -ae
    try:
        return math.ldexp(a1, ae)
    except OverflowError:
        return math.inf


def go_round_half_up(x: float) -> float:
    """``round`` in decaying_histogram.go: ``math.Floor(x + 0.5)``."""
    return math.floor(x + 0.5)
