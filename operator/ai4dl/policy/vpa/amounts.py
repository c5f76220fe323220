"""``model/types.go``: resource amounts (millicores, bytes) with Go's truncating conversions.

All recommended amounts are integer ``ResourceAmount``s with Go's truncating conversions and the
1e14 cap; usage samples are quantised as the live metrics path does (whole millicores, rounded
up from nanocores).
"""

from __future__ import annotations

import math

import numpy as np

#: ``model.MaxResourceAmount``: the cap of every recommended amount (millicores or bytes).
MAX_RESOURCE_AMOUNT = 10**14
# The same bound as a float (exact): comparing a float with a 47-bit int is much slower.
_MAX_RESOURCE_AMOUNT_F = float(MAX_RESOURCE_AMOUNT)
#: What Go's ``int64(NaN)`` gives on amd64 (``CVTTSD2SQ``); only ever compared with a minimum.
_GO_INT64_OF_NAN = -(2**63)


def amount_from_float(amount: float) -> int:
    """``resourceAmountFromFloat``: truncate toward zero, clamp to [0, 1e14]."""
    if 0.0 <= amount <= _MAX_RESOURCE_AMOUNT_F:  # the usual case first (same result)
        return int(amount)
    if amount < 0:
        return 0
    if amount > _MAX_RESOURCE_AMOUNT_F:
        return MAX_RESOURCE_AMOUNT
    if math.isnan(amount):
        return _GO_INT64_OF_NAN
    return int(amount)


def scale_resource(amount: int, factor: float) -> int:
    """``ScaleResource``."""
    return amount_from_float(float(amount) * factor)


def cpu_amount_from_cores(cores: float) -> int:
    """``CPUAmountFromCores``: millicores, truncated."""
    return amount_from_float(cores * 1000.0)


def usage_millicores(cores):
    """Usage in whole millicores as ``Quantity.MilliValue()`` gives it: nanocores, rounded up.

    Works on floats and on arrays (NaN stays NaN); both paths do the same IEEE operations.
    """
    return np.ceil(np.rint(np.multiply(cores, 1e9)) / 1e6)
