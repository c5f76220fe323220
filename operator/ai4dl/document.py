"""The serialised phase model: a small, versioned JSON document validated by pydantic.

It becomes the ``model`` field of the ``PhaseModel`` custom resource's spec, so it holds arrays
of numbers (no pickles) and stays small (a few KB for typical sizes). Floats are written with 9
significant digits, which round-trips float32 weights exactly.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: Written by this version. v2 adds the optional fitted policy tables (``policyTables``);
#: v1 documents (no tables) still load.
SCHEMA_VERSION = "ai4dl.io/phase-model/v2"
SCHEMA_V1 = "ai4dl.io/phase-model/v1"
SCHEMA_VERSIONS = (SCHEMA_V1, SCHEMA_VERSION)

Matrix = list[list[float]]
Vector = list[float]
#: A float that must be finite (JSON has no NaN/Infinity, and a table must not hold one).
Finite = Annotated[float, Field(allow_inf_nan=False)]


def to_list(a) -> list:
    """float32-exact, compact JSON numbers."""
    arr = np.asarray(a, dtype=np.float64)
    return np.vectorize(lambda v: float(f"{v:.9g}"), otypes=[float])(arr).tolist() if arr.size \
        else arr.tolist()


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Feature(_Strict):
    name: str = Field(min_length=1)
    unit: str = Field(min_length=1)


class Scaler(_Strict):
    mean: Vector
    scale: Vector

    @field_validator("scale")
    @classmethod
    def _positive(cls, v: Vector) -> Vector:
        if any(not (s > 0) for s in v):
            raise ValueError("every scale must be > 0")
        return v


class CRBMWeights(_Strict):
    n_visible: int = Field(ge=1)
    n_hidden: int = Field(ge=1)
    n_history: int = Field(ge=1)
    W: Matrix
    B: Matrix
    A: Matrix
    b_visible: Vector
    b_hidden: Vector


class Dwell(_Strict):
    runs: int = Field(ge=0)
    mean: float
    p50: float
    p90: float
    max: float


class PhaseStats(_Strict):
    """Statistics of one phase; vectors are per feature, in the features' units."""
    phase: int = Field(ge=0)
    samples: int = Field(ge=0)
    share: float
    mean: Vector
    std: Vector
    min: Vector
    max: Vector
    p50: Vector
    p90: Vector
    p95: Vector
    p99: Vector
    dwell: Dwell  # in samples of step_seconds


class Prototype(_Strict):
    sequence: list[int]
    executions: int
    share: float


class KSelectionReport(_Strict):
    ks: list[int]
    wcss: list[float]
    silhouette: list[float]
    elbow_k: int
    silhouette_k: int
    chosen_k: int
    rule: str


class FitReport(_Strict):
    seed: int
    n_executions: int
    n_samples: int
    crbm_epochs: int
    crbm_best_epoch: int
    reconstruction_error: float
    validation_error: float
    silhouette: float | None = None
    novelty_rate: float
    k_selection: KSelectionReport | None = None
    device: str = "cpu"


#: Head-room table vocabularies (ai4dl.policy.headroom.ESTIMATORS / POOL_LEVELS).
ESTIMATOR_NAMES = ("max", "mean+2std", "last", "median", "phase-level")
POOL_NAMES = ("state", "burstiness", "global")


class HeadroomResourceTable(_Strict):
    """One resource of a fitted head-room table: per (phase, burstiness bin) state, which
    estimator of the next window to trust and the multiplier (head-room) it gets."""
    resource: str = Field(min_length=1)
    burst_edges: list[Finite] = Field(alias="burstEdges")       # bins: (e[b-1], e[b]]
    estimators: list[list[Literal[ESTIMATOR_NAMES]]]           # (phases, bins)
    multipliers: list[list[Annotated[float, Field(gt=0, allow_inf_nan=False)]]]
    windows: list[list[Annotated[int, Field(ge=0)]]]            # training windows behind each
    pooled: list[list[Literal[POOL_NAMES]]]                     # where each entry came from
    cold_start: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(alias="coldStart")

    @model_validator(mode="after")
    def _shapes(self) -> "HeadroomResourceTable":
        e = self.burst_edges
        if any(b <= a for a, b in zip(e, e[1:])):
            raise ValueError(f"{self.resource}: burstEdges must increase strictly")
        bins = len(e) + 1
        shape = _shape(self.multipliers)
        if len(shape) != 2 or shape[1] != bins:
            raise ValueError(f"{self.resource}: multipliers has shape {shape}, expected "
                             f"(phases, {bins}) for {len(e)} burstEdges")
        for name in ("estimators", "windows", "pooled"):
            got = _shape(getattr(self, name))
            if got != shape:
                raise ValueError(f"{self.resource}: {name} has shape {got}, expected {shape}")
        return self


