"""Opted-in pods that no PhaseModel serves, and the clean-up when a PhaseModel goes.

A pod carrying ``ai4dl.io/managed=true`` expects to be sized. Each PhaseModel's window lists
only the pods that name it and match its selector, so a pod that names no PhaseModel, one that
does not exist, or one whose selector it does not match would be silently ignored. One sweep
per operator (never one per pod: one paged LIST of opted-in pods and one LIST of PhaseModels)
finds them and gives each a Warning Event, once per pod.

When a PhaseModel is deleted, its pods lose the annotations the operator wrote on them
(``ai4dl.io/phase``, ``recommendation``, ...): they would describe a model that is gone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from ai4dl.controller import metrics as m
from ai4dl.kube.raw import drain, paged_items
from ai4dl.controller.pods import OWNED_ANNOTATIONS, PodInfo, pod_info
from ai4dl.crd import GROUP, MODEL_ANNOTATION, OPT_IN_LABEL, PLURAL, VERSION
from ai4dl.crd_spec import LabelSelector

log = logging.getLogger("ai4dl.operator")

LIST_PAGE = 500


@dataclass(frozen=True)
class Orphan:
    pod: PodInfo
    reason: str
    message: str


def find_orphans(pods: Sequence[PodInfo],
                 selectors: dict[tuple[str, str], LabelSelector | None]) -> list[Orphan]:
    """Opted-in pods no PhaseModel will serve, and why (pure). ``selectors`` maps every
    existing PhaseModel (namespace, name) to its selector (None: a spec the operator cannot
    read; its own status says so)."""
    out = []
    for p in pods:
        if p.deleting:
            continue
        if not p.phasemodel:
            out.append(Orphan(p, "NoPhaseModel", f"opted in ({OPT_IN_LABEL}=true) but names no "
                              f"PhaseModel: add the annotation {MODEL_ANNOTATION}"))
        elif (p.namespace, p.phasemodel) not in selectors:
            out.append(Orphan(p, "PhaseModelNotFound", f"{MODEL_ANNOTATION} names PhaseModel "
                              f"{p.phasemodel!r}, which does not exist in namespace "
                              f"{p.namespace}: the pod is not sized"))
        else:
            sel = selectors[(p.namespace, p.phasemodel)]
            if sel is not None and not sel.matches(p.labels):
                out.append(Orphan(p, "SelectorMismatch", f"PhaseModel {p.phasemodel!r} does "
                                  f"not select this pod (its spec.selector does not match the "
                                  f"pod's labels): the pod is not sized"))
    return out


#: A sweep asks for the pods' metadata only (the API server's PartialObjectMetadataList, a JSON
#: list if it cannot): it reads nothing else, and whole pages of pods (spec, status) were read
#: and decoded beside a window's own every few minutes (issue 44 item 3).
METADATA_ONLY = {"Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,"
                           "application/json"}


def sweep_view(item: dict) -> PodInfo:
    """What a sweep needs of a listed pod: its metadata (names, labels, the PhaseModel it
    names, whether it is being deleted). A sweep holds every opted-in pod of the cluster at
    once; the whole :func:`pod_info` (annotations with the operator's records, containers)
    was 27 MB at 10,000 pods, next to the window's own."""
    meta = item.get("metadata") or {}
    return PodInfo(namespace=meta.get("namespace", ""), name=meta.get("name", ""),
                   uid=meta.get("uid", ""),
                   phasemodel=(meta.get("annotations") or {}).get(MODEL_ANNOTATION, ""),
                   containers=[], labels=dict(meta.get("labels") or {}),
                   deleting=bool(meta.get("deletionTimestamp")))


class OrphanSweep:
    """The I/O around :func:`find_orphans`: lists, and one Warning Event per pod and reason."""

    def __init__(self, core_api, custom_api, namespaces: Sequence[str], event_writer):
        self.core, self.custom = core_api, custom_api
        self.namespaces = list(namespaces)
        self.event = event_writer            # (involved object dict, type, reason, message)
        self._warned: set[tuple[str, str]] = set()   # (pod uid, reason)

    def _pods(self) -> list[PodInfo]:
        out: list[PodInfo] = []
        for ns in self.namespaces or [None]:
            call, args = ((self.core.list_namespaced_pod, (ns,)) if ns else
                          (self.core.list_pod_for_all_namespaces, ()))
            out += [sweep_view(i) for i in paged_items(call, *args, page=LIST_PAGE,
                                                       label_selector=f"{OPT_IN_LABEL}=true",
                                                       _headers=METADATA_ONLY)]
        return out

    def _selectors(self) -> dict[tuple[str, str], LabelSelector | None]:
        items = []
        for ns in self.namespaces or [None]:
            got = (self.custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL) if ns
                   else self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL))
            items += got.get("items") or []
        out: dict[tuple[str, str], LabelSelector | None] = {}
        for pm in items:
            meta = pm.get("metadata") or {}
            try:
                sel = LabelSelector.model_validate((pm.get("spec") or {}).get("selector") or {})
            except ValidationError:
                sel = None
            out[(meta.get("namespace", ""), meta.get("name", ""))] = sel
        return out

    def run(self) -> list[Orphan]:
        """One sweep; returns the orphans found (warned about or not)."""
        pods = self._pods()
        orphans = find_orphans(pods, self._selectors())
        present = {p.uid for p in pods}
        self._warned = {w for w in self._warned if w[0] in present}
        counts: dict[tuple[str, str], int] = {}
        for o in orphans:
            counts[(o.pod.namespace, o.reason)] = counts.get((o.pod.namespace, o.reason), 0) + 1
            if (o.pod.uid, o.reason) in self._warned:
                continue
            self._warned.add((o.pod.uid, o.reason))
            m.NOTICES.labels(o.pod.namespace, o.reason).inc()
            log.warning("pod %s/%s: %s", o.pod.namespace, o.pod.name, o.message)
            self.event({"kind": "Pod", "namespace": o.pod.namespace, "name": o.pod.name,
                        "uid": o.pod.uid, "apiVersion": "v1"}, "Warning", o.reason, o.message)
        m.ORPHAN_PODS.clear()
        for (ns, reason), n in counts.items():
            m.ORPHAN_PODS.labels(ns, reason).set(n)
        return orphans


def forget_phasemodel(core_api, namespace: str, name: str) -> int:
    """Remove the operator's annotations from the pods that name PhaseModel namespace/name
    (a JSON merge patch with nulls, which the chart's admission policy allows). Returns how
    many pods were cleaned."""
    done = 0
    for item in paged_items(core_api.list_namespaced_pod, namespace, page=LIST_PAGE,
                            label_selector=f"{OPT_IN_LABEL}=true"):
        p = pod_info(item)
        ours = [k for k in OWNED_ANNOTATIONS if k in p.annotations]
        if p.phasemodel != name or not ours:
            continue
        try:
            drain(core_api.patch_namespaced_pod(
                p.name, namespace, {"metadata": {"annotations": {k: None for k in ours}}},
                _preload_content=False))
            done += 1
        except ApiException as err:
            if err.status != 404:
                log.warning("pod %s/%s: annotations of deleted PhaseModel %s not removed: "
                            "HTTP %s", namespace, p.name, name, err.status)
    return done
