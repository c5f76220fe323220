"""Real PyTorch training jobs as Guaranteed pods on the real node, and what each cost.

The project's training programs (``e2e/workloads/cnn.py``, ``transformer.py``) run in pods of
the real node (``e2e/node/node.py``) from the host's own interpreter: the pod mounts the host's
root read-only at ``/host`` (plus a writable scratch folder of its own for the job's temporary
data and checkpoints) and ``chroot``s into it with busybox, so the job is the container's
process, under the pod's cgroup: its cpu quota throttles it and its memory limit OOM-kills it,
for real.

What a run measures per job (:class:`PodRecorder` polls the pod every second, Prometheus
holds the kubelet's /metrics/cadvisor):

* OOM kills: terminations of the container with reason ``OOMKilled``, read from the pod's
  ``status.containerStatuses[].state/lastState`` (each termination counted once, by its
  container id; with ``restartPolicy: OnFailure`` the job starts over after each);
* cpu throttled time: cAdvisor's ``container_cpu_cfs_throttled_seconds_total`` (and its
  periods), the largest value of each container's series over the pod's life, summed over
  the containers a restart made;
* wall time: pod created -> its container's final exit (``finishedAt``), restarts included;
* requested core-hours and GiB-hours: the pod's ``spec`` requests integrated over that life,
  from the timeline of every value the recorder saw (the author's, then each resize).

Policies: ``static`` (the author's requests), the operator's (a PhaseModel of that ``kind`` in
the namespace: :func:`phasemodel_body`), and ``vpa`` (:class:`VpaUpdater`: the VPA recommender
replica of ``ai4dl.policy.vpa`` fed the same cAdvisor series, its target applied in place each
window). ``bench/bench_real_node.py`` runs them all and writes the table.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
WORKLOADS = REPO / "e2e" / "workloads"
GIB = float(2 ** 30)

#: The operator's and the replica's step and window. cAdvisor refreshes a container's stats
#: every 10-15 s, so a step below ~5 s repeats samples and a rate window under ~40 s comes back
#: empty (the features' rate window is 1 m); 6 steps a window (the CRD wants at least 4) keeps
#: a 2-minute job to 4-5 windows.
STEP, WINDOW = 5, 30


def base_dir() -> Path:
    return Path(os.environ.get("AI4DL_JOBS_DIR", "/tmp/ai4dl-jobs"))


@dataclass(frozen=True)
class JobSpec:
    """One training job: pod ``name`` runs ``e2e/workloads/<program>.py`` for ``duration`` s
    with the author's requests (= limits: Guaranteed)."""

    name: str
    program: str
    duration: float
    cpu: str
    memory: str
    epochs: int = 3
    seed: int = 0
    workers: int = 2
    #: the workload the pod belongs to (``ai4dl.io/workload``); default its name. A job's
    #: runs are pods of their own names in one workload, as a Job's re-runs are
    workload: str = ""

    @property
    def workload_name(self) -> str:
        return self.workload or self.name

    def command(self, python: str = sys.executable) -> list[str]:
        return [python, str(WORKLOADS / f"{self.program}.py"), "--duration", f"{self.duration:g}",
                "--epochs", str(self.epochs), "--workers", str(self.workers),
                "--seed", str(self.seed)]


#: The jobs of the table: the e2e scenario's two programs, 2 minutes each, both at once on the
#: node, with what an author would write for them (a core and 2 GiB each: about twice the
#: ~1 GiB working set they reach, on a round number).
DEFAULT_JOBS = (JobSpec("cnn", "cnn", 120, "1", "2Gi"),
                JobSpec("transformer", "transformer", 120, "1", "2Gi", seed=1))


WORKLOAD_LABEL = "ai4dl.io/workload"     # ai4dl.kube.workload.WORKLOAD_LABEL


def job_manifest(job: JobSpec, namespace: str, node_name: str, scratch: Path, *,
                 labels: dict | None = None, annotations: dict | None = None,
                 python: str = sys.executable, resources: dict | None = None) -> dict:
    """The job's Guaranteed pod on ``node_name``: busybox's ``chroot`` into the host's root
    (mounted read-only at /host), the job's temporary files in ``scratch`` (a host folder,
    writable, mounted at the same path inside /host). ``resources``: requests = limits other
    than the author's (what VPA's admission controller sets)."""
    res = dict(resources or {"cpu": job.cpu, "memory": job.memory})
    inner = str(scratch)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": job.name, "namespace": namespace,
                     # every run of a job is one workload (issue 42), whatever its pod's name
                     "labels": {"app": "train", "job": job.workload_name,
                                WORKLOAD_LABEL: job.workload_name,
                                **(labels or {})},
                     "annotations": dict(annotations or {})},
        "spec": {
            "nodeName": node_name, "hostNetwork": True, "restartPolicy": "OnFailure",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "main", "image": "localhost/ai4dl/busybox:1",
                "imagePullPolicy": "Never",
                "command": ["chroot", "/host", *job.command(python)],
                "env": [{"name": "TMPDIR", "value": inner}, {"name": "HOME", "value": inner},
                        {"name": "PYTHONUNBUFFERED", "value": "1"},
                        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
                "resources": {"requests": dict(res), "limits": dict(res)},
                "volumeMounts": [{"name": "host", "mountPath": "/host", "readOnly": True},
                                 {"name": "scratch", "mountPath": f"/host{inner}"}]}],
            "volumes": [{"name": "host", "hostPath": {"path": "/", "type": "Directory"}},
                        {"name": "scratch", "hostPath": {"path": inner, "type": "Directory"}}]}}


