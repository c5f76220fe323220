"""One window of one PhaseModel, planned without I/O: pods + samples -> what to do per pod.

The kopf daemon fetches (one PromQL query), calls :func:`plan_window`, then applies the plans
(resize patches, annotations, events, status). Everything that decides lives here, so it is
tested without a cluster, and the policy and safety code are the evaluator's own.

Rules that make it safe to change other people's running jobs:
- no resize on missing data: a container whose window has a missing sample is skipped;
- no resize on absurd data: a window with a negative, infinite or physically impossible sample
  (above ``max_value``, the largest a container can have) is skipped as ``bad-sample``;
- one handling per window: a pod whose state record (sealed by the operator's key:
  ai4dl.controller.podstate) already records this window is skipped (an operator restart mid-window neither loses nor repeats a resize);
- the QoS class never changes (Guaranteed pods move limits with requests; Burstable pods keep
  requests at or under their limits; BestEffort pods are left alone);
- a pending or in-progress resize is not stacked on (Deferred / Infeasible / InProgress);
- a write the API server would cap or change (a quantity beyond int64) is never sent, and a
  resize the API server did not apply as sent is not sent again until the target changes;
- a resize the kubelet refuses (PodResizeInProgress Error: a memory limit below the
  container's usage) is taken back at once (the spec set to what the container has: left in
  place, the kubelet would apply it the moment usage dips, and the job would be OOM-killed when
  it rises again), with a Warning Event and a metric; the refused level is not asked for again
  for a back-off of windows (:data:`ai4dl.controller.plan_pod.REFUSED_BACKOFF_WINDOWS`, doubled per refusal in a row);
- a resource whose ``resizePolicy`` is RestartContainer is not resized: the kubelet would
  restart the container (a training job loses its progress), once per phase change.

Every pod that gets nothing says why: ``PodPlan.skipped`` (a reason counted in /metrics) and,
for what its owner must fix, ``PodPlan.notices`` (Warning Events the runtime emits once per pod).

What is served comes from :func:`ai4dl.serving.served_policy` (``auto``: the trainer's
choice, or the reactive baseline before there is a model) and is computed for the window about
to start by :func:`ai4dl.policy.online.next_allocation`, from the window that ended and the
container's running statistics (:class:`~ai4dl.policy.online.OwnHistory`: the runtime keeps
them between windows and, when it writes the pod anyway, in its state annotation). A container
that has no full window yet gets the served policy's cold-start level where it has one (learned
from the training executions' first windows); memory is not lowered without a working-set
sample.

The plan's records (:class:`ContainerPlan`, :class:`PodPlan`, :class:`WindowPlan`) are in
:mod:`ai4dl.controller.plan_types`; each pod's plan is finished (QoS rules, the resize body,
annotations, events, the take-back of a refused resize) by :mod:`ai4dl.controller.plan_pod`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from ai4dl.controller.plan_pod import finish_pods, render_state
from ai4dl.controller.plan_types import ContainerPlan, PodPlan, WindowPlan
from ai4dl.controller.pods import PodInfo
from ai4dl.crd_spec import PhaseModelSpec
from ai4dl.policy.online import next_allocations
from ai4dl.policy.running import OwnHistory, added_windows
from ai4dl.rules.safety import SafetyConfig, SafetyState, apply_safety, working_set_rising
from ai4dl.serving import Served, safety_config, served_policy, window_samples
from ai4dl.quantity import format_resource, parse_quantity
# Grace after a container starts before its series is complete: the cpu feature is a rate over
# one minute, which Prometheus answers only once two scrapes are in it.
START_GRACE_SECONDS = 60.0


def bound_conflicts(spec: PhaseModelSpec, resources: Sequence[str]) -> list[str]:
    """floor > ceiling, per resource, in words (nothing satisfies both: that resource is held)."""
    out = []
    for r in resources:
        b = spec.policy.resources.get(r)
        if b and b.floor and b.ceiling and parse_quantity(b.floor) > parse_quantity(b.ceiling):
            out.append(f"policy.resources.{r}: floor {b.floor} > ceiling {b.ceiling}; {r} "
                       f"requests are left as they are")
    return out


def _implausible(res: np.ndarray, max_value: Sequence[float] | None) -> str | None:
    """What is wrong with resource samples (rows, R) that no container can have used, or None:
    an infinite, a negative, or a value above the physical maximum (NaN, a gap, passes)."""
    with np.errstate(invalid="ignore"):
        if np.isinf(res).any():
            return "an infinite sample"
        if (res < 0).any():
            return f"a negative sample ({np.nanmin(res):g})"
        if max_value is not None:
            over = res > np.asarray(max_value)[None, :]
            if over.any():
                return (f"a sample above the physical maximum ({res[over].max():g} > "
                        f"{np.asarray(max_value)[np.nonzero(over)[1][0]]:g})")
    return None


def classify_window(x: np.ndarray | None, W: int, resource_cols: Sequence[int],
                    max_value: Sequence[float] | None) -> tuple[str | None, str]:
    """Whether a container's last W samples (model feature order) can be planned from: None, or
    the skip reason and what was wrong. Garbage (a negative, infinite or impossible value) is
    told apart from gaps (NaN: Prometheus had no sample, or answered NaN)."""
    if x is None or len(x) == 0:
        return "no-data", "no series for the container"
    window = x[-W:]
    if np.isinf(window).any():
        return "bad-sample", "an infinite sample"
    wrong = _implausible(window[:, list(resource_cols)], max_value)
    if wrong:
        return "bad-sample", wrong
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
    return 0 if _implausible(context[:, list(resource_cols)], max_value) else len(context)


@dataclass(frozen=True)
class _Judged:
    """One container's samples (model feature order) found plannable by
    :func:`plannable_windows`: its window is whole and plausible, ``ctx`` rows of its history
    usable."""
    x: np.ndarray
    ctx: int


def plannable_windows(samples: Mapping[tuple[str, str, str], np.ndarray], order: np.ndarray,
                      W: int, n_context: int, resource_cols: Sequence[int],
                      max_value: Sequence[float] | None) -> dict:
    """The containers whose last W samples :func:`classify_window` passes, judged all at once
    (one array for every container of the answer: per container, the checks cost ~100 µs, a
    second at 10,000 pods), with their usable history (:func:`usable_context`). A container
    left out is judged alone, for its reason. Samples of other lengths are left out."""
    refs = [ref for ref, x in samples.items() if x is not None and len(x) >= W]
    if not refs:
        return {}
    T = len(samples[refs[0]])
    refs = [ref for ref in refs if np.shape(samples[ref]) == np.shape(samples[refs[0]])]
    X = np.stack([np.asarray(samples[ref], np.float64) for ref in refs])[:, :, order]
    cols = list(resource_cols)
    window = X[:, T - W:]
    context = X[:, max(0, T - W - n_context):T - W] if n_context else X[:, :0]
    ok = ~np.isnan(window).any((1, 2)) & ~_implausible_rows(window, cols, max_value)
    usable = (np.isfinite(context).all((1, 2))
              & ~_implausible_rows(context, cols, max_value)) if context.shape[1] else ok
    n_ctx = context.shape[1]
    return {ref: _Judged(X[i], n_ctx if usable[i] else 0)
            for i, ref in enumerate(refs) if ok[i]}


def _implausible_rows(x: np.ndarray, cols: list[int], max_value) -> np.ndarray:
    """Per container (axis 0) of (N, rows, F) samples: whether :func:`_implausible` (or an
    infinite value in any feature) finds something wrong."""
    with np.errstate(invalid="ignore"):
        res = x[:, :, cols]
        wrong = np.isinf(x).any((1, 2)) | (res < 0).any((1, 2))
        if max_value is not None:
            wrong |= (res > np.asarray(max_value)[None, None, :]).any((1, 2))
    return wrong


def own_history(pod: PodInfo, container: str, histories: Mapping | None, model_key: str,
                n_phases: int, n_resources: int, copy: bool = True) -> OwnHistory:
    """The container's running statistics so far (a copy: planning changes nothing it was
    given; ``copy`` False for a reader that changes nothing, such as
    :func:`~ai4dl.policy.running.added_windows`): the runtime's (kept between windows), else
    the pod's state annotation (after an operator restart), else none yet. Per-phase sums
    recorded under another model (its phases are not these) are dropped, the rest kept."""
    key, got = (histories or {}).get((pod.uid, container), (None, None))
    if got is None:
        state = pod.state()
        try:
            got = OwnHistory.from_json((state.get("own") or {})[container])
            key = state.get("model")
        except (KeyError, TypeError, ValueError):
            got = None
    if got is None or got.n_resources != n_resources:
        return OwnHistory(n_phases, n_resources)
    if key != model_key or got.n_phases != n_phases:
        return got.rebased(n_phases)
    return got.copy() if copy else got


@dataclass(frozen=True)
class _Window:
    """What every container of one window is planned with: the PhaseModel's settings, the
    served policy, and the window's place in time."""
    spec: PhaseModelSpec
    served: Served
    resources: tuple[str, ...]
    W: int
    n_context: int
    feature_idx: list[int]          # per spec.features: its column in the model's order
    res_idx: list[int]              # per resource: its column in the model's order
    safety: SafetyConfig
    k: int                          # the model's phases (1 without a model)
    cold: np.ndarray | None         # the served policy's cold-start level, if it has one
    window_start: float
    histories: Mapping | None
    model_key: str
    #: per (pod uid, container): its workload profile's first request (resources order)
    starts: Mapping[tuple[str, str], np.ndarray] | None = None

    def cold_level(self, pod: PodInfo, container: str) -> np.ndarray | None:
        """The level a container with no full window yet is served: its workload profile's
        first request (what admission gave it), else the served policy's pooled level."""
        own = (self.starts or {}).get((pod.uid, container))
        return own if own is not None else self.cold


