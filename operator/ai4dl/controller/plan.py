"""One window of one PhaseModel, planned without I/O: pods + samples -> what to do per pod.

The kopf daemon fetches (one PromQL query), calls :func:`plan_window`, then applies the plans
(resize patches, annotations, events, status). Everything that decides lives here, so it is
tested without a cluster, and the policy and safety code are the evaluator's own.

Rules that make it safe to change other people's running jobs:
- no resize on missing data: a container whose window has a missing sample is skipped;
- one handling per window: a pod whose state annotation already records this window is
  skipped (an operator restart mid-window neither loses nor repeats a resize);
- the QoS class never changes (Guaranteed pods move limits with requests; Burstable pods keep
  requests at or under their limits; BestEffort pods are left alone);
- a pending or in-progress resize is not stacked on (Deferred / Infeasible / InProgress).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from ai4dl.controller.pods import (A_LAST_APPLIED, A_PHASE, A_PHASE_SINCE, A_RECOMMENDATION,
                                   A_STATE, Container, PodInfo, qos_class)
from ai4dl.controller.quantity import format_resource, parse_quantity
from ai4dl.crd import PhaseModelSpec
from ai4dl.policy.policies import make_phase_policy
from ai4dl.policy.safety import SafetyConfig, SafetyState, apply_safety

MANAGED = ("cpu", "memory")
NATIVE_UNITS = {"cpu": "cores", "memory": "bytes"}


@dataclass
class ContainerPlan:
    name: str
    phase: int | None = None
    novel: bool = False
    proposal: dict[str, float] = field(default_factory=dict)   # the policy's, before safety
    target: dict[str, float] = field(default_factory=dict)     # after safety and QoS rules
    current: dict[str, float] = field(default_factory=dict)
    skipped: str | None = None                                 # why nothing was planned


@dataclass
class PodPlan:
    pod: PodInfo
    containers: list[ContainerPlan]
    resize: dict | None = None                  # body for PATCH pods/<name>/resize
    annotations: dict[str, str] = field(default_factory=dict)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    skipped: str | None = None                  # why the whole pod was skipped this window

    @property
    def phase(self) -> int | None:
        return next((c.phase for c in self.containers if c.phase is not None), None)


@dataclass
class WindowPlan:
    pods: list[PodPlan]
    resources: tuple[str, ...]

    def pods_per_phase(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.pods:
            if p.phase is not None:
                out[str(p.phase)] = out.get(str(p.phase), 0) + 1
        return dict(sorted(out.items(), key=lambda kv: int(kv[0])))

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.pods:
            reason = p.skipped or ("resized" if p.resize else "planned")
            out[reason] = out.get(reason, 0) + 1
        return out


def managed_resources(model) -> tuple[str, ...]:
    """cpu and memory, where the model has them in units a request can take."""
    out = []
    for r in MANAGED:
        if r in model.features_:
            unit = model.units_[model.features_.index(r)]
            if unit != NATIVE_UNITS[r]:
                raise ValueError(f"model feature {r!r} is in {unit!r}; requests need "
                                 f"{NATIVE_UNITS[r]!r}")
            out.append(r)
    if not out:
        raise ValueError("the model has neither a cpu nor a memory feature to provision from")
    return tuple(out)


def safety_config(spec: PhaseModelSpec, resources: Sequence[str]) -> SafetyConfig:
    pol = spec.policy
    bounds = [pol.resources.get(r) for r in resources]
    floor = tuple(parse_quantity(b.floor) if b and b.floor else 0.0 for b in bounds)
    ceiling = tuple(parse_quantity(b.ceiling) if b and b.ceiling else np.inf for b in bounds)
    return SafetyConfig(floor=floor, ceiling=ceiling, max_increase=pol.max_increase,
                        max_decrease=pol.max_decrease, cooldown_windows=pol.cooldown_windows,
                        memory_margin=pol.memory_margin, min_change=pol.min_change,
                        memory_index=resources.index("memory") if "memory" in resources
                        else None)


def window_samples(spec: PhaseModelSpec) -> int:
    return max(1, spec.window_seconds // spec.step_seconds)


def plan_window(spec: PhaseModelSpec, model, pods: Sequence[PodInfo],
                samples: Mapping[tuple[str, str, str], np.ndarray], n_context: int,
                window_start: float, now_iso: str) -> WindowPlan:
    """Decide, for every pod of one PhaseModel, phases, recommendations and resizes.

    ``samples[(namespace, pod, container)]`` is (n_context + W, F) in ``spec.features``
    order (NaN where Prometheus had nothing); the last W rows are the window that just ended.
    """
    resources = managed_resources(model)
    W = window_samples(spec)
    feature_idx = [model.features_.index(f.name) for f in spec.features]
    if sorted(feature_idx) != list(range(len(model.features_))):
        raise ValueError("spec.features do not match the model's features")
    policy = make_phase_policy(model, resources, spec.policy.kind, spec.policy.statistic,
                               spec.policy.k, spec.policy.margin, spec.policy.reader,
                               spec.policy.scope)
    safety = safety_config(spec, resources)
    managed_names = set(spec.policy.containers)

    plans: list[PodPlan] = []
    rows: list[tuple[int, ContainerPlan, np.ndarray, int]] = []  # (plan idx, cplan, x, ctx)
    for pod in pods:
        plan = PodPlan(pod, [])
        plans.append(plan)
        if pod.state().get("window") == window_start:
            plan.skipped = "already-handled"
            continue
        for c in pod.containers:
            if managed_names and c.name not in managed_names:
                continue
            cp = ContainerPlan(c.name, current={r: c.requests.get(r, np.nan) for r in resources})
            plan.containers.append(cp)
            x = samples.get((pod.namespace, pod.name, c.name))
            if x is None or len(x) < W:
                cp.skipped = "no-data"
                continue
            x = np.asarray(x, np.float64)[:, np.argsort(feature_idx)]   # model feature order
            window = x[-W:]
            if not np.all(np.isfinite(window)):
                cp.skipped = "no-data"          # never a resize based on missing data
                continue
            context = x[:-W][-n_context:] if n_context else x[:0]
            ctx = len(context) if np.all(np.isfinite(context)) else 0
            rows.append((len(plans) - 1, cp, np.vstack([context[-ctx:] if ctx else x[:0],
                                                        window]), ctx))
    if rows:
        # One encoder product and one nearest-centroid product for every container.
        detections = model.detect([r[2] for r in rows], n_context=[r[3] for r in rows])
        res_idx = [model.features_.index(r) for r in resources]
        current = np.array([[cp.current[r] for r in resources] for _, cp, _, _ in rows])
        proposals = np.empty_like(current)
        working_set = np.full(len(rows), np.nan)
        for i, ((_, cp, x, ctx), det) in enumerate(zip(rows, detections)):
            usage = x[ctx:][:, res_idx]
            cp.phase, cp.novel = int(det.phase[-1]), bool(det.novel[-1])
            proposals[i] = policy.allocate(usage, det.phase, W, current[i], spec.step_seconds)[-1]
            if safety.memory_index is not None:
                working_set[i] = usage[-1, safety.memory_index]
        since = np.array([[_windows_since_increase(plans[pi].pod, cp.name, r, window_start,
                                                   spec.window_seconds)
                           for r in resources] for pi, cp, _, _ in rows])
        # A container with no request for a resource keeps none (its QoS depends on it).
        known = np.isfinite(current)
        state = SafetyState(np.where(known, current, 0.0), since)
        targets, _ = apply_safety(np.where(known, proposals, np.nan), state, safety, working_set)
        for i, (_, cp, _, _) in enumerate(rows):
            cp.proposal = dict(zip(resources, proposals[i].tolist()))
            cp.target = {r: float(targets[i, j]) for j, r in enumerate(resources) if known[i, j]}
    for plan in plans:
        if plan.skipped is None:
            _finish(plan, spec, resources, window_start, now_iso)
    _rate_limit(plans, spec.policy.max_resizes_per_window)
    for plan in plans:
        if plan.skipped is None and plan.resize is None and not plan.annotations:
            plan.skipped = "unchanged"
    return WindowPlan(plans, resources)


def _rate_limit(plans: list[PodPlan], limit: int) -> None:
    """At most ``limit`` resizes per window, the largest relative changes first: a burst of
    thousands of resizes (three API writes each) would swamp the API server and outlast the
    window. Deferred pods are planned again next window; only a changed phase is written (the
    recommendation they would have got is in the metrics): a recommendation annotation per
    deferred pod would cost as many writes as the resizes saved."""
    resizing = [p for p in plans if p.resize is not None]
    if len(resizing) <= limit:
        return

    def change(p: PodPlan) -> float:
        return max((abs(t - c.current.get(r, t)) / max(c.current.get(r, t), 1e-9)
                    for c in p.containers for r, t in c.target.items()), default=0.0)

    for p in sorted(resizing, key=change, reverse=True)[limit:]:
        p.resize, p.events = None, []
        p.skipped = "rate-limited"
        phase_changed = p.pod.annotations.get(A_PHASE) != p.annotations.get(A_PHASE)
        p.annotations = ({k: p.annotations[k] for k in (A_PHASE, A_PHASE_SINCE)}
                         if phase_changed else {})


def _windows_since_increase(pod: PodInfo, container: str, resource: str, window_start: float,
                            window_seconds: int) -> int:
    t = pod.state().get("lastIncrease", {}).get(container, {}).get(resource)
    if t is None:
        return 1 << 30
    return int(round((window_start - float(t)) / window_seconds)) - 1


def _finish(plan: PodPlan, spec: PhaseModelSpec, resources: tuple[str, ...],
            window_start: float, now_iso: str) -> None:
    """QoS rules, the resize body, annotations and events for one pod."""
    pod = plan.pod
    mode = spec.policy.mode
    if mode == "Off":
        plan.skipped = "mode-off"
        return
    planned = [c for c in plan.containers if c.skipped is None and c.target]
    if not planned:
        plan.skipped = "no-data" if plan.containers else "no-managed-container"
        return
    by_name = {c.name: c for c in pod.containers}
    qos = pod.qos
    new_containers: list[Container] = []
    changes: dict[str, dict] = {}
    for c in pod.containers:
        cp = next((p for p in planned if p.name == c.name), None)
        req, lim = dict(c.requests), dict(c.limits)
        if cp is not None:
            for r, t in cp.target.items():
                if abs(t - c.requests.get(r, t)) <= 1e-9 * max(t, 1.0):
                    continue
                if qos == "Guaranteed":
                    req[r] = lim[r] = t             # Guaranteed: requests == limits, always
                else:
                    if r in lim and t > lim[r]:
                        t = lim[r]                  # a request may not exceed its limit
                    req[r] = t
                cp.target[r] = t
        new_containers.append(Container(c.name, req, lim))
        if req != c.requests or lim != c.limits:
            changes[c.name] = {"requests": req, "limits": lim, "old": by_name[c.name]}

    phase = plan.phase
    old_phase = pod.annotations.get(A_PHASE)
    plan.annotations[A_PHASE] = str(phase)
    plan.annotations[A_PHASE_SINCE] = (pod.annotations.get(A_PHASE_SINCE, now_iso)
                                       if old_phase == str(phase) else now_iso)
    plan.annotations[A_RECOMMENDATION] = json.dumps(
        {c.name: {"phase": c.phase, "novel": c.novel,
                  **{r: format_resource(r, v) for r, v in c.target.items()}} for c in planned},
        separators=(",", ":"), sort_keys=True)
    state = pod.state()
    state["window"] = window_start
    plan.annotations[A_STATE] = json.dumps(state, separators=(",", ":"), sort_keys=True)

    # Writes only when something a user can see changed: with thousands of pods, an
    # annotation patch per pod per window would be the operator's main load on the API server.
    # (Handling a window twice without a resize is harmless, so the window id need not be
    # recorded then.)
    unchanged = all(pod.annotations.get(k) == plan.annotations[k]
                    for k in (A_PHASE, A_RECOMMENDATION))
    if mode != "InPlace" or not changes:
        if unchanged:
            plan.annotations = {}
        return
    if qos == "BestEffort":
        plan.events.append(("Warning", "ResizeSkipped", "BestEffort pod: setting requests "
                            "would change its QoS class"))
        plan.skipped = "qos"
        return
    if qos_class(new_containers) != qos:
        plan.events.append(("Warning", "ResizeSkipped", f"the resize would change the QoS class "
                            f"from {qos} to {qos_class(new_containers)}"))
        plan.skipped = "qos"
        return
    if pod.resize_pending or pod.resize_in_progress:
        why = (f"a resize is still pending ({pod.resize_pending})" if pod.resize_pending
               else "a resize is in progress" + (f": {pod.resize_error}" if pod.resize_error
                                                 else ""))
        plan.events.append(("Warning" if pod.resize_pending == "Infeasible" or pod.resize_error
                            else "Normal", "ResizeWaiting", why))
        plan.skipped = "resize-pending"
        return
    body = []
    increases = dict(state.get("lastIncrease", {}))
    summary = []
    for name, ch in changes.items():
        old = ch["old"]
        # Only what changes goes in the patch: unchanged values keep the user's own spelling.
        res: dict = {}
        for part in ("requests", "limits"):
            diff = {r: format_resource(r, v) for r, v in ch[part].items()
                    if getattr(old, part).get(r) != v}
            if diff:
                res[part] = diff
        body.append({"name": name, "resources": res})
        for r in resources:
            new_v, old_v = ch["requests"].get(r), old.requests.get(r)
            if new_v is not None and old_v is not None and new_v != old_v:
                summary.append(f"{name} {r} {format_resource(r, old_v)}→"
                               f"{format_resource(r, new_v)}")
                if new_v > old_v:
                    increases.setdefault(name, {})[r] = window_start
    plan.resize = {"spec": {"containers": body}}
    if increases:
        state["lastIncrease"] = increases
    plan.annotations[A_STATE] = json.dumps(state, separators=(",", ":"), sort_keys=True)
    plan.annotations[A_LAST_APPLIED] = json.dumps(
        {"window": window_start, "containers": {b["name"]: b["resources"] for b in body}},
        separators=(",", ":"), sort_keys=True)
    plan.events.append(("Normal", "Resized", f"phase {phase}: " + ", ".join(summary)))