# ----------------------------------------------------------------------------- Prometheus
def cadvisor_scrape_config(kubelet_port: int, cert: Path, key: Path,
                           interval: str = "5s") -> dict:
    """A Prometheus configuration scraping the kubelet's /metrics/cadvisor (HTTPS, a client
    certificate of the harness CA; the kubelet's own certificate is self-signed)."""
    return {"global": {"scrape_interval": interval, "scrape_timeout": interval},
            "scrape_configs": [{
                "job_name": "kubelet-cadvisor", "scheme": "https",
                "metrics_path": "/metrics/cadvisor", "honor_labels": True,
                "tls_config": {"insecure_skip_verify": True, "cert_file": str(cert),
                               "key_file": str(key)},
                "static_configs": [{"targets": [f"127.0.0.1:{kubelet_port}"]}]}]}


def cadvisor_prometheus(control_plane, node, workdir: Path, binary=None, interval: str = "5s"):
    """A started :class:`~e2e.prometheus.server.PrometheusServer` scraping ``node``'s
    cAdvisor every ``interval``."""
    from e2e.prometheus.server import PrometheusServer

    crt, key = control_plane.pki.client_cert("prometheus-scraper", "ai4dl-prometheus")
    prom = PrometheusServer([], workdir=workdir, scrape_interval=interval, binary=binary)
    prom.config_path.write_text(json.dumps(cadvisor_scrape_config(node.kubelet_port, crt, key,
                                                                  interval)))
    return prom.start()


def _scalar(prom, promql: str) -> float | None:
    res = prom.query(promql)
    return float(res[0]["value"][1]) if res else None


def cadvisor_totals(prom, namespace: str, pod: str, start: float, end: float,
                    window: float = WINDOW) -> dict:
    """The job's cpu throttling, cpu used and memory peak from cAdvisor over [start, end]:
    each counter's largest value per series (a restarted container is a new series, so the
    sum over series counts every container's), evaluated a scrape after ``end``; and its
    memory peak in its first ``window`` s (what a start request has to cover)."""
    sel = f'namespace="{namespace}",pod="{pod}",container="main"'
    span = f"{max(1, math.ceil(end - start + 30))}s"
    at = end + 15

    def total(metric: str) -> float | None:
        res = prom.query(f"sum(max_over_time({metric}{{{sel}}}[{span}] @ {at:.3f}))")
        return float(res[0]["value"][1]) if res else None

    peak = prom.query(f"max(max_over_time(container_memory_working_set_bytes{{{sel}}}[{span}] "
                      f"@ {at:.3f}))")
    first = prom.query(f"max(max_over_time(container_memory_working_set_bytes{{{sel}}}"
                       f"[{max(1, math.ceil(window))}s] @ {start + window:.3f}))")
    return {"throttled_seconds": total("container_cpu_cfs_throttled_seconds_total"),
            "first_window_peak_bytes": float(first[0]["value"][1]) if first else None,
            "throttled_periods": total("container_cpu_cfs_throttled_periods_total"),
            "periods": total("container_cpu_cfs_periods_total"),
            "cpu_seconds": total("container_cpu_usage_seconds_total"),
            "peak_memory_bytes": float(peak[0]["value"][1]) if peak else None}


# ----------------------------------------------------------------------------- the pods
def _ts(text: str | None) -> float | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _cores(q: str) -> float:
    from ai4dl.quantity import parse_quantity

    return float(parse_quantity(q))