# A container planned from its window: (its pod's plan index, its plan, its rows, context rows).
_Row = tuple[int, ContainerPlan, np.ndarray, int]
# A container given its cold-start level: (its pod's plan index, its plan, what was seen).
_Cold = tuple[int, ContainerPlan, np.ndarray | None]


def plan_window(spec: PhaseModelSpec, model, pods: Sequence[PodInfo],
                samples: Mapping[tuple[str, str, str], np.ndarray], n_context: int,
                window_start: float, now_iso: str,
                max_value: Mapping[str, float] | None = None,
                histories: Mapping | None = None, model_key: str = "",
                served: Served | None = None,
                rejected: Mapping[tuple[str, str, str], tuple[str, str]] | None = None,
                floors: Mapping[tuple[str, str], Mapping[str, float]] | None = None,
                held: Mapping[tuple[str, str], float] | None = None,
                starts: Mapping[tuple[str, str], np.ndarray] | None = None
                ) -> WindowPlan:
    """Decide, for every pod of one PhaseModel, phases, recommendations and resizes.

    ``samples[(namespace, pod, container)]`` is (n_context + W, F) in ``spec.features``
    order (NaN where Prometheus had nothing); the last W rows are the window that just ended.
    ``model`` may be None (no model yet: ``auto`` serves the reactive baseline, no phases).
    ``max_value`` (cores, bytes per resource) is the largest a container can physically have:
    a sample above it is garbage, and no request is set above it. ``histories`` maps
    (pod uid, container) to (the model key it was counted under, its :class:`OwnHistory` so
    far); each planned container's updated one is in ``ContainerPlan.own``. ``rejected``
    maps (namespace, pod, container) to (skip reason, detail) for containers whose samples
    the source refused (several series for one feature): skipped, never planned from.
    ``floors`` maps (pod uid, container) to levels its targets are raised to at once, past the
    growth limit (a container restarted after an OOM kill: its bumped peak), within its
    ceiling and the physical maximum. ``held`` maps (pod uid, container) to the memory its
    workload's profile holds this window (the safety layer's hold, as in the evaluator).
    ``starts`` maps (pod uid, container) to its workload profile's first request (in the
    served resources' order): a container of a known workload that has no full window yet
    keeps it, as the evaluator serves a run's first window at its start, instead of the
    pooled cold-start level.
    """
    served = served if served is not None else served_policy(spec, model)
    win = _window(spec, model, served, n_context, window_start, max_value, histories, model_key,
                  starts)
    resources = win.resources
    plans, rows, colds = _collect(win, pods, samples, rejected)
    if rows or colds:
        _decide(win, model, plans, rows, colds, floors, held)
    finish_pods(plans, spec, resources, window_start, now_iso)
    for plan in plans:
        render_state(plan, model_key)
        if plan.skipped is None and plan.resize is None and not plan.annotations:
            plan.skipped = "unchanged"
    return WindowPlan(plans, resources, served, bound_conflicts(spec, resources),
                      sum(1 for p in plans if any(n[0] == "CeilingBelowUsage" for n in p.notices)))


