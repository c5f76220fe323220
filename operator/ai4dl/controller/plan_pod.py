"""One pod's plan finished: QoS rules, resize body, annotations, events, refused take-backs."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from ai4dl.controller.plan_types import SKIP_ORDER, PodPlan
from ai4dl.controller.pods import (A_LAST_APPLIED, A_PHASE, A_PHASE_SINCE, A_RECOMMENDATION,
                                   A_STATE, Container, PodInfo, qos_class)
from ai4dl.controller.savings import original_requests
from ai4dl.crd_spec import PhaseModelSpec
from ai4dl.quantity import format_resource, parse_quantity

# After the kubelet refuses a resize (a memory limit below the container's usage), the refused
# level is not asked for again for this many windows, doubled with each refusal in a row (up
# to the cap): the job's usage must fall first, and the kubelet says nothing about when.
REFUSED_BACKOFF_WINDOWS = 2
REFUSED_BACKOFF_MAX_WINDOWS = 64
# The API server keeps quantities as 64-bit integers (bytes, millicores): a larger value is
# silently capped, so it is never sent.
INT64_MAX = float(2 ** 63 - 1)
#: a target below this fits int64 as millicores and as whole MiB in bytes, rounded up
SURELY_REPRESENTABLE = 1e15


def _representable(resource: str, value: float) -> bool:
    """The formatted quantity fits the API server's int64 (bytes; millicores)."""
    if not np.isfinite(value) or value < 0:
        return False
    if value < SURELY_REPRESENTABLE:    # the usual case, without formatting and parsing it
        return True
    base = parse_quantity(format_resource(resource, value))
    return (base * 1000 if resource == "cpu" else base) <= INT64_MAX


@dataclass
class SettledRequests:
    """A pod's requests with its planned targets (the QoS rules applied): what a resize
    would set, before anything is formatted or written."""
    planned: list                           # its ContainerPlans with a target
    refused_hold: dict                      # levels the kubelet refused lately, held back
    new_containers: list[Container]         # every container with its new requests/limits
    changes: dict[str, dict]                # per container that changes: new and old
    qos: str                                # the pod's QoS class as it stands


def finish_pods(plans: list[PodPlan], spec: PhaseModelSpec, resources: tuple[str, ...],
                window_start: float, now_iso: str) -> None:
    """Every unskipped plan finished (its requests settled, then :func:`finish_settled`)
    and the window's resizes cut to ``maxResizesPerWindow``, the largest relative changes
    first.

    The plans are finished in that order; once the window's resizes are spoken for, a pod
    that would surely be resized is deferred as the cut would defer it, without building
    its resize, recommendation and record first (at 10,000 pods, building them for the
    9,500 the cut then dropped was a quarter of the planning: docs/scaling.md). A pod whose
    resize is not sure (a refused or pending resize, one the API server did not take) is
    finished in full; the cut that follows defers it if it resized."""
    limit = spec.policy.max_resizes_per_window
    settled = [(plan, settle_requests(plan, spec, window_start))
               for plan in plans if plan.skipped is None]
    # the targets are final once settled (capped at limits): the cut's order is known
    settled.sort(key=lambda ps: ps[0].largest_change(), reverse=True)
    resizes = 0
    for plan, requests in settled:
        if requests is None:
            continue
        if resizes >= limit and _surely_resized(plan, requests, spec.policy.mode):
            _annotate_phase(plan, now_iso)
            defer_resize(plan)
            continue
        finish_settled(plan, requests, spec, resources, window_start, now_iso)
        resizes += plan.resize is not None
    rate_limit(plans, limit)


def rate_limit(plans: list[PodPlan], limit: int) -> None:
    """At most ``limit`` resizes per window, the largest relative changes first: a burst of
    thousands of resizes (three API writes each) would swamp the API server and outlast the
    window. Deferred pods are planned again next window (:func:`defer_resize`)."""
    resizing = [p for p in plans if p.resize is not None]
    if len(resizing) <= limit:
        return
    for p in sorted(resizing, key=PodPlan.largest_change, reverse=True)[limit:]:
        defer_resize(p)


