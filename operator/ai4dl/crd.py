"""The ``PhaseModel`` custom resource (group ai4dl.io, version v1alpha1): pydantic models are the
one source of its schema; ``crds/phasemodels.ai4dl.io.yaml`` is generated from them
(``python -m ai4dl.crd > crds/phasemodels.ai4dl.io.yaml``) and a test fails when they drift.

What the OpenAPI schema cannot check (array shapes that must agree with each other) is checked
by :meth:`PhaseModelSpec.validated_model`, which the operator calls before using a model; a
failure sets the ``Degraded`` condition and nothing is resized.
"""

from __future__ import annotations

import copy
import re
import sys
from typing import Any, Literal

from pydantic import (BaseModel, ConfigDict, Field, PrivateAttr, ValidationError,
                      ValidationInfo, field_validator, model_validator)

from ai4dl.method.document import PhaseModelDocument
from ai4dl.policy.objectives import DEFAULT_CPU_FULFILMENT, DEFAULT_MEMORY_RISK

GROUP = "ai4dl.io"
VERSION = "v1alpha1"
KIND = "PhaseModel"
PLURAL = "phasemodels"
SINGULAR = "phasemodel"
SHORT_NAMES = ["pm"]

# Pods opt in with this label (so the operator's watch is filtered by the API server) and name
# their PhaseModel with the annotation.
OPT_IN_LABEL = "ai4dl.io/managed"
MODEL_ANNOTATION = "ai4dl.io/phasemodel"
# The batch trainer's field manager: it owns spec.model, spec.previousModel and status.training.
TRAINER_FIELD_MANAGER = "ai4dl-trainer"

QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"
# Durations as Prometheus writes them, without fractions: 90s, 15m, 12h, 7d, 2w, 1d12h
DURATION_PATTERN = r"^([0-9]+(s|m|h|d|w))+$"
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> float:
    """'1d12h' -> 129600.0 seconds; ValueError with one line when it is not a duration."""
    if not isinstance(text, str) or not re.fullmatch(DURATION_PATTERN, text.strip()):
        raise ValueError(f"invalid duration {text!r}: expected e.g. 90s, 15m, 12h, 7d, 2w, 1d12h")
    return float(sum(int(n) * _DURATION_UNITS[u]
                     for n, u in re.findall(r"([0-9]+)([smhdw])", text)))