def _window(spec: PhaseModelSpec, model, served: Served, n_context: int, window_start: float,
            max_value: Mapping[str, float] | None, histories: Mapping | None,
            model_key: str, starts: Mapping | None = None) -> _Window:
    """The window's settings; a ValueError when spec.features are not the model's features."""
    resources = served.resources
    W = window_samples(spec)
    names = list(model.features_) if model is not None else [f.name for f in spec.features]
    feature_idx = [names.index(f.name) if f.name in names else -1 for f in spec.features]
    if sorted(feature_idx) != list(range(len(names))):
        raise ValueError("spec.features do not match the model's features")
    safety = safety_config(spec, resources, max_value)
    res_idx = [names.index(r) for r in resources]
    k = model.n_phases_ if model is not None else 1
    return _Window(spec, served, resources, W, n_context, feature_idx, res_idx, safety, k,
                   served.cold_start, window_start, histories, model_key, starts)


def _collect(win: _Window, pods: Sequence[PodInfo],
             samples: Mapping[tuple[str, str, str], np.ndarray],
             rejected: Mapping[tuple[str, str, str], tuple[str, str]] | None
             ) -> tuple[list[PodPlan], list[_Row], list[_Cold]]:
    """Every pod's plan, with the containers to plan from their window and those to give a
    cold start; the others are skipped, with their reason (and a notice for their owner)."""
    managed_names = set(win.spec.policy.containers)
    judged = plannable_windows(samples, np.argsort(win.feature_idx), win.W, win.n_context,
                               win.res_idx, win.safety.max_value)
    plans: list[PodPlan] = []
    rows: list[_Row] = []
    colds: list[_Cold] = []
    for pod in pods:
        plan = PodPlan(pod, [])
        plans.append(plan)
        for c in _managed_containers(plan, managed_names, win.window_start):
            cp = ContainerPlan(c.name, current={r: c.requests.get(r, np.nan)
                                                for r in win.resources})
            plan.containers.append(cp)
            refused = (rejected or {}).get((pod.namespace, pod.name, c.name))
            if refused is not None:
                cp.skipped, cp.detail = refused
                plan.notices.append(("DuplicateSeries", f"container {c.name}: {refused[1]}"))
                continue
            ref = (pod.namespace, pod.name, c.name)
            _collect_container(win, len(plans) - 1, pod, cp,
                               judged.get(ref, samples.get(ref)), rows, colds)
    return plans, rows, colds


