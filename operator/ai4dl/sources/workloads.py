"""Who owns the pods of a history pull, and what they requested: kube-state-metrics series
read from Prometheus (the adapter around :mod:`ai4dl.evaluation.workload_report`).

- ``kube_pod_owner`` (``owner_kind``, ``owner_name``), followed up one level through
  ``kube_replicaset_owner`` (a ReplicaSet's Deployment) and ``kube_job_owner`` (a Job's
  CronJob); pods without it get the owner their generated name implies
  (:func:`ai4dl.evaluation.workload_report.owner_from_name`).
- ``kube_pod_container_resource_requests`` (``resource="cpu"``, cores; ``"memory"``, bytes),
  averaged over the pulled period (``avg_over_time``): a request that was resized counts with
  the time it held.

Both are optional: without kube-state-metrics the report guesses owners from names and has no
requests (savings against them are then unknown, not made up).
"""

from __future__ import annotations

from typing import Iterable, Sequence

from ai4dl.sources.prometheus import PrometheusSource, alternation
from ai4dl.sources.prometheus_types import PodRef
from ai4dl.evaluation.workload_report import Owner, owner_from_name, resolve_owners

POD_OWNER = "kube_pod_owner"
REPLICASET_OWNER = "kube_replicaset_owner"
JOB_OWNER = "kube_job_owner"
REQUESTS = "kube_pod_container_resource_requests"
REQUEST_RESOURCES = {"cpu": "cpu", "memory": "memory"}


def containers_of(executions) -> list[PodRef]:
    """The containers of pulled executions (``meta`` namespace, pod, container), in order."""
    return list(dict.fromkeys(PodRef(e.meta["namespace"], e.meta["pod"], e.meta["container"])
                              for e in executions))


def _owners_of(source: PrometheusSource, metric: str, name_label: str, namespaces: str,
               start: float, end: float) -> dict[tuple[str, str], tuple[str, str]]:
    rows = source.series([f"{metric}{{namespace=~{namespaces}}}"], start, end)
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for r in rows:
        ns, name = r.get("namespace"), r.get(name_label)
        kind, owner = r.get("owner_kind", ""), r.get("owner_name", "")
        if not ns or not name:
            continue
        # a controller owner wins over any other (kube_pod_owner lists every ownerReference)
        if (ns, name) not in out or r.get("owner_is_controller") == "true":
            out[(ns, name)] = (kind if kind != "<none>" else "", owner)
    return out


def owners(source: PrometheusSource, refs: Iterable[PodRef], start: float, end: float
           ) -> tuple[dict[tuple[str, str], Owner], int]:
    """Owner of every (namespace, pod) of ``refs``, and how many came from kube-state-metrics
    (the rest: from the pod's name)."""
    refs = list(refs)
    namespaces = sorted({r.namespace for r in refs})
    if not namespaces:
        return {}, 0
    alt = alternation(namespaces)
    found = _owners_of(source, POD_OWNER, "pod", alt, start, end)
    rs = _owners_of(source, REPLICASET_OWNER, "replicaset", alt, start, end) \
        if any(k == "ReplicaSet" for k, _ in found.values()) else {}
    jobs = _owners_of(source, JOB_OWNER, "job_name", alt, start, end) \
        if any(k == "Job" for k, _ in found.values()) else {}
    resolved = resolve_owners(found, rs, jobs)
    out: dict[tuple[str, str], Owner] = {}
    from_ksm = 0
    for r in refs:
        key = (r.namespace, r.pod)
        if key in out:
            continue
        if key in resolved:
            out[key] = resolved[key]
            from_ksm += 1
        else:
            out[key] = owner_from_name(r.namespace, r.pod)
    return out, from_ksm


def requests(source: PrometheusSource, refs: Sequence[PodRef], start: float, end: float
             ) -> dict[PodRef, dict[str, float]]:
    """Per container of ``refs``: its requests (cpu in cores, memory in bytes) averaged over
    [start, end]; containers without them are left out."""
    refs = list(refs)
    namespaces = sorted({r.namespace for r in refs})
    if not namespaces:
        return {}
    wanted = set(refs)
    span = max(1, int(end - start))
    out: dict[PodRef, dict[str, float]] = {}
    for feature, resource in REQUEST_RESOURCES.items():
        query = (f"max by (namespace, pod, container) (avg_over_time({REQUESTS}{{namespace=~"
                 f"{alternation(namespaces)},resource=\"{resource}\"}}[{span}s]))")
        for labels, value in source.instant(query, end):
            ref = PodRef(labels.get("namespace", ""), labels.get("pod", ""),
                         labels.get("container", ""))
            if ref in wanted and value == value and value >= 0:
                out.setdefault(ref, {})[feature] = value
    return out