class _Base(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class LabelSelectorRequirement(_Base):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = []


class LabelSelector(_Base):
    """Which opted-in pods this PhaseModel serves (a standard Kubernetes label selector)."""
    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list,
                                                              alias="matchExpressions")

    def server_side(self, opt_in_label: str | None = None) -> str:
        """As a Kubernetes label selector string for a LIST (the opt-in label first when
        given), so that the API server filters."""
        terms = [f"{opt_in_label}=true"] if opt_in_label else []
        terms += [f"{k}={v}" for k, v in sorted(self.match_labels.items())]
        for e in self.match_expressions:
            if e.operator in ("In", "NotIn"):
                terms.append(f"{e.key} {e.operator.lower()} ({','.join(e.values)})")
            else:
                terms.append(e.key if e.operator == "Exists" else f"!{e.key}")
        return ",".join(terms)

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether a pod with these labels is selected (Kubernetes' label selector rules)."""
        for k, v in self.match_labels.items():
            if labels.get(k) != v:
                return False
        for e in self.match_expressions:
            has = e.key in labels
            if e.operator == "In" and (not has or labels[e.key] not in e.values):
                return False
            if e.operator == "NotIn" and has and labels[e.key] in e.values:
                return False
            if e.operator == "Exists" and not has:
                return False
            if e.operator == "DoesNotExist" and has:
                return False
        return True


#: ``model_validate(..., context=PROMQL_UNCHECKED)`` skips the PromQL confinement check of
#: ``spec.features[].query``: for the operator, which checks it itself (a Degraded condition
#: naming the feature, QueryRefused, rather than an invalid spec; skipped with
#: ``--allow-free-promql``) and for admission, which sends no query.
PROMQL_UNCHECKED = {"promql": "unchecked"}
MAX_QUERY_LENGTH = 4096
MAX_FEATURES = 16
# CEL can check what is safe to require even where the operator allows free PromQL
# (--allow-free-promql): that the operator's matchers go into the query at all. Which
# selectors carry them takes a PromQL parser (ai4dl.sources.promql: pydantic, and the operator
# at run time, for objects stored before this rule existed).
_FEATURE_CEL = [{
    "rule": "self.query.contains('{selector}')",
    "message": "query must contain {selector}: the operator puts the PhaseModel's namespace and "
               "pod matchers there (e.g. metric{{{selector}}})",
}]


class FeatureSource(_Base):
    """One model feature and the PromQL that yields it per (namespace, pod, container).
    ``{selector}`` in the query stands for the label matchers the operator fills in: every
    selector of the query must carry it (it reads the PhaseModel's own pods only)."""
    model_config = ConfigDict(extra="forbid", populate_by_name=True,
                              json_schema_extra={"x-kubernetes-validations": _FEATURE_CEL})
    name: str = Field(min_length=1)
    query: str = Field(min_length=1, max_length=MAX_QUERY_LENGTH,
                       description="PromQL template; {selector} = the PhaseModel's namespace and "
                                   "pod matchers, required in every selector")
    unit: str = "unknown"

    @field_validator("query")
    @classmethod
    def _confined(cls, query: str, info: ValidationInfo) -> str:
        if (info.context or {}).get("promql") != PROMQL_UNCHECKED["promql"]:
            from ai4dl.sources.promql import check_template

            check_template(query, info.data.get("name", ""))
        return query


def default_features() -> list[FeatureSource]:
    return [
        FeatureSource(name="cpu", unit="cores",
                      query="sum by (namespace, pod, container) "
                            "(rate(container_cpu_usage_seconds_total{{{selector}}}[1m]))"),
        FeatureSource(name="memory", unit="bytes",
                      query="sum by (namespace, pod, container) "
                            "(container_memory_working_set_bytes{{{selector}}})"),
    ]


#: Fewest steps a window may hold: a window of one or two samples has no max, mean or spread
#: worth a decision, and a window shorter than the step is not a window at all.
MIN_WINDOW_STEPS = 4

# Cross-field rules the OpenAPI schema cannot express, as CEL rules in the CRD (checked at
# `kubectl apply`, generated from these models like the rest of the schema). The operator keeps
# its own check for objects stored before a rule existed (a Degraded condition).
_BOUNDS_CEL = [{
    "rule": "!has(self.floor) || !has(self.ceiling) || "
            "quantity(self.floor).compareTo(quantity(self.ceiling)) <= 0",
    "message": "floor must not be above ceiling",
}]
_SPEC_CEL = [
    {"rule": f"self.windowSeconds >= {MIN_WINDOW_STEPS} * self.stepSeconds",
     "message": f"windowSeconds must hold at least {MIN_WINDOW_STEPS} steps (stepSeconds)"},
    {"rule": "self.windowSeconds % self.stepSeconds == 0",
     "message": "windowSeconds must be a whole number of steps (stepSeconds)"},
]


class ResourceBounds(_Base):
    model_config = ConfigDict(extra="forbid", populate_by_name=True,
                              json_schema_extra={"x-kubernetes-validations": _BOUNDS_CEL})
    floor: str | None = Field(None, pattern=QUANTITY_PATTERN, max_length=32,
                              description="e.g. 100m, 256Mi")
    ceiling: str | None = Field(None, pattern=QUANTITY_PATTERN, max_length=32)


# Each objective is a share strictly between 0 and 1: at either end it asks for nothing, or for
# what no request can promise (no sample above it, ever). The OpenAPI bounds refuse the same
# values; the rules say in words what the share is, at `kubectl apply`.
_CPU_OBJECTIVE_CEL = [
    {"rule": "!has(self.fulfilment) || (self.fulfilment > 0.0 && self.fulfilment < 1.0)",
     "message": "fulfilment must be in (0, 1): the share of cpu samples at or below the request"},
    {"rule": "!has(self.maxShortWindows) || "
             "(self.maxShortWindows > 0.0 && self.maxShortWindows < 1.0)",
     "message": "maxShortWindows must be in (0, 1): the share of windows with any cpu sample "
                "above the request"},
]
_MEMORY_OBJECTIVE_CEL = [
    {"rule": "!has(self.maxRiskWindows) || "
             "(self.maxRiskWindows > 0.0 && self.maxRiskWindows < 1.0)",
     "message": "maxRiskWindows must be in (0, 1): the share of windows with any memory sample "
                "above the request"},
]


class CpuObjective(_Base):
    """CPU is compressible: a sample above the request is throttled time, not a failure, so cpu
    is judged by the share of samples covered."""
    model_config = ConfigDict(extra="forbid", populate_by_name=True,
                              json_schema_extra={"x-kubernetes-validations": _CPU_OBJECTIVE_CEL})
    fulfilment: float = Field(
        DEFAULT_CPU_FULFILMENT, gt=0, lt=1,
        description="share of cpu samples at or below the request (0.97: at most 3 % of the "
                    "samples throttled). Unset: spec.policy.targetFulfilment when that is set, "
                    "else 0.97")
    max_short_windows: float | None = Field(
        None, gt=0, lt=1, alias="maxShortWindows",
        description="optional: at most this share of windows with any cpu sample above the "
                    "request (null: no bound)")


class MemoryObjective(_Base):
    """Memory is not compressible: a window in which a container uses more than its request is
    a window in which it may be evicted (or, at a Guaranteed pod's limit, OOM-killed), however
    few of its samples exceed. So memory is judged by windows at risk, not by samples."""
    model_config = ConfigDict(extra="forbid", populate_by_name=True,
                              json_schema_extra={"x-kubernetes-validations":
                                                 _MEMORY_OBJECTIVE_CEL})
    max_risk_windows: float = Field(
        DEFAULT_MEMORY_RISK, gt=0, lt=1, alias="maxRiskWindows",
        description="at most this share of windows at risk: windows with any memory sample "
                    "above the request (0.01: one window in a hundred)")


class Objectives(_Base):
    """What the trainer's ``auto`` choice and the head-room tables are asked to achieve, per
    resource."""
    cpu: CpuObjective = Field(default_factory=CpuObjective)
    memory: MemoryObjective = Field(default_factory=MemoryObjective)


POLICY_KINDS = ("auto", "phase-headroom", "burst-headroom", "phase", "phase-proactive",
                "adaptive-max", "adaptive-stat")


class Policy(_Base):
    """How requests are set. The same policy functions the evaluator measures."""
    mode: Literal["Off", "Initial", "Recommend", "InPlace"] = Field(
        "Recommend", description="Off: nothing; Initial: requests set when a pod is created "
                                 "(admission), recommendations annotated; Recommend: "
                                 "recommendations annotated only; InPlace: admission and "
                                 "in-place resizes")
    kind: Literal[POLICY_KINDS] = Field(
        "auto", description="auto: the policy the trainer found best on this PhaseModel's own "
                            "recent pods (never one that lost to the reactive baseline; the "
                            "baseline adaptive-max until a model exists); or one by name")
    objectives: Objectives = Field(
        default_factory=Objectives,
        description="what auto is chosen and the head-room tables are fitted for, per "
                    "resource: cpu by the share of samples covered, memory by the share of "
                    "windows at risk")
    target_fulfilment: float = Field(
        DEFAULT_CPU_FULFILMENT, gt=0.5, lt=1, alias="targetFulfilment",
        description="older name of objectives.cpu.fulfilment: the cpu fulfilment when "
                    "objectives.cpu.fulfilment is unset, ignored when it is set")
    statistic: Literal["mean+kstd", "p50", "p90", "p95", "p99", "max"] = "mean+kstd"
    k: float = Field(2.0, ge=0, le=10)
    margin: float = Field(0.0, ge=0, le=0.10, description="tolerance margin, 0-10 %")
    reader: Literal["last", "majority", "max"] = "last"
    scope: Literal["model", "execution"] = "model"
    resources: dict[Literal["cpu", "memory"], ResourceBounds] = Field(default_factory=dict,
                                                                       max_length=2)
    max_increase: float | None = Field(
        1.0, ge=0, alias="maxIncrease",
        description="relative increase per window (1 = may double); null = unbounded. A "
                    "proposal far above what a pod has shown can only come from a model level "
                    "or a bad sample, so it is reached in steps while each window shows more")
    max_decrease: float | None = Field(0.5, ge=0, le=1, alias="maxDecrease")
    cooldown_windows: int = Field(1, ge=0, alias="cooldownWindows")
    memory_margin: float = Field(
        0.1, ge=0, le=1, alias="memoryMargin",
        description="memory is never set below the latest working set x (1 + memoryMargin), "
                    "nor lowered after a window in which the working set grew by more than "
                    "memoryMargin (a job still starting or loading data)")
    min_change: float = Field(0.1, ge=0, le=1, alias="minChange")
    max_resizes_per_window: int = Field(
        500, ge=1, alias="maxResizesPerWindow",
        description="resize at most this many pods per window (largest changes first); the "
                    "rest wait for the next window, as VPA's updater rate-limits evictions")
    containers: list[str] = Field(default_factory=list,
                                  description="containers to manage; empty = all")

    # Whether the cpu fulfilment is targetFulfilment's (set by the validator below; private, so
    # it is never dumped: a dumped spec carries the resolved value in objectives.cpu.fulfilment).
    _cpu_fulfilment_from_target: bool = PrivateAttr(False)

    @model_validator(mode="after")
    def _target_fulfilment_is_cpu(self) -> "Policy":
        # targetFulfilment is objectives.cpu.fulfilment's older name: a spec that gives only
        # the older one means it for cpu. Resolved here, once, so that every reader of
        # objectives.cpu.fulfilment (and a dumped, re-read spec) sees the value in force.
        cpu = self.objectives.cpu
        if "target_fulfilment" in self.model_fields_set and \
                "fulfilment" not in cpu.model_fields_set:
            self.objectives = self.objectives.model_copy(update={
                "cpu": cpu.model_copy(update={"fulfilment": float(self.target_fulfilment)})})
            self._cpu_fulfilment_from_target = True
        return self

    @property
    def cpu_fulfilment(self) -> float:
        """The cpu fulfilment in force: ``objectives.cpu.fulfilment`` when it was given, else
        ``targetFulfilment`` when that was, else 0.97."""
        return float(self.objectives.cpu.fulfilment)

    @property
    def cpu_fulfilment_from_target(self) -> bool:
        """Whether the cpu fulfilment is ``targetFulfilment``'s (given, and
        ``objectives.cpu.fulfilment`` not)."""
        return self._cpu_fulfilment_from_target

    def objective_note(self) -> str | None:
        """One line when the cpu fulfilment comes from ``targetFulfilment``, else None."""
        if not self._cpu_fulfilment_from_target:
            return None
        return (f"cpu fulfilment {self.cpu_fulfilment:g} from spec.policy.targetFulfilment "
                f"(spec.policy.objectives.cpu.fulfilment is unset)")


class RefitPolicy(_Base):
    """When the batch trainer (``ai4dl train --if-due``, run hourly by a CronJob) refits early.
    The operator counts novel windows and sets the ``RefitRecommended`` condition; the trainer
    also refits when its last run is older than ``maxAge``."""
    novelty_share: float = Field(
        0.2, gt=0, le=1, alias="noveltyShare",
        description="share of novel pod windows (over `windows` recent windows) that triggers "
                    "a refit")
    windows: int = Field(6, ge=1, le=10000, description="over how many recent windows")
    max_age: str = Field("7d", pattern=DURATION_PATTERN, alias="maxAge",
                         description="refit when the last training run is older, e.g. 7d, 12h")


class PhaseModelSpec(_Base):
    model_config = ConfigDict(extra="forbid", populate_by_name=True,
                              json_schema_extra={"x-kubernetes-validations": _SPEC_CEL})
    selector: LabelSelector = Field(default_factory=LabelSelector)
    # at most MAX_FEATURES: the API server sizes the cost of the features' CEL rule by it
    features: list[FeatureSource] = Field(default_factory=default_features, min_length=1,
                                          max_length=MAX_FEATURES)
    step_seconds: int = Field(15, ge=1, le=3600, alias="stepSeconds")
    window_seconds: int = Field(600, ge=1, le=86400, alias="windowSeconds")
    policy: Policy = Field(default_factory=Policy)
    model: dict[str, Any] | None = Field(
        None, description="the fitted model document (ai4dl.io/phase-model/v1), written by the "
                          "trainer or `ai4dl train`")
    previous_model: dict[str, Any] | None = Field(
        None, alias="previousModel",
        description="the model the trainer replaced, kept for `ai4dl rollback` (written by the "
                    "trainer, together with model, in one apply)")
    refit: RefitPolicy = Field(default_factory=RefitPolicy)

    @model_validator(mode="after")
    def _window_of_steps(self) -> "PhaseModelSpec":
        # the CEL rules' own check, for objects stored before the rules existed (the operator
        # then reports InvalidSpec instead of guessing a window)
        if self.window_seconds < MIN_WINDOW_STEPS * self.step_seconds:
            raise ValueError(f"windowSeconds {self.window_seconds} must hold at least "
                             f"{MIN_WINDOW_STEPS} steps of stepSeconds {self.step_seconds}")
        if self.window_seconds % self.step_seconds:
            raise ValueError(f"windowSeconds {self.window_seconds} must be a whole number of "
                             f"steps of stepSeconds {self.step_seconds}")
        return self

    def validated_model(self) -> PhaseModelDocument:
        """The model document, checked in full (shapes included); ValueError with one line."""
        from ai4dl.method.model import validation_message

        if self.model is None:
            raise ValueError("spec.model is empty: train a model first")
        try:
            doc = PhaseModelDocument.model_validate(self.model)
        except ValidationError as err:
            raise ValueError(validation_message(err).replace("invalid phase model: ",
                                                             "spec.model: ")) from None
        names = [f.name for f in doc.features]
        wanted = [f.name for f in self.features]
        if names != wanted:
            raise ValueError(f"spec.model has features {names}, spec.features are {wanted}")
        # The model's history, phases and tables are counted in its own steps, and its levels
        # in its own units: served at another step or on another unit it sizes requests from
        # numbers that mean something else (refit with `ai4dl train --phasemodel`).
        if abs(doc.step_seconds - self.step_seconds) > 1e-6 * self.step_seconds:
            raise ValueError(f"spec.model was fitted at a step of {doc.step_seconds:g} s, "
                             f"spec.stepSeconds is {self.step_seconds}: refit the model at "
                             f"{self.step_seconds} s (or set spec.stepSeconds to "
                             f"{doc.step_seconds:g})")
        for f, mf in zip(self.features, doc.features):
            if f.unit != "unknown" and mf.unit != f.unit:
                raise ValueError(f"spec.model's '{f.name}' is in {mf.unit}, "
                                 f"spec.features[{f.name}].unit is {f.unit}")
        return doc


class Condition(_Base):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = Field(None, alias="lastTransitionTime")


class PolicyScore(_Base):
    policy: str
    resource: str
    target: float
    vs_oracle: float | None = Field(None, alias="vsOracle",
                                    description="allocation ÷ oracle at the matched target "
                                                "(null: the target is out of reach)")
    short_windows: float | None = Field(None, alias="shortWindows",
                                        description="windows with any shortfall there")
    wins: bool = Field(False, description="cheaper than adaptive-max with no more windows short")


class TrainingPolicy(_Base):
    """The trainer's choice for ``kind: auto``: the winner per resource and every candidate's
    score on the most recent training executions."""
    served: dict[str, str] = Field(default_factory=dict, description="resource -> policy")
    reason: str = ""
    scores: list[PolicyScore] = Field(default_factory=list, max_length=100)


class ObjectiveStatus(_Base):
    """One resource's objective in the last training run, and what the served policy achieved
    on the most recent training executions (held out from the fit that chose it)."""
    resource: str
    kind: Literal["fulfilment", "risk"] = Field(
        description="fulfilment: a share of samples at or below the request (cpu); risk: a "
                    "bound on the share of windows with any sample above it (memory)")
    value: float = Field(gt=0, lt=1, description="the fulfilment, or the most windows at risk")
    max_short_windows: float | None = Field(None, gt=0, lt=1, alias="maxShortWindows")
    source: str = Field("", description="where the value came from, when not from "
                        "spec.policy.objectives (e.g. targetFulfilment)")
    achieved_fulfilment: float | None = Field(
        None, ge=0, le=1, alias="achievedFulfilment",
        description="share of the held-out samples at or below what the served policy set")
    achieved_risk_windows: float | None = Field(
        None, ge=0, le=1, alias="achievedRiskWindows",
        description="share of the held-out windows with any sample above what the served "
                    "policy set")


class TrainingStatus(_Base):
    """What the batch trainer did last (written by the trainer only, field manager
    ``ai4dl-trainer``). Scores are allocation ÷ oracle at the fulfilment target on the same
    held-out recent executions (lower is better)."""
    decision: Literal["applied", "rejected", "forced", "rolled-back"]
    reason: str = ""
    trained_at: str | None = Field(None, alias="trainedAt", description="RFC 3339, UTC")
    source: str = ""
    executions: int = Field(0, ge=0, description="executions the candidate was fitted on")
    samples: int = Field(0, ge=0)
    held_out_executions: int = Field(0, ge=0, alias="heldOutExecutions")
    fit_seconds: float | None = Field(None, alias="fitSeconds")
    reconstruction_error: float | None = Field(None, alias="reconstructionError")
    silhouette: float | None = None
    novelty_rate: float | None = Field(None, alias="noveltyRate")
    phases: int | None = None
    candidate_score: float | None = Field(None, alias="candidateScore")
    current_score: float | None = Field(None, alias="currentScore")
    tolerance: float | None = None
    policy: TrainingPolicy | None = None
    objectives: list[ObjectiveStatus] = Field(
        default_factory=list, max_length=10,
        description="per resource: the objective auto was chosen for, and what the served "
                    "policy achieved on the most recent training executions")


class NoveltyWindow(_Base):
    novel: int = Field(ge=0, description="containers whose window was novel")
    total: int = Field(ge=0, description="containers classified in the window")


class NoveltyStatus(_Base):
    """The operator's count of novel windows under the current model (reset when the model
    changes): the state behind the ``RefitRecommended`` condition, kept in status so a
    restarted operator goes on counting."""
    model: str = Field("", description="hash of the model document these windows were read with")
    last_window: float | None = Field(None, alias="lastWindow",
                                      description="start (unix s) of the last window counted")
    recent: list[NoveltyWindow] = Field(default_factory=list, max_length=10000)
    share: float = Field(0.0, ge=0, le=1, description="novel ÷ total over the recent windows")


class SavingsAmount(_Base):
    original: float = Field(0.0, ge=0, description="the authors' requests × time "
                            "(core-seconds, byte-seconds)")
    allocated: float = Field(0.0, ge=0, description="what the pods held (Recommend: what the "
                             "operator recommended) × time")


class SavingsStatus(_Base):
    """What the operator's pods held against what their authors requested, summed over the
    windows processed (ai4dl.controller.savings)."""
    since: str | None = Field(None, description="RFC 3339, UTC: the first window counted")
    last_window: float | None = Field(None, alias="lastWindow",
                                      description="start (unix s) of the last window counted")
    windows: int = Field(0, ge=0)
    resources: dict[str, SavingsAmount] = Field(default_factory=dict)
    summary: str = Field("", description="share of the original requests saved, e.g. "
                         "'cpu 42%, memory 17%'")


class PhaseModelStatus(_Base):
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = Field(None, alias="observedGeneration")
    pods_tracked: int = Field(0, alias="podsTracked")
    pods_per_phase: dict[str, int] = Field(default_factory=dict, alias="podsPerPhase")
    phase_summary: str = Field("", alias="phaseSummary",
                               description="pods per phase, e.g. '0:3 2:5'")
    last_window_time: str | None = Field(None, alias="lastWindowTime")
    last_error: str | None = Field(None, alias="lastError")
    training: TrainingStatus | None = None
    novelty: NoveltyStatus | None = None
    served_policy: str | None = Field(None, alias="servedPolicy",
                                      description="what the operator serves, and why")
    policy: str | None = Field(None, description="the policy served, per resource where they "
                               "differ (e.g. 'cpu phase-headroom, memory adaptive-max')")
    savings: SavingsStatus | None = None


class PhaseModelResource(_Base):
    api_version: Literal["ai4dl.io/v1alpha1"] = Field("ai4dl.io/v1alpha1", alias="apiVersion")
    kind: Literal["PhaseModel"] = "PhaseModel"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: PhaseModelSpec
    status: PhaseModelStatus | None = None


# ----------------------------------------------------------------------------- CRD generation
_DROP = {"title", "discriminator", "$defs"}


def _structural(schema: dict, defs: dict) -> dict:
    """pydantic JSON Schema -> Kubernetes structural OpenAPI v3: $refs inlined, Optional as
    nullable, const as a one-value enum, titles dropped."""
    if "$ref" in schema:
        target = defs[schema["$ref"].split("/")[-1]]
        merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return _structural(merged, defs)
    if "anyOf" in schema:
        options = [o for o in schema["anyOf"] if o.get("type") != "null"]
        nullable = len(options) < len(schema["anyOf"])
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        if len(options) == 1:
            out = _structural({**options[0], **rest}, defs)
            if nullable:
                out["nullable"] = True
            return out
        raise ValueError(f"cannot express anyOf {schema['anyOf']} structurally")
    out: dict = {}
    for key, value in schema.items():
        if key in _DROP:
            continue
        if key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            # JSON Schema 2020 (pydantic) gives the bound; OpenAPI v3.0 wants a flag + bound
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "properties":
            out["properties"] = {k: _structural(v, defs) for k, v in value.items()}
        elif key == "items":
            out["items"] = _structural(value, defs)
        elif key == "additionalProperties":
            out["additionalProperties"] = (_structural(value, defs) if isinstance(value, dict)
                                           else value)
        elif key == "propertyNames":
            continue  # not supported by the API server; keys are checked by pydantic
        else:
            out[key] = value
    if out.get("type") == "object" and "properties" not in out and \
            "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True
    if "additionalProperties" in out and out["additionalProperties"] is False:
        del out["additionalProperties"]
    return out


def openapi_schema(model: type[BaseModel]) -> dict:
    schema = model.model_json_schema(by_alias=True, mode="validation")
    return _structural(schema, schema.get("$defs", {}))


def crd_manifest() -> dict:
    spec_schema = openapi_schema(PhaseModelSpec)
    # The model document is validated in full by its own JSON schema too: malformed documents
    # (wrong types, missing fields) are refused by the API server itself.
    spec_schema["properties"]["model"] = {**openapi_schema(PhaseModelDocument), "nullable": True}
    spec_schema["properties"]["previousModel"] = {**openapi_schema(PhaseModelDocument),
                                                  "nullable": True}
    # Object defaults, so the API server fills in nested defaults (policy.mode, the features'
    # queries) even when a user leaves the whole object out.
    props = spec_schema["properties"]
    props["policy"]["default"] = {}
    props["selector"]["default"] = {}
    props["refit"]["default"] = {}
    objectives = props["policy"]["properties"]["objectives"]
    objectives["default"] = {}
    objectives["properties"]["cpu"]["default"] = {}
    objectives["properties"]["memory"]["default"] = {}
    # No server-side default for the cpu fulfilment nor for its older name targetFulfilment:
    # which of the two a user wrote decides the value in force (Policy._target_fulfilment_is_cpu),
    # and a default filled in by the API server would look written. Pydantic's defaults (0.97)
    # apply when neither is there.
    del objectives["properties"]["cpu"]["properties"]["fulfilment"]["default"]
    del props["policy"]["properties"]["targetFulfilment"]["default"]
    props["features"]["default"] = [f.model_dump(by_alias=True) for f in default_features()]
    status_schema = openapi_schema(PhaseModelStatus)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": KIND, "plural": PLURAL, "singular": SINGULAR,
                      "shortNames": SHORT_NAMES, "listKind": f"{KIND}List"},
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Phases", "type": "string", "jsonPath": ".status.phaseSummary"},
                    {"name": "Pods", "type": "integer", "jsonPath": ".status.podsTracked"},
                    {"name": "Mode", "type": "string", "jsonPath": ".spec.policy.mode"},
                    {"name": "Policy", "type": "string", "jsonPath": ".status.policy",
                     "priority": 1},
                    {"name": "Score", "type": "number", "priority": 1,
                     "description": "last training run: the candidate's allocation ÷ oracle at "
                                    "the fulfilment target (lower is better)",
                     "jsonPath": ".status.training.candidateScore"},
                    {"name": "MemoryRisk", "type": "number", "priority": 1,
                     "description": "last training run: share of memory windows at risk under "
                                    "the served policy on the most recent training executions "
                                    "(objective: spec.policy.objectives.memory.maxRiskWindows)",
                     "jsonPath": '.status.training.objectives[?(@.resource=="memory")]'
                                 '.achievedRiskWindows'},
                    {"name": "Saved", "type": "string", "priority": 1,
                     "description": "share of the authors' requests not allocated so far",
                     "jsonPath": ".status.savings.summary"},
                    {"name": "Ready", "type": "string",
                     "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": spec_schema,
                        "status": status_schema,
                    },
                    "required": ["spec"],
                }},
            }],
        },
    }


HEADER = ("# Generated from the pydantic models in operator/ai4dl/crd.py — do not edit.\n"
          "# Regenerate: .venv/bin/python -m ai4dl.crd > crds/phasemodels.ai4dl.io.yaml\n")


def crd_yaml() -> str:
    import yaml

    return HEADER + yaml.safe_dump(copy.deepcopy(crd_manifest()), sort_keys=False, width=100)


if __name__ == "__main__":
    sys.stdout.write(crd_yaml())
