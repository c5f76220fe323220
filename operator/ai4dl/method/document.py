"""The serialised phase model: a small, versioned JSON document validated by pydantic.

It becomes the ``model`` field of the ``PhaseModel`` custom resource's spec, so it holds arrays
of numbers (no pickles) and stays small (a few KB for typical sizes). Floats are written with 9
significant digits, which round-trips float32 weights exactly.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
from pydantic import ConfigDict, Field, field_validator, model_validator

from ai4dl.method.document_bounds import (MAX_CELLS, MAX_DOCUMENT_BYTES, MAX_FEATURES,
                                          MAX_HIDDEN, MAX_HISTORY, MAX_HISTORY_ROWS, MAX_KS,
                                          MAX_NAME, MAX_PHASES, MAX_PROTOTYPES, MAX_SEQUENCE, MAX_TABLES, PLAUSIBLE_MAX,
                                          SCHEMA_V1, SCHEMA_VERSION, SCHEMA_VERSIONS, USAGE_UNITS,
                                          Number, StrictModel, Vector, approx_le, matrix_shape)
from ai4dl.method.document_tables import HeadroomTable, PolicyChoice, RiskTable


# ----------------------------------------------------------------------------- CEL rules
# The same checks as the validators below, as CEL rules in the CRD (x-kubernetes-validations),
# so that `kubectl apply` of a forged or corrupted document fails at the API server, not in a
# window. Each rule guards its indices: a rule that errors would reject with a worse message.
def _abs(x: str) -> str:
    return f"({x} < 0.0 ? -({x}) : {x})"


def _le_cel(a: str, b: str) -> str:
    return f"{a} <= {b} + 1e-6 * ({_abs(a)} + {_abs(b)}) + 1e-30"


_STATS_CEL = [{
    "rule": "self.min.all(i, lo, i < self.max.size() && i < self.mean.size() && "
            "i < self.std.size() && i < self.p50.size() && i < self.p90.size() && "
            "i < self.p95.size() && i < self.p99.size() && "
            + " && ".join(_le_cel(a, b) for a, b in (
                ("lo", "self.p50[i]"), ("self.p50[i]", "self.p90[i]"),
                ("self.p90[i]", "self.p95[i]"), ("self.p95[i]", "self.p99[i]"),
                ("self.p99[i]", "self.max[i]"), ("lo", "self.mean[i]"),
                ("self.mean[i]", "self.max[i]")))
            + " && self.std[i] <= (self.max[i] - lo) / 2.0 + 1e-6 * ("
            + _abs("lo") + " + " + _abs("self.max[i]") + ") + 1e-30)",
    "message": "phase statistics must be those of real samples: min <= p50 <= p90 <= p95 <= "
               "p99 <= max, min <= mean <= max, std <= (max - min) / 2",
}]
_DOCUMENT_CEL = [
    {"rule": "self.scaler.mean.all(j, m, self.phases.exists(p, j < p.min.size() && "
             + _le_cel("p.min[j]", "m") + ") && self.phases.exists(p, j < p.max.size() && "
             + _le_cel("m", "p.max[j]") + "))",
     "message": "scaler.mean must lie within the training data's range (the phases' min..max)"},
    {"rule": "self.scaler.scale.all(j, s, s <= 1.000001 || self.phases.exists(p, "
             "self.phases.exists(q, j < p.min.size() && j < q.max.size() && "
             + _le_cel("s", "(q.max[j] - p.min[j])") + ")))",
     "message": "scaler.scale must not exceed the training data's range"},
    {"rule": "self.features.all(j, f, !(f.unit in " + str(list(USAGE_UNITS)) + ") || "
             "self.phases.all(p, j >= p.min.size() || p.min[j] >= 0.0))",
     "message": "usage (cores, bytes, percent, fraction) cannot be negative"},
    {"rule": "self.features.all(j, f, !(f.unit in " + str(list(PLAUSIBLE_MAX)) + ") || "
             "self.phases.all(p, j >= p.max.size() || p.max[j] <= (f.unit == 'cores' ? "
             f"{PLAUSIBLE_MAX['cores']!r} : {PLAUSIBLE_MAX['bytes']!r})))",
     "message": f"phase statistics beyond any machine ({PLAUSIBLE_MAX['cores']:g} cores, "
                f"{PLAUSIBLE_MAX['bytes'] / 2 ** 40:g} TiB)"},
    {"rule": "self.transitions.all(r, r.sum() >= 0.9999 && r.sum() <= 1.0001)",
     "message": "transitions: every row must be probabilities summing to 1"},
    {"rule": f"self.crbm.n_history * self.crbm.n_visible <= {MAX_HISTORY_ROWS}",
     "message": f"crbm.n_history x crbm.n_visible must be at most {MAX_HISTORY_ROWS}"},
    {"rule": "self.crbm.W.map(r, r.size()).sum() + self.crbm.B.map(r, r.size()).sum() + "
             "self.crbm.A.map(r, r.size()).sum() + self.centroids.map(r, r.size()).sum() + "
             "self.transitions.map(r, r.size()).sum() + (has(self.prototypes) ? "
             f"self.prototypes.map(p, p.sequence.size()).sum() : 0) <= {MAX_CELLS}",
     "message": f"the model's matrices (crbm.W, crbm.B, crbm.A, centroids, transitions) and "
                f"prototype sequences may hold at most {MAX_CELLS} numbers together (about "
                f"{MAX_DOCUMENT_BYTES // 1024} KiB)"},
]


def document_cells(doc: "PhaseModelDocument") -> int:
    """The numbers :data:`MAX_CELLS` counts (the CEL rule above counts the same)."""
    c = doc.crbm
    return (sum(len(r) for m in (c.W, c.B, c.A, doc.centroids, doc.transitions) for r in m)
            + sum(len(p.sequence) for p in doc.prototypes))


def to_list(a) -> list:
    """float32-exact, compact JSON numbers."""
    arr = np.asarray(a, dtype=np.float64)
    return np.vectorize(lambda v: float(f"{v:.9g}"), otypes=[float])(arr).tolist() if arr.size \
        else arr.tolist()


class Feature(StrictModel):
    name: str = Field(min_length=1, max_length=MAX_NAME)
    unit: str = Field(min_length=1, max_length=MAX_NAME)


FeatureVector = Annotated[Vector, Field(max_length=MAX_FEATURES)]
HiddenVector = Annotated[Vector, Field(max_length=MAX_HIDDEN)]


class Scaler(StrictModel):
    mean: FeatureVector
    scale: FeatureVector

    @field_validator("scale")
    @classmethod
    def _positive(cls, v: Vector) -> Vector:
        if any(not (s > 0) for s in v):
            raise ValueError("every scale must be > 0")
        return v


class CRBMWeights(StrictModel):
    n_visible: int = Field(ge=1, le=MAX_FEATURES)
    n_hidden: int = Field(ge=1, le=MAX_HIDDEN)
    n_history: int = Field(ge=1, le=MAX_HISTORY)
    W: list[HiddenVector] = Field(max_length=MAX_FEATURES)              # (V, H)
    B: list[HiddenVector] = Field(max_length=MAX_HISTORY_ROWS)          # (n V, H)
    A: list[FeatureVector] = Field(max_length=MAX_HISTORY_ROWS)         # (n V, V)
    b_visible: FeatureVector
    b_hidden: HiddenVector

    @model_validator(mode="after")
    def _history_rows(self) -> "CRBMWeights":
        if self.n_history * self.n_visible > MAX_HISTORY_ROWS:
            raise ValueError(f"n_history x n_visible = {self.n_history * self.n_visible}, at "
                             f"most {MAX_HISTORY_ROWS}")
        return self


class Dwell(StrictModel):
    runs: int = Field(ge=0)
    mean: Number = Field(ge=0)
    p50: Number = Field(ge=0)
    p90: Number = Field(ge=0)
    max: Number = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> "Dwell":
        if not approx_le(self.p50, self.p90) or not approx_le(self.p90, self.max) \
                or not approx_le(self.mean, self.max):
            raise ValueError("dwell: expected p50 <= p90 <= max and mean <= max")
        return self


class PhaseStats(StrictModel):
    """Statistics of one phase; vectors are per feature, in the features' units."""
    model_config = ConfigDict(extra="forbid", populate_by_name=True,
                              json_schema_extra={"x-kubernetes-validations": _STATS_CEL})
    phase: int = Field(ge=0)
    samples: int = Field(ge=0)
    share: Number = Field(ge=0, le=1)
    mean: FeatureVector
    std: list[Annotated[float, Field(ge=0, allow_inf_nan=False)]] = Field(
        max_length=MAX_FEATURES)
    min: FeatureVector
    max: FeatureVector
    p50: FeatureVector
    p90: FeatureVector
    p95: FeatureVector
    p99: FeatureVector
    dwell: Dwell  # in samples of step_seconds

    @model_validator(mode="after")
    def _consistent(self) -> "PhaseStats":
        """The statistics of one set of samples: min <= p50 <= p90 <= p95 <= p99 <= max,
        min <= mean <= max, std at most half the range (true of any sample set)."""
        chain = ("min", "p50", "p90", "p95", "p99", "max")
        for j in range(min(len(getattr(self, f)) for f in (*chain, "mean", "std"))):
            v = {f: getattr(self, f)[j] for f in (*chain, "mean", "std")}
            for a, b in zip(chain, chain[1:]):
                if not approx_le(v[a], v[b]):
                    raise ValueError(f"phase {self.phase}, feature {j}: {a} {v[a]:g} > {b} "
                                     f"{v[b]:g} (not the statistics of real samples)")
            if not (approx_le(v["min"], v["mean"]) and approx_le(v["mean"], v["max"])):
                raise ValueError(f"phase {self.phase}, feature {j}: mean {v['mean']:g} outside "
                                 f"[min {v['min']:g}, max {v['max']:g}]")
            if not approx_le(v["std"], (v["max"] - v["min"]) / 2, abs(v["min"]) + abs(v["max"])):
                raise ValueError(f"phase {self.phase}, feature {j}: std {v['std']:g} exceeds half "
                                 f"the range [{v['min']:g}, {v['max']:g}]")
        return self


