"""One window of one PhaseModel, planned without I/O: pods + samples -> what to do per pod.

The kopf daemon fetches (one PromQL query), calls :func:`plan_window`, then applies the plans
(resize patches, annotations, events, status). Everything that decides lives here, so it is
tested without a cluster, and the policy and safety code are the evaluator's own.

Rules that make it safe to change other people's running jobs:
- no resize on missing data: a container whose window has a missing sample is skipped;
- no resize on absurd data: a window with a negative, infinite or physically impossible sample
  (above ``max_value``, the largest a container can have) is skipped as ``bad-sample``;
- one handling per window: a pod whose state annotation already records this window is
  skipped (an operator restart mid-window neither loses nor repeats a resize);
- the QoS class never changes (Guaranteed pods move limits with requests; Burstable pods keep
  requests at or under their limits; BestEffort pods are left alone);
- a pending or in-progress resize is not stacked on (Deferred / Infeasible / InProgress);
- a write the API server would cap or change (a quantity beyond int64) is never sent, and a
  resize the API server did not apply as sent is not sent again until the target changes.

Every pod that gets nothing says why: ``PodPlan.skipped`` (a reason counted in /metrics) and,
for what its owner must fix, ``PodPlan.notices`` (Warning Events the runtime emits once per pod).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from ai4dl.controller.pods import (A_LAST_APPLIED, A_PHASE, A_PHASE_SINCE, A_RECOMMENDATION,
                                   A_STATE, Container, PodInfo, qos_class)
from ai4dl.quantity import format_resource, parse_quantity
from ai4dl.crd import PhaseModelSpec
from ai4dl.policy.policies import make_phase_policy
from ai4dl.policy.safety import SafetyConfig, SafetyState, apply_safety

MANAGED = ("cpu", "memory")
NATIVE_UNITS = {"cpu": "cores", "memory": "bytes"}
# Why a container's window could not be used. The first three are gaps or garbage in the
# metrics (counted by the MetricsIncomplete condition); a container that started during the
# window simply has no full window yet. Worst first: a pod's reason is its worst container's.
DATA_SKIPS = ("bad-sample", "partial-data", "no-data")
SKIP_ORDER = (*DATA_SKIPS, "warming-up")
# Grace after a container starts before its series is complete: the cpu feature is a rate over
# one minute, which Prometheus answers only once two scrapes are in it.
START_GRACE_SECONDS = 60.0
# The API server keeps quantities as 64-bit integers (bytes, millicores): a larger value is
# silently capped, so it is never sent.
INT64_MAX = float(2 ** 63 - 1)


@dataclass
class ContainerPlan:
    name: str
    phase: int | None = None
    novel: bool = False
    proposal: dict[str, float] = field(default_factory=dict)   # the policy's, before safety
    target: dict[str, float] = field(default_factory=dict)     # after safety and QoS rules
    current: dict[str, float] = field(default_factory=dict)
    skipped: str | None = None                                 # why nothing was planned
    detail: str = ""                                           # ... in words (logs, events)


@dataclass
class PodPlan:
    pod: PodInfo
    containers: list[ContainerPlan]
    resize: dict | None = None                  # body for PATCH pods/<name>/resize
    annotations: dict[str, str] = field(default_factory=dict)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    # Warnings about the pod's own setup (reason, message): the runtime emits each once per
    # pod, not every window.
    notices: list[tuple[str, str]] = field(default_factory=list)
    skipped: str | None = None                  # why the whole pod was skipped this window

    @property
    def phase(self) -> int | None:
        return next((c.phase for c in self.containers if c.phase is not None), None)


@dataclass
class WindowPlan:
    pods: list[PodPlan]
    resources: tuple[str, ...]
    # spec-level contradictions (floor > ceiling), one message per resource
    bound_conflicts: list[str] = field(default_factory=list)
    ceiling_below_usage: int = 0        # pods whose memory ceiling is below their working set

    def data_skips(self) -> dict[str, int]:
        """Pods skipped for gaps or garbage in their metrics, by reason."""
        out: dict[str, int] = {}
        for p in self.pods:
            if p.skipped in DATA_SKIPS:
                out[p.skipped] = out.get(p.skipped, 0) + 1
        return out

    def considered(self) -> int:
        """Pods whose metrics were looked at this window (not already handled, not left alone
        for their setup)."""
        return sum(1 for p in self.pods if p.containers and p.skipped != "already-handled")

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


def safety_config(spec: PhaseModelSpec, resources: Sequence[str],
                  max_value: Mapping[str, float] | None = None) -> SafetyConfig:
    pol = spec.policy
    bounds = [pol.resources.get(r) for r in resources]
    floor = tuple(parse_quantity(b.floor) if b and b.floor else 0.0 for b in bounds)
    ceiling = tuple(parse_quantity(b.ceiling) if b and b.ceiling else np.inf for b in bounds)
    return SafetyConfig(floor=floor, ceiling=ceiling, max_increase=pol.max_increase,
                        max_decrease=pol.max_decrease, cooldown_windows=pol.cooldown_windows,
                        memory_margin=pol.memory_margin, min_change=pol.min_change,
                        memory_index=resources.index("memory") if "memory" in resources
                        else None,
                        max_value=tuple(float(max_value.get(r, np.inf)) for r in resources)
                        if max_value else None)


def bound_conflicts(spec: PhaseModelSpec, resources: Sequence[str]) -> list[str]:
    """floor > ceiling, per resource, in words (nothing satisfies both: that resource is held)."""
    out = []
    for r in resources:
        b = spec.policy.resources.get(r)
        if b and b.floor and b.ceiling and parse_quantity(b.floor) > parse_quantity(b.ceiling):
            out.append(f"policy.resources.{r}: floor {b.floor} > ceiling {b.ceiling}; {r} "
                       f"requests are left as they are")
    return out


def classify_window(x: np.ndarray | None, W: int, resource_cols: Sequence[int],
                    max_value: Sequence[float] | None) -> tuple[str | None, str]:
    """Whether a container's last W samples (model feature order) can be planned from: None, or
    the skip reason and what was wrong. Garbage (a negative, infinite or impossible value) is
    told apart from gaps (NaN: Prometheus had no sample, or answered NaN)."""
    if x is None or len(x) == 0:
        return "no-data", "no series for the container"
    window = x[-W:]
    res = window[:, list(resource_cols)]
    with np.errstate(invalid="ignore"):
        if np.isinf(window).any():
            return "bad-sample", "an infinite sample"
        if (res < 0).any():
            return "bad-sample", f"a negative sample ({np.nanmin(res):g})"
        if max_value is not None:
            over = res > np.asarray(max_value)[None, :]
            if over.any():
                return "bad-sample", (f"a sample above the physical maximum "
                                      f"({res[over].max():g} > {np.asarray(max_value)[np.nonzero(over)[1][0]]:g})")
    missing = np.isnan(window).any(1)
    if len(window) < W or missing.all():
        return ("no-data" if missing.all() else "partial-data"), "no samples in the window"
    if missing.any():
        return "partial-data", f"{int(missing.sum())} of {W} samples missing"
    return None, ""


def usable_context(context: np.ndarray, resource_cols: Sequence[int],
                   max_value: Sequence[float] | None) -> int:
    """Rows of history the encoder may use: all of them when every value is a plausible sample,
    else none (the first samples of the window then stand in for their history)."""
    if not len(context) or not np.all(np.isfinite(context)):
        return 0
    res = context[:, list(resource_cols)]
    if (res < 0).any() or (max_value is not None and (res > np.asarray(max_value)).any()):
        return 0
    return len(context)


def window_samples(spec: PhaseModelSpec) -> int:
    return max(1, spec.window_seconds // spec.step_seconds)


def plan_window(spec: PhaseModelSpec, model, pods: Sequence[PodInfo],
                samples: Mapping[tuple[str, str, str], np.ndarray], n_context: int,
                window_start: float, now_iso: str,
                max_value: Mapping[str, float] | None = None) -> WindowPlan:
    """Decide, for every pod of one PhaseModel, phases, recommendations and resizes.

    ``samples[(namespace, pod, container)]`` is (n_context + W, F) in ``spec.features``
    order (NaN where Prometheus had nothing); the last W rows are the window that just ended.
    ``max_value`` (cores, bytes per resource) is the largest a container can physically have:
    a sample above it is garbage, and no request is set above it.
    """
    resources = managed_resources(model)
    W = window_samples(spec)
    feature_idx = [model.features_.index(f.name) for f in spec.features]
    if sorted(feature_idx) != list(range(len(model.features_))):
        raise ValueError("spec.features do not match the model's features")
    policy = make_phase_policy(model, resources, spec.policy.kind, spec.policy.statistic,
                               spec.policy.k, spec.policy.margin, spec.policy.reader,
                               spec.policy.scope)
    safety = safety_config(spec, resources, max_value)
    limits = safety.max_value
    res_idx = [model.features_.index(r) for r in resources]
    managed_names = set(spec.policy.containers)

    plans: list[PodPlan] = []
    rows: list[tuple[int, ContainerPlan, np.ndarray, int]] = []  # (plan idx, cplan, x, ctx)
    for pod in pods:
        plan = PodPlan(pod, [])
        plans.append(plan)
        if pod.state().get("window") == window_start:
            plan.skipped = "already-handled"
            continue
        if pod.qos == "BestEffort":
            plan.skipped = "best-effort"
            plan.notices.append(("BestEffortPod", "no cpu or memory requests or limits: setting "
                                 "any would change its QoS class (BestEffort), so ai4dl leaves "
                                 "this pod alone"))
            continue
        managed = [c for c in pod.containers if not managed_names or c.name in managed_names]
        if not managed:
            plan.skipped = "no-managed-container"
            plan.notices.append(("NoManagedContainer", f"spec.policy.containers "
                                 f"{sorted(managed_names)} of PhaseModel {pod.phasemodel} match "
                                 f"none of this pod's containers "
                                 f"({', '.join(c.name for c in pod.containers)})"))
            continue
        for c in managed:
            cp = ContainerPlan(c.name, current={r: c.requests.get(r, np.nan) for r in resources})
            plan.containers.append(cp)
            x = samples.get((pod.namespace, pod.name, c.name))
            if x is not None:
                x = np.asarray(x, np.float64)[:, np.argsort(feature_idx)]   # model feature order
            reason, detail = classify_window(x, W, res_idx, limits)
            if reason in ("no-data", "partial-data"):
                started = pod.started.get(c.name)
                if started is not None and started > window_start - W * spec.step_seconds \
                        - START_GRACE_SECONDS:
                    reason, detail = "warming-up", "started during the window"
            if reason is not None:
                cp.skipped, cp.detail = reason, detail   # never a resize based on it
                continue
            window = x[-W:]
            context = x[:-W][-n_context:] if n_context else x[:0]
            ctx = usable_context(context, res_idx, limits)
            rows.append((len(plans) - 1, cp, np.vstack([context[len(context) - ctx:], window]),
                         ctx))
    if rows:
        # One encoder product and one nearest-centroid product for every container.
        detections = model.detect([r[2] for r in rows], n_context=[r[3] for r in rows])
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
        below = _ceiling_below_working_set(safety, working_set)
        for i, (pi, cp, _, _) in enumerate(rows):
            cp.proposal = dict(zip(resources, proposals[i].tolist()))
            cp.target = {r: float(targets[i, j]) for j, r in enumerate(resources) if known[i, j]}
            if below[i]:
                m = safety.memory_index
                plans[pi].notices.append(("CeilingBelowUsage", (
                    f"container {cp.name}: memory ceiling "
                    f"{format_resource('memory', safety.ceiling[m])} is below its working set "
                    f"{format_resource('memory', working_set[i])} (+ memoryMargin "
                    f"{safety.memory_margin:g}); its request comes down to the ceiling at most "
                    f"maxDecrease per window")))
    for plan in plans:
        if plan.skipped is None:
            _finish(plan, spec, resources, window_start, now_iso)
    _rate_limit(plans, spec.policy.max_resizes_per_window)
    for plan in plans:
        if plan.skipped is None and plan.resize is None and not plan.annotations:
            plan.skipped = "unchanged"
    return WindowPlan(plans, resources, bound_conflicts(spec, resources),
                      sum(1 for p in plans if any(n[0] == "CeilingBelowUsage" for n in p.notices)))


def _ceiling_below_working_set(safety: SafetyConfig, working_set: np.ndarray) -> np.ndarray:
    """Per row: the memory ceiling is below the latest working set × (1 + margin), so the
    ceiling (a hard cap) wins over the working-set rule: the owner must hear of it."""
    m = safety.memory_index
    if m is None or safety.ceiling is None or not np.isfinite(safety.ceiling[m]):
        return np.zeros(len(working_set), bool)
    need = working_set * (1.0 + (safety.memory_margin or 0.0))
    with np.errstate(invalid="ignore"):
        return np.nan_to_num(need, nan=0.0) > safety.ceiling[m]


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


def _representable(resource: str, value: float) -> bool:
    """The formatted quantity fits the API server's int64 (bytes; millicores)."""
    if not np.isfinite(value) or value < 0:
        return False
    base = parse_quantity(format_resource(resource, value))
    return (base * 1000 if resource == "cpu" else base) <= INT64_MAX


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
    for c in plan.containers:
        if c.skipped is None and c.target and not all(_representable(r, v)
                                                      for r, v in c.target.items()):
            # The API server would cap it (and it is far beyond any machine anyway).
            c.skipped, c.detail = "unrepresentable", f"target {c.target} beyond int64"
            c.target = {}
    planned = [c for c in plan.containers if c.skipped is None and c.target]
    if not planned:
        reasons = [c.skipped for c in plan.containers if c.skipped]
        plan.skipped = min(reasons, key=lambda r: SKIP_ORDER.index(r) if r in SKIP_ORDER
                           else len(SKIP_ORDER)) if reasons else "no-request"
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
    untaken = state.get("untaken") or {}
    sent = {b["name"]: b["resources"] for b in body}
    if untaken.get("containers") == sent:
        # The API server did not apply this very resize as sent (it capped or changed it):
        # sending it again every window would change nothing. Sent again once the target moves.
        plan.skipped = "resize-not-taken"
        if unchanged:
            plan.annotations = {}
        return
    plan.resize = {"spec": {"containers": body}}
    state.pop("untaken", None)
    if increases:
        state["lastIncrease"] = increases
    plan.annotations[A_STATE] = json.dumps(state, separators=(",", ":"), sort_keys=True)
    plan.annotations[A_LAST_APPLIED] = json.dumps(
        {"window": window_start, "containers": {b["name"]: b["resources"] for b in body}},
        separators=(",", ":"), sort_keys=True)
    plan.events.append(("Normal", "Resized", f"phase {phase}: " + ", ".join(summary)))
