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
]
#: A float that must be finite (JSON has no NaN/Infinity, and a table must not hold one).
Finite = Number


def to_list(a) -> list:
    """float32-exact, compact JSON numbers."""
    arr = np.asarray(a, dtype=np.float64)
    return np.vectorize(lambda v: float(f"{v:.9g}"), otypes=[float])(arr).tolist() if arr.size \
        else arr.tolist()


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Feature(_Strict):
    name: str = Field(min_length=1, max_length=MAX_NAME)
    unit: str = Field(min_length=1, max_length=MAX_NAME)


FeatureVector = Annotated[Vector, Field(max_length=MAX_FEATURES)]
HiddenVector = Annotated[Vector, Field(max_length=MAX_HIDDEN)]
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME)]
#: a fit report entry: named numbers, a bounded few
FitEntry = Annotated[dict[Annotated[str, Field(max_length=MAX_NAME)], Finite],
                     Field(max_length=MAX_FIT_KEYS)]


class Scaler(_Strict):
    mean: FeatureVector
    scale: FeatureVector

    @field_validator("scale")
    @classmethod
    def _positive(cls, v: Vector) -> Vector:
        if any(not (s > 0) for s in v):
            raise ValueError("every scale must be > 0")
        return v


class CRBMWeights(_Strict):
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


class Dwell(_Strict):
    runs: int = Field(ge=0)
    mean: Number = Field(ge=0)
    p50: Number = Field(ge=0)
    p90: Number = Field(ge=0)
    max: Number = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> "Dwell":
        if not _le(self.p50, self.p90) or not _le(self.p90, self.max) \
                or not _le(self.mean, self.max):
            raise ValueError("dwell: expected p50 <= p90 <= max and mean <= max")
        return self


class PhaseStats(_Strict):
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
                if not _le(v[a], v[b]):
                    raise ValueError(f"phase {self.phase}, feature {j}: {a} {v[a]:g} > {b} "
                                     f"{v[b]:g} (not the statistics of real samples)")
            if not (_le(v["min"], v["mean"]) and _le(v["mean"], v["max"])):
                raise ValueError(f"phase {self.phase}, feature {j}: mean {v['mean']:g} outside "
                                 f"[min {v['min']:g}, max {v['max']:g}]")
            if not _le(v["std"], (v["max"] - v["min"]) / 2, abs(v["min"]) + abs(v["max"])):
                raise ValueError(f"phase {self.phase}, feature {j}: std {v['std']:g} exceeds half "
                                 f"the range [{v['min']:g}, {v['max']:g}]")
        return self


class Prototype(_Strict):
    sequence: list[int] = Field(max_length=MAX_SEQUENCE)
    executions: int = Field(ge=0)
    share: Number = Field(ge=0, le=1)


class KSelectionReport(_Strict):
    ks: list[int] = Field(max_length=MAX_KS)
    wcss: list[float] = Field(max_length=MAX_KS)
    silhouette: list[float] = Field(max_length=MAX_KS)
    elbow_k: int
    silhouette_k: int
    chosen_k: int
    rule: str = Field(max_length=2000)


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
    device: str = Field("cpu", max_length=MAX_NAME)


#: Head-room table vocabularies (ai4dl.policy.headroom_levels.ESTIMATORS /
#: ai4dl.policy.headroom.POOL_LEVELS).
ESTIMATOR_NAMES = ("max", "mean+2std", "last", "median", "phase-level", "max-2w", "ewma-max")
POOL_NAMES = ("state", "burstiness", "global")


def _bins(item):
    """A row of a head-room table: one entry per burstiness bin (at most edges + 1)."""
    return Annotated[list[item], Field(max_length=MAX_BURST_EDGES + 1)]


class HeadroomResourceTable(_Strict):
    """One resource of a fitted head-room table: per (phase, burstiness bin) state, which
    estimator of the next window to trust and the multiplier (head-room) it gets."""
    resource: str = Field(min_length=1, max_length=MAX_NAME)
    burst_edges: list[Finite] = Field(alias="burstEdges",       # bins: (e[b-1], e[b]]
                                      max_length=MAX_BURST_EDGES)
    estimators: list[_bins(Literal[ESTIMATOR_NAMES])] = Field(max_length=MAX_PHASES)
    multipliers: list[_bins(Annotated[float, Field(gt=0, allow_inf_nan=False)])] = Field(
        max_length=MAX_PHASES)                                  # (phases, bins)
    windows: list[_bins(Annotated[int, Field(ge=0)])] = Field(  # training windows behind each
        max_length=MAX_PHASES)
    pooled: list[_bins(Literal[POOL_NAMES])] = Field(           # where each entry came from
        max_length=MAX_PHASES)
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
    name: str = Field(min_length=1, max_length=MAX_NAME)
    uses_phase: bool = Field(alias="usesPhase")
    target: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)]
    window_samples: int = Field(ge=1, alias="windowSamples")
    resources: list[HeadroomResourceTable] = Field(min_length=1, max_length=MAX_FEATURES)
    fit: list[FitEntry] | None = Field(None, max_length=MAX_FEATURES)  # per resource

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