def defer_resize(plan: PodPlan) -> None:
    """The pod's resize left for the next window: only a changed phase is written (the
    recommendation it would have got is in the metrics): a recommendation annotation per
    deferred pod would cost as many writes as the resizes saved."""
    plan.resize, plan.events = None, []
    plan.skipped = "rate-limited"
    phase_changed = A_PHASE in plan.annotations and \
        plan.pod.annotations.get(A_PHASE) != plan.annotations.get(A_PHASE)
    plan.annotations = ({k: plan.annotations[k] for k in (A_PHASE, A_PHASE_SINCE)}
                        if phase_changed else {})


def settle_requests(plan: PodPlan, spec: PhaseModelSpec, window_start: float
                    ) -> SettledRequests | None:
    """The pod's new requests (the QoS rules, the resize policy and a refused level's
    back-off applied), or None when the pod is skipped (the reason set on the plan)."""
    pod = plan.pod
    mode = spec.policy.mode
    if mode == "Off":
        plan.skipped = "mode-off"
        return None
    _drop_unrepresentable(plan)
    planned = [c for c in plan.containers if c.skipped is None and c.target]
    if not planned:
        reasons = [c.skipped for c in plan.containers if c.skipped]
        plan.skipped = min(reasons, key=lambda r: SKIP_ORDER.index(r) if r in SKIP_ORDER
                           else len(SKIP_ORDER)) if reasons else "no-request"
        return None
    refused_hold = {} if pod.state_untrusted else (pod.state().get("refused") or {})
    qos = pod.qos
    new_containers, changes = _new_requests(plan, planned, mode, refused_hold, window_start,
                                            qos)
    return SettledRequests(planned, refused_hold, new_containers, changes, qos)


def _surely_resized(plan: PodPlan, requests: SettledRequests, mode: str) -> bool:
    """Whether :func:`finish_settled` would surely give the pod a resize (False when in
    doubt): in place, something changes, the QoS class stays, no resize is pending, in
    progress or refused, and none was left untaken by the API server."""
    pod = plan.pod
    return (mode == "InPlace" and bool(requests.changes) and not pod.resize_error
            and not pod.resize_pending and not pod.resize_in_progress
            and qos_class(requests.new_containers) == requests.qos
            and not pod.state().get("untaken"))


def finish_settled(plan: PodPlan, requests: SettledRequests, spec: PhaseModelSpec,
                   resources: tuple[str, ...], window_start: float, now_iso: str) -> None:
    """A pod whose requests are settled, finished: its annotations, its next state record
    (kept on the plan: :func:`render_state` writes it into the annotations), and the resize
    (or the take-back of a refused one) with its events."""
    pod = plan.pod
    mode = spec.policy.mode
    _annotate_recommendation(plan, requests.planned, now_iso)
    state = _next_state(plan, requests.refused_hold, resources, window_start)

    # Writes only when something a user can see changed: with thousands of pods, an
    # annotation patch per pod per window would be the operator's main load on the API server.
    # (Handling a window twice without a resize is harmless, so the window id need not be
    # recorded then.)
    # (a record that is not the operator's is replaced at once, by a sealed one)
    unchanged = not pod.state_untrusted and all(pod.annotations.get(k) ==
                                                plan.annotations.get(k)
                                                for k in (A_PHASE, A_RECOMMENDATION))
    if mode == "InPlace" and pod.resize_error and not pod.resize_pending:
        _take_back_refused(plan, state, spec, window_start, unchanged)
        return
    if _no_resize(plan, mode, requests, unchanged):
        return
    _resize(plan, state, requests.changes, requests.planned, resources, window_start,
            unchanged)


def _drop_unrepresentable(plan: PodPlan) -> None:
    """Containers whose target the API server would cap are skipped, their target dropped."""
    for c in plan.containers:
        if c.skipped is None and c.target and not all(_representable(r, v)
                                                      for r, v in c.target.items()):
            # The API server would cap it (and it is far beyond any machine anyway).
            c.skipped, c.detail = "unrepresentable", f"target {c.target} beyond int64"
            c.target = {}


