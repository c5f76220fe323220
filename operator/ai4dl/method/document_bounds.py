"""The model document's schema versions, number types and size bounds, and the base model and
tolerant comparisons its validators share; re-exported by :mod:`ai4dl.method.document`."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

#: Written by this version. v2 adds the optional fitted policy tables (``policyTables``);
#: v1 documents (no tables) still load.
SCHEMA_VERSION = "ai4dl.io/phase-model/v2"
SCHEMA_V1 = "ai4dl.io/phase-model/v1"
SCHEMA_VERSIONS = (SCHEMA_V1, SCHEMA_VERSION)

# Every number of a document is finite: NaN or Inf would reach the policy arithmetic (JSON
# cannot carry them, but a document built in Python can).
Number = Annotated[float, Field(allow_inf_nan=False)]
Matrix = list[list[Number]]
Vector = list[Number]

# Units whose values are resource usage: never negative.
USAGE_UNITS = ("cores", "bytes", "percent", "fraction")
# Plausibility bounds of usage in native units: no single container has used more (the largest
# machines sold have under 1,000 cores and 32 TiB). A statistic beyond them is not a fit of
# real data; the operator's own --max-sample-* bounds, set to the cluster's largest node, are
# tighter.
PLAUSIBLE_MAX = {"cores": 4096.0, "bytes": float(2 ** 47)}
# Arrays are written with 9 significant digits (float32-exact): orderings hold to this tolerance.
_TOL = 1e-6
# Sizes beyond any real model; the API server needs them to bound the cost of the CEL rules,
# and every reader (the `ai4dl` commands, the trainer, the operator) refuses a document beyond
# them, naming the field and the bound. Rule: about 10x the largest the trainer produces on the
# shared data (docs/results/run.sh: 10 hidden units, --history 6, k <= 10 phases, 2-4
# features, 10 prototypes of a few phases, 2 head-room and 2 peak-risk tables of <= 4 bins).
MAX_FEATURES = 32
MAX_PHASES = 64
MAX_HIDDEN = 100                 # 10 x the default (and largest used) n_hidden, 10
MAX_HISTORY = 60                 # 10 x the largest n_history used, 6 (run.sh's gcd-k6-history6)
#: rows of crbm.B and crbm.A (n_history x n_visible): 10 x the largest used, 6 x 4
MAX_HISTORY_ROWS = 240
MAX_PROTOTYPES = 100             # the trainer keeps the 10 most common
MAX_SEQUENCE = 1000              # phases in one prototype sequence (collapsed: a few)
MAX_TABLES = 8                   # head-room / peak-risk tables of one kind (the trainer: 2)
MAX_BURST_EDGES = 32             # head-room burstiness bins - 1 (the trainer: <= 3)
MAX_FIT_KEYS = 64                # numbers in one fit report entry
MAX_NAME = 253                   # a feature, unit, resource or table name
MAX_KS = 64                      # k values tried by --phases auto (the trainer: 2..10)
#: The largest model document, serialised as the trainer writes it (compact JSON): 192 KiB,
#: 14 x the largest the trainer wrote on the shared data (13.6 KiB: 10 phases, --history 6,
#: both head-room tables). Two limits above it: `kubectl apply` (client-side) copies the object
#: into its last-applied annotation, and annotations hold at most 256 KiB; etcd refuses an
#: object above ~1.5 MiB, and the object holds spec.model and spec.previousModel. The CRD
#: cannot measure bytes (maxItems bound each array, not their sum): a document between this
#: bound and the API server's limits is stored, and every reader refuses it (the operator:
#: Degraded, InvalidModel); above them the API server refuses it itself.
MAX_DOCUMENT_BYTES = 192 * 1024
#: The most numbers the document's matrices (crbm.W, crbm.B, crbm.A, centroids, transitions)
#: and prototype sequences may hold together: the stand-in for MAX_DOCUMENT_BYTES that the API
#: server can count (a CEL rule; a CRD cannot measure bytes, and its per-array maxItems allow
#: documents of megabytes). Written as the trainer writes them (about 12 bytes a number),
#: 16,384 numbers are about 192 KiB; the trainer's largest fit on the shared data holds under
#: 700 (10 phases, --history 6, 4 features).
MAX_CELLS = 16_384


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def approx_le(a: float, b: float, scale: float = 0.0) -> bool:
    """a <= b up to the documents' float32 rounding (relative to ``scale`` when given: the
    magnitude the compared numbers were computed from). The CEL rules use the same test."""
    return a <= b + _TOL * (abs(a) + abs(b) + scale) + 1e-30


def matrix_shape(m: Matrix) -> tuple[int, ...]:
    """Shape of a list of lists, or (-1,) when rows are ragged."""
    lens = {len(r) for r in m}
    if len(lens) > 1:
        return (-1,)
    return (len(m), lens.pop() if lens else 0)
