"""Which containers of a history pull a PhaseModel actually serves.

The trainer's ``--selector`` is PromQL label matchers (often just a namespace); the operator
serves only pods carrying the opt-in label ``ai4dl.io/managed=true`` and matching the
PhaseModel's ``spec.selector``. A model fitted on every container the matchers find would learn
from other PhaseModels' pods (and from pods nobody opted in). So the pull keeps only the pods
the PhaseModel serves, decided from:

1. **kube-state-metrics** when Prometheus has it: ``kube_pod_labels`` keeps every pod's labels
   over time, so pods that ended long ago are judged too. Kubernetes label keys become
   ``label_<key with non-alphanumerics as _>``; kube-state-metrics exports only allow-listed
   labels (``--metric-labels-allowlist=pods=[ai4dl.io/managed,app,...]``): when no
   ``kube_pod_labels`` series of the pulled namespaces carries the opt-in label, it cannot
   tell, and the API server is asked instead.
2. **the API server**: the pods that exist now (one LIST per namespace, filtered by the server).
   Pods already deleted cannot be judged this way: they are dropped, and counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from kubernetes.client.exceptions import ApiException

from ai4dl.crd import OPT_IN_LABEL
from ai4dl.crd_spec import LabelSelector
from ai4dl.errors import Ai4dlError
from ai4dl.kube.raw import api_message, paged_items
from ai4dl.sources.prometheus import PrometheusSource, alternation
from ai4dl.sources.prometheus_types import PodRef

KSM_METRIC = "kube_pod_labels"


def ksm_label(key: str) -> str:
    """kube-state-metrics' name for a Kubernetes label key (``ai4dl.io/managed`` ->
    ``label_ai4dl_io_managed``)."""
    return "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)


def selector_keys(selector: LabelSelector) -> list[str]:
    return [OPT_IN_LABEL, *selector.match_labels, *(e.key for e in selector.match_expressions)]


def serves(selector: LabelSelector, labels: dict[str, str]) -> bool:
    """Whether a pod with ``labels`` is served: opted in and selected."""
    return labels.get(OPT_IN_LABEL) == "true" and selector.matches(labels)


@dataclass
class Membership:
    """The verdict on each (namespace, pod): True served, False not, missing unknown."""
    served: dict[tuple[str, str], bool] = field(default_factory=dict)
    source: str = ""

    def split(self, refs: Iterable[PodRef]) -> tuple[list[PodRef], int, int]:
        """(kept containers, dropped as not served, dropped as unknown)."""
        kept, no, unknown = [], 0, 0
        for r in refs:
            verdict = self.served.get((r.namespace, r.pod))
            if verdict:
                kept.append(r)
            elif verdict is None:
                unknown += 1
            else:
                no += 1
        return kept, no, unknown


def from_kube_state_metrics(source: PrometheusSource, selector: LabelSelector,
                            namespaces: Sequence[str], start: float, end: float
                            ) -> Membership | None:
    """The pods' labels over [start, end] from ``kube_pod_labels``; None when kube-state-metrics
    is absent or does not export the opt-in label. A pod whose labels changed is served if it
    was at any time (it was then sized by the operator)."""
    if not namespaces:
        return Membership(source="kube-state-metrics")
    matcher = f"{KSM_METRIC}{{namespace=~{alternation(namespaces)}}}"
    rows = source.series([matcher], start, end)
    opt_in = ksm_label(OPT_IN_LABEL)
    if not any(opt_in in r for r in rows):
        return None
    keys = selector_keys(selector)
    out = Membership(source="kube-state-metrics")
    for r in rows:
        ns, pod = r.get("namespace"), r.get("pod")
        if not ns or not pod:
            continue
        labels = {k: r[ksm_label(k)] for k in keys if r.get(ksm_label(k), "") != ""}
        out.served[(ns, pod)] = out.served.get((ns, pod), False) or serves(selector, labels)
    return out


def from_api_server(core_api, selector: LabelSelector, namespaces: Sequence[str]) -> Membership:
    """The pods that exist now, listed with the opt-in label and the selector as one
    server-side label selector: every listed pod is served, every other pod that exists is
    not (a second, label-less LIST would cost as much as the pull saves; pods not listed are
    reported as not served or gone)."""
    out = Membership(source="the API server (pods that exist now)")
    for ns in sorted(set(namespaces)):
        try:
            for item in paged_items(core_api.list_namespaced_pod, ns,
                                    label_selector=selector.server_side(OPT_IN_LABEL)):
                meta = item.get("metadata") or {}
                if serves(selector, dict(meta.get("labels") or {})):
                    out.served[(ns, meta.get("name", ""))] = True
        except ApiException as err:
            raise Ai4dlError(
                f"cannot tell which pods of namespace {ns} the PhaseModel serves: listing "
                f"its pods: {api_message(err)} (give the trainer `list pods` there, or "
                f"export pod labels with kube-state-metrics: "
                f"--metric-labels-allowlist=pods=[{OPT_IN_LABEL},...])") from None
    return out