@dataclass
class PodRecord:
    """What the recorder saw of one pod."""

    name: str
    created: float | None = None
    #: (unix time seen, cpu request cores, memory request bytes), one entry per change
    requests: list[tuple[float, float, float]] = field(default_factory=list)
    #: the same for what the container was given (``status.containerStatuses[].resources``:
    #: a resize the kubelet refuses leaves it at the old value while the spec moved on)
    actual: list[tuple[float, float, float]] = field(default_factory=list)
    #: container id -> (reason, exit code, started, finished) of each termination seen
    terminations: dict[str, tuple[str, int, float | None, float | None]] = field(
        default_factory=dict)
    #: (unix time seen, condition type, reason, message) of each resize condition as it changed
    resize_conditions: list[tuple[float, str, str, str]] = field(default_factory=list)
    phase: str = ""
    restarts: int = 0
    qos: str = ""
    missing: bool = False

    @property
    def ooms(self) -> list[tuple[str, float | None]]:
        return [(cid, t[3]) for cid, t in self.terminations.items() if t[0] == "OOMKilled"]

    @property
    def finished(self) -> float | None:
        """The final exit's time (the pod Succeeded or Failed), else None."""
        if self.phase not in ("Succeeded", "Failed") or not self.terminations:
            return None
        return max((t[3] or 0.0) for t in self.terminations.values()) or None

    def to_json(self) -> dict:
        return {"name": self.name, "created": self.created, "phase": self.phase,
                "restarts": self.restarts, "qos": self.qos,
                "requests": [list(r) for r in self.requests],
                "actual": [list(r) for r in self.actual],
                "terminations": {k: list(v) for k, v in self.terminations.items()},
                "resize_conditions": [list(c) for c in self.resize_conditions]}


class PodRecorder(threading.Thread):
    """Polls the pods of ``namespace`` every ``interval`` s and keeps a :class:`PodRecord`
    each: spec requests as they change, every termination (each container id once), resize
    conditions as they change."""

    def __init__(self, core, namespace: str, names: Sequence[str], interval: float = 1.0):
        super().__init__(name=f"pod-recorder-{namespace}", daemon=True)
        self.core, self.namespace, self.interval = core, namespace, interval
        self.records = {n: PodRecord(n) for n in names}
        self.lock = threading.Lock()
        self._stop_ev = threading.Event()
        self.errors: list[str] = []
        self.on_oom = None  # callable(pod name, finished time) for each new OOM kill

    def poll(self) -> None:
        pods = self.core.api_client.sanitize_for_serialization(
            self.core.list_namespaced_pod(self.namespace))["items"]
        now = time.time()
        seen = {p["metadata"]["name"]: p for p in pods}
        with self.lock:
            for name, rec in self.records.items():
                pod = seen.get(name)
                if pod is None:
                    rec.missing = True
                    continue
                self._update(rec, pod, now)

    def _update(self, rec: PodRecord, pod: dict, now: float) -> None:
        rec.created = rec.created or _ts(pod["metadata"].get("creationTimestamp"))
        c = pod["spec"]["containers"][0]
        req = c.get("resources", {}).get("requests", {})
        cur = (_cores(req["cpu"]), _cores(req["memory"]))
        if not rec.requests or rec.requests[-1][1:] != cur:
            rec.requests.append((now if rec.requests else (rec.created or now), *cur))
        st = pod.get("status") or {}
        rec.phase, rec.qos = st.get("phase", ""), st.get("qosClass", "")
        for cs in st.get("containerStatuses") or []:
            given = (cs.get("resources") or {}).get("requests") or {}
            if "cpu" in given and "memory" in given:
                now_given = (_cores(given["cpu"]), _cores(given["memory"]))
                if not rec.actual or rec.actual[-1][1:] != now_given:
                    rec.actual.append((now, *now_given))
            rec.restarts = max(rec.restarts, int(cs.get("restartCount") or 0))
            for which in ("state", "lastState"):
                term = (cs.get(which) or {}).get("terminated")
                if not term or not term.get("containerID"):
                    continue
                cid = term["containerID"]
                if cid not in rec.terminations:
                    rec.terminations[cid] = (
                        term.get("reason") or "", int(term.get("exitCode") or 0),
                        _ts(term.get("startedAt")), _ts(term.get("finishedAt")))
                    if term.get("reason") == "OOMKilled" and self.on_oom is not None:
                        self.on_oom(rec.name, _ts(term.get("finishedAt")) or now)
        conds = {c["type"]: (c.get("reason") or "", c.get("message") or "")
                 for c in st.get("conditions") or [] if c["type"].startswith("PodResize")}
        last: dict[str, tuple[str, str]] = {}
        for _, t, r, m in rec.resize_conditions:
            last[t] = (r, m)
        for t, rm in conds.items():
            if last.get(t) != rm:
                rec.resize_conditions.append((now, t, *rm))
        for t in set(last) - set(conds):
            if last[t] != ("", "gone"):
                rec.resize_conditions.append((now, t, "", "gone"))

    def run(self) -> None:
        while not self._stop_ev.is_set():
            try:
                self.poll()
            except Exception as exc:  # noqa: BLE001 - a blip of the API server: try again
                self.errors.append(f"{type(exc).__name__}: {exc}"[:300])
            self._stop_ev.wait(self.interval)

    def stop(self) -> None:
        self._stop_ev.set()
        self.join(timeout=10)

    def done(self, names: Sequence[str] | None = None) -> bool:
        with self.lock:
            return all(self.records[n].phase in ("Succeeded", "Failed")
                       for n in (names or self.records))


