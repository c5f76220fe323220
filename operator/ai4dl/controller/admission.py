"""Admission (``spec.policy.mode`` Initial and InPlace): a new opted-in pod's requests are set
when it is created, from its PhaseModel's learned first-window level, instead of being kept at
what its author wrote for its whole first window (for a training job: the download and
preprocessing phase, where requests are most wrong). VPA's admission controller does this for
its ``Initial`` and ``Auto`` modes.

Pure: :func:`admission_target` turns a PhaseModel into what admission needs (computed once per
PhaseModel generation, kept in the operator's memory by a kopf index), :func:`admit` decides
for one pod. The kopf mutating handler (ai4dl.controller.handlers) only glues them; nothing on
the hot path reads the API server or writes an Event.

The rules, in order:

- only a pod with the opt-in label and the PhaseModel annotation is considered (the webhook's
  objectSelector already sends no other), of a PhaseModel this operator serves (a pod of
  another one is left to the operator that serves it, untouched), whose selector it matches, in
  mode Initial or InPlace;
- the level is the served policy's cold start (:attr:`ai4dl.serving.Served.cold_start`:
  the target quantile of the training executions' first-window peaks), per managed resource,
  clamped to the PhaseModel's floor and ceiling and the operator's physical maximum, and never
  above the container's limit;
- the QoS class never changes: a BestEffort pod (no requests or limits) is left as it is; a
  Guaranteed pod (requests = limits) only when its workload is known: each managed container
  with a workload profile gets the profile's first request as request and limit (the window
  loop moves a Guaranteed pod's limits with its requests the same way), the others and every
  container of an unknown workload keep the author's (a pooled level is no limit to set on
  someone's job); a Burstable pod whose new requests would all equal its limits keeps the
  request of every container-resource that would have reached its limit;
- only the request's namespace is served: the AdmissionReview's ``request.namespace`` picks the
  PhaseModel, and a pod whose own metadata.namespace disagrees (a forged review) is admitted
  unchanged without reading any PhaseModel;
- a pod the API server would accept is never made one it refuses (admission runs before the
  LimitRanger's and the pod validation's checks): the author's intent is kept (a container
  without a request for a resource gets none; a request equal to its limit, which is what a
  limit-only container's request defaults to, stays), each new request is clamped into the
  container's LimitRange bounds (min, max, limit / maxLimitRequestRatio), and a resource whose
  pod total would break the pod's own ``spec.resources`` (PodLevelResources) or a Pod-type
  LimitRange keeps every container's own request; when no value fits, that container-resource
  is left as it was;
- what was done, or why nothing was, is recorded on the pod: ``ai4dl.io/admitted`` keeps the
  author's original requests (nothing the user gave is lost), sealed with the operator's key
  (a pod's owner could write any record there: ai4dl.controller.podstate), and
  ``ai4dl.io/admission`` says in one line what was set and what was left unchanged, each with
  the container and the rule.

A PhaseModel without a model (or whose model has no learned first-window level) admits pods
unchanged, with the reason in ``ai4dl.io/admission``.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Mapping

from ai4dl.controller.podstate import StateKey, admitted_identity, admitted_scope
from ai4dl.controller.pods import (A_ADMISSION, A_ADMITTED, A_WORKLOAD, RESOURCES, Container,
                                  pod_info, qos_class)
from ai4dl.crd import MODEL_ANNOTATION, OPT_IN_LABEL
from ai4dl.crd_spec import PhaseModelSpec
from ai4dl.crd_spec import PROMQL_UNCHECKED, LabelSelector
from ai4dl.method.model import PhaseModel
from ai4dl.quantity import format_resource, parse_quantity
from ai4dl.rules.workload_profile import start_within_request
from ai4dl.serving import safety_config, served_policy
ADMITTING_MODES = ("Initial", "InPlace")


@dataclass(frozen=True)
class AdmissionTarget:
    """What admission needs of one PhaseModel (no numpy, no model: cheap to keep per PM)."""
    namespace: str
    name: str
    mode: str
    selector: LabelSelector
    containers: tuple[str, ...]                 # managed containers; empty = all
    resources: tuple[str, ...]                  # managed resources
    levels: tuple[float | None, ...] = ()       # per resource: the first-window level or None
    floor: tuple[float, ...] = ()
    ceiling: tuple[float, ...] = ()
    reason: str = ""                            # why there is no level (when levels are None)
    max_increase: float | None = None           # the safety layer's growth limit per window

    @property
    def admits(self) -> bool:
        return self.mode in ADMITTING_MODES


@dataclass
class Admission:
    """The decision for one pod: requests to set, (container index, resource, quantity), and
    the annotations to add. Empty: leave the pod exactly as it came."""
    changes: list[tuple[int, str, str]] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    #: a Guaranteed pod's: each change sets the limit with the request (the QoS class stays)
    limits_follow: bool = False

    def apply(self, pod: dict) -> None:
        """Mutate a pod body in place (the kopf handler's patch function)."""
        containers = pod.setdefault("spec", {}).setdefault("containers", [])
        for i, resource, quantity in self.changes:
            res = containers[i].get("resources") or {}
            res["requests"] = {**(res.get("requests") or {}), resource: quantity}
            if self.limits_follow:
                res["limits"] = {**(res.get("limits") or {}), resource: quantity}
            containers[i]["resources"] = res
        if self.annotations:
            meta = pod.setdefault("metadata", {})
            meta["annotations"] = {**(meta.get("annotations") or {}), **self.annotations}


def admission_target(body: Mapping) -> AdmissionTarget:
    """From a PhaseModel object (the kopf index calls it once per generation)."""
    meta = body.get("metadata") or {}
    ns, name = meta.get("namespace", ""), meta.get("name", "")
    try:
        # admission sends no query: the PromQL confinement is the window loop's business
        spec = PhaseModelSpec.model_validate(body.get("spec") or {}, context=PROMQL_UNCHECKED)
    except ValueError as err:
        first = str(err).splitlines()
        detail = first[1].strip() if len(first) > 1 else first[0]
        return AdmissionTarget(ns, name, "Off", LabelSelector(), (), (),
                               reason=f"its spec is invalid ({detail})")
    base = dict(namespace=ns, name=name, mode=spec.policy.mode, selector=spec.selector,
                containers=tuple(spec.policy.containers))
    if spec.policy.mode not in ADMITTING_MODES:
        return AdmissionTarget(**base, resources=())
    if spec.model is None:
        return AdmissionTarget(**base, resources=(), reason="it has no model yet")
    try:
        served = served_policy(spec, PhaseModel.from_document(spec.validated_model()))
    except ValueError as err:
        return AdmissionTarget(**base, resources=(),
                               reason=f"its model cannot be served ({str(err).splitlines()[0]})")
    cold = served.cold_start
    if cold is None:
        return AdmissionTarget(**base, resources=served.resources,
                               reason="its model learned no first-window level (retrain: the "
                                      "trainer stores one with the head-room tables)")
    safety = safety_config(spec, served.resources)
    return AdmissionTarget(**base, resources=served.resources,
                           levels=tuple(None if not math.isfinite(v) else float(v) for v in cold),
                           floor=tuple(safety.floor), ceiling=tuple(safety.ceiling),
                           max_increase=safety.max_increase)


def profile_levels(target: AdmissionTarget, profiles: Mapping | None, now: float,
                   requests: Mapping[str, Mapping[str, float]] | None = None
                   ) -> dict[str, tuple[tuple[float | None, ...], int]]:
    """Per container with a profile of the target's resources: the first request its profile
    gives (in ``target.resources`` order) and how many runs it remembers — the same
    :meth:`~ai4dl.rules.workload_profile.WorkloadProfile.first_request` the evaluator's served
    start calls, with the same growth limit (a Guaranteed pod's too: its first window, counted
    from its start, lasts until its first resize); its cpu no higher than the container's own
    request (``requests``: container -> resource -> value;
    :data:`~ai4dl.rules.workload_profile.CAPPED_AT_REQUEST` says why)."""
    out = {}
    for container, profile in (profiles or {}).items():
        if tuple(profile.resources) != tuple(target.resources):
            continue
        first = profile.first_request(now, target.max_increase)
        if first is not None:
            first = start_within_request(first, target.resources,
                                         (requests or {}).get(container))
            out[container] = (tuple(float(v) if math.isfinite(v) else None for v in first),
                              profile.n_runs)
    return out


@dataclass(frozen=True)
class LimitRangeRules:
    """One LimitRange's constraints on cpu and memory (types Container and Pod), parsed once per
    LimitRange by a kopf index (the admission hot path reads nothing from the API server).
    ``bounds[(type, field, resource)] = (value, text)``, field one of min, max, ratio."""
    name: str
    bounds: Mapping[tuple[str, str, str], tuple[float, str]] = field(default_factory=dict)

    def get(self, kind: str, what: str, resource: str) -> tuple[float, str] | None:
        return self.bounds.get((kind, what, resource))


def limit_range_rules(body: Mapping) -> LimitRangeRules:
    """From a LimitRange object. A quantity that does not parse is left out (the API server
    validated it when the LimitRange was written, so this does not happen in practice)."""
    bounds: dict[tuple[str, str, str], tuple[float, str]] = {}
    for item in (body.get("spec") or {}).get("limits") or []:
        kind = item.get("type")
        if kind not in ("Container", "Pod"):
            continue
        for what, key in (("min", "min"), ("max", "max"), ("ratio", "maxLimitRequestRatio")):
            for r in RESOURCES:
                text = (item.get(key) or {}).get(r)
                if text is None:
                    continue
                try:
                    value = parse_quantity(text)
                except ValueError:
                    continue
                old = bounds.get((kind, what, r))
                # two items of one type: both apply, the tighter wins
                if old is None or (value > old[0] if what == "min" else value < old[0]):
                    bounds[(kind, what, r)] = (value, str(text))
    return LimitRangeRules((body.get("metadata") or {}).get("name", ""), bounds)


@dataclass(frozen=True)
class QuotaRoom:
    """One ResourceQuota's room left (``hard - used`` per quota key: ``requests.cpu``, ``cpu``,
    ``limits.memory``...), from its status, parsed once per change by a kopf index. ``used``
    is the quota controller's last count: room is what the API server will check against."""
    name: str
    room: Mapping[str, float] = field(default_factory=dict)
    hard: Mapping[str, str] = field(default_factory=dict)


def quota_room(body: Mapping) -> QuotaRoom:
    """From a ResourceQuota object: room per cpu/memory key of its status (its spec's hard
    when the quota controller has not counted yet: nothing used). Scopes are not read: a
    scoped quota is applied to every pod, which may leave a request unraised, never refused."""
    status = body.get("status") or {}
    hard = status.get("hard") or (body.get("spec") or {}).get("hard") or {}
    used = status.get("used") or {}
    room, shown = {}, {}
    for key, text in hard.items():
        if key not in QUOTA_KEYS:
            continue
        try:
            room[key] = parse_quantity(text) - parse_quantity(used.get(key, "0"))
        except ValueError:
            continue
        shown[key] = str(text)
    return QuotaRoom((body.get("metadata") or {}).get("name", ""), room, shown)


#: The quota keys a pod's cpu and memory requests and limits are charged to.
QUOTA_KEYS = ("cpu", "memory", "requests.cpu", "requests.memory", "limits.cpu",
              "limits.memory")


def _quota_breaks(spec: Mapping, resource: str, containers: list[Container],
                  new: Mapping[int, Mapping[str, str]], limits_follow: bool,
                  quotas: tuple[QuotaRoom, ...] | list) -> str:
    """Why raising ``resource`` as ``new`` says would make the API server refuse the pod under
    one of ``quotas`` (its total above the room left), or "". Only a raise is judged: a pod
    whose own requests already exceed the room is refused with or without the webhook."""
    before = [c.requests.get(resource, 0.0) for c in containers]
    after = [parse_quantity(new[i][resource]) if resource in new.get(i, {}) else before[i]
             for i in range(len(containers))]
    totals = {"requests": (_pod_total(spec, resource, before), _pod_total(spec, resource, after))}
    lims = [c.limits.get(resource) for c in containers]
    if limits_follow and None not in lims:
        lim_after = [after[i] if resource in new.get(i, {}) else lims[i]
                     for i in range(len(containers))]
        totals["limits"] = (sum(lims), sum(lim_after))   # type: ignore[arg-type]
    for q in quotas:
        for kind, (old, now) in totals.items():
            keys = (f"{kind}.{resource}", resource) if kind == "requests" else \
                (f"{kind}.{resource}",)
            for k in keys:
                room = q.room.get(k)
                if room is not None and now > old and now > room + 1e-9:
                    return (f"the pod would exceed ResourceQuota {q.name} {k} (hard "
                            f"{q.hard.get(k)}, {format_resource(resource, max(room, 0.0))} "
                            f"left)")
    return ""


def _k8s_int(resource: str, value: float) -> int:
    """The integer the LimitRanger compares: millicores for cpu, bytes (rounded up) else."""
    return math.ceil(value * 1000 - 1e-6) if resource == "cpu" else math.ceil(value - 1e-6)


def _within(resource: str, request: float, limit: float | None, rules: LimitRangeRules,
            kind: str) -> str:
    """Which of ``rules``' constraints of type ``kind`` (Container, or Pod for the pod's sums)
    a request and its limit break, compared as the LimitRanger does ("" when none)."""
    req = _k8s_int(resource, request)
    mn, mx, ratio = (rules.get(kind, w, resource) for w in ("min", "max", "ratio"))
    if mn is not None and req < _k8s_int(resource, mn[0]):
        return f"min {mn[1]}"
    if mx is not None and req > _k8s_int(resource, mx[0]):
        return f"max {mx[1]}"
    if ratio is not None and limit is not None and req > 0 and \
            _k8s_int(resource, limit) / req > ratio[0] * (1 + 1e-12):
        return f"maxLimitRequestRatio {ratio[1]}"
    return ""


def _pod_total(spec: Mapping, resource: str, regular: list[float]) -> float:
    """The pod's aggregate request of ``resource`` as Kubernetes computes it (PodRequests):
    the regular containers (``regular``, the values after admission) plus the sidecars
    (restartable init containers), or the largest init container step if that is more."""
    def req(c):
        text = ((c.get("resources") or {}).get("requests") or {}).get(resource)
        return parse_quantity(text) if text is not None else 0.0
    sidecars = init_peak = 0.0
    for c in spec.get("initContainers") or []:
        if c.get("restartPolicy") == "Always":
            sidecars += req(c)
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, req(c) + sidecars)
    return max(sum(regular) + sidecars, init_peak)