#: The peak-risk policy's state features (ai4dl.policy.peak.FEATURES) and the phase.
RISK_FEATURE_NAMES = ("phase", "elapsed", "since", "ratio", "dip")


class RiskFeature(_Strict):
    """One state feature of a peak-risk table and its bins: bin b holds [edges[b],
    edges[b+1])."""
    name: Literal[RISK_FEATURE_NAMES[1:]]
    edges: list[Finite] = Field(min_length=1, max_length=64)

    @field_validator("edges")
    @classmethod
    def _increasing(cls, v: list[float]) -> list[float]:
        if any(b <= a for a, b in zip(v, v[1:])):
            raise ValueError("edges must increase strictly")
        return v


#: What a peak-risk state's multiplier multiplies (ai4dl.policy.peak.ESTIMATORS): the running
#: maximum, or the last window's max.
RISK_ESTIMATOR_NAMES = ("peak", "last")


class RiskState(_Strict):
    """A fitted state: its pooling level (index into the table's ``levels``), its bin of each
    of the level's features (in the level's order), the level it multiplies (``estimator``),
    the multiplier and the training windows it was fitted on."""
    level: int = Field(ge=0)
    bins: list[Annotated[int, Field(ge=0)]] = Field(max_length=len(RISK_FEATURE_NAMES))
    estimator: Literal[RISK_ESTIMATOR_NAMES] = "peak"
    multiplier: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    windows: int = Field(ge=0)


class RiskResourceTable(_Strict):
    """One resource of a peak-risk table."""
    resource: str = Field(min_length=1, max_length=MAX_NAME)
    cold_start: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(alias="coldStart")
    min_windows: int = Field(ge=1, alias="minWindows")
    calibration: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    states: list[RiskState] = Field(max_length=4096)


class RiskTable(_Strict):
    """A fitted :class:`ai4dl.policy.peak.PeakRiskPolicy` (``peak-risk``, or the phase-blind
    ``peak-risk-blind``): the running maximum (or the last window's max) × a multiplier per
    state, fitted for at most ``maxRisk`` of windows at risk. ``levels`` is the pooling chain,
    finest first: a state at level i is keyed by the bins of ``levels[i]``'s features; a window
    takes the first level whose key has a state (none: the largest multiplier)."""
    name: str = Field(min_length=1, max_length=MAX_NAME)
    uses_phase: bool = Field(alias="usesPhase")
    phases: int = Field(ge=1, le=MAX_PHASES)                   # phase rows (1: phase-blind)
    max_risk: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = Field(alias="maxRisk")
    window_samples: int = Field(ge=1, alias="windowSamples")
    features: list[RiskFeature] = Field(min_length=1, max_length=len(RISK_FEATURE_NAMES))
    levels: list[Annotated[list[Literal[RISK_FEATURE_NAMES]],
                           Field(max_length=len(RISK_FEATURE_NAMES))]] = Field(
        min_length=1, max_length=16)
    resources: list[RiskResourceTable] = Field(min_length=1, max_length=MAX_FEATURES)
    fit: list[FitEntry] | None = Field(None, max_length=MAX_FEATURES)  # per resource

    @model_validator(mode="after")
    def _agree(self) -> "RiskTable":
        names = [f.name for f in self.features]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.name}: a feature is listed twice")
        if not self.uses_phase and self.phases != 1:
            raise ValueError(f"{self.name}: a phase-blind table has one phase row")
        sizes = {"phase": self.phases, **{f.name: len(f.edges) for f in self.features}}
        for i, lv in enumerate(self.levels):
            unknown = [f for f in lv if f not in sizes]
            if unknown or len(set(lv)) != len(lv):
                what = unknown[0] if unknown else "a feature twice"
                raise ValueError(f"{self.name}: levels[{i}] names {what} (features: "
                                 f"{', '.join(sizes)})")
            if "phase" in lv and not self.uses_phase:
                raise ValueError(f"{self.name}: a phase-blind table has no phase level")
        for r in self.resources:
            seen = set()
            for st in r.states:
                if st.level >= len(self.levels):
                    raise ValueError(f"{self.name}.{r.resource}: state at level {st.level}, "
                                     f"the table has {len(self.levels)}")
                lv = self.levels[st.level]
                if len(st.bins) != len(lv) or any(b >= sizes[f] for f, b in zip(lv, st.bins)):
                    raise ValueError(f"{self.name}.{r.resource}: state bins {st.bins} do not "
                                     f"fit level {st.level} ({', '.join(lv) or 'global'})")
                key = (st.level, tuple(st.bins))
                if key in seen:
                    raise ValueError(f"{self.name}.{r.resource}: state {key} listed twice")
                seen.add(key)
        if len({r.resource for r in self.resources}) != len(self.resources):
            raise ValueError(f"{self.name}: a resource is listed twice")
        if self.fit is not None and len(self.fit) != len(self.resources):
            raise ValueError(f"{self.name}: fit has {len(self.fit)} entries for "
                             f"{len(self.resources)} resources")
        return self


