"""What the operator needs to know about an opted-in pod, read from its API object (pure)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from ai4dl.controller.podstate import (StateKey, admitted_identity, admitted_scope,
                                       parse_admitted, parse_state, state_scope)
from ai4dl.quantity import parse_quantity
from ai4dl.crd import MODEL_ANNOTATION
from ai4dl.kube.workload import workload_of

RESOURCES = ("cpu", "memory")

# Annotations the operator owns on pods (its only state besides Prometheus).
A_PHASE = "ai4dl.io/phase"
A_PHASE_SINCE = "ai4dl.io/phase-since"
A_RECOMMENDATION = "ai4dl.io/recommendation"
A_LAST_APPLIED = "ai4dl.io/last-applied"
A_STATE = "ai4dl.io/state"
OWNED_ANNOTATIONS = (A_PHASE, A_PHASE_SINCE, A_RECOMMENDATION, A_LAST_APPLIED, A_STATE)
# Written by admission at creation: the author's requests (sealed), what was done in one line.
A_ADMITTED = "ai4dl.io/admitted"
A_ADMISSION = "ai4dl.io/admission"
# Written by admission: the pod's workload (ai4dl.kube.workload), for people and kubectl.
A_WORKLOAD = "ai4dl.io/workload"


@dataclass
class Container:
    name: str
    requests: dict[str, float]
    limits: dict[str, float]
    # What the kubelet reports the container has (status.containerStatuses[].resources): the
    # spec is what was asked for, which a refused resize leaves behind. Not part of equality:
    # the kubelet moves it on its own (a resize read twice is "changed" only by its spec).
    actual_requests: dict[str, float] = field(default_factory=dict, compare=False)
    actual_limits: dict[str, float] = field(default_factory=dict, compare=False)
    # Resources whose resizePolicy is RestartContainer: an in-place resize of them restarts
    # the container (the operator leaves them alone, see ai4dl.controller.plan).
    restart_on_resize: frozenset[str] = field(default_factory=frozenset, compare=False)


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
    resize_error: str | None = None         # message of PodResizeInProgress reason Error
    resize_message: str = ""                # the kubelet's message of PodResizePending
    resource_version: str = ""              # of the object read: the precondition of a resize
    started: dict[str, float] = field(default_factory=dict)   # container -> start (unix s)
    phase: str = ""                         # status.phase (Pending, Running, Succeeded, ...)
    workload: str = ""                      # kind/name (ai4dl.kube.workload)
    # per container: restarts so far, whether the last one was an OOM kill, when its last
    # run ended (a terminated container's finishedAt)
    restarts: dict[str, int] = field(default_factory=dict)
    oom_killed: dict[str, bool] = field(default_factory=dict)
    finished: dict[str, float] = field(default_factory=dict)
    # The operator's state record, once verified (verify_pod): {} until then, and when the
    # record is absent or not the operator's; why not in state_problem (None: verified or
    # absent). Admission's record of the author's requests likewise.
    _state: dict | None = field(default=None, repr=False, compare=False)
    state_problem: str | None = None
    state_detail: str = ""
    admitted: dict[str, dict[str, str | None]] | None = None
    admitted_problem: str | None = None
    #: the pod as admission saw it (ai4dl.controller.podstate.admitted_identity)
    identity: str = ""
    #: read with a pending record (ai4dl.controller.records.PendingRecords.overlay) whose
    #: authors' requests its own written record lacks: its first resize still needs a record
    first_record_pending: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    @property
    def ended(self) -> bool:
        """Its execution is over: it ran to an end, or is being deleted."""
        return self.phase in ("Succeeded", "Failed") or self.deleting

    @property
    def qos(self) -> str:
        return qos_class(self.containers)

    def state(self) -> dict:
        """The operator's verified state record (window handled last, last increases, the
        author's original requests, running statistics), or {}: a fresh copy each time
        (callers build the next state from it). Never the annotation as it stands: only what
        :func:`verify_pod` found sealed by the operator's key for this very pod."""
        return dict(self._state or {})

    @property
    def state_untrusted(self) -> bool:
        """The pod carries a state record that is not (or no longer) the operator's."""
        return self.state_problem is not None


def verify_pod(pod: PodInfo, key: StateKey) -> PodInfo:
    """Open the pod's sealed records with the operator's key (in place; returns the pod)."""
    opened = key.open(state_scope(pod.namespace, pod.name, pod.uid),
                      pod.annotations.get(A_STATE))
    data, problem, detail = {}, opened.problem, opened.detail
    if problem is None:
        data, detail = parse_state(opened.data)
        problem = "malformed" if detail else None
    pod._state = data
    pod.state_problem = None if problem == "absent" else problem
    pod.state_detail = detail
    opened = key.open(admitted_scope(pod.namespace, pod.phasemodel, pod.identity),
                      pod.annotations.get(A_ADMITTED))
    pod.admitted, problem = None, opened.problem
    if problem is None:
        pod.admitted, detail = parse_admitted(opened.data)
        problem = "malformed" if detail else None
    pod.admitted_problem = None if problem == "absent" else problem
    return pod


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


#: No resource restarts its container when resized (most containers): one object for all
_NONE_RESTART: frozenset[str] = frozenset()


def _restart_on_resize(container: dict) -> frozenset[str]:
    """The resources whose resizePolicy is RestartContainer (an empty set is shared, not made
    for each of a window's containers)."""
    found = frozenset(p.get("resourceName") for p in container.get("resizePolicy") or []
                      if p.get("restartPolicy") == "RestartContainer")
    return found or _NONE_RESTART


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
    actual = {cs.get("name"): cs.get("resources") or {}
              for cs in status.get("containerStatuses") or []}
    containers = [Container(c["name"], _resources((c.get("resources") or {}).get("requests")),
                            _resources((c.get("resources") or {}).get("limits")),
                            _resources(actual.get(c["name"], {}).get("requests")),
                            _resources(actual.get(c["name"], {}).get("limits")),
                            _restart_on_resize(c))
                  for c in spec.get("containers", [])]
    pending = in_progress = error = None
    message = ""
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodResizePending" and cond.get("status") == "True":
            pending = cond.get("reason") or "Pending"
            message = cond.get("message") or ""
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
    restarts, oom_killed, finished = {}, {}, {}
    for cs in status.get("containerStatuses") or []:
        name = cs.get("name", "")
        count = cs.get("restartCount")
        restarts[name] = count if isinstance(count, int) and count >= 0 else 0
        last = (cs.get("lastState") or {}).get("terminated") or {}
        now = (cs.get("state") or {}).get("terminated") or {}
        oom_killed[name] = (now or last).get("reason") == "OOMKilled"
        end = _timestamp(now.get("finishedAt")) if now.get("finishedAt") else None
        if end is not None:
            finished[name] = end
    return PodInfo(
        namespace=meta.get("namespace", ""), name=meta.get("name", ""),
        uid=meta.get("uid", ""), phasemodel=annotations.get(MODEL_ANNOTATION, ""),
        containers=containers, annotations=annotations, labels=dict(meta.get("labels") or {}),
        running=status.get("phase") == "Running",
        deleting=bool(meta.get("deletionTimestamp")),
        resize_pending=pending, resize_in_progress=bool(in_progress), resize_error=error,
        resize_message=message,
        resource_version=str(meta.get("resourceVersion") or ""), started=started,
        phase=str(status.get("phase") or ""), workload=workload_of(obj).key,
        restarts=restarts, oom_killed=oom_killed, finished=finished,
        identity=admitted_identity(meta))