def admit(pod: Mapping, targets: Mapping[tuple[str, str], AdmissionTarget],
          max_value: Mapping[str, float] | None = None, key: StateKey | None = None, *,
          namespace: str | None,
          limit_ranges: tuple[LimitRangeRules, ...] | list = (),
          resource_quotas: tuple[QuotaRoom, ...] | list = (),
          workload: str = "", profiles: Mapping | None = None,
          now: float | None = None, seal: bool = True) -> Admission:
    """The decision for a pod being created (see the module doc). ``targets`` maps (namespace,
    PhaseModel name) to the PhaseModels this operator serves (only ``.get`` is used).
    ``key`` seals the record of the author's requests (``ai4dl.io/admitted``): without it the
    record is plain JSON, which the operator never trusts (ai4dl.controller.podstate).
    ``namespace``: the AdmissionReview's ``request.namespace`` (what the API server is creating
    the pod in; never the pod's own metadata, which whoever sends a review writes);
    ``limit_ranges``, ``resource_quotas``: the LimitRanges and ResourceQuotas of that
    namespace (a request is never raised past a quota's room left). ``workload``
    (ai4dl.kube.workload) is written on the pod; ``profiles`` are its workload's, per
    container (verified: a
    :class:`ai4dl.controller.profiles.StoredProfiles`' containers): a container with one
    starts from its own runs, the others from the PhaseModel's pooled level. ``seal``: write
    the sealed record of the author's requests (off where the webhook does not authenticate
    its callers: :func:`_admitted_record`)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    pm = annotations.get(MODEL_ANNOTATION)
    if labels.get(OPT_IN_LABEL) != "true" or not pm:
        return Admission()

    shown = {A_WORKLOAD: workload} if workload else {}
    target, decided = _serving_target(meta, labels, pm, targets, namespace, shown)
    if decided is not None:
        return decided
    containers = pod_info(dict(pod)).containers
    qos = qos_class(containers)
    managed = [i for i, c in enumerate(containers)
               if not target.containers or c.name in target.containers]
    known = profile_levels(target, profiles, time.time() if now is None else now,
                           {c.name: c.requests for c in containers})
    if qos == "Guaranteed" and any(containers[i].name in known for i in managed):
        return _admit_guaranteed(pod, target, containers, managed, known, max_value, key,
                                 namespace=namespace, limit_ranges=limit_ranges, shown=shown,
                                 quotas=resource_quotas, seal=seal)
    if qos == "Guaranteed":
        return _unchanged(shown, "the pod is Guaranteed and no managed container's workload "
                                 "has a profile (a Guaranteed pod gets only its own workload's "
                                 "level, as request and limit)")
    if qos != "Burstable":
        return _unchanged(shown, f"the pod's QoS class is {qos}: setting requests would "
                                 f"change it")
    if not managed:
        return _unchanged(shown, f"none of the pod's containers is in PhaseModel {pm}'s "
                                 f"spec.policy.containers")
    return _admit_burstable(pod, pm, target, containers, managed, known, max_value, key,
                            limit_ranges=limit_ranges, shown=shown, quotas=resource_quotas,
                            seal=seal)


def _unchanged(shown: Mapping[str, str], why: str) -> Admission:
    """The pod admitted as it is, the reason in ``ai4dl.io/admission``."""
    return Admission(annotations={**shown, A_ADMISSION: f"unchanged: {why}"})


def _serving_target(meta: Mapping, labels: Mapping, pm: str,
                    targets: Mapping[tuple[str, str], AdmissionTarget], namespace: str | None,
                    shown: Mapping[str, str]
                    ) -> tuple[AdmissionTarget | None, Admission | None]:
    """(the PhaseModel that admits the pod, None), or (None, the decision) when the review is
    forged, the PhaseModel is not this operator's or does not admit, or it has no level."""
    ns = meta.get("namespace")
    if not namespace or ns != namespace:
        # The API server fills the pod's namespace from the request before admission, so the
        # two agree on every review it sends: a disagreement is a forged review, which must
        # learn nothing of any PhaseModel (none is read).
        return None, _unchanged(shown, f"the pod's metadata.namespace ({ns or 'none'}) is not "
                                       f"the request's namespace ({namespace or 'none'})")
    target = targets.get((namespace, pm))
    if target is None:
        # not one of ours: another operator (a shard) may serve it, and its webhook decides;
        # a PhaseModel that does not exist at all is the orphan sweep's Warning Event
        return None, Admission()
    if not target.admits:
        return None, Admission()                # Off / Recommend: not admission's business
    if not target.selector.matches(labels):
        return None, _unchanged(shown, f"the pod does not match PhaseModel {pm}'s "
                                       f"spec.selector")
    if target.reason:
        return None, _unchanged(shown, f"PhaseModel {pm}: {target.reason}")
    return target, None


