"""The ``PhaseModel`` status's pydantic models (conditions, training, novelty, savings);
re-exported by :mod:`ai4dl.crd`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ai4dl.crd_spec import CrdModel


class Condition(CrdModel):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = Field(None, alias="lastTransitionTime")


class PolicyScore(CrdModel):
    policy: str
    resource: str
    target: float
    vs_oracle: float | None = Field(None, alias="vsOracle",
                                    description="allocation ÷ oracle at the matched target "
                                                "(null: the target is out of reach)")
    short_windows: float | None = Field(None, alias="shortWindows",
                                        description="windows with any shortfall there")
    wins: bool = Field(False, description="cheaper than adaptive-max with no more windows short")


class TrainingPolicy(CrdModel):
    """The trainer's choice for ``kind: auto``: the winner per resource and every candidate's
    score on the most recent training executions."""
    served: dict[str, str] = Field(default_factory=dict, description="resource -> policy")
    reason: str = ""
    scores: list[PolicyScore] = Field(default_factory=list, max_length=100)


class ObjectiveStatus(CrdModel):
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


class TrainingStatus(CrdModel):
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


class NoveltyWindow(CrdModel):
    novel: int = Field(ge=0, description="containers whose window was novel")
    total: int = Field(ge=0, description="containers classified in the window")


class NoveltyStatus(CrdModel):
    """The operator's count of novel windows under the current model (reset when the model
    changes): the state behind the ``RefitRecommended`` condition, kept in status so a
    restarted operator goes on counting."""
    model: str = Field("", description="hash of the model document these windows were read with")
    last_window: float | None = Field(None, alias="lastWindow",
                                      description="start (unix s) of the last window counted")
    recent: list[NoveltyWindow] = Field(default_factory=list, max_length=10000)
    share: float = Field(0.0, ge=0, le=1, description="novel ÷ total over the recent windows")


class SavingsAmount(CrdModel):
    original: float = Field(0.0, ge=0, description="the authors' requests × time "
                            "(core-seconds, byte-seconds)")
    allocated: float = Field(0.0, ge=0, description="what the pods held (Recommend: what the "
                             "operator recommended) × time")


class SavingsStatus(CrdModel):
    """What the operator's pods held against what their authors requested, summed over the
    windows processed (ai4dl.controller.savings)."""
    since: str | None = Field(None, description="RFC 3339, UTC: the first window counted")
    last_window: float | None = Field(None, alias="lastWindow",
                                      description="start (unix s) of the last window counted")
    windows: int = Field(0, ge=0)
    resources: dict[str, SavingsAmount] = Field(default_factory=dict)
    summary: str = Field("", description="share of the original requests saved, e.g. "
                         "'cpu 42%, memory 17%'")


class WorkloadsStatus(CrdModel):
    """The workloads of the PhaseModel's pods (ai4dl.kube.workload) and their profiles."""
    running: int = Field(0, ge=0, description="distinct workloads among the running pods")
    profiled: int = Field(0, ge=0, description="... of which have a WorkloadProfile (a known "
                                               "workload: admission starts it from it)")
    stored: int = Field(0, ge=0, description="WorkloadProfiles kept for this PhaseModel")
    profile_writes: int = Field(0, ge=0, alias="profileWrites",
                                description="WorkloadProfile writes by this operator process")


class PhaseModelStatus(CrdModel):
    conditions: list[Condition] = Field(default_factory=list)
    observed_generation: int | None = Field(None, alias="observedGeneration")
    pods_tracked: int = Field(0, alias="podsTracked")
    pods_per_phase: dict[str, int] = Field(default_factory=dict, alias="podsPerPhase")
    phase_summary: str = Field("", alias="phaseSummary",
                               description="pods per phase, e.g. '0:3 2:5'")
    last_window_time: str | None = Field(None, alias="lastWindowTime",
                                         description="the last window that changed the "
                                                     "status (a window that changes nothing "
                                                     "writes nothing)")
    last_error: str | None = Field(None, alias="lastError")
    unrecorded_window: float | None = Field(
        None, alias="unrecordedWindow",
        description="the last window (unix s) whose resizes went without their pods' records "
                    "(the write budget): an operator that starts within it leaves it")
    training: TrainingStatus | None = None
    novelty: NoveltyStatus | None = None
    served_policy: str | None = Field(None, alias="servedPolicy",
                                      description="what the operator serves, and why")
    policy: str | None = Field(None, description="the policy served, per resource where they "
                               "differ (e.g. 'cpu phase-headroom, memory adaptive-max')")
    savings: SavingsStatus | None = None
    workloads: WorkloadsStatus | None = None