def _new_requests(plan: PodPlan, planned: list, mode: str, refused_hold: dict,
                  window_start: float, qos: str) -> tuple[list[Container], dict[str, dict]]:
    """Every container's requests and limits with the planned targets (the QoS rules, the
    resize policy and a refused level's back-off applied; each target as set), and, per
    container that changes, its new requests and limits and its old self."""
    pod = plan.pod
    by_name = {c.name: c for c in pod.containers}
    new_containers: list[Container] = []
    changes: dict[str, dict] = {}
    for c in pod.containers:
        cp = next((p for p in planned if p.name == c.name), None)
        req, lim = dict(c.requests), dict(c.limits)
        if cp is not None:
            for r, t in cp.target.items():
                if abs(t - c.requests.get(r, t)) <= 1e-9 * max(t, 1.0):
                    continue
                if mode == "InPlace" and r in c.restart_on_resize:
                    plan.notices.append(("ResizeRestartsContainer", (
                        f"container {c.name}'s resizePolicy for {r} is RestartContainer: an "
                        f"in-place resize would restart it, so its {r} is left as it is "
                        f"(recommended {format_resource(r, t)}; set NotRequired to let the "
                        f"operator resize it)")))
                    continue
                held = refused_hold.get(c.name, {}).get(r)
                if (held is not None and t < c.requests.get(r, t)
                        and t <= float(held["value"]) * (1 + 1e-9)
                        and window_start < float(held["until"])):
                    continue        # the kubelet refused this level lately: back-off
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
    return new_containers, changes


def _annotate_phase(plan: PodPlan, now_iso: str) -> None:
    """The phase (and since when) annotations of the plan."""
    pod = plan.pod
    phase = plan.phase
    old_phase = pod.annotations.get(A_PHASE)
    if phase is not None:          # no model yet (the baseline) or a cold start: no phase
        plan.annotations[A_PHASE] = str(phase)
        plan.annotations[A_PHASE_SINCE] = (pod.annotations.get(A_PHASE_SINCE, now_iso)
                                           if old_phase == str(phase) else now_iso)


def _annotate_recommendation(plan: PodPlan, planned: list, now_iso: str) -> None:
    """The phase (and since when) and the recommendation annotations of the plan."""
    _annotate_phase(plan, now_iso)
    plan.annotations[A_RECOMMENDATION] = json.dumps(
        {c.name: {"phase": c.phase, "novel": c.novel,
                  **({"coldStart": True} if c.cold_start else {}),
                  **{r: format_resource(r, v) for r, v in c.target.items()}} for c in planned},
        separators=(",", ":"), sort_keys=True)


def _next_state(plan: PodPlan, refused_hold: dict, resources: tuple[str, ...],
                window_start: float) -> dict:
    """The pod's state record after this window (kept on the plan; :func:`render_state` adds
    the running statistics): the window, the refusals still held, the authors' requests."""
    pod = plan.pod
    by_name = {c.name: c for c in pod.containers}
    state = pod.state()
    state["window"] = window_start
    if refused_hold and not pod.resize_error:
        # a held level the container now has was taken (the kubelet applied it): the refusals
        # are no longer "in a row"
        kept = {name: {r: h for r, h in per.items() if name not in by_name
                       or by_name[name].requests.get(r, float("inf"))
                       > float(h["value"]) * (1 + 1e-9)}
                for name, per in refused_hold.items()}
        kept = {name: per for name, per in kept.items() if per}
        if kept:
            state["refused"] = kept
        else:
            state.pop("refused", None)
    if "orig" not in state:
        # the authors' requests before the operator's first write: the baseline of the savings
        # (ai4dl.controller.savings: admission's verified record, else the pod's requests;
        # none when admission's record cannot be trusted), moved into this pod's own record
        orig = original_requests(pod)
        state["orig"] = {c.name: {r: v for r, v in orig.get(c.name, {}).items()
                                  if r in resources} for c in pod.containers}
    _keep_state(plan, state)
    return state