def _admit_burstable(pod: Mapping, pm: str, target: AdmissionTarget,
                     containers: list[Container], managed: list[int], known: Mapping,
                     max_value: Mapping[str, float] | None, key: StateKey | None, *,
                     limit_ranges: tuple[LimitRangeRules, ...] | list,
                     shown: Mapping[str, str], quotas: tuple[QuotaRoom, ...] | list,
                     seal: bool) -> Admission:
    """A Burstable pod with managed containers: each gets its level as request, except where
    the pod would become Guaranteed or break its pod-level bounds (the rule in the note)."""
    spec = pod.get("spec") or {}
    qos = qos_class(containers)
    new, notes = _burstable_levels(target, containers, spec.get("containers") or [], managed,
                                   known, max_value, limit_ranges)
    keep: set = set()
    if qos_class(_requests_after(containers, new, keep)) != qos:
        # all requests would equal the limits (Guaranteed): the container-resources that would
        # reach their limit keep their own request
        keep = {(i, r) for i in managed for r, q in new[i].items()
                if containers[i].limits.get(r) == parse_quantity(q)}
        notes += [f"{containers[i].name} {r}: the learned level reaches its limit (the pod "
                  f"would become Guaranteed)" for i, r in sorted(keep)]
    keep = _pod_level_keeps(spec, containers, managed, new, keep, limit_ranges, notes)
    if qos_class(_requests_after(containers, new, keep)) != qos:
        return _unchanged(shown, "setting the learned requests would change the pod's QoS "
                                 "class")
    return _decision(pod, pm, containers, {i: {r: q for r, q in new[i].items()
                                               if (i, r) not in keep} for i in managed},
                     known, notes, key, shown, quotas=quotas, seal=seal)