def integrate(timeline: Sequence[tuple[float, float, float]], start: float,
              end: float) -> tuple[float, float]:
    """(core-seconds, byte-seconds) of a step function of requests (``(t, cpu, memory)``,
    each value in force from its t to the next) over [start, end]."""
    cpu = mem = 0.0
    for i, (t, c, m) in enumerate(timeline):
        t0 = max(start, t)
        t1 = min(end, timeline[i + 1][0] if i + 1 < len(timeline) else end)
        if t1 > t0:
            cpu += c * (t1 - t0)
            mem += m * (t1 - t0)
    return cpu, mem


def held(spec: Sequence[tuple[float, float, float]], actual: Sequence[tuple[float, float, float]],
         start: float, end: float) -> tuple[float, float]:
    """(core-seconds, byte-seconds) the node held for the pod over [start, end]: at each
    instant the larger of its spec's requests and what its container was given (before the
    container reports anything, the spec's)."""
    cuts = sorted({start, end, *(t for t, _, _ in spec), *(t for t, _, _ in actual)})
    cuts = [t for t in cuts if start <= t <= end]

    def at(tl, t):
        cur = None
        for row in tl:
            if row[0] > t:
                break
            cur = row
        return cur

    cpu = mem = 0.0
    for t0, t1 in zip(cuts, cuts[1:]):
        s, a = at(spec, t0), at(actual, t0)
        if s is None:
            continue
        c, m = (s[1], s[2]) if a is None else (max(s[1], a[1]), max(s[2], a[2]))
        cpu += c * (t1 - t0)
        mem += m * (t1 - t0)
    return cpu, mem


# ----------------------------------------------------------------------------- VPA replica
class VpaUpdater(threading.Thread):
    """VPA's recommender replica (``ai4dl.policy.vpa``, one aggregate per job: VPA's key is
    the workload) fed every ``window`` s the jobs' cAdvisor samples from Prometheus (the
    operator's default queries, at ``step``), told of each OOM kill (``RecordOOM`` with the
    pod's memory request), and its target applied to the running pod in place, requests =
    limits (Guaranteed), when cpu or memory differs by more than ``min_change`` — as the
    evaluator's ``vpa`` policy serves it. ``history``: earlier executions of each job
    (name -> Execution, or a list of them), fed first, as a VPA that has watched the workload
    before."""

    def __init__(self, core, prom_url: str, namespace: str, names: Sequence[str], *,
                 window: float = WINDOW, step: float = STEP, min_change: float = 0.1,
                 history: dict | None = None, recommenders: dict | None = None,
                 workloads: dict[str, str] | None = None):
        super().__init__(name=f"vpa-{namespace}", daemon=True)
        from ai4dl.policy.policies import VpaPolicy
        from ai4dl.sources.prometheus import PrometheusSource

        self.core, self.namespace, self.names = core, namespace, list(names)
        #: pod -> its workload, whose recommender it feeds and is sized by (VPA's key)
        self.workload = dict(workloads or {n: n for n in self.names})
        self.window, self.step, self.min_change = window, step, min_change
        self.source = PrometheusSource(prom_url, timeout=5, retries=1)
        #: one recommender per job; ``recommenders`` (an earlier run's ``recs``): the same
        #: ones go on, as VPA's checkpoint keeps a workload's histograms across its pods
        self.recs = recommenders if recommenders is not None else {
            w: VpaPolicy().new_state() for w in self.workload.values()}
        self.fed_until: dict[str, float] = {}
        self.resizes: list[tuple[float, str, float, float]] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self._stop_ev = threading.Event()
        for name, got in (history or {}).items():          # by workload
            for k, ex in enumerate(got if isinstance(got, (list, tuple)) else [got]):
                self._feed(name, f"history-{name}-{k}", ex.times, ex.values, ex.features)

    def _feed(self, workload, container, times, values, features) -> None:
        import numpy as np

        rec = self.recs[workload]
        ok = ~np.isnan(values).any(axis=1)
        t, v = np.asarray(times)[ok], np.asarray(values, dtype=float)[ok]
        if len(t):
            rec.add_cpu_samples(t, v[:, list(features).index("cpu")], container=container)
            rec.add_memory_samples(t, v[:, list(features).index("memory")], container=container)

    def record_oom(self, pod: str, when: float) -> None:
        with self.lock:
            try:
                p = self.core.read_namespaced_pod(pod, self.namespace)
                mem = _cores(p.spec.containers[0].resources.requests["memory"])
                self.recs[self.workload[pod]].record_oom(when, mem, container=pod)
            except Exception as exc:  # noqa: BLE001
                self.errors.append(f"record_oom {pod}: {exc}"[:300])

    def target(self, name: str, now: float) -> dict[str, str] | None:
        """The recommender's target for pod ``name`` (its workload's) as quantities (cpu to the
        millicore, memory to the MiB, up), or None before it has samples."""
        with self.lock:
            state = self.recs[self.workload.get(name, name)]
            if state.memory.is_empty():     # VPA has no recommendation before a sample
                return None
            t = state.recommend(now).target
        if not all(math.isfinite(t.get(r, math.nan)) and t[r] > 0 for r in ("cpu", "memory")):
            return None
        return {"cpu": f"{max(1, math.ceil(t['cpu'] * 1000))}m",
                "memory": f"{math.ceil(t['memory'] / 2 ** 20)}Mi"}

    def tick(self, now: float) -> None:
        from ai4dl.sources.prometheus_types import PodRef

        for name in self.names:
            try:
                pod = self.core.read_namespaced_pod(name, self.namespace)
            except Exception:  # noqa: BLE001 - not there (yet / any more)
                continue
            if pod.status.phase != "Running":
                continue
            start = self.fed_until.get(name, now - self.window)
            got = self.source.fetch(["cpu", "memory"], [PodRef(self.namespace, name, "main")],
                                    start + self.step, now, self.step)
            s = got[PodRef(self.namespace, name, "main")]
            with self.lock:
                self._feed(self.workload[name], name, s.times, s.values, s.features)
                self.fed_until[name] = now
                target = self.recs[self.workload[name]].recommend(now).target
            req = pod.spec.containers[0].resources.requests
            cur_cpu, cur_mem = _cores(req["cpu"]), _cores(req["memory"])
            cpu = max(0.001, math.ceil(target["cpu"] * 1000) / 1000)
            mem = math.ceil(target["memory"] / 2 ** 20) * 2 ** 20
            if abs(cpu - cur_cpu) <= self.min_change * cur_cpu and \
                    abs(mem - cur_mem) <= self.min_change * cur_mem:
                continue
            want = {"cpu": f"{round(cpu * 1000)}m", "memory": f"{mem // 2 ** 20}Mi"}
            self.core.patch_namespaced_pod_resize(name, self.namespace, {"spec": {"containers": [
                {"name": "main", "resources": {"requests": want, "limits": want}}]}})
            self.resizes.append((now, name, cpu, float(mem)))

    def run(self) -> None:
        nxt = time.time() + self.window
        while not self._stop_ev.wait(max(0.0, nxt - time.time())):
            try:
                self.tick(time.time())
            except Exception as exc:  # noqa: BLE001 - reported with the run
                self.errors.append(f"{type(exc).__name__}: {exc}"[:300])
            nxt += self.window

    def stop(self) -> None:
        self._stop_ev.set()
        self.join(timeout=20)