def _managed_containers(plan: PodPlan, managed_names: set[str], window_start: float) -> list:
    """The pod's containers to plan; none (the pod skipped, and why) when it was handled this
    window already, is BestEffort, or has no managed container."""
    pod = plan.pod
    if pod.state().get("window") == window_start:
        plan.skipped = "already-handled"
        return []
    if pod.qos == "BestEffort":
        plan.skipped = "best-effort"
        plan.notices.append(("BestEffortPod", "no cpu or memory requests or limits: setting "
                             "any would change its QoS class (BestEffort), so ai4dl leaves "
                             "this pod alone"))
        return []
    managed = [c for c in pod.containers if not managed_names or c.name in managed_names]
    if not managed:
        plan.skipped = "no-managed-container"
        plan.notices.append(("NoManagedContainer", f"spec.policy.containers "
                             f"{sorted(managed_names)} of PhaseModel {pod.phasemodel} match "
                             f"none of this pod's containers "
                             f"({', '.join(c.name for c in pod.containers)})"))
    return managed


def _collect_container(win: _Window, pi: int, pod: PodInfo, cp: ContainerPlan,
                       x: np.ndarray | None, rows: list[_Row], colds: list[_Cold]) -> None:
    """One container's samples judged: appended to ``rows`` (a full window), to ``colds`` (a
    new container, started at the cold-start level), or else skipped with the reason."""
    W, res_idx, limits = win.W, win.res_idx, win.safety.max_value
    if isinstance(x, _Judged):      # plannable (plannable_windows): the window and history
        rows.append((pi, cp, x.x[len(x.x) - W - x.ctx:], x.ctx))
        return
    if x is not None:
        x = np.asarray(x, np.float64)[:, np.argsort(win.feature_idx)]   # model feature order
    reason, detail = classify_window(x, W, res_idx, limits)
    if reason in ("no-data", "partial-data"):
        started = pod.started.get(cp.name)
        if started is not None and started > win.window_start - W * win.spec.step_seconds \
                - START_GRACE_SECONDS:
            reason, detail = "warming-up", "started during the window"
    if reason == "warming-up" and win.cold_level(pod, cp.name) is not None:
        own = own_history(pod, cp.name, win.histories, win.model_key, win.k, len(win.resources))
        if own.n == 0:
            # a new container: its workload's first request, else the level learned from
            # training executions' first windows, not the author's request (memory only
            # down to a sample seen)
            seen = None if x is None else x[-W:][:, res_idx]
            cp.usage = seen
            colds.append((pi, cp, seen))
            return
    if reason is not None:
        cp.skipped, cp.detail = reason, detail   # never a resize based on it
        if reason in ("warming-up", "partial-data") and x is not None:
            cp.usage = x[-W:][:, res_idx]        # what was seen, for its run's summary
        return
    window = x[-W:]
    context = x[:-W][-win.n_context:] if win.n_context else x[:0]
    ctx = usable_context(context, res_idx, limits)
    rows.append((pi, cp, np.vstack([context[len(context) - ctx:], window]), ctx))