def _burstable_levels(target: AdmissionTarget, containers: list[Container], specs: list,
                      managed: list[int], known: Mapping,
                      max_value: Mapping[str, float] | None,
                      limit_ranges: tuple[LimitRangeRules, ...] | list
                      ) -> tuple[dict[int, dict[str, str]], list[str]]:
    """Per managed container and resource, the request to set (the quantity text written),
    and what was left unchanged, with the rule that kept it."""
    notes: list[str] = []
    new: dict[int, dict[str, str]] = {i: {} for i in managed}
    for j, r in enumerate(target.resources):
        for i in managed:
            name = containers[i].name
            levels = known[name][0] if name in known else target.levels
            level = levels[j] if j < len(levels) else None
            if level is None:
                continue
            value = min(max(level, target.floor[j]), target.ceiling[j],
                        (max_value or {}).get(r, math.inf))
            q, note = _burstable_request(r, value, specs[i].get("resources") or {},
                                         containers[i], limit_ranges)
            if q is None:
                notes.append(f"{name} {r}: {note}")
            else:
                new[i][r] = q
    return new, notes


def _requests_after(containers: list[Container], new: Mapping[int, Mapping[str, str]],
                    keep: set) -> list[Container]:
    """The containers with the requests ``new`` set, but those in ``keep`` (container index,
    resource)."""
    return [Container(c.name, {**c.requests, **{r: parse_quantity(q)
                                              for r, q in new.get(i, {}).items()
                                              if (i, r) not in keep}}, c.limits)
            for i, c in enumerate(containers)]