# ----------------------------------------------------------------------------- the model
def phasemodel_body(name: str, kind: str, model_doc: dict | None, *, step: int = STEP,
                    window: int = WINDOW) -> dict:
    """A PhaseModel serving the jobs (``app: train``) with the CRD's defaults but for the mode
    (InPlace: the default, Recommend, writes nothing), the kind, step and window."""
    from ai4dl.crd import GROUP, VERSION

    spec: dict[str, Any] = {"selector": {"matchLabels": {"app": "train"}},
                            "stepSeconds": step, "windowSeconds": window,
                            "policy": {"mode": "InPlace", "kind": kind}}
    if model_doc is not None:
        spec["model"] = model_doc
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PhaseModel",
            "metadata": {"name": name}, "spec": spec}


def record_executions(prom_url: str, namespace: str, spans: dict[str, tuple[float, float]],
                      step: float = STEP, started: dict[str, float] | None = None) -> dict:
    """Each job's cpu (cores) and memory (bytes) from cAdvisor through Prometheus at ``step``
    over its [start, end] (name -> Execution; the operator's default queries). A container's
    start in ``started``: its first minute's cpu read over its age, as the operator reads it
    (ai4dl.sources.young_rates), not diluted over the rate's minute."""
    from ai4dl.sources.prometheus import PrometheusSource, young_rates_diluted
    from ai4dl.sources.prometheus_types import PodRef, default_feature_queries
    from ai4dl.sources.young_rates import feature_rate_ranges, undilute

    src = PrometheusSource(prom_url, timeout=10, retries=2)
    features = default_feature_queries(("cpu", "memory"))
    ranges = feature_rate_ranges([f.promql for f in features], src.rate_window)
    diluted = young_rates_diluted(src) is True
    out = {}
    for name, (start, end) in spans.items():
        ref = PodRef(namespace, name, "main")
        got = src.fetch(features, [ref], start, end, step)[ref]
        if diluted and (started or {}).get(name) is not None:
            got.values[:] = undilute(got.values, got.times, started[name], ranges, step)
        out[name] = got.to_execution(name)
    return out


