"""The model document's fitted policy tables (head-room, peak-risk) and the policy ``auto`` chose;
re-exported by :mod:`ai4dl.method.document`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from ai4dl.method.document_bounds import (MAX_BURST_EDGES, MAX_FEATURES, MAX_FIT_KEYS,
                                          MAX_NAME, MAX_PHASES, Number, StrictModel,
                                          matrix_shape)

#: A float that must be finite (JSON has no NaN/Infinity, and a table must not hold one).
Finite = Number
Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME)]
#: a fit report entry: named numbers, a bounded few
FitEntry = Annotated[dict[Annotated[str, Field(max_length=MAX_NAME)], Finite],
                     Field(max_length=MAX_FIT_KEYS)]


#: Head-room table vocabularies (ai4dl.policy.headroom_levels.ESTIMATORS /
#: ai4dl.policy.headroom.POOL_LEVELS).
ESTIMATOR_NAMES = ("max", "mean+2std", "last", "median", "phase-level", "max-2w", "ewma-max")
POOL_NAMES = ("state", "burstiness", "global")


def _bins(item):
    """A row of a head-room table: one entry per burstiness bin (at most edges + 1)."""
    return Annotated[list[item], Field(max_length=MAX_BURST_EDGES + 1)]


class HeadroomResourceTable(StrictModel):
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
        shape = matrix_shape(self.multipliers)
        if len(shape) != 2 or shape[1] != bins:
            raise ValueError(f"{self.resource}: multipliers has shape {shape}, expected "
                             f"(phases, {bins}) for {len(e)} burstEdges")
        for name in ("estimators", "windows", "pooled"):
            got = matrix_shape(getattr(self, name))
            if got != shape:
                raise ValueError(f"{self.resource}: {name} has shape {got}, expected {shape}")
        return self


class HeadroomTable(StrictModel):
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


class RiskFeature(StrictModel):
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


class RiskState(StrictModel):
    """A fitted state: its pooling level (index into the table's ``levels``), its bin of each
    of the level's features (in the level's order), the level it multiplies (``estimator``),
    the multiplier and the training windows it was fitted on."""
    level: int = Field(ge=0)
    bins: list[Annotated[int, Field(ge=0)]] = Field(max_length=len(RISK_FEATURE_NAMES))
    estimator: Literal[RISK_ESTIMATOR_NAMES] = "peak"
    multiplier: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    windows: int = Field(ge=0)


class RiskResourceTable(StrictModel):
    """One resource of a peak-risk table."""
    resource: str = Field(min_length=1, max_length=MAX_NAME)
    cold_start: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(alias="coldStart")
    min_windows: int = Field(ge=1, alias="minWindows")
    calibration: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    states: list[RiskState] = Field(max_length=4096)


class RiskTable(StrictModel):
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


class PolicyChoice(StrictModel):
    """What ``auto`` serves with this model, per resource: the policy that won on the
    PhaseModel's own recent executions (ai4dl.policy.auto.choose_policy, run by the trainer)."""
    resources: list[Name] = Field(min_length=1, max_length=MAX_FEATURES)
    #: policy names; which ones a PhaseModel can serve is the policies' own business
    #: (ai4dl.policy.catalog.choice_problem; the CRD's schema lists them)
    winners: list[Name] = Field(min_length=1, max_length=MAX_FEATURES)
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