def _pod_level_keeps(spec: Mapping, containers: list[Container], managed: list[int],
                     new: Mapping[int, Mapping[str, str]], keep: set,
                     limit_ranges: tuple[LimitRangeRules, ...] | list, notes: list[str]) -> set:
    """``keep`` with every container's own request of each resource whose pod total would
    break the pod's spec.resources or a Pod-type LimitRange (the rule added to ``notes``)."""
    # the pod as a whole: pod-level resources (spec.resources, PodLevelResources: the
    # containers' requests must sum within the pod's) and Pod-type LimitRanges. The sum moves
    # with every container, so a resource that would break one keeps every container's own.
    pod_res = spec.get("resources") or {}
    for r in sorted({r for i in managed for r in new[i]}):
        after = _requests_after(containers, new, keep)
        total = _pod_total(spec, r, [c.requests.get(r, 0.0) for c in after])
        why = ""
        bound = (pod_res.get("requests") or {}).get(r) or (pod_res.get("limits") or {}).get(r)
        if bound is not None and _k8s_int(r, total) > _k8s_int(r, parse_quantity(bound)):
            why = f"the containers' requests would sum above the pod's spec.resources ({bound})"
        if not why:
            lims = [c.limits.get(r) for c in after]
            total_lim = sum(lims) if lims and None not in lims else None  # type: ignore
            for x in limit_ranges:
                if w := _within(r, total, total_lim, x, "Pod"):
                    why = f"the pod's total would break LimitRange {x.name} Pod {w}"
                    break
        if why:
            keep |= {(i, r) for i in managed if r in new[i]}
            notes.append(f"{r} of every container: {why}")
    return keep