def preload_profiles(api, namespace: str, history: dict, key_file, name: str = "pm") -> int:
    """The static runs in the operator's workload profiles of ``namespace``'s PhaseModel
    ``name``, as the VPA replica is pre-loaded with them: what the trainer's batch fill
    (``ai4dl train --state-key-file``, ``fill_profiles``) writes from Prometheus history for a
    PhaseModel whose jobs ran before. They ran in another namespace here, so the bench hands
    them over through the same functions (``batch_runs``, ``ProfileStore.record_runs``).
    Returns the WorkloadProfiles written."""
    from kubernetes import client

    from ai4dl import trainer as T
    from ai4dl.controller.podstate import StateKey
    from ai4dl.controller.profiles import ProfileStore
    from ai4dl.crd import GROUP, PLURAL, VERSION
    from ai4dl.crd_spec import PhaseModelSpec
    from ai4dl.kube.workload import Workload
    from ai4dl.serving import managed_resources, safety_config, window_samples

    custom = client.CustomObjectsApi(api)
    pm = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    spec = PhaseModelSpec.model_validate(pm["spec"])
    resources = managed_resources(spec=spec)
    workload = {ex.meta["pod"]: Workload("Label", job, "label").key
                for job, got in history.items() for ex in got}
    runs = T.batch_runs([ex for got in history.values() for ex in got], resources,
                        window_samples(spec), lambda ex: workload[ex.meta["pod"]], time.time())
    store = ProfileStore(custom, namespace, name, StateKey.from_file(key_file))
    max_increase = safety_config(spec, resources).max_increase
    for w, got in runs.items():
        store.record_runs(w, got, resources, pm["metadata"]["uid"], time.time(), max_increase)
    return store.writes


def fit_model_doc(executions: Sequence, step: int = STEP, window: int = WINDOW) -> dict:
    """The model the trainer would store: a PhaseModel fitted on ``executions`` (NaN rows,
    where cAdvisor had nothing yet, dropped), with auto's choice and both head-room tables
    for this step and window."""
    import numpy as np

    from ai4dl.crd_spec import PhaseModelSpec
    from ai4dl.method.model import PhaseModel
    from ai4dl.method.traces import Execution, TraceSet
    from ai4dl.trainer import choose_served_policy

    clean = []
    for e in executions:
        ok = ~np.isnan(e.values).any(axis=1)
        clean.append(Execution(e.name, e.times[ok], e.values[ok], e.features, e.units,
                               step=float(step)))
    model = PhaseModel(n_phases=4, epochs=15, random_state=0).fit(TraceSet(clean))
    choose_served_policy(model, clean, PhaseModelSpec.model_validate(
        {"stepSeconds": step, "windowSeconds": window}))
    return json.loads(model.to_document().model_dump_json(by_alias=True, exclude_none=True))


