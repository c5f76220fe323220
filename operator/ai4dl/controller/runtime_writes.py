"""The window's writes to its pods: resizes, annotations and Events, in parallel, with metrics."""

from __future__ import annotations

import json
import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from ai4dl.controller import metrics as m
from ai4dl.controller.plan_types import WindowPlan
from ai4dl.controller.pods import A_STATE, PodInfo, pod_info
from ai4dl.controller.podstate import state_scope
from ai4dl.controller.records import MARKER, choose_writes, extra_writes
from ai4dl.controller.runtime_window import WindowReport
from ai4dl.crd import GROUP, PLURAL, VERSION
from ai4dl.crd_spec import PhaseModelSpec
from ai4dl.kube.raw import api_message, drain, read_json, write_event
from ai4dl.quantity import parse_quantity

log = logging.getLogger("ai4dl.operator")

WRITERS = 8   # concurrent pod writes per window (the client's connection pool is sized to match)
SKIP_REASONS = {"gone": "pod-gone", "conflict": "conflict",   # write outcome -> metric reason
                "untaken": "resize-not-taken", "deadline": "window-deadline"}


class PodWrites:
    """WindowRunner's pod writes (a base class: uses its core, custom, key, namespace, name,
    had_pods, write_budget, record_share, pending and caches)."""

    # ------------------------------------------------------------------ writes
    def _apply(self, plan: WindowPlan, spec: PhaseModelSpec, report: WindowReport,
               originals: list[dict], deadline: float | None = None) -> None:
        """Write the plans: pods in parallel (the API calls are latency-bound), each pod's own
        writes in order (the record in annotations, then the resize, then Events), the
        largest changes first, within the process's write limit and the window's budget of
        writes besides resizes (ai4dl.controller.records: the records left out are kept in
        memory); a pod not started by ``deadline`` (wall-clock seconds: when the next window
        is due) waits for the next window."""
        labels = (self.namespace, self.name)
        novel = total = 0
        for p in plan.pods:
            if p.skipped:
                report.skipped[p.skipped] = report.skipped.get(p.skipped, 0) + 1
                m.SKIPPED_WINDOWS.labels(*labels, p.skipped).inc()
            elif any(c.skipped == "duplicate-series" for c in p.containers):
                # the pod is served for its other containers; this one's window is counted
                m.SKIPPED_WINDOWS.labels(*labels, "duplicate-series").inc()
            for c in p.containers:
                if c.phase is not None:
                    total += 1
                    novel += c.novel
        if self.had_pods:
            m.NOVEL_SHARE.labels(*labels).set(novel / total if total else 0.0)
        report.novel, report.classified = novel, total
        m.POD_SERIES.replace(self.namespace, self.name, tuple(plan.resources),
                             pod_series(plan, originals,
                                        m.POD_SERIES.table(self.namespace, self.name)))
        present = {p.pod.key for p in plan.pods}
        for key in list(self._noticed):
            if key not in present:
                del self._noticed[key]
        for p in plan.pods:
            if not p.notices:       # a set per pod only where there is something to note
                continue
            seen = self._noticed.setdefault(p.pod.key, set())
            for reason, msg in p.notices:
                if (p.pod.uid, reason) not in seen:
                    seen.add((p.pod.uid, reason))
                    p.events.append(("Warning", reason, msg))
                    report.noticed += 1
                    m.NOTICES.labels(self.namespace, reason).inc()
        self.pending.carry(plan.pods)
        self._send([p for p in plan.pods if _writes_planned(p)], len(plan.pods), report,
                   deadline)

    def _send(self, work: list, pods: int, report: WindowReport,
              deadline: float | None) -> None:
        """The window's writes, within its budget besides resizes (what is left out of it
        waits in memory) and the process's write limit, resizes first."""
        if not work:
            return
        # resizes first, the largest first: what the deadline leaves for the next window is
        # what matters least (the same order as the rate limit's, ai4dl.controller.plan)
        work.sort(key=lambda p: (p.resize is None, -p.largest_change()))
        choice = choose_writes(work, extra_writes(pods, self.record_share),
                               self.pending.since())
        if choice.unrecorded and not self._mark_unrecorded(report.window_start):
            for p in choice.deferred:       # no marker, no resize without its record
                if p.resize is not None:
                    p.annotations, p.deferred = p.deferred, {}
            choice.unrecorded = 0
        report.unevented, report.unrecorded = choice.unevented, choice.unrecorded
        for p in work:
            if not _writes_planned(p):      # all it had left out: nothing to send
                self.pending.defer(p.pod, p.deferred, report.window_start)
        work = [p for p in work if _writes_planned(p)]
        if not work:
            return
        with ThreadPoolExecutor(max_workers=min(WRITERS, len(work))) as pool:
            outcomes = pool.map(lambda p: self._write_within(p, deadline), work)
            for p, outcome in zip(work, outcomes):
                self._count_outcome(p, outcome, report, p.pod.uid in choice.needed)
        late = report.skipped.get(SKIP_REASONS["deadline"], 0)
        if late:
            log.warning("%s/%s: %d pods' writes left for the next window (not reached by the "
                        "window's end: --kube-api-qps %g)", self.namespace, self.name, late,
                        self.write_budget.qps)

    def _count_outcome(self, p, outcome: str, report: WindowReport, needed: bool) -> None:
        """A pod's write outcome counted (report, metrics), and its record kept: written, or
        left in memory until a later window writes it (``needed``: the record went before a
        resize, as :func:`choose_writes` found)."""
        labels = (self.namespace, self.name)
        if outcome in ("resized", "", "untaken"):
            if p.annotations:
                self.pending.written(p.pod.uid)
                m.RECORDS_WRITTEN.labels(*labels, "needed" if needed else "optional").inc()
            if p.deferred:
                self.pending.defer(p.pod, p.deferred, report.window_start)
        if outcome == "resized":
            report.resized += 1
            m.RESIZES.labels(*labels).inc()
            if p.refused:           # the take-back of a resize the kubelet refused
                m.RESIZES_REFUSED.labels(*labels).inc()
        elif outcome in SKIP_REASONS:
            m.SKIPPED_WINDOWS.labels(*labels, SKIP_REASONS[outcome]).inc()
            report.skipped[SKIP_REASONS[outcome]] = \
                report.skipped.get(SKIP_REASONS[outcome], 0) + 1
        elif outcome:
            report.error = f"{p.pod.namespace}/{p.pod.name}: {outcome}"

    def _mark_unrecorded(self, window: float) -> bool:
        """The PhaseModel's status names ``window`` as one whose resizes go without their
        records (ai4dl.controller.records: an operator restarted within it leaves it); False
        when the write failed."""
        self.write_budget.take(1)
        try:
            drain(self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, self.namespace, PLURAL, self.name,
                {"status": {MARKER: window}}, _preload_content=False))
            self.pending.marked = window
            return True
        except (ApiException, HTTPError) as err:
            m.ERRORS.labels(self.namespace, self.name, "api-status").inc()
            log.warning("%s/%s: window marker not written (%s): every resize goes with its "
                        "record this window", self.namespace, self.name,
                        api_message(err) if isinstance(err, ApiException) else err)
            return False

    def _write_within(self, p, deadline: float | None) -> str:
        """The pod's writes (:meth:`_write_pod`) once the write limit gives their tokens;
        'deadline' (nothing written) when it would give them after ``deadline``."""
        waited = time.monotonic()
        if not self.write_budget.take(_writes_planned(p), deadline):
            return "deadline"
        waited = time.monotonic() - waited
        if waited > 0.001:
            m.WRITE_WAIT_SECONDS.inc(waited)
        return self._write_pod(p)

    def _write_pod(self, p) -> str:
        """'resized', '' (written), 'gone' (the pod vanished mid-window), 'conflict' (someone
        else resized it since our read: replanned next window) or an error message.

        A resize is recorded before it is sent: the annotations (this window's id, what is
        sent) first, then pods/resize, then the Events. An operator that dies between the two
        PATCHes (SIGKILL, an evicted pod) restarts and catches up on the window it was in; had
        the resize gone first, a pod resized but not yet recorded would be planned again from
        its new, already lowered requests: two steps of ``maxDecrease`` in one window
        (tests/test_faults.py, the operator SIGKILLed mid-writes). Recorded first, the worst
        case is a resize one window late."""
        try:
            if p.resize is None:
                self._annotate(p)
                taken = True
            else:
                # the record first when it is written with the resize (ai4dl.controller.records)
                version = self._record(p) if p.annotations else p.pod.resource_version or None
                taken = self._resize(p, version) if version is not False else False
            if taken is False:
                log.info("%s/%s: resized by someone else since this window's read; planned "
                         "again next window", p.pod.namespace, p.pod.name)
                return "conflict"
            if isinstance(taken, dict):
                # The API server stored other values than we sent (it capped or changed them):
                # remember this resize, so it is not sent again until the target moves.
                # (The record goes now, whole, when it was left out of this window's writes.)
                sent = {c["name"]: c["resources"] for c in p.resize["spec"]["containers"]}
                state = json.loads({**p.deferred, **p.annotations}.get(A_STATE) or "{}")
                state["untaken"] = {"containers": sent}
                p.annotations = {**p.deferred, A_STATE: json.dumps(state, separators=(",", ":"),
                                                                   sort_keys=True)}
                p.deferred = {}
                self._annotate(p)
                p.events = [("Warning", "ResizeNotApplied",
                             f"the API server stored {json.dumps(taken, sort_keys=True)} for "
                             f"the resize {json.dumps(sent, sort_keys=True)}; not sent again "
                             f"until the target changes")] + [e for e in p.events
                                                              if e[1] != "Resized"]
            for etype, ereason, msg in p.events:
                self._event(p.pod, etype, ereason, msg)
            if isinstance(taken, dict):
                return "untaken"
            return "resized" if p.resize is not None else ""
        except ApiException as err:
            if err.status == 404:       # the pod vanished mid-window: nothing to do
                return "gone"
            m.ERRORS.labels(self.namespace, self.name, f"api-{err.status}").inc()
            msg = api_message(err)
            log.warning("%s/%s: write failed: %s", p.pod.namespace, p.pod.name, msg)
            self._event(p.pod, "Warning", "ResizeFailed", msg)
            return msg
        except HTTPError as err:        # the API server unreachable (retries spent)
            m.ERRORS.labels(self.namespace, self.name, "api-unreachable").inc()
            return f"API server unreachable: {type(err).__name__}"

    def _sealed(self, p) -> dict:
        """The plan's annotations, its state sealed for this very pod (its owner can read it,
        not forge it)."""
        out = dict(p.annotations)
        if A_STATE in out:
            out[A_STATE] = self.key.seal(state_scope(p.pod.namespace, p.pod.name, p.pod.uid),
                                         json.loads(out[A_STATE]))
        return out

    def _annotate(self, p) -> None:
        """PATCH the plan's annotations (none: nothing)."""
        if p.annotations:
            drain(self.core.patch_namespaced_pod(
                p.pod.name, p.pod.namespace, {"metadata": {"annotations": self._sealed(p)}},
                _preload_content=False))

    def _record(self, p) -> str | None | bool:
        """PATCH the annotations of a resize about to be sent, with the resourceVersion of the
        pod we planned from, so a pod changed by someone else since our read is neither
        recorded nor resized. Returns the resourceVersion the record left (the resize's
        precondition; None when the read had none), or False when the pod's containers changed:
        nothing written, the next window plans from what is there."""
        annotations = self._sealed(p)

        def send(version):
            meta = {"annotations": annotations, **({"resourceVersion": version} if version
                                                   else {})}
            stored = read_json(self.core.patch_namespaced_pod(
                p.pod.name, p.pod.namespace, {"metadata": meta}, _preload_content=False))
            return (stored.get("metadata") or {}).get("resourceVersion") if version else None

        return self._unless_resized_since(p, p.pod.resource_version, send)

    def _resize(self, p, version: str | None) -> bool | dict:
        """PATCH pods/resize with ``version`` (the resourceVersion our own record left on the
        pod we planned from), so a resize made by someone else in between is never overwritten
        with a target computed from stale requests (False: the next window plans from what is
        there; the record stays, and says what was meant).

        True when the answer shows what was sent; else what the API server stored instead
        ({container: {part: {resource: quantity}}}): the resize did not take as sent."""
        def send(version):
            body = dict(p.resize, metadata={"resourceVersion": version}) if version else p.resize
            stored = read_json(self.core.patch_namespaced_pod_resize(
                p.pod.name, p.pod.namespace, body, _preload_content=False))
            return _stored_differs(p.resize, stored) or True

        return self._unless_resized_since(p, version, send)

    def _unless_resized_since(self, p, version: str | None, send, attempts: int = 3):
        """``send(version)``'s answer, the write made with a resourceVersion precondition. On
        a conflict the pod is read again: if only other fields changed (labels, annotations,
        status, containers this resize does not write, such as a sidecar) the write is sent
        again at the new version; if a container it writes changed since the read the plan
        came from, False (nothing more is written)."""
        planned_from = _written_containers(p, p.pod.containers)
        for _ in range(attempts):
            try:
                return send(version)
            except ApiException as err:
                if err.status != 409 or not version:
                    raise
            m.ERRORS.labels(self.namespace, self.name, "api-409").inc()
            fresh = pod_info(read_json(self.core.read_namespaced_pod(
                p.pod.name, p.pod.namespace, _preload_content=False)))
            if _written_containers(p, fresh.containers) != planned_from:
                return False
            version = fresh.resource_version
        return False

    def _event(self, pod: PodInfo, etype: str, reason: str, message: str) -> None:
        self._event_for({"kind": "Pod", "namespace": pod.namespace, "name": pod.name,
                         "uid": pod.uid, "apiVersion": "v1"}, etype, reason, message)

    def _event_for(self, involved: dict, etype: str, reason: str, message: str) -> None:
        write_event(self.core, involved, etype, reason, message)