def _burstable_request(r: str, value: float, res: Mapping, container: Container,
                       limit_ranges: tuple[LimitRangeRules, ...] | list
                       ) -> tuple[str | None, str]:
    """A Burstable container's new request of ``r`` for the level ``value`` (its spec's
    ``resources`` as written): the quantity text, or None and why it keeps its own."""
    if (res.get("requests") or {}).get(r) is None:
        # the author asked for no request of r (BestEffort for r, or a limit the API server has
        # not defaulted from): giving one would change what was asked
        return None, "it has no request (none is added)"
    lim = container.limits.get(r)
    if lim is not None and container.requests.get(r) == lim:
        # a limit without a request has been defaulted to request = limit before admission
        # (the two cannot be told apart): both mean "reserve the limit"
        return None, "its request equals its limit (a limit-only container's request " \
                     "defaults to it)"
    # the bounds the API server will enforce: the limit, and every LimitRange's Container
    # min / max / maxLimitRequestRatio (request >= limit / ratio)
    lo, hi = 0.0, math.inf
    hi_text = ""
    if lim is not None:
        hi, hi_text = lim, str((res.get("limits") or {}).get(r))
    for rules in limit_ranges:
        if (b := rules.get("Container", "min", r)) is not None:
            lo = max(lo, b[0])
        if (b := rules.get("Container", "max", r)) is not None and b[0] < hi:
            hi, hi_text = b
        if (b := rules.get("Container", "ratio", r)) is not None and lim is not None:
            lo = max(lo, lim / b[0])
    if lo > hi:
        return None, (f"no request is within its limit and LimitRange bounds "
                      f"({', '.join(x.name for x in limit_ranges)})")
    q = format_resource(r, min(max(value, lo), hi))
    if parse_quantity(q) > hi:
        q = hi_text                     # never above the bound (rounding included)
    broken = [f"LimitRange {x.name} Container {w}" for x in limit_ranges
              if (w := _within(r, parse_quantity(q), lim, x, "Container"))]
    if broken:
        return None, f"{broken[0]} (the learned level rounds outside it)"
    return q, ""