class Prototype(StrictModel):
    sequence: list[int] = Field(max_length=MAX_SEQUENCE)
    executions: int = Field(ge=0)
    share: Number = Field(ge=0, le=1)


class KSelectionReport(StrictModel):
    ks: list[int] = Field(max_length=MAX_KS)
    wcss: list[float] = Field(max_length=MAX_KS)
    silhouette: list[float] = Field(max_length=MAX_KS)
    elbow_k: int
    silhouette_k: int
    chosen_k: int
    rule: str = Field(max_length=2000)


class FitReport(StrictModel):
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
    device: str = Field("cpu", max_length=MAX_NAME)


class PhaseModelDocument(StrictModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True,
                              json_schema_extra={"x-kubernetes-validations": _DOCUMENT_CEL})
    schema_version: Literal[SCHEMA_VERSIONS] = Field(SCHEMA_VERSION, alias="schemaVersion")
    step_seconds: float = Field(gt=0, alias="stepSeconds")
    features: list[Feature] = Field(min_length=1, max_length=MAX_FEATURES)
    scaler: Scaler
    crbm: CRBMWeights
    centroids: list[Annotated[list[Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]],
                              Field(max_length=MAX_HIDDEN)]] = Field(
        max_length=MAX_PHASES, description="hidden-unit probabilities, in [0, 1]")
    novelty_threshold: list[Annotated[float, Field(ge=0, allow_inf_nan=False)]] = Field(
        alias="noveltyThreshold", max_length=MAX_PHASES)
    phases: list[PhaseStats] = Field(max_length=MAX_PHASES)
    transitions: list[Annotated[list[Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]],
                                Field(max_length=MAX_PHASES)]] = Field(max_length=MAX_PHASES)
    prototypes: list[Prototype] = Field([], max_length=MAX_PROTOTYPES)
    fit: FitReport | None = None
    policy_tables: list[HeadroomTable] | None = Field(None, alias="policyTables",
                                                      max_length=MAX_TABLES)
    #: fitted peak-risk tables (optional, additive in v2: documents without them load as before)
    risk_tables: list[RiskTable] | None = Field(None, alias="riskTables", max_length=MAX_TABLES)
    policy_choice: PolicyChoice | None = Field(None, alias="policyChoice")

    @model_validator(mode="after")
    def _shapes(self) -> "PhaseModelDocument":
        """Array shapes must agree; the message names the first field that does not."""
        cells = document_cells(self)
        if cells > MAX_CELLS:
            raise ValueError(f"the model's matrices and prototype sequences hold {cells} "
                             f"numbers, more than the {MAX_CELLS} a model document may hold "
                             f"(about {MAX_DOCUMENT_BYTES // 1024} KiB)")
        V, H, n = len(self.features), self.crbm.n_hidden, self.crbm.n_history
        k = len(self.centroids)
        expect = {
            "scaler.mean": (np.shape(self.scaler.mean), (V,)),
            "scaler.scale": (np.shape(self.scaler.scale), (V,)),
            "crbm.n_visible": ((self.crbm.n_visible,), (V,)),
            "crbm.W": (matrix_shape(self.crbm.W), (V, H)),
            "crbm.B": (matrix_shape(self.crbm.B), (n * V, H)),
            "crbm.A": (matrix_shape(self.crbm.A), (n * V, V)),
            "crbm.b_visible": (np.shape(self.crbm.b_visible), (V,)),
            "crbm.b_hidden": (np.shape(self.crbm.b_hidden), (H,)),
            "centroids": (matrix_shape(self.centroids), (k, H)),
            "noveltyThreshold": (np.shape(self.novelty_threshold), (k,)),
            "phases": ((len(self.phases),), (k,)),
            "transitions": (matrix_shape(self.transitions), (k, k)),
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
        self._sane()
        size = len(self.model_dump_json(by_alias=True, exclude_none=True))
        if size > MAX_DOCUMENT_BYTES:
            raise ValueError(f"the document is {size / 1024:.0f} KiB serialised, more than the "
                             f"{MAX_DOCUMENT_BYTES // 1024} KiB a model document may hold")
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
        if self.risk_tables is not None:
            if self.schema_version == SCHEMA_V1:
                raise ValueError(f"riskTables needs schemaVersion {SCHEMA_VERSION}")
            names = [f.name for f in self.features]
            for t in self.risk_tables:
                if t.uses_phase and t.phases != k:
                    raise ValueError(f"riskTables.{t.name}: {t.phases} phase rows for a model "
                                     f"with {k} phases")
                for r in t.resources:
                    if r.resource not in names:
                        raise ValueError(f"riskTables.{t.name}: no feature {r.resource!r}")
        if self.policy_choice is not None:
            if self.schema_version == SCHEMA_V1:
                raise ValueError(f"policyChoice needs schemaVersion {SCHEMA_VERSION}")
            names = [f.name for f in self.features]
            for res in self.policy_choice.resources:
                if res not in names:
                    raise ValueError(f"policyChoice: no feature {res!r}")
            # whether each winner can be served from what the document holds is the
            # policies' question (ai4dl.policy.catalog.choice_problem)
        return self

    def _sane(self) -> None:
        """Numbers a fit of real data can produce, so that a corrupted or forged document is
        refused here (by `kubectl apply`, the trainer, the operator) and never reaches a
        window: usage never negative nor beyond a physical bound, the scaler inside the
        training data's range, probabilities in [0, 1], rows of the transition matrix summing
        to one."""
        k = len(self.centroids)
        lo = [min(p.min[j] for p in self.phases) for j in range(len(self.features))]
        hi = [max(p.max[j] for p in self.phases) for j in range(len(self.features))]
        for j, f in enumerate(self.features):
            if f.unit in USAGE_UNITS and lo[j] < 0:
                raise ValueError(f"phases: feature {f.name!r} ({f.unit}) has negative usage "
                                 f"{lo[j]:g}")
            bound = PLAUSIBLE_MAX.get(f.unit)
            if bound is not None and hi[j] > bound:
                raise ValueError(f"phases: feature {f.name!r} reaches {hi[j]:g} {f.unit}, beyond "
                                 f"any machine ({bound:g})")
            m, sc = self.scaler.mean[j], self.scaler.scale[j]
            if not (approx_le(lo[j], m) and approx_le(m, hi[j])):
                raise ValueError(f"scaler.mean[{j}] = {m:g} is outside the training data's range "
                                 f"[{lo[j]:g}, {hi[j]:g}] of {f.name!r}")
            if not approx_le(sc, max(hi[j] - lo[j], 1.0)):
                raise ValueError(f"scaler.scale[{j}] = {sc:g} exceeds the training data's range "
                                 f"of {f.name!r} ({hi[j] - lo[j]:g})")
        for i, row in enumerate(self.transitions):
            if abs(sum(row) - 1) > 1e-4:
                raise ValueError(f"transitions[{i}]: a row of probabilities summing to 1 expected")
        if any(s < 0 or s >= k for p in self.prototypes for s in p.sequence):
            raise ValueError(f"prototypes: phase ids must be in [0, {k})")
        if sorted(p.phase for p in self.phases) != list(range(k)):
            raise ValueError(f"phases: expected phase ids 0..{k - 1}, once each")