class HeadroomTable(_Strict):
    """A fitted :class:`ai4dl.policy.headroom.HeadroomPolicy` (``phase-headroom``, or the
    phase-blind control ``burst-headroom`` with one phase row)."""
    name: str = Field(min_length=1)
    uses_phase: bool = Field(alias="usesPhase")
    target: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)]
    window_samples: int = Field(ge=1, alias="windowSamples")
    resources: list[HeadroomResourceTable] = Field(min_length=1)
    fit: list[dict[str, Finite]] | None = None                 # per resource, the fit report

    @model_validator(mode="after")
    def _agree(self) -> "HeadroomTable":
        rows = {len(r.multipliers) for r in self.resources}
        if len(rows) > 1:
            raise ValueError(f"{self.name}: resources have different numbers of phase rows")
        if not self.uses_phase and rows != {1}:
            raise ValueError(f"{self.name}: a phase-blind table has one phase row")
        if self.fit is not None and len(self.fit) != len(self.resources):
            raise ValueError(f"{self.name}: fit has {len(self.fit)} entries for "
                             f"{len(self.resources)} resources")
        return self


class PhaseModelDocument(_Strict):
    schema_version: Literal[SCHEMA_VERSIONS] = Field(SCHEMA_VERSION, alias="schemaVersion")
    step_seconds: float = Field(gt=0, alias="stepSeconds")
    features: list[Feature] = Field(min_length=1)
    scaler: Scaler
    crbm: CRBMWeights
    centroids: Matrix
    novelty_threshold: Vector = Field(alias="noveltyThreshold")
    phases: list[PhaseStats]
    transitions: Matrix
    prototypes: list[Prototype] = []
    fit: FitReport | None = None
    policy_tables: list[HeadroomTable] | None = Field(None, alias="policyTables")

    @model_validator(mode="after")
    def _shapes(self) -> "PhaseModelDocument":
        """Array shapes must agree; the message names the first field that does not."""
        V, H, n = len(self.features), self.crbm.n_hidden, self.crbm.n_history
        k = len(self.centroids)
        expect = {
            "scaler.mean": (np.shape(self.scaler.mean), (V,)),
            "scaler.scale": (np.shape(self.scaler.scale), (V,)),
            "crbm.n_visible": ((self.crbm.n_visible,), (V,)),
            "crbm.W": (_shape(self.crbm.W), (V, H)),
            "crbm.B": (_shape(self.crbm.B), (n * V, H)),
            "crbm.A": (_shape(self.crbm.A), (n * V, V)),
            "crbm.b_visible": (np.shape(self.crbm.b_visible), (V,)),
            "crbm.b_hidden": (np.shape(self.crbm.b_hidden), (H,)),
            "centroids": (_shape(self.centroids), (k, H)),
            "noveltyThreshold": (np.shape(self.novelty_threshold), (k,)),
            "phases": ((len(self.phases),), (k,)),
            "transitions": (_shape(self.transitions), (k, k)),
        }
        if k < 1:
            raise ValueError("centroids: at least one phase is required")
        for name, (got, want) in expect.items():
            if tuple(got) != tuple(want):
                raise ValueError(f"{name} has shape {tuple(got)}, expected {tuple(want)}")
        for p in self.phases:
            for f in ("mean", "std", "min", "max", "p50", "p90", "p95", "p99"):
                if len(getattr(p, f)) != V:
                    raise ValueError(f"phases[{p.phase}].{f} has {len(getattr(p, f))} values, "
                                     f"expected {V}")
        if self.policy_tables is not None:
            if self.schema_version == SCHEMA_V1:
                raise ValueError(f"policyTables needs schemaVersion {SCHEMA_VERSION}")
            names = [f.name for f in self.features]
            for t in self.policy_tables:
                rows = len(t.resources[0].multipliers)
                if t.uses_phase and rows != k:
                    raise ValueError(f"policyTables.{t.name}: {rows} phase rows for a model "
                                     f"with {k} phases")
                for r in t.resources:
                    if r.resource not in names:
                        raise ValueError(f"policyTables.{t.name}: no feature {r.resource!r}")
        return self


def _shape(m: Matrix) -> tuple[int, ...]:
    """Shape of a list of lists, or (-1,) when rows are ragged."""
    lens = {len(r) for r in m}
    if len(lens) > 1:
        return (-1,)
    return (len(m), lens.pop() if lens else 0)