def _decision(pod: Mapping, pm: str, containers: list[Container],
              new: Mapping[int, Mapping[str, str]], known: Mapping, notes: list[str],
              key: StateKey | None, shown: Mapping[str, str], *,
              limits_follow: bool = False,
              quotas: tuple[QuotaRoom, ...] | list = (), seal: bool = True) -> Admission:
    """The admission of the requests ``new`` (container index -> resource -> quantity text):
    the changes, the sealed record of the author's requests they replace, and the note. A
    resource whose raise would exceed a ResourceQuota's room keeps every raised container's
    own request (its decreases stand: the pod's total only falls)."""
    new, notes = _within_quotas(pod, containers, new, notes, limits_follow, quotas)
    meta = pod.get("metadata") or {}
    ns = meta.get("namespace") or ""
    specs = (pod.get("spec") or {}).get("containers") or []
    changes, set_text, original = [], [], {}
    from_profile = []
    for i, wanted in new.items():
        c = containers[i]
        old = (specs[i].get("resources") or {}).get("requests") or {}
        for r, q in wanted.items():
            if old.get(r) is not None and parse_quantity(old[r]) == parse_quantity(q):
                continue
            changes.append((i, r, q))
            set_text.append(f"{c.name} {r} {q}")
            if c.name in known and f"{c.name} ({known[c.name][1]} runs)" not in from_profile:
                from_profile.append(f"{c.name} ({known[c.name][1]} runs)")
            original.setdefault(c.name, {})[r] = old.get(r)
    kept = ("; unchanged: " + "; ".join(notes)) if notes else ""
    if not changes:
        return Admission(annotations={**shown, A_ADMISSION: "unchanged: " + (
            "; ".join(notes) if notes else
            f"PhaseModel {pm}'s first-window levels are the requests the pod has")})
    source = (f"workload {shown.get(A_WORKLOAD, '')}'s profile for {', '.join(from_profile)}"
              + ("" if limits_follow else ", else the learned first-window level")
              if from_profile else "learned first-window level")
    moved = " (limits with them: the pod is Guaranteed)" if limits_follow else ""
    return Admission(changes, {
        **shown,
        **_admitted_record(meta, ns, pm, original, key, seal),
        A_ADMISSION: f"set by PhaseModel {pm} ({source}){moved}: " + ", ".join(set_text)
        + kept + ("" if seal else _authors_note(original))}, limits_follow=limits_follow)


def _admitted_record(meta: Mapping, ns: str, pm: str, original: Mapping, key: StateKey | None,
                     seal: bool) -> dict[str, str]:
    """``ai4dl.io/admitted``: the author's requests, sealed for this pod (its identity as
    admission sees it). None when ``seal`` is off: a webhook that does not authenticate its
    callers would seal whatever originals anyone sent it (issue 43), so it writes none; the
    savings then count from the pod's requests at the operator's first write."""
    if not seal:
        return {}
    if key is None:
        return {A_ADMITTED: json.dumps(original, separators=(",", ":"), sort_keys=True)}
    return {A_ADMITTED: key.seal(admitted_scope(ns, pm, admitted_identity(meta)), original)}


