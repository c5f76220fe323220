"""Model documents at the bounds of ai4dl.method.document, for tests/test_bounds.py and
tests/test_bounds_integration.py: consistent (every validator but the bound under test
passes), so a refusal can only come from that bound."""

from __future__ import annotations

import numpy as np

from ai4dl.method.document import to_list
from ai4dl.method.document_bounds import SCHEMA_VERSION

UNITS = {"cpu": "cores", "memory": "bytes"}
TOP = {"cpu": 2.0, "memory": float(2 ** 31)}


def doc(features=("cpu", "memory"), hidden: int = 10, history: int = 3, phases: int = 4,
        prototypes: int = 1, sequence: int = 3, seed: int = 0,
        weight_scale: float = 1.0) -> dict:
    """A document of these dimensions; numbers random but plausible (usage in [0, TOP]);
    ``weight_scale`` scales the CRBM's weights (1e-5: each written in 15 characters)."""
    rng = np.random.default_rng(seed)
    V, H, n, k = len(features), hidden, history, phases
    top = [TOP.get(f, 1.0) for f in features]

    def stats(i: int) -> dict:
        q = {"min": 0.0, "p50": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99, "max": 1.0,
             "mean": 0.5, "std": 0.25}
        return {"phase": i, "samples": 100, "share": 1.0 / k,
                **{key: to_list([v * t for t in top]) for key, v in q.items()},
                "dwell": {"runs": 1, "mean": 10.0, "p50": 10.0, "p90": 10.0, "max": 10.0}}

    return {
        "schemaVersion": SCHEMA_VERSION, "stepSeconds": 15.0,
        "features": [{"name": f, "unit": UNITS.get(f, "unknown")} for f in features],
        "scaler": {"mean": to_list([0.5 * t for t in top]), "scale": [1.0] * V},
        "crbm": {"n_visible": V, "n_hidden": H, "n_history": n,
                 "W": to_list(weight_scale * rng.uniform(-1, 1, (V, H))),
                 "B": to_list(weight_scale * rng.uniform(-1, 1, (n * V, H))),
                 "A": to_list(weight_scale * rng.uniform(-1, 1, (n * V, V))),
                 "b_visible": to_list(rng.uniform(-1, 1, V)),
                 "b_hidden": to_list(rng.uniform(-1, 1, H))},
        "centroids": to_list(rng.uniform(0, 1, (k, H))),
        "noveltyThreshold": to_list(rng.uniform(0, 1, k)),
        "phases": [stats(i) for i in range(k)],
        "transitions": to_list(np.eye(k)),
        "prototypes": [{"sequence": [int(x) for x in rng.integers(0, k, sequence)],
                        "executions": 1, "share": 1.0 / max(prototypes, 1)}
                       for _ in range(prototypes)],
    }


def oversized() -> dict:
    """Every dimension and the count of numbers within its bound, the whole beyond
    MAX_DOCUMENT_BYTES (211 KiB, under the 256 KiB `kubectl apply` can carry: its weights are
    long numbers): the case no CRD rule can see and only the readers refuse."""
    return doc(hidden=100, history=40, phases=50, prototypes=1, sequence=3, weight_scale=1e-5)


def too_many_numbers() -> dict:
    """Every dimension within its bound, the numbers of its matrices beyond MAX_CELLS (16,883,
    about 200 KiB: under what `kubectl apply` can carry): the CRD's CEL rule refuses it, and
    the readers name the count first."""
    return doc(hidden=100, history=45, phases=50, prototypes=1, sequence=3)