def _writes_planned(p) -> int:
    """The API writes a pod's plan makes when all goes as planned: its annotations, its
    resize, its Events."""
    return (1 if p.annotations else 0) + (1 if p.resize is not None else 0) + len(p.events)


def _written_containers(p, containers: list) -> list:
    """The containers a planned write sends new resources for (all of them for a write that
    resizes nothing): only a change to those makes the plan stale."""
    names = {c["name"] for c in p.resize["spec"]["containers"]} if p.resize else None
    return [c for c in containers if names is None or c.name in names]


def _stored_differs(resize: dict, stored: dict) -> dict | None:
    """What the API server stored for the containers and values a resize sent, where that is
    not what was sent (compared as quantities: it may respell "1024Mi" as "1Gi")."""
    by_name = {c.get("name"): (c.get("resources") or {})
               for c in (stored.get("spec") or {}).get("containers") or []}
    out: dict = {}
    for c in resize["spec"]["containers"]:
        have = by_name.get(c["name"], {})
        for part, values in c["resources"].items():
            for r, q in values.items():
                got = (have.get(part) or {}).get(r)
                try:
                    same = got is not None and abs(parse_quantity(got) - parse_quantity(q)) <= \
                        1e-9 * max(parse_quantity(q), 1.0)
                except ValueError:
                    same = False
                if not same:
                    out.setdefault(c["name"], {}).setdefault(part, {})[r] = got
    return out or None