#: Policies a PhaseModel can serve window by window (ai4dl.policy.online.SERVABLE).
SERVABLE_NAMES = ("adaptive-max", "adaptive-stat", "phase-headroom", "burst-headroom", "phase",
                  "phase-proactive", "peak-risk")


class PolicyChoice(_Strict):
    """What ``auto`` serves with this model, per resource: the policy that won on the
    PhaseModel's own recent executions (ai4dl.policy.auto.choose_policy, run by the trainer)."""
    resources: list[Name] = Field(min_length=1, max_length=MAX_FEATURES)
    winners: list[Literal[SERVABLE_NAMES]] = Field(min_length=1, max_length=MAX_FEATURES)
    targets: list[Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)]] = Field(
        min_length=1, max_length=MAX_FEATURES)
    reason: str = Field("", max_length=2000)
    #: per resource, what its target is: a fulfilment of samples, or a share of windows at
    #: risk (memory); absent in documents written before objectives: every target a fulfilment
    kinds: list[Literal["fulfilment", "risk"]] | None = Field(None, max_length=MAX_FEATURES)
    #: per resource, the factor the winner's rows are multiplied by (a resource judged by risk:
    #: calibrated on the training executions so that it leaves its share of windows at risk);
    #: absent: 1. Bounded: a factor past 100 is no calibration but a broken fit.
    calibration: list[Annotated[float, Field(gt=0, le=100, allow_inf_nan=False)]] | None = \
        Field(None, max_length=MAX_FEATURES)

    @model_validator(mode="after")
    def _agree(self) -> "PolicyChoice":
        if not len(self.resources) == len(self.winners) == len(self.targets):
            raise ValueError("policyChoice: resources, winners and targets differ in length")
        for name in ("kinds", "calibration"):
            v = getattr(self, name)
            if v is not None and len(v) != len(self.resources):
                raise ValueError(f"policyChoice: {name} has {len(v)} values for "
                                 f"{len(self.resources)} resources")
        return self

    def objective_kinds(self) -> list[str]:
        return list(self.kinds) if self.kinds is not None else ["fulfilment"] * len(
            self.resources)

    def factors(self) -> list[float]:
        return list(self.calibration) if self.calibration is not None else [1.0] * len(
            self.resources)


class PhaseModelDocument(_Strict):
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
            tables = {t.name: {r.resource for r in t.resources}
                      for t in self.policy_tables or []}
            risk = {t.name: {r.resource for r in t.resources} for t in self.risk_tables or []}
            names = [f.name for f in self.features]
            for res, w in zip(self.policy_choice.resources, self.policy_choice.winners):
                if res not in names:
                    raise ValueError(f"policyChoice: no feature {res!r}")
                if w in ("phase-headroom", "burst-headroom") and res not in tables.get(w, ()):
                    raise ValueError(f"policyChoice: {res} is served by {w}, but policyTables "
                                     f"has no {w} table for it")
                if w == "peak-risk" and res not in risk.get(w, ()):
                    raise ValueError(f"policyChoice: {res} is served by {w}, but riskTables "
                                     f"has no {w} table for it")
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
            if not (_le(lo[j], m) and _le(m, hi[j])):
                raise ValueError(f"scaler.mean[{j}] = {m:g} is outside the training data's range "
                                 f"[{lo[j]:g}, {hi[j]:g}] of {f.name!r}")
            if not _le(sc, max(hi[j] - lo[j], 1.0)):
                raise ValueError(f"scaler.scale[{j}] = {sc:g} exceeds the training data's range "
                                 f"of {f.name!r} ({hi[j] - lo[j]:g})")
        for i, row in enumerate(self.transitions):
            if abs(sum(row) - 1) > 1e-4:
                raise ValueError(f"transitions[{i}]: a row of probabilities summing to 1 expected")
        if any(s < 0 or s >= k for p in self.prototypes for s in p.sequence):
            raise ValueError(f"prototypes: phase ids must be in [0, {k})")
        if sorted(p.phase for p in self.phases) != list(range(k)):
            raise ValueError(f"phases: expected phase ids 0..{k - 1}, once each")


def _le(a: float, b: float, scale: float = 0.0) -> bool:
    """a <= b up to the documents' float32 rounding (relative to ``scale`` when given: the
    magnitude the compared numbers were computed from). The CEL rules use the same test."""
    return a <= b + _TOL * (abs(a) + abs(b) + scale) + 1e-30


def _shape(m: Matrix) -> tuple[int, ...]:
    """Shape of a list of lists, or (-1,) when rows are ragged."""
    lens = {len(r) for r in m}
    if len(lens) > 1:
        return (-1,)
    return (len(m), lens.pop() if lens else 0)
