"""What each policy would have allocated per workload, against the requests the pods had: the
report of ``ai4dl evaluate --prometheus`` (pure: a replayed :class:`EvaluationResult` in,
rows, markdown and JSON out).

A *workload* is what owns the pods (:class:`Owner`: a Job, PyTorchJob, Deployment, StatefulSet
... from kube-state-metrics' ``kube_pod_owner``, else guessed from the pod's name,
:func:`owner_from_name`). Per workload and in total, for every replayed policy and resource:

- the allocation (resource-hours over the scored samples: the cold-start window of each
  execution is left out, as everywhere in the evaluator) at the policy's *own* allocation,
  the fitted policies (``auto``, the head-room tables) as fitted for the highest target (97 %,
  the PhaseModel default);
- fulfilment (share of samples with usage ≤ allocation) and windows with any shortfall there;
- the current requests over the same samples (``kube_pod_container_resource_requests``) and
  the saving ``1 − allocation ÷ requested``, both over the executions whose request is known
  (none known: no saving is claimed).

These are raw figures (what would have been allocated); the matched-fulfilment tables of the
evaluator report compare the policies at equal fulfilment.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from ai4dl.evaluation.evaluate import EvaluationResult
from ai4dl.evaluation.report import markdown_table
from ai4dl.evaluation.starts import trace_request
from ai4dl.judge import per_sample_allocation, scored_mask, resource_unit_scale
from ai4dl.kube.workload import CRON_JOB_NAME, SAFE_ALPHABET

# Name suffixes Kubernetes generates (k8s.io/apimachinery rand.SafeEncodeString's alphabet).
_SAFE = SAFE_ALPHABET
_KUBEFLOW = re.compile(r"^(?P<name>.+)-(?:master|worker|chief|ps|evaluator|launcher)-\d+$")
_DEPLOYMENT = re.compile(rf"^(?P<name>.+)-[{_SAFE}]{{6,10}}-[{_SAFE}]{{5}}$")
_STATEFULSET = re.compile(r"^(?P<name>.+)-\d+$")
_JOB = re.compile(rf"^(?P<name>.+)-[{_SAFE}]{{5}}$")
_REPLICASET_HASH = re.compile(rf"^(?P<name>.+)-[{_SAFE}]{{6,10}}$")


@dataclass(frozen=True)
class Owner:
    """The workload a pod belongs to."""
    namespace: str
    kind: str            # Job, CronJob, Deployment, StatefulSet, PyTorchJob, ..., Pod
    name: str
    source: str = "kube_pod_owner"     # or "pod name" (guessed)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.name}"


def owner_from_name(namespace: str, pod: str) -> Owner:
    """The owner a pod's generated name implies (no kube-state-metrics): ``x-worker-0`` a
    Kubeflow job ``x``; ``x-<hash>-<5>`` a Deployment; ``x-3`` a StatefulSet; ``x-<5>`` a Job
    (``x-<8+ digits>-<5>``: a CronJob's); else the pod itself."""
    for pattern, kind in ((_KUBEFLOW, "TrainingJob"), (_DEPLOYMENT, "Deployment"),
                          (_STATEFULSET, "StatefulSet"), (_JOB, "Job")):
        m = pattern.match(pod)
        if m:
            name = m.group("name")
            if kind == "Job":
                cron = CRON_JOB_NAME.match(name)
                if cron:
                    return Owner(namespace, "CronJob", cron.group("name"), "pod name")
            return Owner(namespace, kind, name, "pod name")
    return Owner(namespace, "Pod", pod, "pod name")


def resolve_owners(pod_owner: Mapping[tuple[str, str], tuple[str, str]],
                   replicaset_owner: Mapping[tuple[str, str], tuple[str, str]] | None = None,
                   job_owner: Mapping[tuple[str, str], tuple[str, str]] | None = None
                   ) -> dict[tuple[str, str], Owner]:
    """Owners from kube-state-metrics: ``pod_owner[(ns, pod)] = (kind, name)``
    (``kube_pod_owner``), a ReplicaSet followed to its Deployment (``kube_replicaset_owner``,
    else its name without the template hash) and a Job to its CronJob (``kube_job_owner``)."""
    out = {}
    for (ns, pod), (kind, name) in pod_owner.items():
        if kind == "ReplicaSet":
            up = (replicaset_owner or {}).get((ns, name))
            if up and up[0]:
                kind, name = up
            else:
                m = _REPLICASET_HASH.match(name)
                if m:
                    kind, name = "Deployment", m.group("name")
        elif kind == "Job":
            up = (job_owner or {}).get((ns, name))
            if up and up[0]:
                kind, name = up
        if not kind or kind == "<none>":
            kind, name = "Pod", pod
        out[(ns, pod)] = Owner(ns, kind, name)
    return out


# ----------------------------------------------------------------------------- aggregation
@dataclass
class PolicyFigures:
    """One policy, one resource, over a set of executions (raw allocation)."""
    allocation: float              # resource-hours (GiB-hours for bytes)
    fulfilment: float
    short_windows: int
    windows: int
    savings: float                 # 1 - allocation / requested, over the executions whose
    #                                request is known (NaN: none is)


@dataclass
class WorkloadRow:
    key: str
    namespace: str
    kind: str
    name: str
    owner_source: str
    pods: int
    executions: int
    hours: float                                   # scored sample-hours (all its containers)
    usage: dict[str, float]                        # resource-hours
    #: resource-hours at the requests, over the executions whose request is known
    requested: dict[str, float]
    known_hours: dict[str, float]                  # the hours of those executions
    policies: dict[str, dict[str, PolicyFigures]] = field(default_factory=dict)

    def level(self, amount: float) -> float:
        """A resource-hours amount as a mean level over the workload's hours (cores, GiB)."""
        return amount / self.hours if self.hours > 0 else math.nan

    def request_level(self, resource: str) -> float:
        """The mean request where known (NaN: unknown for all its executions)."""
        h = self.known_hours[resource]
        return self.requested[resource] / h if h > 0 else math.nan


def shown_replays(result: EvaluationResult) -> dict:
    """Each policy's replay as reported per workload: a fitted policy as fitted for the
    highest target (the PhaseModel default, 97 %), the others as replayed."""
    top = max(result.config.targets)
    out = dict(result.replays)
    for name, by_t in result.per_target.items():
        if top in by_t:
            out[name] = by_t[top]
    return out


def sorted_rows(rows: Sequence[WorkloadRow], first: str) -> list[WorkloadRow]:
    """Largest first: by requested resource-hours of resource ``first`` where the requests are
    known, else by its usage; then by key."""
    def size(r: WorkloadRow) -> float:
        return r.requested[first] if r.known_hours[first] > 0 else r.usage[first]

    return sorted(rows, key=lambda r: (-size(r), r.key))


def workload_rows(result: EvaluationResult, owners: Sequence[Owner],
                  requests: Sequence[np.ndarray]) -> tuple[list[WorkloadRow], WorkloadRow]:
    """Per workload and in total (the last: key ``total``), sorted by requested (else used)
    resource-hours, largest first. ``owners[i]`` and ``requests[i]`` (per resource, NaN
    unknown) belong to execution ``i`` of ``result.data``."""
    data, cfg = result.data, result.config
    W = cfg.window
    N, R = len(data.usage), len(data.resources)
    to_amount = data.step / 3600.0 / np.array([resource_unit_scale(u)[0] for u in data.units])
    replays = shown_replays(result)
    first = 0 if cfg.include_cold_start else 1

    # Per execution, once: scored samples, usage, scored windows, and per policy its
    # allocation, samples covered and windows short (a workload, and the total, sums them).
    n = np.zeros(N)
    usage = np.zeros((N, R))
    windows = np.zeros(N)
    alloc = {name: np.zeros((N, R)) for name in replays}
    covered = {name: np.zeros((N, R)) for name in replays}
    short = {name: np.zeros((N, R)) for name in replays}
    for i, u in enumerate(data.usage):
        m = scored_mask(len(u), W, cfg.include_cold_start)
        us = u[m]
        wmax = np.maximum.reduceat(u, np.arange(0, len(u), W), axis=0)[first:] if len(u) \
            else np.empty((0, R))
        n[i], usage[i], windows[i] = len(us), us.sum(0), len(wmax)
        for name, rep in replays.items():
            a = rep.allocations[i]
            per_sample = per_sample_allocation(a, len(u), W)[m]
            alloc[name][i] = per_sample.sum(0)
            covered[name][i] = (us <= per_sample).sum(0)
            short[name][i] = (wmax > a[first: first + len(wmax)]).sum(0)
    req = np.array([np.asarray(r, np.float64) for r in requests]).reshape(N, R)
    known = np.isfinite(req)            # the requests kube-state-metrics knew: savings only there
    requested = np.where(known, req, 0.0) * n[:, None]

    def row(key: str, owner: Owner | None, idx: list[int], pods: int) -> WorkloadRow:
        k = known[idx]
        n_idx = float(n[idx].sum())
        req_amount = requested[idx].sum(0) * to_amount
        out = WorkloadRow(key, owner.namespace if owner else "", owner.kind if owner else "",
                          owner.name if owner else "total", owner.source if owner else "",
                          pods, len(idx), n_idx * data.step / 3600.0,
                          dict(zip(data.resources, (usage[idx].sum(0) * to_amount).tolist())),
                          dict(zip(data.resources, req_amount.tolist())),
                          dict(zip(data.resources,
                                   ((n[idx][:, None] * k).sum(0) * data.step / 3600.0)
                                   .tolist())))
        for name in replays:
            total = alloc[name][idx].sum(0) * to_amount
            over_known = (alloc[name][idx] * k).sum(0) * to_amount
            out.policies[name] = {
                r: PolicyFigures(float(total[j]),
                                 float(covered[name][idx, j].sum() / n_idx) if n_idx
                                 else math.nan,
                                 int(short[name][idx, j].sum()), int(windows[idx].sum()),
                                 1.0 - over_known[j] / req_amount[j] if req_amount[j] > 0
                                 else math.nan)
                for j, r in enumerate(data.resources)}
        return out

    groups: dict[str, list[int]] = {}
    by_key: dict[str, Owner] = {}
    pods_of: dict[str, set] = {}
    for i, o in enumerate(owners):
        groups.setdefault(o.key, []).append(i)
        by_key[o.key] = o
        pods_of.setdefault(o.key, set()).add(data.groups[i] if data.groups else data.names[i])
    rows = sorted_rows([row(k, by_key[k], idx, len(pods_of[k])) for k, idx in groups.items()],
                       data.resources[0])
    total = row("total", None, list(range(len(owners))), len({p for s in pods_of.values()
                                                              for p in s}))
    return rows, total


def rows_for(result: EvaluationResult, executions, owner_of: Mapping[tuple[str, str], Owner]
             ) -> tuple[list[WorkloadRow], WorkloadRow]:
    """:func:`workload_rows` for executions pulled from Prometheus (``meta`` namespace and pod;
    requests in ``meta`` as :func:`ai4dl.evaluation.evaluate.trace_request` reads them), in the order the
    result holds them (cross-fitting concatenates its folds)."""
    by_name = {e.name: e for e in executions}
    replayed = [by_name[name] for name in result.data.names]
    return workload_rows(result, [owner_of[(e.meta["namespace"], e.meta["pod"])]
                                  for e in replayed],
                         [trace_request(e, result.data.resources) for e in replayed])


# ----------------------------------------------------------------------------- rendering
def _level(x: float) -> str:
    if not np.isfinite(x):
        return "—"
    return f"{x:.3g}"


def _pct(x: float, signed: bool = False) -> str:
    if not np.isfinite(x):
        return "—"
    return f"{100 * x:+.1f} %" if signed else f"{100 * x:.1f} %"


def level_unit(unit: str) -> str:
    return "GiB" if unit == "bytes" else ("cores" if unit == "cores" else unit)


def workload_table(rows: Sequence[WorkloadRow], total: WorkloadRow, policy: str,
                   resources: Sequence[str], units: Sequence[str], top: int | None = None
                   ) -> str:
    """One line per workload (the ``top`` largest; the rest summed up in the total line): the
    mean request, the mean usage and ``policy``'s mean allocation per resource, its fulfilment,
    windows short and saving against the requests."""
    header = ["workload", "pods", "hours"]
    for r, u in zip(resources, units):
        lu = level_unit(u)
        header += [f"{r} request [{lu}]", f"{r} used", f"{r} {policy}"]
    header += ["fulfilment", "windows short", "savings vs request"]
    shown = list(rows[:top] if top else rows)

    def line(w: WorkloadRow, label: str) -> list[str]:
        cells = [label, str(w.pods), f"{w.hours:.1f}"]
        figs = w.policies.get(policy, {})
        for r in resources:
            cells += [_level(w.request_level(r)), _level(w.level(w.usage[r])),
                      _level(w.level(figs[r].allocation)) if r in figs else "—"]
        cells.append(" / ".join(_pct(figs[r].fulfilment) for r in resources if r in figs))
        cells.append(" / ".join(f"{figs[r].short_windows}/{figs[r].windows}"
                                for r in resources if r in figs))
        cells.append(" / ".join(_pct(figs[r].savings, True) for r in resources if r in figs))
        return cells

    body = [line(w, f"{w.namespace}/{w.kind}/{w.name}") for w in shown]
    if top and len(rows) > top:
        body.append([f"… {len(rows) - top} more (in the JSON and markdown)", "", ""]
                    + [""] * (3 * len(resources) + 3))
    body.append(line(total, "**total**"))
    return markdown_table(header, body, set(range(1, len(header))))


def totals_table(total: WorkloadRow, resources: Sequence[str], units: Sequence[str],
                 policies: Sequence[str]) -> str:
    """Every policy in total: allocation, against the requests, fulfilment, windows short."""
    header = ["policy", "resource", "allocation", "÷ requested", "savings vs request",
              "fulfilment", "windows short"]
    body = []
    for name in policies:
        figs = total.policies.get(name)
        if not figs:
            continue
        for r, u in zip(resources, units):
            f = figs[r]
            body.append([name, r, f"{f.allocation:,.1f} {resource_unit_scale(u)[1]}",
                         f"{1 - f.savings:.3f}" if np.isfinite(f.savings) else "—",
                         _pct(f.savings, True), _pct(f.fulfilment),
                         f"{f.short_windows:,} of {f.windows:,}"])
    for r, u in zip(resources, units):
        h = total.known_hours[r]
        body.append(["(current requests)", r,
                     f"{total.requested[r]:,.1f} {resource_unit_scale(u)[1]}" if h > 0 else
                     "unknown", "1.000" if h > 0 else "—",
                     f"known for {100 * h / total.hours:.0f} % of the hours"
                     if total.hours > 0 else "", "", ""])
    return markdown_table(header, body, {2, 3, 4, 5, 6})


def row_dict(w: WorkloadRow) -> dict:
    def num(x):
        return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x

    return {"workload": w.key, "namespace": w.namespace, "kind": w.kind, "name": w.name,
            "owner_source": w.owner_source, "pods": w.pods, "executions": w.executions,
            "hours": num(w.hours), "usage": {r: num(v) for r, v in w.usage.items()},
            "requested": {r: num(v) for r, v in w.requested.items()},
            "requested_hours": {r: num(v) for r, v in w.known_hours.items()},
            "policies": {p: {r: {"allocation": num(f.allocation), "fulfilment": num(f.fulfilment),
                                 "short_windows": f.short_windows, "windows": f.windows,
                                 "savings_vs_request": num(f.savings)}
                             for r, f in figs.items()}
                         for p, figs in w.policies.items()}}
