"""Which workload a pod belongs to (issue 42): the job that is re-run, read from the pod alone.

A *workload* is what a platform engineer calls "the same job again": its top controller, with
the suffixes Kubernetes generates stripped, so that a retry, the next CronJob run or the next
trial of a sweep submitted under the same name is the same workload; all ranks and replicas of
one job are one workload. Per container, it is what a workload profile
(:mod:`ai4dl.rules.workload_profile`) is kept for.

Read from the pod object only — its labels and ownerReferences, which the controllers that
create pods set at creation, so admission sees them too — never from the controller objects
(the operator reads no Job, JobSet or Deployment: least privilege, and nothing to fetch on the
admission path). In order:

1. the label ``ai4dl.io/workload`` (a valid label value), which the pod's author sets to name
   the workload themselves (two differently named jobs that are one workload, or one name used
   by two workloads);
2. the Kubeflow training jobs (PyTorchJob, TFJob, MPIJob, XGBoostJob, PaddleJob, JAXJob,
   TrainJob): the pod's controller reference, or the ``training.kubeflow.org/job-name`` label;
3. a JobSet (its ``jobset.sigs.k8s.io/jobset-name`` label: the pods' controller is one of its
   child Jobs, one per replicated job);
4. a RayJob (``ray.io/originated-from-cr-name`` with ``ray.io/originated-from-crd: RayJob``,
   else its RayCluster's name without the ``-raycluster-<5>`` suffix KubeRay adds);
5. the controller reference: a Job (a CronJob's Job ``<cronjob>-<minutes>`` is that CronJob; a
   Job created with ``generateName`` is its prefix), a ReplicaSet (its Deployment: the name
   without the ``pod-template-hash``), a StatefulSet, anything else as named;
6. a pod without a controller: its ``generateName`` prefix, else its own name.

Names are only normalised where Kubernetes generated the suffix (a 5-character suffix in the
alphabet of ``rand.SafeEncodeString``, which has no vowels: ``train-x7k2p``, never
``train-model``).

The label is written by the pod's owner, so it is trusted only within what that owner already
has: a profile belongs to one PhaseModel in one namespace (the tenant's), so a label can mix or
split that tenant's own workloads, never reach another namespace's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

WORKLOAD_LABEL = "ai4dl.io/workload"

# Name suffixes Kubernetes generates (k8s.io/apimachinery rand.SafeEncodeString's alphabet).
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_GENERATED = re.compile(rf"^(?P<name>.+)-[{SAFE_ALPHABET}]{{5}}$")
CRON_JOB_NAME = re.compile(r"^(?P<name>.+)-\d{8,}$")      # a CronJob's Job: <cronjob>-<minutes>
_RAY_CLUSTER = re.compile(rf"^(?P<name>.+)-raycluster-[{SAFE_ALPHABET}]{{5}}$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

KUBEFLOW_KINDS = ("PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob",
                  "TrainJob")
KUBEFLOW_JOB_LABEL = "training.kubeflow.org/job-name"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
RAY_CR_NAME_LABEL = "ray.io/originated-from-cr-name"
RAY_CRD_LABEL = "ray.io/originated-from-crd"
RAY_CLUSTER_LABEL = "ray.io/cluster"


@dataclass(frozen=True)
class Workload:
    """A pod's workload in its namespace: ``kind/name`` (``key``), and what named it."""
    kind: str        # Job, CronJob, Deployment, StatefulSet, PyTorchJob, JobSet, RayJob, Pod, ...
    name: str
    source: str      # "label", "controller", "pod"

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.name}"


def strip_generated(name: str) -> str:
    """``name`` without a suffix Kubernetes generated (``-x7k2p``), else ``name``."""
    m = _GENERATED.match(name)
    return m.group("name") if m else name


def job_workload(name: str) -> Workload:
    """A Job's workload: a CronJob's Job is its CronJob, a generated name its prefix."""
    cron = CRON_JOB_NAME.match(name)
    if cron:
        return Workload("CronJob", cron.group("name"), "controller")
    return Workload("Job", strip_generated(name), "controller")


def owner_workload(kind: str, name: str) -> Workload:
    """The workload of a pod whose top owner is known by kind and name elsewhere (the trainer's
    batch fill: kube-state-metrics' ``kube_pod_owner``, or a name-based guess), named as
    :func:`workload_of` names it from the pod."""
    if kind == "Job":
        return job_workload(name)
    if kind in ("Pod", "", "<none>"):
        return Workload("Pod", strip_generated(name), "pod")
    if kind in KUBEFLOW_KINDS or kind in ("JobSet", "RayJob"):
        return Workload(kind, strip_generated(name), "controller")
    return Workload(kind, name, "controller")


def _controller(meta: Mapping) -> tuple[str, str] | None:
    refs = [r for r in meta.get("ownerReferences") or [] if isinstance(r, Mapping)]
    ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    if ref is None or not ref.get("kind") or not ref.get("name"):
        return None
    return str(ref["kind"]), str(ref["name"])


def workload_of(pod: Mapping) -> Workload:
    """The workload of a pod object (a dict as the API returns it, or as admission gets it)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    named = labels.get(WORKLOAD_LABEL)
    if isinstance(named, str) and named and _LABEL_VALUE.match(named) and len(named) <= 63:
        return Workload("Label", named, "label")
    owner = _controller(meta)
    if owner and owner[0] in KUBEFLOW_KINDS:
        return Workload(owner[0], strip_generated(owner[1]), "controller")
    if labels.get(KUBEFLOW_JOB_LABEL):
        return Workload("TrainingJob", strip_generated(labels[KUBEFLOW_JOB_LABEL]), "controller")
    if labels.get(JOBSET_LABEL):
        return Workload("JobSet", strip_generated(labels[JOBSET_LABEL]), "controller")
    if labels.get(RAY_CRD_LABEL) == "RayJob" and labels.get(RAY_CR_NAME_LABEL):
        return Workload("RayJob", strip_generated(labels[RAY_CR_NAME_LABEL]), "controller")
    if labels.get(RAY_CLUSTER_LABEL):
        m = _RAY_CLUSTER.match(labels[RAY_CLUSTER_LABEL])
        if m:
            return Workload("RayJob", m.group("name"), "controller")
        return Workload("RayCluster", labels[RAY_CLUSTER_LABEL], "controller")
    if owner is not None:
        kind, name = owner
        if kind == "Job":
            return job_workload(name)
        if kind == "ReplicaSet":
            suffix = labels.get("pod-template-hash")
            if suffix and name.endswith(f"-{suffix}"):
                return Workload("Deployment", name[: -len(suffix) - 1], "controller")
            return Workload("ReplicaSet", name, "controller")
        return Workload(kind, name, "controller")
    prefix = str(meta.get("generateName") or "").rstrip("-")
    if prefix:
        return Workload("Pod", prefix, "pod")
    return Workload("Pod", strip_generated(str(meta.get("name") or "")), "pod")