def _decide(win: _Window, model, plans: list[PodPlan], rows: list[_Row], colds: list[_Cold],
            floors: Mapping | None, held: Mapping | None) -> None:
    """Phases, proposals and safe targets for every container collected, recorded on its
    ContainerPlan (what its owner must hear of, in its pod's notices)."""
    resources, safety = win.resources, win.safety
    n_rows = len(rows) + len(colds)
    current = np.array([[cp.current[r] for r in resources]
                        for _, cp, *_ in (*rows, *colds)])
    proposals = np.empty_like(current)
    working_set = np.full(n_rows, np.nan)
    rising = np.zeros(n_rows, bool)
    lasts, last_phases, owns = _observe_rows(win, model, plans, rows)
    if safety.memory_index is not None and rows:
        # every container's latest working set and whether it rose, in one call
        m = safety.memory_index
        working_set[:len(rows)] = lasts[:, -1, m]
        began = [plans[pi].pod.started.get(cp.name) for pi, cp, *_ in rows]
        rising[:len(rows)] = working_set_rising(
            lasts[:, :, m], safety.memory_margin,
            [b is not None and b > win.window_start - win.W * win.spec.step_seconds
             for b in began])
    # the served policy for every container at once (tests/test_online.py: the same
    # numbers as its replay over each whole history)
    proposals[:len(rows)] = next_allocations(win.served.policy, lasts, last_phases, owns)
    _cold_proposals(win, plans, colds, len(rows), current, proposals, working_set, rising)
    everyone = [*((pi, cp) for pi, cp, *_ in rows), *((pi, cp) for pi, cp, _ in colds)]
    targets, known = _safe_targets(win, plans, everyone, current, proposals, working_set,
                                   rising, held)
    below = _ceiling_below_working_set(safety, working_set)
    _raise_to_floors(targets, everyone, plans, floors, resources, safety)
    _record_targets(win, plans, everyone, proposals, targets, known, below, working_set)


