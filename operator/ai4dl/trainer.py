"""The batch trainer's decisions, without I/O: which executions are held out, how a model is
scored on them, whether a candidate replaces the current model, whether a refit is due, and
the exact objects the trainer applies (server-side apply, field manager ``ai4dl-trainer``).

The adapters around it: :mod:`ai4dl.sources.prometheus_history` (history pulls),
:mod:`ai4dl.kube.phasemodels` (read / apply / roll back), ``ai4dl train`` in :mod:`ai4dl.cli.main`.

**Policy.** Before it is scored, a candidate gets ``auto``'s choice on its own training
executions (:func:`choose_served_policy`: every candidate policy scored on the most recent of
them against ``spec.policy.objectives``, cpu a fulfilment of samples and memory a share of
windows at risk; the winner per resource, never one that lost to the reactive baseline, and the
fitted head-room tables go into the model document).

**Score.** A model is scored the way the operator would serve it: the policy
:func:`ai4dl.serving.served_policy` gives for the PhaseModel's ``spec.policy`` and that
model (``auto``: the model's own choice) and the operator's safety layer
(:func:`ai4dl.serving.safety_config`), replayed window by window
(``spec.windowSeconds / spec.stepSeconds`` samples) over the held-out executions by the
evaluator (:mod:`ai4dl.evaluation.evaluate`). The score is allocation ÷ oracle at the fulfilment target
(the cpu fulfilment, ``spec.policy.objectives.cpu.fulfilment``, 0.97 by default: the
allocation scaled by the smallest margin that covers that share of the samples, over the
oracle's), averaged over the managed resources (cpu, memory). Lower is better; 1.0 is the
oracle.

**Decision.** The candidate replaces the current model when its score is at most
``current × (1 + tolerance)`` (default tolerance 1 %: two fits of equal quality differ by about
that from k-means and CRBM noise, and a refit on fresh data is worth that much). Otherwise it
is rejected (kept out, the reason recorded in ``status.training``) unless forced.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np

from ai4dl.crd import GROUP, KIND, TRAINER_FIELD_MANAGER, VERSION
from ai4dl.crd_spec import MIN_WINDOW_STEPS, PhaseModelSpec, parse_duration
from ai4dl.evaluation.evaluate import prepare
from ai4dl.judge import ORACLE, replay, score, serve
from ai4dl.method.document_tables import PolicyChoice
from ai4dl.method.traces import Execution
from ai4dl.policy import catalog
from ai4dl.policy.auto import build_candidate, choose_policy
from ai4dl.policy.headroom import to_table
from ai4dl.policy.peak import to_table as risk_to_table
from ai4dl.policy.policies import Oracle
from ai4dl.rules.objectives import Objective
from ai4dl.rules.workload_profile import container_run_id, summarise
from ai4dl.serving import (managed_resources, objectives, safety_config, served_policy,
                           window_samples)

FIELD_MANAGER = TRAINER_FIELD_MANAGER
TOLERANCE = 0.01           # relative: candidate <= current × (1 + TOLERANCE) replaces it
HELD_OUT_FRACTION = 0.25   # share of the most recent execution groups held out for scoring
MIN_TRAIN_EXECUTIONS = 3
# Samples kept for a run (training + held-out; the newest executions, see ``--max-samples``).
# Measured on CPU, PhaseModel defaults: the fit needs ~125 bytes per training sample above
# ~130 MiB (4.3 M samples: +655 MiB, 8.6 M: +1,180 MiB), so 12 M training samples (16 M with
# the 25 % held out) keep it near 1.5 GiB; with torch (~0.6 GiB), the executions (16 bytes a
# sample) and the pull, the trainer Job peaks near 2.5 GiB, under its 4 GiB limit.
MAX_SAMPLES = 16_000_000
# etcd refuses objects over 1.5 MiB; the model and the previous one must fit well below it
# (metadata, status and managed fields take the rest).
MAX_MODELS_BYTES = 1_000_000

DECISIONS = ("applied", "rejected", "forced", "rolled-back")


class TooFewExecutions(ValueError):
    """Not enough executions to fit a model and hold some out."""


# ----------------------------------------------------------------------------- held-out split
def split_recent(executions: Sequence[Execution], fraction: float = HELD_OUT_FRACTION,
                 min_train: int = MIN_TRAIN_EXECUTIONS) -> tuple[list[Execution], list[Execution]]:
    """(train, held-out): the groups (pods) that ended most recently are held out, about
    ``fraction`` of the groups and at least one; a group never lands on both sides.

    Recent rather than random: the question is whether the candidate serves what runs *now*
    better than the current model, and the recent past is the best sample of that.
    """
    if not 0 < fraction < 1:
        raise ValueError(f"held-out fraction must be in (0, 1), got {fraction}")
    last_end: dict[str, float] = {}
    for e in executions:
        end = float(e.times[-1]) if len(e) else -math.inf
        last_end[e.group] = max(last_end.get(e.group, -math.inf), end)
    groups = sorted(last_end, key=lambda g: (last_end[g], g))
    n_held = max(1, int(round(fraction * len(groups))))
    held_groups = set(groups[len(groups) - n_held:])
    train = [e for e in executions if e.group not in held_groups]
    held = [e for e in executions if e.group in held_groups]
    if len(groups) < 2 or len(train) < min_train:
        raise TooFewExecutions(
            f"too few executions to fit: {len(executions)} executions in {len(groups)} pods "
            f"(need at least {min_train} to train on plus one more pod to score on)")
    return train, held


# ----------------------------------------------------------------------------- scoring
@dataclass
class ModelScore:
    """Allocation ÷ oracle at each managed resource's objective (a matched fulfilment, or a
    matched share of windows at risk), per resource and their mean."""
    value: float
    per_resource: dict[str, float]
    executions: int
    samples: int

    def __str__(self) -> str:
        parts = ", ".join(f"{r} {v:.3f}" for r, v in self.per_resource.items())
        return f"{self.value:.3f} ({parts})"


def score_model(model, executions: Sequence[Execution], spec: PhaseModelSpec,
                target: float | None = None) -> ModelScore:
    """Score ``model`` on ``executions`` as the operator would serve it (see the module doc):
    the policy :func:`ai4dl.serving.served_policy` picks for the spec and this model
    (``auto``: the model's own choice), under the PhaseModel's safety layer, at each resource's
    objective. ValueError (one line) when the model cannot provision these executions."""
    served = served_policy(spec, model)
    resources = served.resources
    window = window_samples(spec)
    missing = [f for f in model.features_ if f not in executions[0].features]
    if missing:
        raise ValueError(f"the model needs feature {missing[0]!r}, the data has "
                         f"{', '.join(executions[0].features)}")
    # Executions no longer than one window have nothing to score (the first window is the
    # cold start, excluded as in the evaluator).
    usable = [e.select(model.features_) for e in executions if len(e) > window]
    if not usable:
        raise ValueError(f"no held-out execution is longer than one window ({window} samples)")
    data = prepare(usable, resources, model)
    safety = safety_config(spec, resources)
    own = {"served": replay(data, served.policy, window),
           ORACLE: replay(data, Oracle(), window)}
    replays = {n: serve(data, r, window, safety) for n, r in own.items()}
    # each resource at its objective: a fulfilment at the matched target, a share of windows
    # at risk at the matched share (``target`` given: a fulfilment for every resource)
    objs = (objectives(spec, resources) if target is None else
            tuple(Objective(r, "fulfilment", float(target)) for r in resources))
    scores = score(data, replays, window,
                   targets=tuple(sorted({o.value for o in objs if not o.is_risk})),
                   risks=tuple(sorted({o.value for o in objs if o.is_risk})),
                   safety=safety, own=own)["served"]
    per = {o.resource: float(s.vs_oracle_risk_at[o.value] if o.is_risk else
                             s.vs_oracle_at[o.value]) for o, s in zip(objs, scores)}
    value = float(np.mean(list(per.values())))
    return ModelScore(value, per, len(usable), int(sum(len(e) for e in usable)))


def choice_objectives(spec: PhaseModelSpec, resources: Sequence[str]) -> dict:
    """{resource: Objective} from ``spec.policy.objectives``: what ``auto`` is chosen for."""
    return {o.resource: o for o in objectives(spec, resources)}


def table_fulfilment(objectives: dict) -> float:
    """The one fulfilment a head-room table is fitted at (a table has one target for all its
    resources): the cpu objective's, else the first resource's quantile (memory: 1 − its
    risk bound)."""
    # TODO(merge): per-resource targets once headroom tables take one per resource; memory
    # would then be fitted at objectives["memory"].quantile beside cpu's fulfilment.
    if "cpu" in objectives:
        return float(objectives["cpu"].value)
    return float(next(iter(objectives.values())).quantile)


def window_problem(executions: Sequence[Execution], window: int, step: float,
                   flag: str = "--window-seconds") -> str | None:
    """Why no head-room table can be fitted for windows of ``window`` samples on
    ``executions`` (one line naming ``flag`` and a value that fits), or None.

    A table learns from the windows after an execution's first (the cold start): an execution
    no longer than one window gives none, and tables fitted on no window at all would be
    stored as if they had learnt something."""
    longest = max((len(e) for e in executions), default=0)
    if longest > window:
        return None
    # the longest window that leaves the longest execution a window after its first, in whole
    # steps: what fits at all (a quarter of it gives each run a few windows to learn from)
    fits = (longest - 1) * step
    hint = (f"{flag} {fits:g} or less fits (a quarter of it gives each run a few windows)"
            if longest - 1 >= MIN_WINDOW_STEPS else "record longer runs, or a shorter step")
    return (f"every training execution is at most one window long ({flag} "
            f"{window * step:g} = {window} samples of {step:g} s; the longest execution is "
            f"{longest} samples, {longest * step:g} s): no window to fit a head-room table "
            f"on; {hint}")


def choose_served_policy(model, train: Sequence[Execution], spec: PhaseModelSpec):
    """``auto``'s choice for a freshly fitted ``model``, on its own training executions
    (:func:`ai4dl.policy.auto.choose_policy`: the most recent 30 % of them score the
    candidates), stored on the model: the head-room tables (both fitted on every training
    execution, so that an explicit ``kind`` can serve either) and the winners
    (``policy_choice_``). Returns the :class:`~ai4dl.policy.auto.AutoChoice`."""
    resources = managed_resources(model)
    window = window_samples(spec)
    problem = window_problem(train, window, spec.step_seconds, "windowSeconds")
    if problem:
        raise ValueError(problem)
    data = prepare([e.select(model.features_) for e in train], resources, model)
    objectives = choice_objectives(spec, resources)
    # chosen under the safety layer it will be served under (its holds change what is at risk)
    choice = choose_policy(data, window, model, objectives,
                           safety=safety_config(spec, resources))
    tables = {t.name: t for t in choice.tables}
    learned = catalog.names(fitted_for="objective")       # the head-room tables
    for name in learned:
        if name not in tables:
            tables[name] = build_candidate(name, data, window, model,
                                           table_fulfilment(objectives))
    model.policy_tables_ = [to_table(tables[n]) for n in learned]
    # a peak-risk winner is served from its table in the document (riskTables)
    model.risk_tables_ = [risk_to_table(p) for p in choice.risk_tables] or None
    model.policy_choice_ = PolicyChoice(resources=list(resources),
                                        winners=list(choice.winners),
                                        targets=list(choice.targets), reason=choice.reason[:2000],
                                        kinds=[o.kind for o in choice.objectives],
                                        calibration=[float(c) for c in choice.calibration])
    return choice


# ----------------------------------------------------------------------------- decision
@dataclass(frozen=True)
class Decision:
    decision: str          # applied | rejected | forced
    reason: str

    @property
    def replaces_model(self) -> bool:
        return self.decision in ("applied", "forced")


def decide(candidate: float, current: float | None, tolerance: float = TOLERANCE,
           force: bool = False, current_problem: str | None = None) -> Decision:
    """Whether the candidate (score ``candidate``, lower is better) replaces the current model.

    ``current`` None: there is no current model (or, with ``current_problem``, it cannot be
    scored on this data, e.g. its features no longer match): the candidate is applied."""
    if tolerance < 0:
        raise ValueError("tolerance must not be negative")
    if current is None:
        return Decision("applied", f"current model cannot be scored: {current_problem}"
                        if current_problem else "no current model")
    bound = current * (1 + tolerance)
    if math.isfinite(candidate) and (candidate <= bound or not math.isfinite(current)):
        return Decision("applied", f"candidate scores {candidate:.4f}, current {current:.4f} "
                        f"(accepted up to {bound:.4f}, tolerance {tolerance:.1%})")
    why = (f"candidate scores {candidate:.4f} allocation/oracle at the fulfilment target, "
           f"current {current:.4f}: worse by more than the {tolerance:.1%} tolerance")
    if force:
        return Decision("forced", why + "; applied anyway (--force)")
    return Decision("rejected", why)


# ----------------------------------------------------------------------------- refit due
def _parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def refit_due(resource: dict, now: float) -> tuple[bool, str]:
    """Whether ``ai4dl train --if-due`` should fit now, and why (one line).

    Due when the PhaseModel has no model, when the operator set ``RefitRecommended=True``
    after the trainer's last run (a recommendation is answered by one run, whatever its
    decision: a rejected candidate is not retried every hour, only at ``maxAge``), or when the
    last run (``status.training.trainedAt``; none recorded counts as too old) is older than
    ``spec.refit.maxAge``."""
    spec = PhaseModelSpec.model_validate(resource.get("spec") or {})
    status = resource.get("status") or {}
    training = status.get("training") or {}
    last_run = _parse_time(training.get("trainedAt"))
    if spec.model is None:
        return True, "the PhaseModel has no model yet"
    for c in status.get("conditions") or []:
        if c.get("type") == "RefitRecommended" and c.get("status") == "True":
            since = _parse_time(c.get("lastTransitionTime"))
            if last_run is None or since is None or since > last_run:
                msg = c.get("message") or c.get("reason") or ""
                return True, f"RefitRecommended ({msg})" if msg else "RefitRecommended"
    max_age = parse_duration(spec.refit.max_age)
    if last_run is None:
        return True, "no training run recorded in status.training"
    age = now - last_run
    if age > max_age:
        return True, f"last training run {age / 3600:.1f} h ago, maxAge {spec.refit.max_age}"
    return False, (f"not due: last training run {age / 3600:.1f} h ago (maxAge "
                   f"{spec.refit.max_age}), no new RefitRecommended")


# ----------------------------------------------------------------------------- what is applied
def _meta(namespace: str, name: str) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
            "metadata": {"name": name, "namespace": namespace}}


def document_bytes(doc: dict | None) -> int:
    return 0 if doc is None else len(json.dumps(doc, separators=(",", ":")))


@dataclass
class ModelApply:
    """The one apply that replaces the model: the new model and the previous one together, so
    no reader ever sees a model without its rollback (or a half-written pair)."""
    body: dict
    kept_previous: bool
    warning: str | None = None


def model_apply(namespace: str, name: str, new_model: dict, previous_model: dict | None,
                max_bytes: int = MAX_MODELS_BYTES) -> ModelApply:
    new_size = document_bytes(new_model)
    if new_size > max_bytes:
        raise ValueError(f"the model document is {new_size} bytes, over the {max_bytes}-byte "
                         "budget for a PhaseModel (fewer hidden units or phases?)")
    spec: dict[str, Any] = {"model": new_model}
    warning = None
    kept = previous_model is not None
    if previous_model is not None:
        if new_size + document_bytes(previous_model) > max_bytes:
            kept, warning = False, (f"the previous model is not kept for rollback: both "
                                    f"together exceed {max_bytes} bytes")
        else:
            spec["previousModel"] = previous_model
    return ModelApply({**_meta(namespace, name), "spec": spec}, kept, warning)


def rollback_apply(namespace: str, name: str, resource: dict) -> dict:
    """Swap model and previousModel (a second rollback undoes the first). ValueError when
    there is nothing to roll back to."""
    spec = resource.get("spec") or {}
    previous = spec.get("previousModel")
    if not previous:
        raise ValueError(f"PhaseModel {namespace}/{name} has no previous model to roll back to")
    body_spec: dict[str, Any] = {"model": previous}
    if spec.get("model"):
        body_spec["previousModel"] = spec["model"]
    return {**_meta(namespace, name), "spec": body_spec}


@dataclass
class TrainingRecord:
    """``status.training``: what the trainer did last."""
    decision: str
    reason: str
    trained_at: str
    source: str = ""
    executions: int = 0
    samples: int = 0
    held_out_executions: int = 0
    fit_seconds: float | None = None
    reconstruction_error: float | None = None
    silhouette: float | None = None
    novelty_rate: float | None = None
    phases: int | None = None
    candidate_score: float | None = None
    current_score: float | None = None
    tolerance: float | None = None
    policy: dict | None = None       # auto's choice: served, reason, scores (TrainingPolicy)
    objectives: list | None = None   # per resource: objective and achieved (ObjectiveStatus)
    extra: dict = field(default_factory=dict)

    def to_status(self) -> dict:
        def num(x):
            return None if x is None or not math.isfinite(x) else round(float(x), 6)

        out = {"decision": self.decision, "reason": self.reason[:1000],
               "trainedAt": self.trained_at, "source": self.source,
               "executions": self.executions, "samples": self.samples,
               "heldOutExecutions": self.held_out_executions,
               "fitSeconds": num(self.fit_seconds),
               "reconstructionError": num(self.reconstruction_error),
               "silhouette": num(self.silhouette), "noveltyRate": num(self.novelty_rate),
               "phases": self.phases, "candidateScore": num(self.candidate_score),
               "currentScore": num(self.current_score), "tolerance": self.tolerance,
               "policy": self.policy, "objectives": self.objectives}
        return {k: v for k, v in out.items() if v is not None}


def policy_status(choice) -> dict:
    """``status.training.policy`` from an :class:`~ai4dl.policy.auto.AutoChoice`."""
    def num(x):
        return None if x is None or not math.isfinite(x) else round(float(x), 6)
    return {"served": dict(zip(choice.resources, choice.winners)), "reason": choice.reason[:1000],
            "scores": [{"policy": s.policy, "resource": s.resource, "target": s.target,
                        "vsOracle": num(s.vs_oracle), "shortWindows": num(s.short_windows),
                        "wins": bool(s.wins)} for s in choice.scores][:100]}


def objectives_status(choice, spec: PhaseModelSpec) -> list[dict]:
    """``status.training.objectives`` (ObjectiveStatus): per resource, the objective ``auto``
    was chosen for and what the served winner achieved on the most recent training executions
    (``AutoChoice.as_dict()``'s ``objectives`` and ``achieved``)."""
    def share(x):
        return None if x is None or isinstance(x, str) or not math.isfinite(x) else \
            round(float(x), 6)

    summary = choice.as_dict()
    # a choice made without objectives (too few executions) names none: its targets
    asked = summary.get("objectives") or [
        {"resource": r, "kind": "fulfilment", "value": t}
        for r, t in zip(choice.resources, choice.targets)]
    achieved = {a["resource"]: a for a in summary.get("achieved") or []}
    note = spec.policy.objective_note()
    out = []
    for o in asked:
        row = {"resource": o["resource"], "kind": o["kind"], "value": float(o["value"])}
        if o.get("maxShortWindows") is not None:
            row["maxShortWindows"] = float(o["maxShortWindows"])
        if note and o["resource"] == "cpu":
            row["source"] = note
        got = achieved.get(o["resource"], {})
        for key, name in (("fulfilment", "achievedFulfilment"),
                          ("riskWindows", "achievedRiskWindows")):
            if share(got.get(key)) is not None:
                row[name] = share(got[key])
        out.append(row)
    return out


def status_apply(namespace: str, name: str, record: TrainingRecord) -> dict:
    return {**_meta(namespace, name), "status": {"training": record.to_status()}}


# ----------------------------------------------------------------------------- workload profiles
def batch_runs(executions: Sequence[Execution], resources: Sequence[str], window: int,
               workload_of: Any, ended_before: float
               ) -> dict[str, list[tuple[str, Any]]]:
    """The trainer's batch fill of workload profiles (issue 42): per workload key, each
    execution's (container, :class:`~ai4dl.rules.workload_profile.RunSummary`), with the run id
    the window loop gives the same container (so that a run both report counts once).
    ``workload_of(execution)`` names its workload (the operator's key); only executions whose
    last sample came before ``ended_before`` are taken (a container still running has not
    reached its peak: the window loop reports it when it ends)."""
    mem = list(resources).index("memory") if "memory" in resources else None
    out: dict[str, list[tuple[str, Any]]] = {}
    for e in executions:
        meta = e.meta or {}
        if not len(e) or float(e.times[-1]) >= ended_before or not meta.get("container"):
            continue
        sel = e.select(resources)
        step = float(e.step or (np.median(np.diff(e.times)) if len(e) > 1 else 1.0))
        run = summarise(sel.values, step, window, float(e.times[0]), memory_index=mem,
                        bytes_unit=mem is not None and tuple(sel.units)[mem] == "bytes")
        run = replace(run, run_id=container_run_id(meta.get("namespace", ""),
                                                   meta.get("pod", ""), meta["container"]))
        out.setdefault(workload_of(e), []).append((meta["container"], run))
    return out