def pod_series(plan: WindowPlan, originals: list[dict], last: dict) -> dict:
    """The PhaseModel's per-container gauges after this window (metrics.PodSeries): each
    container of its pods with this window's phase, recommendation, request and author's
    request, and its last values where this window has none (a pod skipped keeps them).
    Pods gone (or no longer opted in) are left out: /metrics must not grow with every pod
    ever seen."""
    resources = tuple(plan.resources)
    nan = math.nan
    table = {}
    present = {p.pod.name for p in plan.pods}
    for key, series in last.items():
        if key[0] in present:
            table[key] = series
    for k, p in enumerate(plan.pods):
        for c in p.containers:
            before = table.get((p.pod.name, c.name))
            own = originals[k].get(c.name, {})
            current = [c.current.get(r, nan) for r in resources]
            original = [own.get(r) for r in resources]
            table[(p.pod.name, c.name)] = m.ContainerSeries(
                c.phase if c.phase is not None else (before.phase if before else None),
                _kept([c.target.get(r, nan) for r in resources], before, "recommended"),
                _kept(current, before, "requested"),
                _kept([nan if v is None else v for v in original], before, "original"))
    return table


def _kept(values: list, before, field: str) -> tuple[float, ...]:
    """This window's values, the last ones where it has none (NaN)."""
    if before is None:
        return tuple(values)
    old = getattr(before, field)
    return tuple(old[i] if v != v and i < len(old) else v for i, v in enumerate(values))