def _authors_note(original: Mapping) -> str:
    """The author's requests, in the admission note, for people (nothing is lost; nothing
    is trusted from it)."""
    parts = [f"{c} {r} {q if q is not None else 'none'}" for c, rs in original.items()
             for r, q in rs.items()]
    return "; the author's: " + ", ".join(parts) + " (not sealed: no client authentication)"



def _within_quotas(pod: Mapping, containers: list[Container],
                   new: Mapping[int, Mapping[str, str]], notes: list[str], limits_follow: bool,
                   quotas: tuple[QuotaRoom, ...] | list
                   ) -> tuple[dict[int, dict[str, str]], list[str]]:
    """``new`` without the raises of a resource that would break a quota (the rule named in
    ``notes``, issue 43: the API server refused a pod it would otherwise admit, 403)."""
    out = {i: dict(w) for i, w in new.items()}
    if not quotas:
        return out, notes
    spec = pod.get("spec") or {}
    notes = list(notes)
    for r in sorted({r for w in out.values() for r in w}):
        why = _quota_breaks(spec, r, containers, out, limits_follow, quotas)
        if not why:
            continue
        for i, w in out.items():
            if r in w and parse_quantity(w[r]) > containers[i].requests.get(r, 0.0):
                del w[r]
        notes.append(f"{r} not raised: {why}")
    return out, notes


def _admit_guaranteed(pod: Mapping, target: AdmissionTarget, containers: list[Container],
                      managed: list[int], known: Mapping, max_value: Mapping[str, float] | None,
                      key: StateKey | None, *, namespace: str,
                      limit_ranges: tuple[LimitRangeRules, ...] | list,
                      shown: Mapping[str, str],
                      quotas: tuple[QuotaRoom, ...] | list = (), seal: bool = True) -> Admission:
    """A Guaranteed pod of a known workload: each managed container with a profile gets its
    profile's first request as request and limit (Guaranteed stays Guaranteed; the window loop
    moves a Guaranteed pod's limits with its requests the same way). Only a profile's level:
    the pooled level of an unknown workload is no limit to set on someone's job. Within the
    floor, ceiling and physical maximum and the LimitRange's Container min and max; a resource
    the pod's own ``spec.resources`` bounds, or whose total would break a Pod-type LimitRange,
    stays as the author wrote it."""
    pm = ((pod.get("metadata") or {}).get("annotations") or {}).get(MODEL_ANNOTATION, "")
    pod_res = (pod.get("spec") or {}).get("resources") or {}
    notes: list[str] = []
    new: dict[int, dict[str, str]] = {}
    for j, r in enumerate(target.resources):
        if (pod_res.get("requests") or {}).get(r) or (pod_res.get("limits") or {}).get(r):
            notes.append(f"{r} of every container: the pod's spec.resources bounds it")
            continue
        wanted: dict[int, str] = {}
        for i in managed:
            name = containers[i].name
            level = known[name][0][j] if name in known and j < len(known[name][0]) else None
            if level is None:
                continue
            value = min(max(level, target.floor[j]), target.ceiling[j],
                        (max_value or {}).get(r, math.inf))
            lo, hi = 0.0, math.inf
            for rules in limit_ranges:
                if (b := rules.get("Container", "min", r)) is not None:
                    lo = max(lo, b[0])
                if (b := rules.get("Container", "max", r)) is not None:
                    hi = min(hi, b[0])
            q = format_resource(r, min(max(value, lo), hi))
            broken = [f"LimitRange {x.name} Container {w}" for x in limit_ranges
                      if (w := _within(r, parse_quantity(q), parse_quantity(q), x, "Container"))]
            if lo > hi or broken:
                notes.append(f"{name} {r}: " + (broken[0] if broken else
                                                 "no value is within its LimitRange bounds"))
                continue
            wanted[i] = q
        after = [parse_quantity(wanted[i]) if i in wanted else c.requests.get(r, 0.0)
                 for i, c in enumerate(containers)]
        total = _pod_total(pod.get("spec") or {}, r, after)
        why = next((f"the pod's total would break LimitRange {x.name} Pod {w}"
                    for x in limit_ranges if (w := _within(r, total, total, x, "Pod"))), "")
        if why:
            notes.append(f"{r} of every container: {why}")
            continue
        for i, q in wanted.items():
            new.setdefault(i, {})[r] = q
    return _decision(pod, pm, containers, new, known, notes, key, shown, limits_follow=True,
                     quotas=quotas, seal=seal)