def _keep_state(plan: PodPlan, state: dict) -> None:
    """The pod's state record, kept on the plan; its annotation is rendered by
    :func:`render_state` once the window's rate limit has dropped the plans that will not keep
    it (at 10,000 pods, rendering every pod's running statistics was a third of the planning
    time, most of it thrown away)."""
    plan.state = state
    plan.annotations[A_STATE] = ""


def render_state(plan: PodPlan, model_key: str) -> None:
    """The state annotation of a plan that kept it: its record with the running statistics
    (kept with the pod whenever it is written anyway: an operator restart then resumes from
    them; between writes the runtime keeps them in memory)."""
    state, plan.state = plan.state, None
    if state is None or A_STATE not in plan.annotations:
        plan.annotations.pop(A_STATE, None)
        return
    own = {c.name: c.own.to_json() for c in plan.containers if c.own is not None}
    if own:
        state["own"] = {**(state.get("own") or {}), **own}
        state["model"] = model_key
    plan.annotations[A_STATE] = json.dumps(state, separators=(",", ":"), sort_keys=True)


def _no_resize(plan: PodPlan, mode: str, requests: SettledRequests, unchanged: bool) -> bool:
    """Whether the pod gets no resize this window (the reason and events recorded): not
    InPlace, nothing changes, the QoS class would change, or a resize is pending."""
    pod = plan.pod
    qos, changes, new_containers = requests.qos, requests.changes, requests.new_containers
    if mode == "InPlace" and not changes and pod.resize_pending == "Infeasible":
        # The plan is the resize the kubelet will never apply (its own target): the owner
        # still hears of it from the operator, as when the target moved.
        plan.events.append(("Warning", "ResizeWaiting", _waiting(pod)))
        plan.skipped = "resize-pending"
        if unchanged:
            plan.annotations = {}
        return True
    if mode != "InPlace" or not changes:
        if unchanged:
            plan.annotations = {}
        return True
    if qos_class(new_containers) != qos:
        plan.events.append(("Warning", "ResizeSkipped", f"the resize would change the QoS class "
                            f"from {qos} to {qos_class(new_containers)}"))
        plan.skipped = "qos"
        return True
    if pod.resize_pending or pod.resize_in_progress:
        plan.events.append(("Warning" if pod.resize_pending == "Infeasible" or pod.resize_error
                            else "Normal", "ResizeWaiting", _waiting(pod)))
        plan.skipped = "resize-pending"
        return True
    return False


def _resize(plan: PodPlan, state: dict, changes: dict[str, dict], planned: list,
            resources: tuple[str, ...], window_start: float, unchanged: bool) -> None:
    """The resize of the changes (body, state, last-applied record, Resized event), unless
    the API server did not apply this very resize as sent."""
    increases = {k: dict(v) for k, v in state.get("lastIncrease", {}).items()}
    body, summary = _resize_body(changes, resources, window_start, increases)
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
    _keep_state(plan, state)
    plan.annotations[A_LAST_APPLIED] = json.dumps(
        {"window": window_start, "containers": {b["name"]: b["resources"] for b in body}},
        separators=(",", ":"), sort_keys=True)
    phase = plan.phase
    what = (f"phase {phase}" if phase is not None else
            "cold start" if any(c.cold_start for c in planned) else "no phase model")
    plan.events.append(("Normal", "Resized", f"{what}: " + ", ".join(summary)))


def _resize_body(changes: dict[str, dict], resources: tuple[str, ...], window_start: float,
                 increases: dict) -> tuple[list[dict], list[str]]:
    """The resize's containers (only what changes) and its summary, old→new per request;
    each request raised is recorded in ``increases`` (in place) at ``window_start``."""
    body = []
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
    return body, summary


def _waiting(pod: PodInfo) -> str:
    """Why a pod's resize waits, with the kubelet's own words."""
    if pod.resize_pending:
        return (f"a resize is still pending ({pod.resize_pending})"
                + (f": {pod.resize_message}" if pod.resize_message else ""))
    return "a resize is in progress" + (f": {pod.resize_error}" if pod.resize_error else "")


