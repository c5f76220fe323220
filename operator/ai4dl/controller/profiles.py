"""Workload profiles as the operator keeps them (issue 42): one ``WorkloadProfile`` object per
(PhaseModel, workload) (:mod:`ai4dl.crd_profile`), its record sealed with the operator's key.

Pure but for :class:`ProfileStore` (one GET and at most one write per workload whose executions
ended in a window). What a record holds is
:class:`ai4dl.rules.workload_profile.WorkloadProfile` per container: the same object, and the
same :meth:`~ai4dl.rules.workload_profile.WorkloadProfile.first_request`, that the evaluator's
served start uses (:mod:`ai4dl.evaluation.starts`) — a figure from the evaluator is a promise
about the operator.

Why sealed: the object lives in the tenant's namespace. The operator's role is the only one on
it, but a cluster admin may grant more, and a profile read back unchecked would let whoever can
write it set another workload's first request (a profile copied from a small job onto a large
one starves it). The seal's scope is the namespace, the PhaseModel and the workload: a record
edited, or copied onto another workload's object, reads as absent, and that workload starts
from the pooled level (as an unknown one does).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from kubernetes.client.exceptions import ApiException

from ai4dl.controller.podstate import StateKey
from ai4dl.crd import GROUP, KIND, VERSION
from ai4dl.crd_profile import PROFILE_KIND, PROFILE_PLURAL
from ai4dl.kube.raw import paged_items
from ai4dl.rules.workload_profile import (CompactProfile, ProfileError, RunSummary,
                                          WorkloadProfile, start_within_request)
from ai4dl.quantity import format_resource

log = logging.getLogger("ai4dl.operator")

PHASEMODEL_LABEL = "ai4dl.io/phasemodel"
#: Most containers one workload's record keeps (the rest are not profiled).
MAX_CONTAINERS = 16


def profile_scope(namespace: str, phasemodel: str, workload: str) -> str:
    return f"profile\0{namespace}\0{phasemodel}\0{workload}"


def profile_name(phasemodel: str, workload: str) -> str:
    """The object's name: the PhaseModel's (shortened) and a hash of the workload key (a
    workload's name may be longer than a name can be, or hold characters one cannot)."""
    digest = hashlib.sha256(f"{phasemodel}\0{workload}".encode()).hexdigest()[:12]
    stem = re.sub(r"[^a-z0-9-]", "-", phasemodel.lower())[:40].strip("-") or "pm"
    return f"{stem}-{digest}"


@dataclass(frozen=True)
class StoredProfiles:
    """One workload's profiles, per container, as read (verified) from its object."""
    workload: str
    containers: Mapping[str, WorkloadProfile]
    resource_version: str = ""
    problem: str | None = None        # None: verified (or no object); else why it was not read


def open_record(body: Mapping, key: StateKey) -> StoredProfiles:
    """A WorkloadProfile object's profiles, if its record verifies for its own namespace,
    PhaseModel and workload; else none, with the reason."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    ns, pm, workload = meta.get("namespace", ""), spec.get("phaseModel", ""), \
        spec.get("workload", "")
    rv = str(meta.get("resourceVersion") or "")
    if not isinstance(pm, str) or not isinstance(workload, str) \
            or profile_name(pm, workload) != meta.get("name"):
        return StoredProfiles(str(workload), {}, rv, "its name is not its workload's")
    opened = key.open(profile_scope(ns, pm, workload), (body.get("status") or {}).get("record"))
    if opened.problem is not None:
        return StoredProfiles(workload, {}, rv, opened.problem)
    data = opened.data
    if not isinstance(data, Mapping) or not isinstance(data.get("containers"), Mapping):
        return StoredProfiles(workload, {}, rv, "malformed")
    try:
        profiles = {str(c): WorkloadProfile.from_dict(doc)
                    for c, doc in list(data["containers"].items())[:MAX_CONTAINERS]}
    except ProfileError as err:
        return StoredProfiles(workload, {}, rv, f"malformed ({err})")
    return StoredProfiles(workload, profiles, rv)


def fold_runs(stored: Mapping[str, WorkloadProfile], runs: Sequence[tuple[str, RunSummary]],
              resources: Sequence[str]) -> tuple[dict[str, WorkloadProfile], bool]:
    """The profiles with ``runs`` (container, summary) observed, and whether anything changed
    (a run already remembered, by its id, changes nothing: an execution seen ending twice)."""
    out = dict(stored)
    changed = False
    for container, run in runs:
        old = out.get(container)
        if old is None or tuple(old.resources) != tuple(resources):
            if len(out) >= MAX_CONTAINERS and container not in out:
                continue
            old = WorkloadProfile(tuple(resources))
        new = old.observe(run)
        if new is not old:
            out[container], changed = new, True
    return out, changed


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def profile_object(namespace: str, phasemodel: str, phasemodel_uid: str, workload: str,
                   profiles: Mapping[str, WorkloadProfile], key: StateKey, now: float,
                   max_increase: float | None, resource_version: str = "") -> dict:
    """The WorkloadProfile object to write: the sealed record and, for people, the counts and
    each container's first request and peak as of ``now``."""
    record = key.seal(profile_scope(namespace, phasemodel, workload),
                      {"containers": {c: p.to_dict() for c, p in sorted(profiles.items())}})
    containers = []
    for c, p in sorted(profiles.items()):
        first = p.first_request(now, max_increase)
        peak = p.peak(now)
        containers.append({
            "name": c, "runs": len(p.runs),
            "firstRequest": {} if first is None else
            {r: format_resource(r, float(v)) for r, v in zip(p.resources, first)},
            "peak": {} if peak is None else
            {r: format_resource(r, float(v)) for r, v in zip(p.resources, peak[0])}})
    ends = [r.end for p in profiles.values() for r in p.runs]
    meta = {"name": profile_name(phasemodel, workload), "namespace": namespace,
            "labels": {PHASEMODEL_LABEL: phasemodel[:63]},
            "ownerReferences": [{"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
                                 "name": phasemodel, "uid": phasemodel_uid}]
            if phasemodel_uid else []}
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": PROFILE_KIND, "metadata": meta,
            "spec": {"phaseModel": phasemodel, "workload": workload},
            "status": {"executions": max((p.executions for p in profiles.values()), default=0),
                       "oomKills": max((p.oom_kills for p in profiles.values()), default=0),
                       "lastExecutionEnd": _iso(max(ends)) if ends else None,
                       "containers": containers, "record": record}}


