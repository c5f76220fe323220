"""One window of one PhaseModel, end to end: read (Prometheus, the pod index), plan (pure),
write (pods/resize, annotations, Events, the PhaseModel's status). The kopf daemon calls
:meth:`WindowRunner.run` once per window; nothing here keeps state between windows that a
restart could lose (the pods' annotations and Prometheus are the state).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Sequence

from pydantic import ValidationError

from ai4dl.controller import metrics as m
from ai4dl.controller.novelty import CONDITION as NOVELTY_CONDITION
from ai4dl.controller.novelty import NoveltyVerdict, update_novelty
from ai4dl.controller.plan import WindowPlan, plan_window, window_samples
from ai4dl.controller.pods import PodInfo, pod_info
from ai4dl.crd import GROUP, OPT_IN_LABEL, PLURAL, VERSION, LabelSelector, PhaseModelSpec
from ai4dl.errors import Ai4dlError
from ai4dl.model import PhaseModel

log = logging.getLogger("ai4dl.operator")

WRITERS = 8   # concurrent pod writes per window (the client's connection pool is sized to match)
LIST_PAGE = 500   # pods per LIST page: bounds the raw JSON held at once
SKIP_REASONS = {"gone": "pod-gone", "conflict": "conflict"}   # write outcome -> metric reason


def now_iso(t: float | None = None) -> str:
    return dt.datetime.fromtimestamp(time.time() if t is None else t, dt.timezone.utc) \
        .strftime("%Y-%m-%dT%H:%M:%SZ")


def window_start(now: float, window_seconds: int) -> float:
    """Windows are aligned to multiples of their length (so a restarted operator computes the
    same window id and does not handle a window twice)."""
    return float(int(now // window_seconds) * window_seconds)


def label_selector(selector: LabelSelector) -> str:
    """The opt-in label and a PhaseModel's selector as one server-side label selector."""
    terms = [f"{OPT_IN_LABEL}=true"]
    terms += [f"{k}={v}" for k, v in sorted(selector.match_labels.items())]
    for e in selector.match_expressions:
        if e.operator in ("In", "NotIn"):
            terms.append(f"{e.key} {e.operator.lower()} ({','.join(e.values)})")
        else:
            terms.append(e.key if e.operator == "Exists" else f"!{e.key}")
    return ",".join(terms)


def selector_matches(selector: LabelSelector, labels: dict[str, str]) -> bool:
    for k, v in selector.match_labels.items():
        if labels.get(k) != v:
            return False
    for e in selector.match_expressions:
        has = e.key in labels
        if e.operator == "In" and (not has or labels[e.key] not in e.values):
            return False
        if e.operator == "NotIn" and has and labels[e.key] in e.values:
            return False
        if e.operator == "Exists" and not has:
            return False
        if e.operator == "DoesNotExist" and has:
            return False
    return True


@dataclass
class WindowReport:
    window_start: float
    pods: int = 0
    resized: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    degraded_reason: str | None = None
    seconds: float = 0.0
    plan: WindowPlan | None = None
    novel: int = 0              # containers whose window was novel
    classified: int = 0         # containers given a phase


class ModelCache:
    """Fitted models by document hash: rebuilt only when the document changes."""

    def __init__(self):
        self._cache: dict[str, PhaseModel] = {}

    @staticmethod
    def key(spec: PhaseModelSpec) -> str:
        return hashlib.sha256(json.dumps(spec.model, sort_keys=True).encode()).hexdigest()

    def get(self, spec: PhaseModelSpec) -> PhaseModel:
        doc = spec.validated_model()            # ValueError with one line when malformed
        key = self.key(spec)
        if key not in self._cache:
            self._cache.clear()
            self._cache[key] = PhaseModel.from_document(doc)
        return self._cache[key]


