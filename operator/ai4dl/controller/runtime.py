"""One window of one PhaseModel, end to end: read (Prometheus, the pod index), plan (pure),
write (pods/resize, annotations, Events, the PhaseModel's status). The kopf daemon calls
:meth:`WindowRunner.run` once per window; nothing here keeps state between windows that a
restart could lose (the pods' annotations and Prometheus are the state).

The window's clock, its report and the model cache are in :mod:`ai4dl.controller.runtime_window`;
the writes to the pods (:class:`~ai4dl.controller.runtime_writes.PodWrites`, a base of
:class:`WindowRunner`) in :mod:`ai4dl.controller.runtime_writes`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections import defaultdict
from typing import Sequence

import numpy as np
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from urllib3.exceptions import HTTPError

from ai4dl.controller import idle
from ai4dl.controller import metrics as m
from ai4dl.controller.fairness import VOLATILE_MESSAGES
from ai4dl.controller.novelty import CONDITION as NOVELTY_CONDITION
from ai4dl.controller.novelty import NoveltyVerdict, update_novelty
from ai4dl.controller.plan import START_GRACE_SECONDS, plan_window
from ai4dl.controller.plan_types import DATA_SKIPS, WindowPlan
from ai4dl.controller.runtime_window import (ModelCache, WindowReport, label_selector,
                                             now_iso, window_start)
from ai4dl.controller.runtime_writes import PodWrites
from ai4dl.controller.savings import (add_window, clamp_originals, original_requests,
                                      window_amounts)
from ai4dl.serving import Served, safety_config, served_policy, window_samples
from ai4dl.kube.raw import api_message, drain, paged_items
from ai4dl.controller.podstate import FOREIGN_PROBLEMS, StateKey
from ai4dl.controller.profiles import ProfileStore, first_requests
from ai4dl.controller.runs import RunTracker, oom_floors
from ai4dl.rules.workload_profile import CompactProfile, held_level
from ai4dl.controller.pods import (A_ADMITTED, A_STATE, PodInfo, pod_info, qos_class,
                                   verify_pod)
from ai4dl.controller.records import PendingRecords, assume_raised, unrecorded_window
from ai4dl.controller.query_budget import DEFAULT_BUDGET_SECONDS, OVER_BUDGET, QueryBudget
from ai4dl.controller.throttle import WriteBudget
from ai4dl.crd import GROUP, PLURAL, VERSION
from ai4dl.crd_spec import PhaseModelSpec
from ai4dl.crd_spec import PROMQL_UNCHECKED
from ai4dl.errors import Ai4dlError
from ai4dl.promql import template_problem
from ai4dl.sources.prometheus import young_rates_diluted
from ai4dl.sources.young_rates import feature_rate_ranges, undilute
from ai4dl.sources.prometheus_types import (DEFAULT_RATE_WINDOW, FeatureQuery,
                                            PrometheusQueryError, PrometheusQueryTimeout,
                                            SeriesLimitExceeded)

log = logging.getLogger("ai4dl.operator")

LIST_PAGE = 500   # pods per LIST page: bounds the raw JSON held at once
# Largest cpu (cores) and memory (bytes) a container can have: a sample above it is garbage,
# and no request is set above it (--max-container-cpu / --max-container-memory; the chart's
# ValidatingAdmissionPolicy enforces the same bound on the operator's resizes).
DEFAULT_MAX_VALUE = {"cpu": 2048.0, "memory": float(64 * 2 ** 40)}
# WorkloadProfiles kept per PhaseModel (--max-workloads-per-phasemodel): the most recently ended.
DEFAULT_MAX_WORKLOADS = 10000
# A window's pod writes besides resizes, as a share of its pods (--pod-record-share)
DEFAULT_RECORD_SHARE = 0.05
PROFILE_REFRESH_SECONDS = 3600.0


class WindowRunner(PodWrites):
    """The I/O around :func:`plan_window` for one PhaseModel."""

    def __init__(self, core_api, custom_api, source, namespace: str, name: str,
                 max_value: dict[str, float] | None = None, key: StateKey | None = None,
                 allow_free_promql: bool = False,
                 max_workloads: int = DEFAULT_MAX_WORKLOADS,
                 query_budget_seconds: float = DEFAULT_BUDGET_SECONDS,
                 idle_after_seconds: float = idle.IDLE_AFTER_SECONDS,
                 write_budget: WriteBudget | None = None,
                 record_share: float = DEFAULT_RECORD_SHARE):
        self.core, self.custom, self.source = core_api, custom_api, source
        # the client-side limit on API writes, one for the whole process (--kube-api-qps)
        self.write_budget = write_budget if write_budget is not None else WriteBudget()
        # the window's writes besides resizes, as a share of its pods (--pod-record-share),
        # and the pod records left out of them, kept until written (ai4dl.controller.records)
        self.record_share = record_share
        self.pending = PendingRecords()
        # what this PhaseModel's window query may cost (ai4dl.controller.query_budget)
        self.budget = QueryBudget(query_budget_seconds)
        # how often an empty PhaseModel lists its pods (ai4dl.controller.idle)
        self.idle = idle.IdleLists(idle_after_seconds, idle.spread(namespace, name))
        self.namespace, self.name = namespace, name
        # seals the records the operator keeps on pods (ai4dl.controller.podstate)
        self.key = key if key is not None else StateKey.generate()
        # --allow-free-promql: the feature queries are sent without the confinement check
        # (ai4dl.promql); off, a query that could read another namespace is refused.
        self.allow_free_promql = allow_free_promql
        # Containers already warned about (log) for getting several series for one feature:
        # once per container, not every window.
        self._duplicate_warned: set[tuple[str, str, str]] = set()
        self.max_value = dict(DEFAULT_MAX_VALUE if max_value is None else max_value)
        self.models = ModelCache()
        # Warnings about a pod's own setup already sent, per pod: (uid, reason). Once per pod
        # (per operator process), not every window: an Event per pod per window would bury
        # the one that matters.
        self._noticed: dict[tuple[str, str], set[tuple[str, str]]] = {}
        # Per container, the running statistics of its samples so far (ai4dl.policy.online):
        # {(pod uid, container): (model key, OwnHistory)}.
        self._own: dict = {}
        # Set by the scheduler (ai4dl.controller.handlers, ai4dl.controller.fairness) before
        # each run: conditions it decides (WindowThrottled, WindowsLate), written with every
        # status of the run, and how often this PhaseModel is served (its window, or more when
        # below the operator's minimum): the pods hold their requests that long, so savings
        # count that long.
        self.conditions: list[tuple[str, str, str, str]] = []
        self.period_seconds: int = 0
        # Workload profiles (issue 42): the runs in progress (memory only), the store of the
        # PhaseModel's WorkloadProfile objects, the workloads that have one (a LIST at the
        # first window and every PROFILE_REFRESH_SECONDS, which also enforces the bound).
        self.runs = RunTracker()
        self.profiles = ProfileStore(custom_api, namespace, name, self.key)
        self.max_workloads = max_workloads
        self.profiled: set[str] | None = None
        # per (workload, container): the memory hold of its profile (level, until in a run)
        self.holds: dict[tuple[str, str], tuple[float, float]] = {}
        # per (workload, container): what its first request is computed from (admission's
        # start, kept by the window loop until the run has a full window)
        self.firsts: dict[tuple[str, str], CompactProfile] = {}
        self._profiles_listed = -math.inf
        # The status last written (its JSON without lastWindowTime): a window that changes
        # nothing writes nothing (issue 43: 1,000 idle PhaseModels made 6,088 status PATCHes
        # in 6 minutes). After a restart the first window writes.
        self._status_written: bytes | None = None
        # Whether a window has found a pod of this PhaseModel: until then it has no window
        # duration, skip or novelty series (a labelled histogram is ~13 values with a lock
        # each: per PhaseModel created ahead of its jobs, memory for series that say nothing).
        self.had_pods = False

    # ------------------------------------------------------------------ one window
    def list_pods(self, spec: PhaseModelSpec) -> list[PodInfo]:
        """The PhaseModel's opted-in pods, read once per window: one paged LIST in its
        namespace, filtered by the API server (opt-in label + spec.selector). A watch would
        also echo back every write of ours as an event to parse (two per resized pod), which
        cost more CPU than the writes themselves; between windows the operator needs nothing
        about pods, and it keeps none in memory."""
        return [pod_info(item) for item in paged_items(
            self.core.list_namespaced_pod, self.namespace,
            label_selector=label_selector(spec.selector), page=LIST_PAGE)]

    def run(self, body: dict, pods: Sequence[PodInfo] | None = None,
            now: float | None = None, deadline: float | None = None) -> WindowReport:
        """One window; ``pods`` None lists them (tests and benchmarks may pass their own).
        Its pod writes end at ``deadline`` (wall-clock seconds; default: the next boundary
        after ``now``, on this run's clock): pods not reached wait for the next window."""
        started = time.perf_counter()
        now = time.time() if now is None else now
        spec, failed = self._validated_spec(body, now)
        if failed is not None:
            return failed
        start = window_start(now, spec.window_seconds)
        report = WindowReport(start)
        stopped = self._not_acting(body, spec, report)
        if stopped is not None:
            return stopped
        model, served, failed = self._serving(body, spec, report)
        if failed is not None:
            return failed
        model_key = self.models.model_key[:16] if model is not None else ""
        resting = self._resting(body, spec, report)
        if resting is not None:
            return resting
        if unrecorded_window(body.get("status")) == start and self.pending.marked != start:
            return self._unrecorded(report)     # (its own mark: its records are in memory)
        if pods is None:
            if not self.idle.should_list(now, idle.take_woken(self.namespace, self.name)):
                m.POD_LISTS.labels("idle").inc()
                return report       # no pod last time, none admitted since: status as it is
            pods, failed = self._listed_pods(body, spec, report)
            if failed is not None:
                return failed
            m.POD_LISTS.labels("listed").inc()
            self.idle.listed(now, len(pods))
        mine = self._mine(spec, pods, report, body.get("status") or {})
        W = window_samples(spec)
        n_context = model.crbm_.n_history if model is not None else 0
        samples, rejected, failed = self._fetch(body, spec, report, mine, W, n_context)
        if failed is not None:
            return failed
        # runs that ended since the last window (their pods ended, vanished, or a container
        # restarted): an OOM-killed container's memory is raised at once by this plan
        ended = self.runs.ended(pods, now)
        self._refresh_profiles(now)
        try:
            plan = plan_window(spec, model, mine, samples, n_context, start, now_iso(now),
                               max_value=self.max_value, histories=self._own,
                               model_key=model_key, served=served, rejected=rejected,
                               floors=oom_floors(ended, served.resources),
                               held=self._held(mine, start, spec.window_seconds),
                               starts=first_requests(
                                   mine, self.firsts, start,
                                   spec.window_seconds + START_GRACE_SECONDS, served.resources,
                                   safety_config(spec, served.resources).max_increase))
        except ValueError as err:
            return self._degraded(body, report, "InvalidModel", str(err))
        if deadline is None:        # the next boundary, on this run's clock (tests pass theirs)
            deadline = time.time() + (start + max(spec.window_seconds, self.period_seconds)
                                      - now)
        originals = self._apply_window(body, plan, spec, report, model_key, started, deadline)
        novelty = (update_novelty((body.get("status") or {}).get("novelty"), model_key, start,
                                  report.novel, report.classified, spec.refit)
                   if model is not None else None)
        workloads = self._profile_runs(body, spec, ended, mine, plan, start, W, now)
        savings = self._window_savings(body, spec, plan, originals, start)
        self._processed_status(body, report, plan, model is None, served, novelty, savings,
                               workloads)
        return report

    def _undiluted(self, spec: PhaseModelSpec, mine: Sequence[PodInfo], samples: dict,
                   begin: float, step: float) -> dict:
        """``samples`` with each young container's rate features read over its age, where
        the store reads them over the rate's whole range (ai4dl.sources.young_rates): its
        first window is then what it used, as the trainer and the evaluator read runs."""
        ranges = feature_rate_ranges([f.query for f in spec.features],
                                     getattr(self.source, "rate_window", DEFAULT_RATE_WINDOW))
        if not (ranges > 0).any() or not samples:
            return samples
        young = [((p.namespace, p.name, c.name), began) for p in mine for c in p.containers
                 if (began := p.started.get(c.name)) is not None and began > begin - ranges.max()]
        if not young or young_rates_diluted(self.source) is not True:
            return samples
        for key, began in young:
            values = samples.get(key)
            if values is not None:
                times = begin + step * np.arange(len(values), dtype=np.float64)
                samples[key] = undilute(values, times, began, ranges, step)
        return samples

    def _validated_spec(self, body: dict, now: float
                        ) -> tuple[PhaseModelSpec | None, WindowReport | None]:
        """(the PhaseModel's spec, None), or (None, the degraded report) when it is invalid."""
        try:
            # the PromQL confinement is checked below, with its own reason (QueryRefused)
            spec = PhaseModelSpec.model_validate(body.get("spec") or {}, context=PROMQL_UNCHECKED)
        except ValidationError as err:
            e = err.errors()[0]
            return None, self._degraded(body, WindowReport(now), "InvalidSpec",
                                        f"spec.{'.'.join(map(str, e['loc']))}: {e['msg']}")
        return spec, None

    def _not_acting(self, body: dict, spec: PhaseModelSpec,
                    report: WindowReport) -> WindowReport | None:
        """The report when the window stops before reading anything: the PhaseModel is being
        deleted, is in mode Off, or has a feature query that the PromQL confinement refuses."""
        if (body.get("metadata") or {}).get("deletionTimestamp"):
            return report        # being deleted: its pods' annotations are being removed
        if spec.policy.mode == "Off":
            self._status(body, report, ready=True, reason="Off", message="mode Off: not acting")
            return report
        if not self.allow_free_promql:
            for f in spec.features:
                problem = template_problem(f.query)
                if problem is not None:     # stored before the CRD's rule, or bypassing it
                    m.ERRORS.labels(self.namespace, self.name, "promql-refused").inc()
                    return self._degraded(
                        body, report, "QueryRefused",
                        f"spec.features[{f.name}].query {problem}; nothing is queried or "
                        f"resized until it is fixed", skip=True)
        return None

    def _serving(self, body: dict, spec: PhaseModelSpec, report: WindowReport) -> tuple:
        """(the model or None, the served policy, None), or (None, None, the degraded report)
        when the model or the served policy cannot be had."""
        try:
            meta = body.get("metadata") or {}
            version = (meta["uid"], meta["generation"]) if meta.get("uid") and \
                meta.get("generation") else None
            model = self.models.get(spec, version) if spec.model is not None else None
        except (ValueError, Ai4dlError) as err:
            return None, None, self._degraded(body, report, "InvalidModel", str(err))
        try:
            served = served_policy(spec, model)
        except ValueError as err:
            reason = "NoModel" if model is None else "InvalidModel"
            return None, None, self._degraded(body, report, reason, str(err))
        return model, served, None

    def _listed_pods(self, body: dict, spec: PhaseModelSpec, report: WindowReport
                     ) -> tuple[list[PodInfo] | None, WindowReport | None]:
        """(the PhaseModel's pods, None), or (None, the degraded report) when the LIST fails."""
        labels = (self.namespace, self.name)
        try:
            return self.list_pods(spec), None
        except ApiException as err:
            m.ERRORS.labels(*labels, f"api-{err.status}").inc()
            return None, self._degraded(body, report, "PodListFailed",
                                        f"listing pods: {api_message(err)}", skip=True)
        except (OSError, HTTPError) as err:   # unreachable (urllib3's retries spent)
            m.ERRORS.labels(*labels, "api-unreachable").inc()
            return None, self._degraded(body, report, "PodListFailed",
                                        f"listing pods: {type(err).__name__}: {err}"[:300],
                                        skip=True)

    def _mine(self, spec: PhaseModelSpec, pods: Sequence[PodInfo], report: WindowReport,
              status: dict) -> list[PodInfo]:
        """The running pods of this PhaseModel, their records verified, counted."""
        mine = [p for p in pods if p.running and not p.deleting and p.phasemodel == self.name
                and spec.selector.matches(p.labels)]
        for p in mine:
            verify_pod(p, self.key)     # only records sealed by the operator are read
        # ... and those it has not written yet; a record older than the last window with
        # unrecorded resizes may have missed an increase (a restart): read as raised then
        overlaid = self.pending.overlay(mine)
        assume_raised(mine, self.pending.earlier_marker(unrecorded_window(status),
                                                        report.window_start), overlaid)
        report.pods = len(mine)
        self.had_pods = self.had_pods or bool(mine)
        m.PODS_TRACKED.labels(self.namespace, self.name).set(len(mine))
        return mine

    def _fetch(self, body: dict, spec: PhaseModelSpec, report: WindowReport,
               mine: Sequence[PodInfo], W: int, n_context: int) -> tuple:
        """(samples per container, containers whose samples are refused, None) from one
        query, or (None, None, the degraded report) when Prometheus does not answer."""
        labels = (self.namespace, self.name)
        refs = [(p.namespace, p.name, c.name) for p in mine for c in p.containers
                if not spec.policy.containers or c.name in spec.policy.containers]
        samples = {}
        rejected: dict[tuple[str, str, str], tuple[str, str]] = {}
        if not refs:
            return samples, rejected, None
        step = spec.step_seconds
        # grid: n_context history samples, then the W samples of the window that just ended
        end = report.window_start
        begin = end - (W + n_context - 1) * step
        sent = time.perf_counter()
        try:
            got = self.source.fetch([FeatureQuery(f.name, f.query,
                                                  confined=not self.allow_free_promql)
                                     for f in spec.features],
                                    refs, begin, end, step)
        except PrometheusQueryTimeout as err:
            m.ERRORS.labels(*labels, "query-timeout").inc()
            self._charge(report, sent, len(refs), timed_out=True)
            return None, None, self._degraded(body, report, "QueryTimeout", f"{err}; "
                                              f"{self._resting_message(report)}", skip=True)
        except SeriesLimitExceeded as err:
            m.ERRORS.labels(*labels, "too-many-series").inc()
            return None, None, self._degraded(body, report, "TooManySeries", str(err), skip=True)
        except PrometheusQueryError as err:
            m.ERRORS.labels(*labels, "promql").inc()
            return None, None, self._degraded(body, report, "QueryError", str(err), skip=True)
        except Ai4dlError as err:   # PrometheusUnavailable: no data, no resize
            m.ERRORS.labels(*labels, "prometheus").inc()
            # a query that no answer came to within the timeouts costs its time all the same
            self._charge(report, sent, len(refs), timed_out=False)
            return None, None, self._degraded(body, report, "PrometheusUnavailable", str(err),
                                              skip=True)
        # an answer over the budget is used (its cost is paid); the next windows rest
        self._charge(report, sent, len(refs), timed_out=False)
        samples = self._undiluted(spec, mine, {tuple(ref): got[ref].values for ref in got},
                                  begin, step)
        for ref, features in got.duplicated.items():
            key = tuple(ref)
            detail = (f"more than one series for {', '.join(features)} (scraped twice, or "
                      f"the query does not give one series per container): its samples are "
                      f"not used")
            rejected[key] = ("duplicate-series", detail)
            if key not in self._duplicate_warned:
                self._duplicate_warned.add(key)
                log.warning("PhaseModel %s/%s: container %s: %s", self.namespace, self.name,
                            "/".join(key), detail)
        return samples, rejected, None

    def _resting(self, body: dict, spec: PhaseModelSpec,
                 report: WindowReport) -> WindowReport | None:
        """The degraded report of a window not queried because an earlier window's query cost
        too much (ai4dl.controller.query_budget), else None."""
        strike = self.budget.resting(report.window_start,
                                     tuple((f.name, f.query) for f in spec.features))
        if strike is None:
            return None
        m.ERRORS.labels(self.namespace, self.name, "query-over-budget").inc()
        return self._degraded(body, report, OVER_BUDGET, self.budget.message(
            strike, report.window_start, self._period()), skip=True)

    def _period(self) -> float:
        return float(self.period_seconds or 1)

    def _charge(self, report: WindowReport, sent: float, containers: int,
                timed_out: bool) -> None:
        """Charge the window's query for ``containers`` containers to the budget (its wall
        time since ``sent``)."""
        seconds = time.perf_counter() - sent
        m.QUERY_SECONDS.labels(self.namespace, self.name).observe(seconds)
        strike = self.budget.charge(report.window_start, seconds, timed_out, self._period(),
                                    containers)
        if strike is not None and not timed_out:
            log.warning("PhaseModel %s/%s: window %s: %s", self.namespace, self.name,
                        report.window_start, self._resting_message(report))

    def _resting_message(self, report: WindowReport) -> str:
        strike = self.budget.last
        if strike is None:
            return "the next window is queried as usual"
        return self.budget.message(strike, report.window_start + self._period(),
                                   self._period())

    def _unrecorded(self, report: WindowReport) -> WindowReport:
        """The window is one whose resizes an operator (an earlier process) sent without their
        records: its pods are left until the next window (ai4dl.controller.records)."""
        log.warning("%s/%s: this window's resizes were sent by an earlier operator process "
                    "without their pods' records: the window is left, its pods planned again "
                    "next window", self.namespace, self.name)
        m.SKIPPED_WINDOWS.labels(self.namespace, self.name, "restarted-mid-window").inc()
        report.skipped["restarted-mid-window"] = 1
        return report

    def _apply_window(self, body: dict, plan: WindowPlan, spec: PhaseModelSpec,
                      report: WindowReport, model_key: str, started: float,
                      deadline: float) -> list[dict]:
        """The plan applied (records, histories, the writes to the pods) and timed; the
        authors' requests per pod, read once per pod: for the metrics and the savings."""
        labels = (self.namespace, self.name)
        report.plan = plan
        self._rejected_records(plan)
        self._keep_histories(plan, model_key)
        originals = [self._capped_originals(p, labels) if p.containers else {}
                     for p in plan.pods]
        self._apply(plan, spec, report, originals, deadline)
        if report.unevented:
            self._event_on_phasemodel(body, "Normal", "Resized", (
                f"{report.resized} pods resized this window; {report.unevented} of them have "
                f"no Resized Event of their own (a window writes at most "
                f"{self.record_share:.0%} of its pods' records and Events besides the resizes: "
                f"--pod-record-share)"))
        if self.had_pods:
            m.RECORDS_PENDING.labels(*labels).set(len(self.pending))
        report.seconds = time.perf_counter() - started
        if self.had_pods:
            m.WINDOW_SECONDS.labels(*labels).observe(report.seconds)
        return originals

    def _processed_status(self, body: dict, report: WindowReport, plan: WindowPlan,
                          no_model: bool, served: Served, novelty: NoveltyVerdict | None,
                          savings: dict | None, workloads: dict) -> None:
        """The status of a window processed: what was served, to how many pods, and what the
        window found wrong."""
        self._status(body, report, ready=True,
                     reason="BaselineNoModel" if served.baseline and no_model
                     else "WindowProcessed",
                     message=f"{report.pods} pods, {report.resized} resized; serving "
                             f"{served.summary()}" + (" (no model yet)" if no_model
                                                      else ""),
                     per_phase=plan.pods_per_phase(), novelty=novelty,
                     extra=self._plan_conditions(body, plan), served=served.reason,
                     policy=served.summary(), savings=savings, workloads=workloads)

    def _window_savings(self, body: dict, spec: PhaseModelSpec, plan: WindowPlan,
                        originals: list[dict], start: float) -> dict | None:
        """The status' savings with this window added (each amount counted in the metrics),
        or None: a window with nothing to count adds nothing (and writes no status for it)."""
        amounts = window_amounts(plan.pods, plan.resources, spec.policy.mode,
                                 max(spec.window_seconds, self.period_seconds), originals)
        # (no container counted: every amount 0, as for a PhaseModel with no pod)
        counted = any(orig or held for orig, held in amounts.values())
        savings = add_window((body.get("status") or {}).get("savings"), amounts, start,
                             now_iso(start)) if counted else None
        if savings is not None:
            for r, (orig, held) in amounts.items():
                m.REQUEST_SECONDS.labels(self.namespace, self.name, r, "original").inc(orig)
                m.REQUEST_SECONDS.labels(self.namespace, self.name, r, "allocated").inc(held)
        return savings

    def _refresh_profiles(self, now: float) -> None:
        """The PhaseModel's workload profiles (the holds the window's plan keeps), read at the
        first window and every PROFILE_REFRESH_SECONDS, the bound enforced then. A failure is
        logged and counted: it never stops the window's resizes."""
        if self.profiled is not None and now - self._profiles_listed < PROFILE_REFRESH_SECONDS:
            return
        self._profiles_listed = now
        try:
            stored, deleted = self.profiles.refresh(self.max_workloads)
        except Exception as err:     # noqa: BLE001 — profiles must never stop a window
            m.ERRORS.labels(self.namespace, self.name, "profile").inc()
            log.warning("PhaseModel %s/%s: workload profiles not read: %s: %s",
                        self.namespace, self.name, type(err).__name__, str(err)[:300])
            return
        if deleted:
            m.PROFILES_DELETED.labels(self.namespace, self.name).inc(deleted)
        self.profiled = set(stored)
        self.holds, self.firsts = {}, {}
        for workload, got in stored.items():
            self._keep_holds(workload, got.containers, now)

    def _keep_holds(self, workload: str, profiles, now: float) -> None:
        """Each container's memory hold (:meth:`WorkloadProfile.hold`), as of ``now``, and
        what its first request is computed from."""
        for container, profile in profiles.items():
            self.firsts[(workload, container)] = profile.compact()
            hold = profile.hold(now)
            if hold is not None:
                self.holds[(workload, container)] = hold

    def _held(self, mine: Sequence[PodInfo], start: float,
              window_seconds: float) -> dict[tuple[str, str], float]:
        """Per (pod uid, container): the memory its workload's profile holds for the window
        starting at ``start`` (:func:`~ai4dl.rules.workload_profile.held_level`, the
        evaluator's own rule)."""
        out = {}
        for p in mine:
            # a Guaranteed pod's limits follow its requests: what is held is also a limit
            as_limit = qos_class(p.containers) == "Guaranteed"
            for c in p.containers:
                hold, began = self.holds.get((p.workload, c.name)), p.started.get(c.name)
                if hold is None or began is None:
                    continue
                level = held_level(hold, start - began, as_limit, window_seconds)
                if math.isfinite(level):
                    out[(p.uid, c.name)] = level
        return out

    def _profile_runs(self, body: dict, spec: PhaseModelSpec, ended: Sequence,
                      mine: Sequence[PodInfo], plan: WindowPlan, start: float, W: int,
                      now: float) -> dict:
        """Hand the runs that ended to their workloads' profiles (one write per workload at
        most), feed the window to the runs in progress, and count the workloads for the
        status. A failure here is logged and counted: it never stops the window's resizes."""
        self.runs.observe(plan, start, W, spec.step_seconds)
        by_workload: dict[str, list] = defaultdict(list)
        for e in ended:
            by_workload[e.workload].append((e.container, e.run))
        max_increase = safety_config(spec, plan.resources).max_increase
        uid = (body.get("metadata") or {}).get("uid", "")
        try:
            for workload, runs in by_workload.items():
                written = self.profiles.record_runs(workload, runs, plan.resources, uid, now,
                                                    max_increase)
                if written is not None:
                    m.PROFILE_WRITES.labels(self.namespace, self.name).inc()
                    if self.profiled is not None:
                        self.profiled.add(workload)
                    self._keep_holds(workload, written, now)
        except Exception as err:     # noqa: BLE001 — profiles must never stop a window
            m.ERRORS.labels(self.namespace, self.name, "profile").inc()
            log.warning("PhaseModel %s/%s: workload profiles not updated: %s: %s",
                        self.namespace, self.name, type(err).__name__, str(err)[:300])
        running = {p.workload for p in mine}
        known = self.profiled or set()
        return {"running": len(running), "profiled": len(running & known),
                "stored": len(known), "profileWrites": self.profiles.writes}

    def _capped_originals(self, p, labels) -> dict:
        """The pod's authors' requests for the savings, none above the largest a container can
        have (``clamp_originals``); each clamped one is counted and logged, naming the pod."""
        originals, clamped = clamp_originals(original_requests(p.pod), self.max_value)
        for container, resource, value in clamped:
            m.ORIGINALS_CLAMPED.labels(*labels, resource).inc()
            log.warning("PhaseModel %s/%s: pod %s container %s: its author's %s request %g is "
                        "above the largest a container can have (%g): the savings count it at "
                        "that", self.namespace, self.name, p.pod.name, container, resource,
                        value, self.max_value[resource])
        return originals

    def _rejected_records(self, plan: WindowPlan) -> None:
        """Records on a pod that are not the operator's: counted, and — when someone wrote them
        (not merely an earlier key) — a Warning Event on that pod, once, naming the record. The
        pod itself is planned as a new one (its decreases wait for the cool-down); the
        PhaseModel and its other pods are not affected."""
        for p in plan.pods:
            for annotation, problem, detail in (
                    (A_STATE, p.pod.state_problem, p.pod.state_detail),
                    (A_ADMITTED, p.pod.admitted_problem, "")):
                if problem is None:
                    continue
                m.STATE_REJECTED.labels(self.namespace, self.name, annotation, problem).inc()
                if problem in FOREIGN_PROBLEMS:
                    what = {"unsigned": "is not sealed by the operator",
                            "forged": "does not carry the operator's signature for this pod",
                            "malformed": "is malformed"}[problem]
                    p.notices.append(("StateRejected", (
                        f"annotation {annotation} {what}{': ' + detail if detail else ''}; "
                        f"ignored: the operator keeps its own records (this pod is sized as a "
                        f"new one, decreases held for the cool-down"
                        f"{', and left out of the savings' if annotation == A_ADMITTED else ''})"
                        )[:1000]))
                else:
                    log.info("%s/%s: %s sealed by another key (an earlier operator process?): "
                             "read as absent", p.pod.namespace, p.pod.name, annotation)

    def _keep_histories(self, plan: WindowPlan, model_key: str) -> None:
        """Each planned container's running statistics, for the next window (memory only: the
        pod's state annotation has them too whenever the pod is written)."""
        present = {p.pod.uid for p in plan.pods}
        self._own = {k: v for k, v in self._own.items() if k[0] in present}
        for p in plan.pods:
            for c in p.containers:
                if c.own is not None:
                    self._own[(p.pod.uid, c.name)] = (model_key, c.own)

    def _plan_conditions(self, body: dict, plan: WindowPlan) -> list[tuple[str, str, str, str]]:
        """(type, status, reason, message) of what the window found wrong: pods skipped for gaps
        or garbage in their metrics (MetricsIncomplete, with the share), and bounds that cannot
        hold (BoundsConflict). A bound conflict is also a Warning Event on the PhaseModel when
        it appears."""
        out = []
        skips, considered = plan.data_skips(), plan.considered()
        n = sum(skips.values())
        for r in DATA_SKIPS if self.had_pods else ():
            m.PODS_SKIPPED.labels(self.namespace, self.name, r).set(skips.get(r, 0))
        if n:
            detail = ", ".join(f"{r} {c}" for r, c in sorted(skips.items()))
            out.append(("MetricsIncomplete", "True", "PodsSkipped",
                        f"{n} of {considered} pods ({100.0 * n / max(considered, 1):.0f} %) "
                        f"skipped this window, never resized on missing or bad samples: "
                        f"{detail}"))
        else:
            out.append(("MetricsIncomplete", "False", "Complete",
                        f"every pod's window was complete ({considered} pods)"))
        problems = list(plan.bound_conflicts)
        if plan.ceiling_below_usage:
            problems.append(f"the memory ceiling is below the working set of "
                            f"{plan.ceiling_below_usage} pods: their requests come down to it "
                            f"at most maxDecrease per window")
        if problems:
            reason = "FloorAboveCeiling" if plan.bound_conflicts else "CeilingBelowUsage"
            out.append(("BoundsConflict", "True", reason, "; ".join(problems)))
            prev = _condition(body, "BoundsConflict")
            if prev.get("status") != "True" or prev.get("message") != out[-1][3]:
                self._event_on_phasemodel(body, "Warning", reason, out[-1][3])
        else:
            out.append(("BoundsConflict", "False", "BoundsHold", ""))
        return out

    def _event_on_phasemodel(self, body: dict, etype: str, reason: str, message: str) -> None:
        meta = body.get("metadata") or {}
        self._event_for({"kind": "PhaseModel", "namespace": self.namespace, "name": self.name,
                         "uid": meta.get("uid", ""), "apiVersion": f"{GROUP}/{VERSION}"},
                        etype, reason, message)

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
                novelty: NoveltyVerdict | None = None,
                extra: list[tuple[str, str, str, str]] = (), served: str | None = None,
                policy: str | None = None, savings: dict | None = None,
                workloads: dict | None = None) -> None:
        old = {c.get("type"): c for c in (body.get("status") or {}).get("conditions") or []}
        now = now_iso()

        def cond(ctype: str, status: str, r: str, msg: str) -> dict:
            prev = old.get(ctype, {})
            changed = prev.get("status") != status
            return {"type": ctype, "status": status, "reason": r, "message": msg[:1000],
                    "lastTransitionTime": now if changed else prev.get("lastTransitionTime", now)}

        # Degraded: the window could not be processed, or it was but skipped pods for bad
        # metrics or works against bounds that cannot hold (the window's own conditions say
        # which); Ready stays True in the second case.
        trouble = next((x for x in extra if x[1] == "True"), None)
        if not ready:
            degraded = cond("Degraded", "True", reason, message)
        elif trouble is not None:
            degraded = cond("Degraded", "True", trouble[0], trouble[3])
        else:
            degraded = cond("Degraded", "False", reason, "")
        conditions = [cond("Ready", "True" if ready else "False", reason, message), degraded]
        conditions += [cond(*x) for x in extra]
        conditions += [cond(*x) for x in self.conditions]
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
        if served is not None:
            status["servedPolicy"] = served[:300]
        if policy is not None:
            status["policy"] = policy[:100]
        if savings is not None:
            status["savings"] = savings
        if workloads is not None:
            status["workloads"] = workloads
        # written on change only: lastWindowTime is the last window that changed the status
        # (the operator's liveness is its metrics and health endpoint, not a write per window)
        seen = _change_key(status)
        if seen == self._status_written:
            m.STATUS_WRITES.labels(self.namespace, self.name, "unchanged").inc()
            return
        try:
            # the answer (the whole PhaseModel, its model documents too) is not read into
            # objects: for a 180 KiB document that was 500 KB of Python per status write
            drain(self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, self.namespace, PLURAL, self.name, {"status": status},
                _preload_content=False))
            self._status_written = seen
            m.STATUS_WRITES.labels(self.namespace, self.name, "written").inc()
        except ApiException as err:
            if err.status != 404:
                log.warning("status of %s/%s not written: %s", self.namespace, self.name,
                            api_message(err))


def _change_key(status: dict) -> bytes:
    """What a status is compared by to decide whether to write it: all of it but
    lastWindowTime and the messages of VOLATILE_MESSAGES conditions (one window's figures)."""
    kept = {k: v for k, v in status.items() if k != "lastWindowTime"}
    kept["conditions"] = [{k: v for k, v in c.items() if k != "message"}
                          if c.get("type") in VOLATILE_MESSAGES else c
                          for c in status.get("conditions") or []]
    # a digest, not the text: kept per PhaseModel between windows (a status is 1-2 KB of JSON)
    return hashlib.blake2b(json.dumps(kept, sort_keys=True, default=str).encode(),
                           digest_size=16).digest()


def _condition(body: dict, ctype: str) -> dict:
    return next((c for c in (body.get("status") or {}).get("conditions") or []
                 if c.get("type") == ctype), {})