def _observe_rows(win: _Window, model, plans: list[PodPlan], rows: list[_Row]
                  ) -> tuple[np.ndarray, np.ndarray | None, list[OwnHistory]]:
    """Each row's phases (the model's detection), usage and running statistics updated with
    the window: (usage per row, phases per row or None without a model, the statistics)."""
    W, resources = win.W, win.resources
    # One encoder product and one nearest-centroid product for every container.
    detections = (model.detect([r[2] for r in rows], n_context=[r[3] for r in rows])
                  if model is not None and rows else [None] * len(rows))
    lasts = np.empty((len(rows), W, len(resources)))
    last_phases = np.zeros((len(rows), W), np.int64) if model is not None else None
    before = []
    for i, ((pi, cp, x, ctx), det) in enumerate(zip(rows, detections)):
        lasts[i] = cp.usage = x[ctx:][:, win.res_idx]
        if det is not None:
            last_phases[i] = det.phase
            cp.phase, cp.novel = int(det.phase[-1]), bool(det.novel[-1])
        before.append(own_history(plans[pi].pod, cp.name, win.histories, win.model_key,
                                  win.k, len(resources), copy=False))
    # every container's statistics with this window, at once (new objects: what the runtime
    # keeps is replaced only if the window's plan is kept)
    owns = added_windows(before, lasts, last_phases)
    for (_, cp, *_), own in zip(rows, owns):
        cp.own = own
    return lasts, last_phases, owns


def _cold_proposals(win: _Window, plans: list[PodPlan], colds: list[_Cold], first: int,
                    current: np.ndarray, proposals: np.ndarray, working_set: np.ndarray,
                    rising: np.ndarray) -> None:
    """The cold-start level proposed for each cold container (rows from ``first`` on: its
    workload's first request, else the pooled level), with its working set and whether it
    rose (in place)."""
    safety = win.safety
    for i, (pi, cp, seen) in enumerate(colds, start=first):
        cp.cold_start = True
        level = win.cold_level(plans[pi].pod, cp.name)
        proposals[i] = np.where(np.isfinite(level), level, np.nan)
        if safety.memory_index is not None:
            m = safety.memory_index
            ok = None if seen is None else seen[:, m][np.isfinite(seen[:, m])]
            # no working-set sample yet: memory is not lowered below the request in force
            working_set[i] = (ok[-1] if ok is not None and len(ok)
                              else current[i, m] / (1.0 + (safety.memory_margin or 0.0)))
            if seen is not None:     # a cold start: it started during the window
                rising[i] = working_set_rising(seen[:, m][None], safety.memory_margin,
                                               [True])[0]