class WindowRunner:
    """The I/O around :func:`plan_window` for one PhaseModel."""

    def __init__(self, core_api, custom_api, source, namespace: str, name: str):
        self.core, self.custom, self.source = core_api, custom_api, source
        self.namespace, self.name = namespace, name
        self.models = ModelCache()
        # Containers given metrics last window (memory only: after a restart the first
        # window's vanished pods keep their series until the process ends, nothing worse).
        self._in_metrics: set[tuple[str, str, str]] = set()

    # ------------------------------------------------------------------ one window
    def list_pods(self, spec: PhaseModelSpec) -> list[PodInfo]:
        """The PhaseModel's opted-in pods, read once per window: one paged LIST in its
        namespace, filtered by the API server (opt-in label + spec.selector). A watch would
        also echo back every write of ours as an event to parse (two per resized pod), which
        cost more CPU than the writes themselves; between windows the operator needs nothing
        about pods, and it keeps none in memory."""
        pods: list[PodInfo] = []
        token = None
        while True:
            page = _read_json(self.core.list_namespaced_pod(
                self.namespace, label_selector=label_selector(spec.selector), limit=LIST_PAGE,
                _continue=token, _preload_content=False))
            pods += [pod_info(item) for item in page.get("items") or []]
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return pods

    def run(self, body: dict, pods: Sequence[PodInfo] | None = None,
            now: float | None = None) -> WindowReport:
        """One window; ``pods`` None lists them (tests and benchmarks may pass their own)."""
        started = time.perf_counter()
        now = time.time() if now is None else now
        labels = (self.namespace, self.name)
        try:
            spec = PhaseModelSpec.model_validate(body.get("spec") or {})
        except ValidationError as err:
            e = err.errors()[0]
            return self._degraded(body, WindowReport(now), "InvalidSpec",
                                  f"spec.{'.'.join(map(str, e['loc']))}: {e['msg']}")
        start = window_start(now, spec.window_seconds)
        report = WindowReport(start)
        if spec.policy.mode == "Off":
            self._status(body, report, ready=True, reason="Off", message="mode Off: not acting")
            return report
        try:
            model = self.models.get(spec)
        except (ValueError, Ai4dlError) as err:
            return self._degraded(body, report, "InvalidModel", str(err))

        if pods is None:
            from kubernetes.client.exceptions import ApiException
            from urllib3.exceptions import HTTPError

            try:
                pods = self.list_pods(spec)
            except ApiException as err:
                m.ERRORS.labels(*labels, f"api-{err.status}").inc()
                return self._degraded(body, report, "PodListFailed",
                                      f"listing pods: {_api_message(err)}", skip=True)
            except (OSError, HTTPError) as err:   # unreachable (urllib3's retries spent)
                m.ERRORS.labels(*labels, "api-unreachable").inc()
                return self._degraded(body, report, "PodListFailed",
                                      f"listing pods: {type(err).__name__}: {err}"[:300],
                                      skip=True)
        mine = [p for p in pods if p.running and not p.deleting and p.phasemodel == self.name
                and selector_matches(spec.selector, p.labels)]
        report.pods = len(mine)
        m.PODS_TRACKED.labels(*labels).set(len(mine))
        refs = [(p.namespace, p.name, c.name) for p in mine for c in p.containers
                if not spec.policy.containers or c.name in spec.policy.containers]
        W = window_samples(spec)
        n_context = model.crbm_.n_history
        samples = {}
        if refs:
            from ai4dl.sources.prometheus import FeatureQuery, PrometheusQueryError

            step = spec.step_seconds
            # grid: n_context history samples, then the W samples of the window that just ended
            end = start
            begin = start - (W + n_context - 1) * step
            try:
                got = self.source.fetch([FeatureQuery(f.name, f.query) for f in spec.features],
                                        refs, begin, end, step)
            except PrometheusQueryError as err:
                m.ERRORS.labels(*labels, "promql").inc()
                return self._degraded(body, report, "QueryError", str(err), skip=True)
            except Ai4dlError as err:   # PrometheusUnavailable: no data, no resize
                m.ERRORS.labels(*labels, "prometheus").inc()
                return self._degraded(body, report, "PrometheusUnavailable", str(err), skip=True)
            samples = {tuple(ref): got[ref].values for ref in got}
        try:
            plan = plan_window(spec, model, mine, samples, n_context, start, now_iso(now))
        except ValueError as err:
            return self._degraded(body, report, "InvalidModel", str(err))
        report.plan = plan
        self._apply(plan, spec, report)
        report.seconds = time.perf_counter() - started
        m.WINDOW_SECONDS.labels(*labels).observe(report.seconds)
        novelty = update_novelty((body.get("status") or {}).get("novelty"),
                                 ModelCache.key(spec)[:16], start, report.novel,
                                 report.classified, spec.refit)
        self._status(body, report, ready=True, reason="WindowProcessed",
                     message=f"{report.pods} pods, {report.resized} resized",
                     per_phase=plan.pods_per_phase(), novelty=novelty)
        return report

    # ------------------------------------------------------------------ writes
    def _apply(self, plan: WindowPlan, spec: PhaseModelSpec, report: WindowReport) -> None:
        """Write the plans: pods in parallel (the API calls are latency-bound), each pod's own
        writes in order (resize, then annotations, then Events)."""
        labels = (self.namespace, self.name)
        novel = total = 0
        for p in plan.pods:
            if p.skipped:
                report.skipped[p.skipped] = report.skipped.get(p.skipped, 0) + 1
                m.SKIPPED_WINDOWS.labels(*labels, p.skipped).inc()
            for c in p.containers:
                if c.phase is not None:
                    total += 1
                    novel += c.novel
                    m.POD_PHASE.labels(p.pod.namespace, p.pod.name, c.name, self.name).set(c.phase)
                    for r, v in c.target.items():
                        m.RECOMMENDATION.labels(p.pod.namespace, p.pod.name, c.name, r,
                                                self.name).set(v)
        m.NOVEL_SHARE.labels(*labels).set(novel / total if total else 0.0)
        report.novel, report.classified = novel, total
        # Pods that are gone (or no longer opted in) lose their series: /metrics must not grow
        # with every pod ever seen.
        # (A pod still here but skipped this window keeps its last values.)
        present = {p.pod.key for p in plan.pods}
        for key in list(self._in_metrics):
            if key[:2] not in present:
                m.forget_pod(*key, self.name, plan.resources)
                self._in_metrics.discard(key)
        self._in_metrics |= {(*p.pod.key, c.name) for p in plan.pods for c in p.containers
                             if c.phase is not None}
        work = [p for p in plan.pods if p.resize is not None or p.annotations or p.events]
        if not work:
            return
        with ThreadPoolExecutor(max_workers=min(WRITERS, len(work))) as pool:
            for p, outcome in zip(work, pool.map(self._write_pod, work)):
                if outcome == "resized":
                    report.resized += 1
                    m.RESIZES.labels(*labels).inc()
                elif outcome in SKIP_REASONS:
                    m.SKIPPED_WINDOWS.labels(*labels, SKIP_REASONS[outcome]).inc()
                elif outcome:
                    report.error = f"{p.pod.namespace}/{p.pod.name}: {outcome}"

    def _write_pod(self, p) -> str:
        """'resized', '' (written), 'gone' (the pod vanished mid-window), 'conflict' (someone
        else resized it since our read: replanned next window) or an error message."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            if p.resize is not None and not self._resize(p):
                log.info("%s/%s: resized by someone else since this window's read; planned "
                         "again next window", p.pod.namespace, p.pod.name)
                return "conflict"
            if p.annotations:
                _drain(self.core.patch_namespaced_pod(
                    p.pod.name, p.pod.namespace, {"metadata": {"annotations": p.annotations}},
                    _preload_content=False))
            for etype, ereason, msg in p.events:
                self._event(p.pod, etype, ereason, msg)
            return "resized" if p.resize is not None else ""
        except ApiException as err:
            if err.status == 404:       # the pod vanished mid-window: nothing to do
                return "gone"
            m.ERRORS.labels(self.namespace, self.name, f"api-{err.status}").inc()
            msg = _api_message(err)
            log.warning("%s/%s: write failed: %s", p.pod.namespace, p.pod.name, msg)
            self._event(p.pod, "Warning", "ResizeFailed", msg)
            return msg
        except HTTPError as err:        # the API server unreachable (retries spent)
            m.ERRORS.labels(self.namespace, self.name, "api-unreachable").inc()
            return f"API server unreachable: {type(err).__name__}"

    def _resize(self, p, attempts: int = 3) -> bool:
        """PATCH pods/resize with the resourceVersion of the pod we planned from, so a resize
        made by someone else in between is never overwritten with a target computed from stale
        requests. On a conflict the pod is read again: if only other fields changed (labels,
        annotations, status) the same resize is sent with the new version; if its resources
        changed, False (nothing written; the next window plans from what is there)."""
        from kubernetes.client.exceptions import ApiException

        version, planned_from = p.pod.resource_version, p.pod.containers
        for _ in range(attempts):
            body = dict(p.resize, metadata={"resourceVersion": version}) if version else p.resize
            try:
                _drain(self.core.patch_namespaced_pod_resize(
                    p.pod.name, p.pod.namespace, body, _preload_content=False))
                return True
            except ApiException as err:
                if err.status != 409 or not version:
                    raise
            m.ERRORS.labels(self.namespace, self.name, "api-409").inc()
            fresh = pod_info(_read_json(self.core.read_namespaced_pod(
                p.pod.name, p.pod.namespace, _preload_content=False)))
            if fresh.containers != planned_from:
                return False
            version = fresh.resource_version
        return False

    def _event(self, pod: PodInfo, etype: str, reason: str, message: str) -> None:
        from kubernetes.client.exceptions import ApiException

        ts = now_iso()
        body = {
            "metadata": {"generateName": f"{pod.name}.ai4dl.", "namespace": pod.namespace},
            "involvedObject": {"kind": "Pod", "namespace": pod.namespace, "name": pod.name,
                               "uid": pod.uid, "apiVersion": "v1"},
            "type": etype, "reason": reason, "message": message[:1000],
            "source": {"component": "ai4dl-operator"}, "firstTimestamp": ts,
            "lastTimestamp": ts, "count": 1, "reportingComponent": "ai4dl-operator",
        }
        try:
            _drain(self.core.create_namespaced_event(pod.namespace, body, _preload_content=False))
        except ApiException as err:     # an Event is best effort, never a reason to stop
            log.info("event for %s/%s not recorded: %s", pod.namespace, pod.name,
                     _api_message(err))

    def _degraded(self, body: dict, report: WindowReport, reason: str, message: str,
                  skip: bool = False) -> WindowReport:
        report.degraded_reason, report.error = reason, message
        if skip:
            m.SKIPPED_WINDOWS.labels(self.namespace, self.name, reason).inc()
        log.warning("PhaseModel %s/%s degraded (%s): %s", self.namespace, self.name, reason,
                    message)
        self._status(body, report, ready=False, reason=reason, message=message)
        return report

    def _status(self, body: dict, report: WindowReport, ready: bool, reason: str, message: str,
                per_phase: dict[str, int] | None = None,
                novelty: NoveltyVerdict | None = None) -> None:
        from kubernetes.client.exceptions import ApiException

        old = {c.get("type"): c for c in (body.get("status") or {}).get("conditions") or []}
        now = now_iso()

        def cond(ctype: str, status: str, r: str, msg: str) -> dict:
            prev = old.get(ctype, {})
            changed = prev.get("status") != status
            return {"type": ctype, "status": status, "reason": r, "message": msg[:1000],
                    "lastTransitionTime": now if changed else prev.get("lastTransitionTime", now)}

        conditions = [cond("Ready", "True" if ready else "False", reason, message),
                      cond("Degraded", "False" if ready else "True", reason,
                           "" if ready else message)]
        if novelty is not None:
            conditions.append(cond(NOVELTY_CONDITION, "True" if novelty.recommended else "False",
                                   novelty.reason, novelty.message))
        # A merge patch replaces the whole list: conditions not decided here are carried over.
        decided = {c["type"] for c in conditions}
        conditions += [c for t, c in old.items() if t not in decided]
        status = {
            "conditions": conditions,
            "observedGeneration": (body.get("metadata") or {}).get("generation"),
            "lastWindowTime": now_iso(report.window_start) if report.window_start else None,
            "lastError": None if ready else message,
        }
        if ready and per_phase is not None:
            status["podsTracked"] = report.pods
            status["podsPerPhase"] = per_phase
            status["phaseSummary"] = " ".join(f"{k}:{v}" for k, v in per_phase.items())
        if novelty is not None:
            status["novelty"] = novelty.status
        try:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, self.namespace, PLURAL, self.name, {"status": status})
        except ApiException as err:
            if err.status != 404:
                log.warning("status of %s/%s not written: %s", self.namespace, self.name,
                            _api_message(err))


def _drain(response) -> None:
    """Read a raw answer and hand its connection back to the pool. The answer (the whole pod)
    is not needed, and building client objects from it cost ~15 % of the operator's CPU per
    write; but an answer left unread keeps its connection out of the pool, so every later
    write opens a new TLS connection (a window measured twice as slow)."""
    response.read()
    response.release_conn()


def _read_json(response):
    """A raw answer as JSON, its connection handed back to the pool."""
    try:
        return json.loads(response.data)
    finally:
        response.release_conn()


def _api_message(err) -> str:
    try:
        return json.loads(err.body).get("message") or f"HTTP {err.status}"
    except (TypeError, ValueError, AttributeError):
        return f"HTTP {err.status}: {err.reason}"