# ----------------------------------------------------------------------------- one policy
def run_jobs(core, node, prom, namespace: str, jobs: Sequence[JobSpec], *, policy: str,
             labels: dict | None = None, annotations: dict | None = None,
             vpa: VpaUpdater | None = None, timeout: float | None = None,
             until: Sequence[str] | None = None, log=lambda msg: None) -> dict:
    """Run ``jobs`` at once as pods of ``namespace`` (which must exist) until each (or each
    of ``until``) has finished, or ``timeout``; then measure them and delete the pods.
    Returns the run's JSON (jobs, totals)."""
    scratch_root = base_dir() / f"{os.getpid()}-{namespace}"
    timeout = timeout or 4 * max(j.duration for j in jobs) + 120
    rec = PodRecorder(core, namespace, [j.name for j in jobs])
    if vpa is not None:
        rec.on_oom = vpa.record_oom
    t0 = time.time()
    try:
        for job in jobs:
            scratch = scratch_root / job.name
            scratch.mkdir(parents=True, exist_ok=True)
            # VPA in mode Auto sizes a pod at its creation from the recommendation it has
            start = vpa.target(job.name, time.time()) if vpa is not None else None
            core.create_namespaced_pod(namespace, job_manifest(
                job, namespace, node.name, scratch, labels=labels, annotations=annotations,
                resources=start))
        rec.start()
        if vpa is not None:
            vpa.start()
        deadline = t0 + timeout
        while not rec.done(until) and time.time() < deadline:
            time.sleep(1)
        t_stop = time.time()
        if not rec.done(until):
            log(f"{policy}: jobs not finished after {timeout:.0f} s")
    finally:
        if vpa is not None and vpa.is_alive():
            vpa.stop()
        if rec.is_alive():
            rec.stop()
            with contextlib.suppress(Exception):
                rec.poll()
    # cAdvisor's last values of a container reach Prometheus a scrape or two after it ends
    time.sleep(20)
    out_jobs = []
    for job in jobs:
        r = rec.records[job.name]
        end = r.finished or t_stop   # unfinished: measured up to when the run stopped
        start = r.created or t0
        core_s, byte_s = integrate(r.requests, start, end)
        held_core_s, held_byte_s = held(r.requests, r.actual, start, end)
        totals = cadvisor_totals(prom, namespace, job.name, start, end)
        out_jobs.append({
            "job": job.workload_name, "pod": job.name, "program": job.program,
            "duration": job.duration,
            "author_requests": {"cpu": job.cpu, "memory": job.memory},
            "finished": r.finished is not None, "phase": r.phase, "qos": r.qos,
            "wall_seconds": end - start, "restarts": r.restarts, "oom_kills": len(r.ooms),
            "requested_core_hours": core_s / 3600, "requested_gib_hours": byte_s / GIB / 3600,
            "held_core_hours": held_core_s / 3600, "held_gib_hours": held_byte_s / GIB / 3600,
            "resizes": max(0, len(r.requests) - 1),
            **totals, "record": r.to_json()})
    for job in jobs:
        with contextlib.suppress(Exception):
            core.delete_namespaced_pod(job.name, namespace, grace_period_seconds=0)
    # gone before the next run starts (its pods are the node's only load)
    deadline = time.time() + 60
    while time.time() < deadline and any(
            p.metadata.name in {j.name for j in jobs}
            for p in core.list_namespaced_pod(namespace).items):
        time.sleep(1)
    shutil.rmtree(scratch_root, ignore_errors=True)
    return {"policy": policy, "namespace": namespace, "jobs": out_jobs,
            "recorder_errors": rec.errors,
            "vpa": None if vpa is None else {"resizes": vpa.resizes, "errors": vpa.errors},
            "totals": totals_of(out_jobs)}


def totals_of(jobs: Sequence[dict]) -> dict:
    def s(key):
        vals = [j[key] for j in jobs if j.get(key) is not None]
        return sum(vals) if vals else None
    return {"oom_kills": s("oom_kills"), "throttled_seconds": s("throttled_seconds"),
            "throttled_periods": s("throttled_periods"), "periods": s("periods"),
            "cpu_seconds": s("cpu_seconds"),
            "wall_seconds": max((j["wall_seconds"] for j in jobs), default=None),
            "requested_core_hours": s("requested_core_hours"),
            "requested_gib_hours": s("requested_gib_hours"),
            "held_core_hours": s("held_core_hours"), "held_gib_hours": s("held_gib_hours"),
            "resizes": s("resizes"),
            "unfinished": sum(not j["finished"] for j in jobs)}


# ----------------------------------------------------------------------------- the report
POLICY_TITLES = {"static": "static (the author's requests)", "adaptive-max": "adaptive-max",
                 "vpa": "vpa (our VPA recommender replica)", "auto": "auto (the default)"}


def _f(x, fmt: str) -> str:
    return "—" if x is None else format(x, fmt)


def _start_mib(j: dict) -> float | None:
    req = j["record"]["requests"]
    return req[0][2] / 2 ** 20 if req else None