class ProfileStore:
    """Reads and writes one PhaseModel's WorkloadProfile objects (the window loop's)."""

    def __init__(self, custom_api, namespace: str, phasemodel: str, key: StateKey):
        self.custom, self.namespace, self.phasemodel, self.key = (custom_api, namespace,
                                                                  phasemodel, key)
        self.writes = 0

    def read(self, workload: str) -> StoredProfiles:
        try:
            body = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PROFILE_PLURAL,
                profile_name(self.phasemodel, workload))
        except ApiException as err:
            if err.status == 404:
                return StoredProfiles(workload, {})
            raise
        stored = open_record(body, self.key)
        if stored.problem is not None and stored.problem != "absent":
            log.warning("WorkloadProfile %s/%s (%s): its record is not the operator's (%s): "
                        "rewritten from this execution on", self.namespace,
                        profile_name(self.phasemodel, workload), workload, stored.problem)
        return stored

    def record_runs(self, workload: str, runs: Sequence[tuple[str, RunSummary]],
                    resources: Sequence[str], phasemodel_uid: str, now: float,
                    max_increase: float | None) -> dict[str, WorkloadProfile] | None:
        """Fold the ended executions into the workload's profile: one write when it changed
        (a create the first time, else an update with the read's resourceVersion as its
        precondition: a conflict is left to the next window, which folds again). The profiles
        written, or None when nothing changed."""
        stored = self.read(workload)
        profiles, changed = fold_runs(stored.containers, runs, resources)
        if not changed:
            return None
        body = profile_object(self.namespace, self.phasemodel, phasemodel_uid, workload,
                              profiles, self.key, now, max_increase, stored.resource_version)
        if stored.resource_version:
            self.custom.replace_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PROFILE_PLURAL, body["metadata"]["name"], body)
        else:
            self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace,
                                                        PROFILE_PLURAL, body)
        self.writes += 1
        return profiles

    # ------------------------------------------------------------------ the bound
    def refresh(self, max_workloads: int, now: float | None = None
                ) -> tuple[dict[str, StoredProfiles], int]:
        """The workloads that have a profile, after deleting the least recently ended beyond
        ``max_workloads`` (the bound per PhaseModel): one paged LIST of this PhaseModel's
        objects (by label), and a DELETE per object dropped. Returns (the kept workloads'
        profiles, verified: a record that is not the operator's reads as none; the number of
        objects deleted)."""
        found = []
        for item in paged_items(self.custom.list_namespaced_custom_object, GROUP, VERSION,
                                self.namespace, PROFILE_PLURAL,
                                label_selector=f"{PHASEMODEL_LABEL}={self.phasemodel[:63]}"):
            spec = item.get("spec") or {}
            if spec.get("phaseModel") != self.phasemodel:
                continue
            end = str((item.get("status") or {}).get("lastExecutionEnd") or "")
            found.append((end, str(spec.get("workload", "")),
                          (item.get("metadata") or {}).get("name", ""), open_record(item, self.key)))
        found.sort(key=lambda f: f[:3], reverse=True)   # ISO times sort as times: newest first
        deleted = 0
        for _, workload, name, _ in found[max_workloads:]:
            try:
                self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace,
                                                            PROFILE_PLURAL, name)
                deleted += 1
            except ApiException as err:
                if err.status != 404:
                    log.warning("WorkloadProfile %s/%s not deleted: HTTP %s", self.namespace,
                                name, err.status)
        return {w: stored for _, w, _, stored in found[:max_workloads]}, deleted


def first_requests(pods: Sequence, firsts: Mapping[tuple[str, str], CompactProfile],
                   now: float, recent_s: float, resources: Sequence[str],
                   max_increase: float | None) -> dict[tuple[str, str], np.ndarray]:
    """Per (pod uid, container) started within ``recent_s`` before ``now`` (only such a
    container can lack a full window) whose workload has a profile of ``resources``: the first
    request that profile gives, with the safety layer's growth limit — the one admission set
    (:func:`ai4dl.controller.admission.profile_levels`). The window loop keeps it until the run
    has a full window, as the evaluator serves a run's first window at its start: a grid
    boundary part-way through that window would otherwise replace the workload's own start by
    the pooled cold-start level, which was learned from other workloads. Its cpu no higher than
    the container's request, as admission capped it (:data:`~ai4dl.rules.workload_profile.
    CAPPED_AT_REQUEST`)."""
    out: dict[tuple[str, str], np.ndarray] = {}
    cache: dict[tuple[str, str], np.ndarray | None] = {}
    for p in pods:
        for c in p.containers:
            key, began = (p.workload, c.name), p.started.get(c.name)
            if began is None or began < now - recent_s or key not in firsts:
                continue
            if key not in cache:
                profile = firsts[key]
                cache[key] = (profile.first_request(now, max_increase)
                              if tuple(profile.resources) == tuple(resources) else None)
            if cache[key] is not None:
                out[(p.uid, c.name)] = start_within_request(cache[key], resources, c.requests)
    return out
