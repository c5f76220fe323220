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
- the level is the served policy's cold start (:attr:`ai4dl.policy.serving.Served.cold_start`:
  the target quantile of the training executions' first-window peaks), per managed resource,
  clamped to the PhaseModel's floor and ceiling and the operator's physical maximum, and never
  above the container's limit;
- the QoS class never changes: a BestEffort pod (no requests or limits) and a Guaranteed pod
  (requests = limits) are left as they are; a Burstable pod whose new requests would all equal
  its limits keeps the request of every container-resource that would have reached its limit;
- what was done, or why nothing was, is recorded on the pod: ``ai4dl.io/admitted`` keeps the
  author's original requests (nothing the user gave is lost), ``ai4dl.io/admission`` says in one
  line what was set or why nothing was.

A PhaseModel without a model (or whose model has no learned first-window level) admits pods
unchanged, with the reason in ``ai4dl.io/admission``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Mapping

from ai4dl.controller.pods import Container, pod_info, qos_class
from ai4dl.crd import (MODEL_ANNOTATION, OPT_IN_LABEL, PROMQL_UNCHECKED, LabelSelector,
                       PhaseModelSpec)
from ai4dl.quantity import format_resource, parse_quantity

A_ADMITTED = "ai4dl.io/admitted"
A_ADMISSION = "ai4dl.io/admission"
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

    @property
    def admits(self) -> bool:
        return self.mode in ADMITTING_MODES


@dataclass
class Admission:
    """The decision for one pod: requests to set, (container index, resource, quantity), and
    the annotations to add. Empty: leave the pod exactly as it came."""
    changes: list[tuple[int, str, str]] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)

    def apply(self, pod: dict) -> None:
        """Mutate a pod body in place (the kopf handler's patch function)."""
        containers = pod.setdefault("spec", {}).setdefault("containers", [])
        for i, resource, quantity in self.changes:
            res = containers[i].get("resources") or {}
            res["requests"] = {**(res.get("requests") or {}), resource: quantity}
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
    from ai4dl.model import PhaseModel
    from ai4dl.policy.serving import safety_config, served_policy

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
                           floor=tuple(safety.floor), ceiling=tuple(safety.ceiling))


def admit(pod: Mapping, targets: Mapping[tuple[str, str], AdmissionTarget],
          max_value: Mapping[str, float] | None = None) -> Admission:
    """The decision for a pod being created (see the module doc). ``targets`` maps (namespace,
    PhaseModel name) to the PhaseModels this operator serves (only ``.get`` is used)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    pm = annotations.get(MODEL_ANNOTATION)
    if labels.get(OPT_IN_LABEL) != "true" or not pm:
        return Admission()
    ns = meta.get("namespace", "")
    target = targets.get((ns, pm))

    def unchanged(why: str) -> Admission:
        return Admission(annotations={A_ADMISSION: f"unchanged: {why}"})
    if target is None:
        # not one of ours: another operator (a shard) may serve it, and its webhook decides;
        # a PhaseModel that does not exist at all is the orphan sweep's Warning Event
        return Admission()
    if not target.admits:
        return Admission()                      # Off / Recommend: not admission's business
    if not target.selector.matches(labels):
        return unchanged(f"the pod does not match PhaseModel {pm}'s spec.selector")
    if target.reason:
        return unchanged(f"PhaseModel {pm}: {target.reason}")
    specs = (pod.get("spec") or {}).get("containers") or []
    containers = pod_info(dict(pod)).containers
    qos = qos_class(containers)
    if qos != "Burstable":
        return unchanged(f"the pod's QoS class is {qos}: setting requests would change it")
    managed = [i for i, c in enumerate(containers)
               if not target.containers or c.name in target.containers]
    if not managed:
        return unchanged(f"none of the pod's containers is in PhaseModel {pm}'s "
                         f"spec.policy.containers")
    # per managed container and resource: the request to set, as the quantity text written
    new: dict[int, dict[str, str]] = {i: {} for i in managed}
    for j, r in enumerate(target.resources):
        level = target.levels[j] if j < len(target.levels) else None
        if level is None:
            continue
        value = min(max(level, target.floor[j]), target.ceiling[j],
                    (max_value or {}).get(r, math.inf))
        for i in managed:
            q = format_resource(r, value)
            lim_text = ((specs[i].get("resources") or {}).get("limits") or {}).get(r)
            lim = containers[i].limits.get(r)
            if lim is not None and parse_quantity(q) > lim:
                q = str(lim_text)            # never above the limit (rounding included)
            new[i][r] = q

    def requests_after(keep: set) -> list[Container]:
        return [Container(c.name, {**c.requests, **{r: parse_quantity(q)
                                                  for r, q in new.get(i, {}).items()
                                                  if (i, r) not in keep}}, c.limits)
                for i, c in enumerate(containers)]
    keep: set = set()
    if qos_class(requests_after(keep)) != qos:
        # all requests would equal the limits (Guaranteed): the container-resources that would
        # reach their limit keep their own request
        keep = {(i, r) for i in managed for r, q in new[i].items()
                if containers[i].limits.get(r) == parse_quantity(q)}
        if qos_class(requests_after(keep)) != qos:
            return unchanged("setting the learned requests would change the pod's QoS class")
    changes, set_text, original = [], [], {}
    for i in managed:
        c = containers[i]
        old = (specs[i].get("resources") or {}).get("requests") or {}
        for r, q in new[i].items():
            if (i, r) in keep or (old.get(r) is not None
                                  and parse_quantity(old[r]) == parse_quantity(q)):
                continue
            changes.append((i, r, q))
            set_text.append(f"{c.name} {r} {q}")
            original.setdefault(c.name, {})[r] = old.get(r)
    if not changes:
        return unchanged(f"PhaseModel {pm}'s first-window levels are the requests the pod has")
    return Admission(changes, {
        A_ADMITTED: json.dumps(original, separators=(",", ":"), sort_keys=True),
        A_ADMISSION: f"set by PhaseModel {pm} (learned first-window level): "
                     + ", ".join(set_text)})
