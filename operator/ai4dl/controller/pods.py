"""What the operator needs to know about an opted-in pod, read from its API object (pure)."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

from ai4dl.quantity import parse_quantity
from ai4dl.crd import MODEL_ANNOTATION

RESOURCES = ("cpu", "memory")

# Annotations the operator owns on pods (its only state besides Prometheus).
A_PHASE = "ai4dl.io/phase"
A_PHASE_SINCE = "ai4dl.io/phase-since"
A_RECOMMENDATION = "ai4dl.io/recommendation"
A_LAST_APPLIED = "ai4dl.io/last-applied"
A_STATE = "ai4dl.io/state"
OWNED_ANNOTATIONS = (A_PHASE, A_PHASE_SINCE, A_RECOMMENDATION, A_LAST_APPLIED, A_STATE)


@dataclass
class Container:
    name: str
    requests: dict[str, float]
    limits: dict[str, float]


@dataclass
class PodInfo:
    namespace: str
    name: str
    uid: str
    phasemodel: str
    containers: list[Container]
    annotations: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    running: bool = False
    deleting: bool = False
    resize_pending: str | None = None       # reason of PodResizePending (Deferred/Infeasible)
    resize_in_progress: bool = False
    resize_error: str | None = None
    resource_version: str = ""              # of the object read: the precondition of a resize
    started: dict[str, float] = field(default_factory=dict)   # container -> start (unix s)
    _state: dict | None = field(default=None, repr=False, compare=False)   # parsed once

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    @property
    def qos(self) -> str:
        return qos_class(self.containers)

    def state(self) -> dict:
        """The operator's state annotation (window handled last, last increases, running
        statistics), or {}: parsed once per pod read (a window asks several times), a fresh
        copy each time (callers build the next state from it)."""
        if self._state is None:
            try:
                data = json.loads(self.annotations.get(A_STATE, "{}"))
            except json.JSONDecodeError:
                data = {}
            self._state = data if isinstance(data, dict) else {}
        return dict(self._state)


def _timestamp(text: str | None) -> float | None:
    try:
        return dt.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _resources(section: dict | None) -> dict[str, float]:
    out = {}
    for r in RESOURCES:
        v = (section or {}).get(r)
        if v is not None:
            out[r] = parse_quantity(v)
    return out


def qos_class(containers: list[Container]) -> str:
    """Kubernetes' QoS class from the containers' cpu/memory requests and limits."""
    if all(not c.requests and not c.limits for c in containers):
        return "BestEffort"
    for c in containers:
        for r in RESOURCES:
            lim = c.limits.get(r)
            req = c.requests.get(r, lim)   # a limit alone defaults the request to it
            if lim is None or req != lim:
                return "Burstable"
    return "Guaranteed"


def pod_info(obj: dict[str, Any]) -> PodInfo:
    """From a pod object (dict as the API returns it)."""
    meta = obj.get("metadata", {}) or {}
    spec = obj.get("spec", {}) or {}
    status = obj.get("status", {}) or {}
    annotations = dict(meta.get("annotations") or {})
    containers = [Container(c["name"], _resources((c.get("resources") or {}).get("requests")),
                            _resources((c.get("resources") or {}).get("limits")))
                  for c in spec.get("containers", [])]
    pending = in_progress = error = None
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodResizePending" and cond.get("status") == "True":
            pending = cond.get("reason") or "Pending"
        elif cond.get("type") == "PodResizeInProgress" and cond.get("status") == "True":
            in_progress = True
            if cond.get("reason") == "Error":
                error = cond.get("message") or "resize error"
    # When each container's current run began (its metrics series begins there): the
    # container's own start where the kubelet reports it, else the pod's.
    pod_start = _timestamp(status.get("startTime")) if status.get("startTime") else None
    started = {}
    for cs in status.get("containerStatuses") or []:
        t = _timestamp(((cs.get("state") or {}).get("running") or {}).get("startedAt")) \
            if ((cs.get("state") or {}).get("running") or {}).get("startedAt") else None
        if t is not None or pod_start is not None:
            started[cs.get("name", "")] = t if t is not None else pod_start
    for c in containers:
        if c.name not in started and pod_start is not None:
            started[c.name] = pod_start
    return PodInfo(
        namespace=meta.get("namespace", ""), name=meta.get("name", ""),
        uid=meta.get("uid", ""), phasemodel=annotations.get(MODEL_ANNOTATION, ""),
        containers=containers, annotations=annotations, labels=dict(meta.get("labels") or {}),
        running=status.get("phase") == "Running",
        deleting=bool(meta.get("deletionTimestamp")),
        resize_pending=pending, resize_in_progress=bool(in_progress), resize_error=error,
        resource_version=str(meta.get("resourceVersion") or ""), started=started)