def _take_back_refused(plan: PodPlan, state: dict, spec: PhaseModelSpec, window_start: float,
                       unchanged: bool) -> None:
    """The kubelet refused the pod's resize (PodResizeInProgress, reason Error; in 1.34+ a
    memory limit below the container's usage): set the spec back to what the containers have
    (status.containerStatuses[].resources), so the refused limit is not applied later at a
    moment of low usage, and hold that level for a back-off. One Warning Event: the take-back
    ends the kubelet's condition, so the next window does not see it again."""
    pod = plan.pod
    where = f"pod {pod.namespace}/{pod.name}"
    if not _is_last_applied(pod):
        # someone else's resize (the spec is not what the operator last sent): theirs to
        # take back; the operator waits and says why
        plan.events.append(("Warning", "ResizeWaiting", f"{where}: " + _waiting(pod)))
        plan.skipped = "resize-pending"
        if unchanged:
            plan.annotations = {}
        return
    plan.refused = pod.resize_error or "resize error"
    hold = {k: dict(v) for k, v in (state.get("refused") or {}).items()}
    body, summary, longest = [], [], 0
    for c in pod.containers:
        res: dict = {}
        for part, want, have in (("requests", c.requests, c.actual_requests),
                                 ("limits", c.limits, c.actual_limits)):
            diff = {r: format_resource(r, have[r]) for r in want
                    if r in have and abs(want[r] - have[r]) > 1e-9 * max(have[r], 1.0)}
            if diff:
                res[part] = diff
        if not res:
            continue
        body.append({"name": c.name, "resources": res})
        for r in sorted({r for part in res.values() for r in part}):
            asked = c.requests.get(r, c.limits.get(r))
            had = c.actual_requests.get(r, c.actual_limits.get(r))
            summary.append(f"{c.name} {r} {format_resource(r, asked)}→{format_resource(r, had)}")
            if asked is not None and had is not None and asked < had:
                prev = hold.get(c.name, {}).get(r) or {}
                n = int(prev.get("n", 0)) + 1
                windows = min(REFUSED_BACKOFF_WINDOWS * 2 ** (n - 1),
                              REFUSED_BACKOFF_MAX_WINDOWS)
                longest = max(longest, windows)
                hold.setdefault(c.name, {})[r] = {
                    "value": asked, "n": n,
                    "until": window_start + (windows + 1) * spec.window_seconds}
    if not body:
        # nothing to take back (the kubelet reports no resources): wait, and say why
        plan.events.append(("Warning", "ResizeWaiting", f"{where}: " + _waiting(pod)))
        plan.skipped = "resize-pending"
        plan.refused = None
        if unchanged:
            plan.annotations = {}
        return
    state.pop("untaken", None)
    state["refused"] = hold
    plan.resize = {"spec": {"containers": body}}
    _keep_state(plan, state)
    plan.annotations[A_LAST_APPLIED] = json.dumps(
        {"window": window_start, "containers": {b["name"]: b["resources"] for b in body}},
        separators=(",", ":"), sort_keys=True)
    plan.events.append(("Warning", "ResizeRefused", (
        f"the kubelet refused the resize of {where}: {plan.refused}; set back to what the "
        f"container has ({', '.join(summary)})"
        + (f"; not lowered to that level again for {longest} windows" if longest else ""))))


def _is_last_applied(pod: PodInfo) -> bool:
    """The pod's spec is the resize the operator sent last (``ai4dl.io/last-applied``)."""
    try:
        last = json.loads(pod.annotations.get(A_LAST_APPLIED) or "")
        sent = last["containers"]
        by_name = {c.name: c for c in pod.containers}
        return bool(sent) and all(
            parse_quantity(q) == getattr(by_name[name], part)[r]
            for name, res in sent.items() for part, values in res.items()
            if part in ("requests", "limits") for r, q in values.items())
    except (ValueError, TypeError, KeyError, AttributeError):
        return False