def report_markdown(results: Sequence[dict], meta: dict) -> str:
    """The "On a real node" table: one row per policy over all its runs, one per policy and
    run (totals over the jobs), then one row per job, policy and run."""
    jobs = ", ".join(f"{j['name']} ({j['program']}.py, {j['duration']:g} s, requests "
                     f"{j['cpu']} cpu / {j['memory']})" for j in meta["jobs"])
    runs = max((r.get("run", 1) for r in results), default=1)
    lines = [
        "## On a real node",
        "",
        f"Data: {len(meta['jobs'])} real PyTorch training jobs run at once, each as a "
        f"Guaranteed pod (requests = limits) on a real kubelet {meta.get('kubelet', '')} + "
        f"containerd + runc node (cgroup v1), under each policy in turn, {runs} time"
        f"{'s' if runs > 1 else ''} in a row (each job one workload: a pod of its own name "
        f"each run, `<job>-<run>`, with the job's `ai4dl.io/workload` label and a new seed): "
        f"{jobs}. Usage from "
        f"cAdvisor (the kubelet's /metrics/cadvisor) scraped every {meta['scrape']} by the real "
        f"Prometheus; operator and VPA replica on {meta['step']} s steps, {meta['window']} s "
        f"windows; the model fitted on the static runs' recording. The operator serves its "
        f"admission webhook, its workload profiles pre-loaded with the static runs (what the "
        f"trainer's batch fill writes from Prometheus history): every run starts at its "
        f"workload profile's first request, requests and limits, and its memory is held at the "
        f"profile's peak (+15 %: a Guaranteed pod's request is its limit) until the point "
        f"in the run where it came; the operator updates the profile as each run ends. The "
        f"VPA replica keeps one recommender per "
        f"job across its runs (as VPA's checkpoint does), pre-loaded with the static runs, and "
        f"sizes each new pod from its target as VPA's admission controller does. "
        f"Machine: {meta['machine']}. "
        f"Made by `{meta['command']}` in {meta['seconds'] / 60:.1f} min ({meta['date']}).",
        "",
    ]
    head = ("| OOM kills | cpu throttled (s) | throttled periods | job wall time (s, longest) | "
            "requested core-h | requested GiB-h | held core-h / GiB-h | resizes | unfinished |")

    def row(t: dict) -> str:
        share = (f" ({100 * t['throttled_periods'] / t['periods']:.0f} %)"
                 if t["periods"] and t["throttled_periods"] is not None else "")
        return (f"{t['oom_kills']} | {_f(t['throttled_seconds'], '.1f')} | "
                f"{_f(t['throttled_periods'], '.0f')}{share} | {_f(t['wall_seconds'], '.0f')} | "
                f"{_f(t['requested_core_hours'], '.4f')} | {_f(t['requested_gib_hours'], '.4f')}"
                f" | {_f(t['held_core_hours'], '.4f')} / {_f(t['held_gib_hours'], '.4f')} | "
                f"{t['resizes']} | {t['unfinished']} |")
    policies = list(dict.fromkeys(r["policy"] for r in results))
    if runs > 1:
        lines += [f"All {runs} runs:", "", "| policy " + head, "|---" * 10 + "|"]
        for pol in policies:
            every = [j for r in results if r["policy"] == pol for j in r["jobs"]]
            t = totals_of(every)
            t["wall_seconds"] = sum(max(j["wall_seconds"] for j in r["jobs"])
                                    for r in results if r["policy"] == pol)
            lines.append(f"| {POLICY_TITLES.get(pol, pol)} | " + row(t))
        lines += ["", "(wall time here: the runs' longest jobs, summed.) Per run:", ""]
    lines += ["| policy | run " + head, "|---" * 11 + "|"]
    for r in results:
        lines.append(f"| {POLICY_TITLES.get(r['policy'], r['policy'])} | {r.get('run', 1)} | "
                     + row(r["totals"]))
    lines += ["",
              "OOM kills: terminations with reason OOMKilled in the pods' status (the job starts "
              "over after each). Throttled: cAdvisor's container_cpu_cfs_throttled_seconds_total "
              "and _periods_total (share: of all cfs periods). Wall time: pod created to the "
              "job's final exit. Requested: the pods' spec requests integrated over that time; "
              "held: the larger of the spec's requests and what the container was given "
              "(status.containerStatuses[].resources) at each instant: a decrease the kubelet "
              "refuses (a memory limit below usage) leaves the container at its old size while "
              "the spec has moved on. Resizes: changes of the spec's requests. Start: the "
              "memory request the pod was created with (after admission); first-window peak: "
              "the most working set cAdvisor saw in the pod's first window.",
              "", "Per job:", "",
              "| policy | run | job | OOM kills | restarts | cpu throttled (s) | cpu used "
              "(core-s) | start (MiB) | first-window peak (MiB) | start ÷ first-window peak | "
              "peak working set (MiB) | wall (s) | requested core-h | requested GiB-h | "
              "held GiB-h | requests at the end |",
              "|---" * 16 + "|"]
    for r in results:
        for j in r["jobs"]:
            last = j["record"]["requests"][-1] if j["record"]["requests"] else None
            end = (f"{last[1]:.3g} cpu / {last[2] / 2 ** 20:.0f} MiB" if last else "—")
            peak = j.get("peak_memory_bytes")
            first = j.get("first_window_peak_bytes")
            start = _start_mib(j)
            ratio = (start / (first / 2 ** 20) if start is not None and first else None)
            lines.append(
                f"| {r['policy']} | {r.get('run', 1)} | {j['job']} | {j['oom_kills']} | "
                f"{j['restarts']} | {_f(j['throttled_seconds'], '.1f')} | "
                f"{_f(j['cpu_seconds'], '.0f')} | {_f(start, '.0f')} | "
                f"{_f(None if first is None else first / 2 ** 20, '.0f')} | {_f(ratio, '.2f')} | "
                f"{_f(None if peak is None else peak / 2 ** 20, '.0f')} | "
                f"{j['wall_seconds']:.0f} | {j['requested_core_hours']:.4f} | "
                f"{j['requested_gib_hours']:.4f} | {j['held_gib_hours']:.4f} | {end} |")
    notes = meta.get("notes") or []
    if notes:
        lines += [""] + [f"* {n}" for n in notes]
    return "\n".join(lines) + "\n"