def _safe_targets(win: _Window, plans: list[PodPlan], everyone: list, current: np.ndarray,
                  proposals: np.ndarray, working_set: np.ndarray, rising: np.ndarray,
                  held: Mapping | None) -> tuple[np.ndarray, np.ndarray]:
    """The proposals through the safety layer: (targets, which requests the containers have)."""
    resources = win.resources
    since = np.array([[_windows_since_increase(plans[pi].pod, cp.name, r, win.window_start,
                                               win.spec.window_seconds)
                       for r in resources] for pi, cp in everyone])
    # A container with no request for a resource keeps none (its QoS depends on it).
    known = np.isfinite(current)
    state = SafetyState(np.where(known, current, 0.0), since)
    holds = (np.array([held.get((plans[pi].pod.uid, cp.name), np.nan)
                       for pi, cp in everyone]) if held else None)
    targets, _ = apply_safety(np.where(known, proposals, np.nan), state, win.safety, working_set,
                              rising, holds)
    return targets, known


def _record_targets(win: _Window, plans: list[PodPlan], everyone: list, proposals: np.ndarray,
                    targets: np.ndarray, known: np.ndarray, below: np.ndarray,
                    working_set: np.ndarray) -> None:
    """Each container's proposal and target on its plan; a notice on the pod when the memory
    ceiling is below its working set."""
    resources, safety = win.resources, win.safety
    for i, (pi, cp) in enumerate(everyone):
        cp.proposal = dict(zip(resources, proposals[i].tolist()))
        cp.target = {r: float(targets[i, j]) for j, r in enumerate(resources) if known[i, j]}
        if below[i] and not cp.cold_start:
            m = safety.memory_index
            plans[pi].notices.append(("CeilingBelowUsage", (
                f"container {cp.name}: memory ceiling "
                f"{format_resource('memory', safety.ceiling[m])} is below its working set "
                f"{format_resource('memory', working_set[i])} (+ memoryMargin "
                f"{safety.memory_margin:g}); its request comes down to the ceiling at most "
                f"maxDecrease per window")))


def _raise_to_floors(targets: np.ndarray, everyone, plans: list[PodPlan],
                     floors: Mapping | None, resources: Sequence[str],
                     safety: SafetyConfig) -> None:
    """Targets raised to the containers' floors (in place), each floor bounded by the ceiling
    and the physical maximum; a notice says why on the pod."""
    if not floors:
        return
    for i, (pi, cp) in enumerate(everyone):
        floor = floors.get((plans[pi].pod.uid, cp.name))
        for r, level in (floor or {}).items():
            if r not in resources:
                continue
            j = list(resources).index(r)
            bound = min(safety.ceiling[j] if safety.ceiling is not None else np.inf,
                        safety.max_value[j] if safety.max_value is not None else np.inf)
            want = min(float(level), bound)
            if np.isfinite(targets[i, j]) and want > targets[i, j]:
                targets[i, j] = want
                plans[pi].notices.append(("OOMKilled", (
                    f"container {cp.name} was OOM-killed: its {r} request is raised at once "
                    f"to {format_resource(r, want)} (its run's peak, bumped ×1.2, at least "
                    f"+100Mi; its workload's profile is bumped too)")))


def _ceiling_below_working_set(safety: SafetyConfig, working_set: np.ndarray) -> np.ndarray:
    """Per row: the memory ceiling is below the latest working set × (1 + margin), so the
    ceiling (a hard cap) wins over the working-set rule: the owner must hear of it."""
    m = safety.memory_index
    if m is None or safety.ceiling is None or not np.isfinite(safety.ceiling[m]):
        return np.zeros(len(working_set), bool)
    need = working_set * (1.0 + (safety.memory_margin or 0.0))
    with np.errstate(invalid="ignore"):
        return np.nan_to_num(need, nan=0.0) > safety.ceiling[m]


def _windows_since_increase(pod: PodInfo, container: str, resource: str, window_start: float,
                            window_seconds: int) -> int:
    if pod.state_untrusted:
        # a record that is not the operator's (or sealed by a key it no longer holds): when
        # the last increase was is unknown, so decreases wait for the cool-down
        return 0
    t = pod.state().get("lastIncrease", {}).get(container, {}).get(resource)
    if t is None:
        return 1 << 30
    return int(round((window_start - float(t)) / window_seconds)) - 1
