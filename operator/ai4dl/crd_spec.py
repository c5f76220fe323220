"""The ``PhaseModel`` spec's pydantic models (selector, features, policy, refit) and the CEL rules
they carry into the CRD; re-exported by :mod:`ai4dl.crd`."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import (BaseModel, ConfigDict, Field, PrivateAttr, ValidationError,
                      ValidationInfo, field_validator, model_validator)

from ai4dl.method.document import PhaseModelDocument
from ai4dl.method.plausibility import model_level_problem
from ai4dl.method.model import validation_message
from ai4dl.policy import catalog
from ai4dl.promql import check_template
from ai4dl.rules.objectives import DEFAULT_CPU_FULFILMENT, DEFAULT_MEMORY_RISK

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


class CrdModel(BaseModel):
    """The CRD models' base: unknown fields refused, a field by its name or its alias."""
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class LabelSelectorRequirement(CrdModel):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = []


class LabelSelector(CrdModel):
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
# selectors carry them takes a PromQL parser (ai4dl.promql: pydantic, and the operator
# at run time, for objects stored before this rule existed).
#: A query template's language as an RE2 pattern, for the CEL rule below: any character but a
#: brace, the escapes {{ and }}, and the tokens {selector} and {rate_window}. The renderer
#: (ai4dl.promql.render_template) reads the same language; a test holds them together.
TEMPLATE_RE2 = "^([^{}]|[{][{]|[}][}]|[{]selector[}]|[{]rate_window[}])*$"
_FEATURE_CEL = [{
    "rule": "self.query.contains('{selector}')",
    "message": "query must contain {selector}: the operator puts the PhaseModel's namespace and "
               "pod matchers there (e.g. metric{{{selector}}})",
}, {
    # the template language (ai4dl.promql.render_template): no brace but {selector},
    # {rate_window}, {{ and }} (issue 43: a format string's {selector[19]} was a bypass)
    "rule": f"self.query.matches('{TEMPLATE_RE2}')",
    "message": "query is not a template: every brace must be part of {selector}, {rate_window}, "
               "{{ or }} (literal braces are doubled; nothing else is filled in)",
}]


class FeatureSource(CrdModel):
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
            check_template(query, info.data.get("name", ""))
        return query


def default_features() -> list[FeatureSource]:
    return [
        # max over a container's series, not the sum (DEFAULT_QUERIES says why)
        FeatureSource(name="cpu", unit="cores",
                      query="max by (namespace, pod, container) "
                            "(rate(container_cpu_usage_seconds_total{{{selector}}}[1m]))"),
        FeatureSource(name="memory", unit="bytes",
                      query="max by (namespace, pod, container) "
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


class ResourceBounds(CrdModel):
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


class CpuObjective(CrdModel):
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


class MemoryObjective(CrdModel):
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


class Objectives(CrdModel):
    """What the trainer's ``auto`` choice and the head-room tables are asked to achieve, per
    resource."""
    cpu: CpuObjective = Field(default_factory=CpuObjective)
    memory: MemoryObjective = Field(default_factory=MemoryObjective)


def policy_kinds() -> tuple[str, ...]:
    """What ``spec.policy.kind`` may name: the policies declared for the CRD
    (ai4dl.policy.catalog), ``auto`` first."""
    named = catalog.names(crd=True)
    return (catalog.AUTO, *(n for n in named if n != catalog.AUTO))


def _kinds_enum(schema: dict) -> None:
    """The CRD schema's enum of ``spec.policy.kind``, read from the catalogue when the schema
    is generated."""
    schema["enum"] = list(policy_kinds())


class Policy(CrdModel):
    """How requests are set. The same policy functions the evaluator measures."""
    mode: Literal["Off", "Initial", "Recommend", "InPlace"] = Field(
        "Recommend", description="Off: nothing; Initial: requests set when a pod is created "
                                 "(admission), recommendations annotated; Recommend: "
                                 "recommendations annotated only; InPlace: admission and "
                                 "in-place resizes")
    kind: str = Field(
        "auto", json_schema_extra=_kinds_enum,
        description="auto: the policy the trainer found best on this PhaseModel's own "
                    "recent pods (never one that lost to the reactive baseline; the "
                    "baseline until a model exists); or one by name")
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

    @field_validator("kind")
    @classmethod
    def _declared_kind(cls, v: str) -> str:
        kinds = policy_kinds()
        if v not in kinds:
            raise ValueError(f"Input should be {', '.join(repr(k) for k in kinds[:-1])} or "
                             f"{kinds[-1]!r}")
        return v

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


class RefitPolicy(CrdModel):
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


class PhaseModelSpec(CrdModel):
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
        # a model of data in the wrong unit is valid JSON: its levels tell (issue 45)
        problem = model_level_problem(doc) or catalog.choice_problem(doc)
        if problem is not None:
            raise ValueError(f"spec.model: {problem}")
        return doc

