"""kopf registration: one daemon per PhaseModel (one loop per model, never one timer per pod).
kopf does not watch pods at all: each window lists the model's opted-in pods once, filtered by
the API server (ai4dl.controller.runtime.WindowRunner.list_pods), so the operator never reads
or caches other pods, and kopf writes none of its last-handled annotations onto pods. The
daemons only wait for their boundaries: the windows' blocking work runs on a bounded pool of
window workers that namespaces take in turn (ai4dl.controller.fairness), so no namespace's
PhaseModels can delay another's windows or starve the event loop that serves admission.

Besides: one sweep per operator for opted-in pods that no PhaseModel serves
(ai4dl.controller.orphans), and, when a PhaseModel is deleted, the removal of the annotations
the operator wrote on its pods."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import ssl
import threading
import time
from functools import partial

import aiohttp.web
import kopf
import requests
from kubernetes import client, config
from requests.adapters import HTTPAdapter

from ai4dl.controller import idle, memory, profile_index
from ai4dl.controller import metrics as m
from ai4dl.controller.admission import admission_target, admit, limit_range_rules, quota_room
from ai4dl.controller.fairness import WindowScheduler, late_condition, throttled_condition
from ai4dl.controller.orphans import OrphanSweep, forget_phasemodel
from ai4dl.controller.podstate import StateKey
from ai4dl.controller.profile_index import ProfileIndex
from ai4dl.controller.query_budget import DEFAULT_BUDGET_SECONDS
from ai4dl.controller.runtime import (DEFAULT_MAX_WORKLOADS, DEFAULT_RECORD_SHARE,
                                     WindowRunner)
from ai4dl.controller.runtime_window import now_iso, window_start
from ai4dl.controller.runtime_writes import WRITERS
from ai4dl.controller.throttle import WriteBudget
from ai4dl.controller.webhook import WEBHOOK_PATH, SelfSignedCertificates, patch_ca_bundle
from ai4dl.controller.window_loop import Due, Served, WindowLoop, window_seconds
from ai4dl.crd import GROUP, MODEL_ANNOTATION, OPT_IN_LABEL, PLURAL, VERSION
from ai4dl.kube.raw import write_event
from ai4dl.kube.workload import workload_of
from ai4dl.sources.prometheus import SERIES_FACTOR, PrometheusSource

log = logging.getLogger("ai4dl.operator")

# Filled in by ai4dl.controller.__main__ (or tests) before kopf starts.
CONFIG: dict = {"prometheus_url": os.environ.get("AI4DL_PROMETHEUS_URL", ""),
                "prometheus_timeout": 10.0, "prometheus_retries": 3, "max_value": None,
                "namespaces": [], "orphan_check_seconds": 0.0, "allow_free_promql": False,
                "max_series_per_query": 0, "min_window_seconds": 60.0,
                "query_budget_seconds": DEFAULT_BUDGET_SECONDS,
                "idle_after_seconds": idle.IDLE_AFTER_SECONDS,
                "window_workers": 4, "window_late_seconds": 5.0}
_TASKS: list[asyncio.Task] = []
#: Fields of a PhaseModel left out of kopf's last-handled-configuration annotation.
DIFFBASE_IGNORED = ("spec.model", "spec.previousModel")


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_) -> None:
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = 4
    # No watch on CustomResourceDefinitions or Namespaces: the PhaseModel CRD is installed
    # before the operator (the chart does it) and the namespaces are given, so the operator
    # needs no cluster-wide read of either (least privilege; a new CRD needs a restart).
    settings.scanning.disabled = True
    # kopf keeps the object's essence in an annotation (last-handled-configuration) for its
    # change detection; with a model inside, a valid PhaseModel's essence passed the API
    # server's 256 KiB limit on annotations, and kopf retried the refused patch for ever
    # (issue 43). The models are not what the handlers react to: left out of it.
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        ignored_fields=DIFFBASE_IGNORED)
    if CONFIG.get("orphan_check_seconds"):
        _TASKS.append(asyncio.create_task(_orphan_sweeps(CONFIG["orphan_check_seconds"])))
    if CONFIG.get("webhook"):
        await _configure_webhook(settings, CONFIG["webhook"])


@kopf.on.cleanup()
async def stop_tasks(**_) -> None:
    for task in _TASKS:
        task.cancel()
    _TASKS.clear()
    for stop in _STOPS:     # the profile index's threads (they end at their next event)
        stop.set()
    _STOPS.clear()


async def _configure_webhook(settings: kopf.OperatorSettings, cfg: dict) -> None:
    """The admission server (kopf's, on our certificate; kopf manages no webhook
    configuration: the chart owns it). Self-signed mode: make the certificate; a background
    task writes its CA into our configuration (until then the API server cannot call us and
    creates pods unchanged) and renews it."""
    if cfg["cert_dir"]:
        certfile = os.path.join(cfg["cert_dir"], "tls.crt")
        keyfile = os.path.join(cfg["cert_dir"], "tls.key")
    else:
        certs = SelfSignedCertificates(cfg["hosts"])
        core, _ = _clients()
        admission_api = client.AdmissionregistrationV1Api(core.api_client)
        certfile, keyfile = str(certs.certfile), str(certs.keyfile)
        _TASKS.append(asyncio.create_task(_renew_certificates(certs, admission_api,
                                                              cfg["configuration"])))
    client_ca = cfg.get("client_ca_file") or None
    settings.admission.server = _ReviewServer(
        addr=cfg["addr"], port=cfg["port"], certfile=certfile, pkeyfile=keyfile,
        host=cfg["hosts"][0] if cfg["hosts"] else None, file_check_interval=10.0,
        # the API server authenticates with its webhook client certificate: a caller without
        # one signed by this CA fails the TLS handshake and never reaches a handler
        verify_mode=ssl.CERT_REQUIRED if client_ca else None, verify_cafile=client_ca,
        # kopf re-reads ``cafile`` (only passed on as a caBundle, unused: managed is None)
        # with the serving files when it changes: a rotated client CA is picked up too
        cafile=client_ca, allowed_client_names=tuple(cfg.get("client_names") or ()))
    settings.admission.managed = None


async def _orphan_sweeps(interval: float) -> None:
    core, custom = _clients()
    sweep = OrphanSweep(core, custom, CONFIG.get("namespaces") or [], partial(write_event, core))
    while True:
        try:
            await asyncio.to_thread(sweep.run)
        except Exception as err:   # an unreachable API server: next time
            log.warning("orphan sweep failed: %s: %s", type(err).__name__, str(err)[:300])
        await asyncio.sleep(interval)


_CLIENTS: tuple | None = None
_CLIENTS_LOCK = threading.Lock()


def _clients():
    """(CoreV1Api, CustomObjectsApi) on one API client for the whole process. One per
    PhaseModel was a connection pool, a TLS connection and a parsed kubeconfig each (issue 43:
    300 idle PhaseModels held 303 sockets); the pool is sized for every window worker's
    writers at once (urllib3's pool is thread-safe), and an in-cluster token is re-read by the
    client when it rotates."""
    global _CLIENTS
    with _CLIENTS_LOCK:
        if _CLIENTS is None:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            cfg = client.Configuration.get_default_copy()
            cfg.connection_pool_maxsize = int(CONFIG.get("window_workers") or 4) * WRITERS + 2
            api = client.ApiClient(cfg)
            _CLIENTS = (client.CoreV1Api(api), client.CustomObjectsApi(api))
        return _CLIENTS


_WRITE_BUDGET: list = []


def _write_budget() -> WriteBudget:
    """The process's one limit on API writes (--kube-api-qps, --kube-api-burst): every window
    writes to the same API server."""
    if not _WRITE_BUDGET:
        _WRITE_BUDGET.append(WriteBudget(float(CONFIG.get("kube_api_qps") or 0.0),
                                         int(CONFIG.get("kube_api_burst") or 1)))
    return _WRITE_BUDGET[0]


_SOURCE: list = []


def _source():
    """The one Prometheus client of every PhaseModel's windows (it keeps no state of a
    PhaseModel: one each was 1.3 KB per PhaseModel)."""
    if not CONFIG["prometheus_url"]:
        raise kopf.PermanentError("no Prometheus URL (--prometheus-url or AI4DL_PROMETHEUS_URL)")
    if not _SOURCE:
        _SOURCE.append(_new_source())
    return _SOURCE[0]


def _new_source():
    # A window's answer is bounded: --max-series-per-query, else SERIES_FACTOR per container
    # and feature asked for (more is refused unparsed: TooManySeries).
    return PrometheusSource(CONFIG["prometheus_url"], timeout=CONFIG["prometheus_timeout"],
                            retries=CONFIG["prometheus_retries"],
                            max_series=CONFIG.get("max_series_per_query") or None,
                            max_series_factor=SERIES_FACTOR, session=_prometheus_session())


_SESSION: list = []


def _prometheus_session():
    """One HTTP session (one connection pool) for every PhaseModel's queries: a session each
    kept a connection to Prometheus open per PhaseModel that had queried (1,000 served
    PhaseModels, 1,000 idle connections). Its pool holds as many connections as there are
    window workers, which are all that query at once."""
    if not _SESSION:
        session = requests.Session()
        workers = int(CONFIG.get("window_workers") or 4)
        adapter = HTTPAdapter(pool_connections=1, pool_maxsize=workers, max_retries=0)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        _SESSION.append(session)
    return _SESSION[0]


def state_key():
    """The key that seals the operator's records on pods (ai4dl.controller.podstate): from
    ``--state-key-file`` (CONFIG), else one random key for this process, made once."""
    key = CONFIG.get("state_key")
    if key is None:
        key = CONFIG["state_key"] = StateKey.generate()
        log.warning("no --state-key-file: the records on pods are sealed with a key of this "
                    "process only; after a restart they read as absent (cool-downs and running "
                    "statistics start again)")
    return key


def phasemodel_labels(text: str) -> dict[str, str] | None:
    """'shard=a,team=x' -> kopf's label filter; None (every PhaseModel) when empty."""
    pairs = [item.partition("=") for item in text.split(",") if item.strip()]
    return {k.strip(): v.strip() for k, _, v in pairs} or None


#: The kopf index of the PhaseModels this instance serves, read by the window loop.
ENTRIES_INDEX = "phasemodel_entries"
#: What a window reads of its PhaseModel's metadata.
ENTRY_METADATA = ("name", "namespace", "uid", "generation", "resourceVersion",
                  "deletionTimestamp")


def phasemodel_entries(namespace, name, body, **_):
    """kopf index: a served PhaseModel as its windows read it (spec, status, a few metadata
    fields), not kopf's whole object: managedFields and kopf's own annotations stay out of
    memory (ai4dl.controller.window_loop)."""
    meta = body.get("metadata") or {}
    return {(namespace, name): {"spec": dict(body.get("spec") or {}),
                                "status": dict(body.get("status") or {}),
                                "metadata": {k: meta[k] for k in ENTRY_METADATA if k in meta}}}


def _not_deleted(meta, **_) -> bool:
    """A PhaseModel whose deletion began leaves the index: its loop stops (kopf's deletion
    handler cleans its pods meanwhile)."""
    return not meta.get("deletionTimestamp")


def _runner(namespace: str, name: str) -> WindowRunner:
    """A served PhaseModel's runner (the state its windows keep), when the loop first sees it."""
    core, custom = _clients()
    runner = WindowRunner(core, custom, _source(), namespace, name,
                          max_value=CONFIG.get("max_value"), key=state_key(),
                          allow_free_promql=bool(CONFIG.get("allow_free_promql")),
                          max_workloads=int(CONFIG.get("max_workloads") or DEFAULT_MAX_WORKLOADS),
                          query_budget_seconds=float(CONFIG.get("query_budget_seconds",
                                                                DEFAULT_BUDGET_SECONDS)),
                          idle_after_seconds=float(CONFIG.get("idle_after_seconds",
                                                              idle.IDLE_AFTER_SECONDS)),
                          write_budget=_write_budget(),
                          record_share=float(CONFIG.get("pod_record_share",
                                                        DEFAULT_RECORD_SHARE)))
    idle.serve(namespace, name)
    return runner


def _forget(namespace: str, name: str) -> None:
    idle.forget(namespace, name)
    m.forget_phasemodel(namespace, name)


async def _queue_window(served: Served, entry: dict, due: Due) -> float:
    """A PhaseModel's window, queued for the window workers, which take namespaces in turn
    (ai4dl.controller.fairness); the boundary handled."""
    runner, scheduler = served.runner, _scheduler()
    minimum = float(CONFIG.get("min_window_seconds") or 0.0)
    runner.period_seconds = due.period
    throttled = throttled_condition(window_seconds(entry), due.period, minimum)
    ahead = (len(scheduler.queue), scheduler.queue.tenants_waiting(),
             scheduler.queue.depth(runner.namespace))
    # the window reads a copy: the index's entry is kopf's, replaced by the next event
    snapshot = {part: dict(entry.get(part) or {}) for part in ("spec", "status", "metadata")}
    return await scheduler.run(runner.namespace, partial(
        _run_window, runner, snapshot, due.at, due.grid, due.settle, throttled, ahead,
        scheduler.workers, time.time()))


async def start_window_loop(phasemodel_entries: kopf.Index, **_) -> None:
    """The one window loop of every PhaseModel in the index (ai4dl.controller.window_loop)."""
    loop = WindowLoop(phasemodel_entries, _runner, _queue_window, _forget,
                      minimum=float(CONFIG.get("min_window_seconds") or 0.0),
                      settle_seconds=float(CONFIG.get("settle_seconds", 1.0)))
    _TASKS.append(asyncio.create_task(loop.run()))


def _run_window(runner: WindowRunner, snapshot: dict, due: float, grid: int, settle: float,
                throttled: tuple, ahead: tuple[int, int, int], workers: int,
                queued: float) -> float:
    """One window's blocking work, on a window worker: the latest window whose boundary (on
    ``grid``) + settle has passed (the one that was due, or a later one when the work waited
    past it), with its lateness measured, shown (metric, WindowsLate) and logged. Returns the
    boundary handled."""
    ns, name = runner.namespace, runner.name
    started = time.time()
    boundary = window_start(started - settle, grid)
    lateness, wait = max(0.0, started - due), started - queued
    tolerance = float(CONFIG.get("window_late_seconds", 5.0))
    if lateness - wait > tolerance:
        cause = "the previous window's work overran its period"
    else:
        n, k, own = ahead
        cause = (f"it waited {wait:.1f} s for one of the operator's {workers} window workers "
                 f"({n} windows of {k} namespaces were queued when it was due, {own} of them "
                 f"from this namespace; namespaces take turns)")
    late = late_condition(lateness, tolerance, cause, now_iso(boundary))
    runner.conditions = [throttled, late]
    m.WINDOW_WAIT_SECONDS.labels(ns).observe(max(0.0, wait))
    m.WINDOW_LATENESS.labels(ns, name, "started").set(lateness)
    if late[1] == "True":
        m.WINDOWS_LATE.labels(ns, name).inc()
        log.warning("PhaseModel %s/%s: window late: %s", ns, name, late[3])
    try:
        # its pod writes end when the next window is due, its boundary + settle (pods not
        # reached wait for it): the writes get a whole period after the window started
        report = runner.run(snapshot, now=boundary + settle,
                            deadline=boundary + grid + settle)
        # the lateness and the duration: what a slow window is measured by (tests read them
        # to size their deadlines and to say why a wait ran out)
        log.info("PhaseModel %s/%s window %s: %d pods, %d resized, skipped %s; started %.2f s "
                 "after due, took %.2f s", ns, name, report.window_start, report.pods,
                 report.resized, report.skipped, lateness, report.seconds)
    except Exception:   # one bad window must not end the loop of this PhaseModel
        log.exception("PhaseModel %s/%s: window failed", ns, name)
    m.WINDOW_LATENESS.labels(ns, name, "finished").set(time.time() - due)
    return boundary


_SCHEDULER: WindowScheduler | None = None


def _scheduler() -> WindowScheduler:
    """The operator's one pool of window workers (--window-workers), made on first use."""
    global _SCHEDULER
    if _SCHEDULER is None:
        def gauges(s: WindowScheduler) -> None:
            m.WINDOW_QUEUE_DEPTH.set(len(s.queue))
            m.WINDOWS_RUNNING.set(s.queue.in_flight())
            if not len(s.queue) and not s.queue.in_flight():
                memory.give_back()      # a round of windows done: its garbage returned
        _SCHEDULER = WindowScheduler(int(CONFIG.get("window_workers") or 4), on_change=gauges)
    return _SCHEDULER


async def phasemodel_deleted(namespace, name, **_):
    """Its pods keep nothing that describes a model that is gone (kopf holds the PhaseModel's
    finalizer until this returns; it left the window loop's index when deletion began)."""
    core, _ = _clients()
    n = await asyncio.to_thread(forget_phasemodel, core, namespace, name)
    log.info("PhaseModel %s/%s deleted: the operator's annotations removed from %d pods",
             namespace, name, n)


def register_phasemodels() -> None:
    """Register the PhaseModels' index, their window loop and deletion handler (above) for the
    PhaseModels this instance serves: ``--phasemodel-selector``, which
    ai4dl.controller.__main__ puts in AI4DL_PHASEMODEL_SELECTOR before it calls this."""
    labels = phasemodel_labels(os.environ.get("AI4DL_PHASEMODEL_SELECTOR", ""))
    kopf.index(GROUP, VERSION, PLURAL, labels=labels, when=_not_deleted,
               id=ENTRIES_INDEX)(phasemodel_entries)
    kopf.on.startup()(start_window_loop)
    kopf.on.delete(GROUP, VERSION, PLURAL, labels=labels)(phasemodel_deleted)


# ----------------------------------------------------------------------------- admission
# Registered by register_admission() (ai4dl.controller.__main__, when the webhook is on): kopf
# refuses admission handlers without a server. The PhaseModels' admission targets are kept in
# memory by a kopf index (recomputed when a PhaseModel's generation changes, not on every status
# write), so the mutating handler reads nothing from the API server and writes nothing.
_TARGETS: dict[tuple[str, str], tuple[tuple, object]] = {}


def _admission_target(namespace: str, name: str, body) -> object:
    meta = body.get("metadata") or {}
    # a PhaseModel deleted and created again under its name starts at generation 1 again
    version = (meta.get("uid"), int(meta.get("generation") or 0))
    cached = _TARGETS.get((namespace, name))
    if cached is None or cached[0] != version:
        cached = (version, admission_target(body))
        _TARGETS[(namespace, name)] = cached
    return cached[1]


def admission_targets(namespace, name, body, **_):
    """kopf index: (namespace, name) -> the PhaseModel's AdmissionTarget."""
    return {(namespace, name): _admission_target(namespace, name, body)}


def limit_ranges(namespace, name, body, **_):
    """kopf index: namespace -> its LimitRanges' constraints (admission keeps new requests
    within them; read from memory on the hot path)."""
    return {namespace: limit_range_rules(body)}


def resource_quotas(namespace, name, body, **_):
    """kopf index: namespace -> its ResourceQuotas' room left (admission never raises a request
    past it: the API server would refuse the pod)."""
    return {namespace: quota_room(body)}


#: Admission's workload profiles (ai4dl.controller.profile_index: not a kopf index, whose
#: start-up wait grows with the square of the objects); made and kept by start_profile_index.
_PROFILES: list[ProfileIndex] = []
_STOPS: list[threading.Event] = []
#: How long a review waits for the profiles' first LIST after a start (then: unknown workload).
PROFILE_WAIT_SECONDS = 1.0


async def start_profile_index(**_) -> None:
    """kopf startup: the profile index's LIST and WATCH threads, one per served namespace (or
    the cluster), stopped with the process (daemon threads)."""
    _clients()      # the kubeconfig or in-cluster configuration loaded
    index, stop = ProfileIndex(state_key, CONFIG.get("namespaces") or (None,)), threading.Event()
    # a client of its own: each WATCH holds a connection, not one of the window writers'
    cfg = client.Configuration.get_default_copy()
    cfg.connection_pool_maxsize = len(index.scopes) + 1
    profile_index.start(index, client.CustomObjectsApi(client.ApiClient(cfg)), stop)
    _PROFILES[:] = [index]
    _STOPS.append(stop)


def _workload_profiles(key) -> dict | None:
    return _PROFILES[0].get(key, PROFILE_WAIT_SECONDS) if _PROFILES else None


def admit_pod(body, patch, admission_targets: kopf.Index, limit_ranges: kopf.Index,
              resource_quotas: kopf.Index, **_):
    """Mutating admission of a pod being created: set its requests from its PhaseModel's
    learned first-window level (ai4dl.controller.admission). Never refuses a pod: on any error
    it is admitted unchanged (the configuration's failurePolicy is Ignore besides)."""
    started = time.perf_counter()
    try:
        namespace = REQUEST_NAMESPACE.get()
        ranges = tuple(limit_ranges.get(namespace) or ()) if namespace else ()
        quotas = tuple(resource_quotas.get(namespace) or ()) if namespace else ()
        workload = workload_of(body).key
        pm = ((body.get("metadata") or {}).get("annotations") or {}).get(MODEL_ANNOTATION, "")
        if namespace and pm:
            idle.wake(namespace, pm)        # an idle PhaseModel lists its pods next window
        profiles = _workload_profiles((namespace, pm, workload))
        decision = admit(dict(body), _FirstOfEach(admission_targets), CONFIG.get("max_value"),
                         state_key(), namespace=namespace, limit_ranges=ranges,
                         resource_quotas=quotas, workload=workload, profiles=profiles,
                         # only the API server's reviews get the author's requests sealed
                         seal=bool((CONFIG.get("webhook") or {}).get("client_ca_file")))
    except Exception:   # a bug must not block pod creation: admit unchanged, say so in the log
        log.exception("admission of a pod failed: admitted unchanged")
        m.ADMISSIONS.labels("error").inc()
        return
    if decision.changes or decision.annotations:
        patch.fns.append(decision.apply)
    m.ADMISSIONS.labels("set" if decision.changes else "unchanged").inc()
    m.ADMISSION_SECONDS.observe(time.perf_counter() - started)


#: The AdmissionReview's ``request.namespace`` of the review being served. kopf hands its
#: handlers the object only (whose metadata.namespace whoever sends the review writes), so the
#: server below sets it per review; kopf copies the context into the handler's thread.
REQUEST_NAMESPACE: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "ai4dl_request_namespace", default=None)


class _ReviewServer(kopf.WebhookServer):
    """kopf's server, plus: the review's ``request.namespace`` for the handler, and, with
    ``allowed_client_names``, only client certificates with one of these common names (the
    client CA may sign other clients' certificates too: a cluster CA signs every user's)."""

    def __init__(self, *, allowed_client_names: tuple[str, ...] = (), **kwargs):
        super().__init__(**kwargs)
        self.allowed_client_names = allowed_client_names

    async def __call__(self, fn):
        names = self.allowed_client_names

        async def serve(request, *, sslpeer=None, **kwargs):
            if names and _common_name(sslpeer) not in names:
                log.warning("webhook: a review from client certificate %r refused (allowed: "
                            "%s)", _common_name(sslpeer), ", ".join(names))
                raise aiohttp.web.HTTPForbidden(reason="client certificate not allowed")
            payload = request.get("request") if isinstance(request, dict) else None
            namespace = payload.get("namespace") if isinstance(payload, dict) else None
            token = REQUEST_NAMESPACE.set(namespace if isinstance(namespace, str) else None)
            try:
                return await fn(request, sslpeer=sslpeer, **kwargs)
            finally:
                REQUEST_NAMESPACE.reset(token)
        async for client_config in super().__call__(serve):
            yield client_config


def _common_name(peercert) -> str | None:
    """The subject CN of ``ssl``'s getpeercert() dict (None without a certificate)."""
    for rdn in (peercert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return value
    return None


class _FirstOfEach:
    """A kopf index (key -> store of values) read as key -> its one value, looked up per key
    (a pod's admission reads one PhaseModel, not all of them)."""

    def __init__(self, index):
        self.index = index

    def get(self, key, default=None):
        store = self.index.get(key)
        return next(iter(store), default) if store is not None else default


def register_admission() -> None:
    """Register the PhaseModel index and the pod mutating handler (see above)."""
    labels = phasemodel_labels(os.environ.get("AI4DL_PHASEMODEL_SELECTOR", ""))
    kopf.index(GROUP, VERSION, PLURAL, labels=labels)(admission_targets)
    # RBAC: limitranges list/watch (rbac.yaml); kopf serves no review until it is listed
    kopf.index("", "v1", "limitranges")(limit_ranges)
    # RBAC: resourcequotas list/watch (rbac.yaml); their status is the room admission keeps to
    kopf.index("", "v1", "resourcequotas")(resource_quotas)
    # RBAC: workloadprofiles list/watch; the operator's own checkpoint objects
    kopf.on.startup()(start_profile_index)
    kopf.on.mutate("", "v1", "pods", id=WEBHOOK_PATH.strip("/"), operations=["CREATE"],
                   labels={OPT_IN_LABEL: "true"}, side_effects=False,
                   ignore_failures=True)(admit_pod)


async def _renew_certificates(certs, admission_api, configuration: str,
                              interval: float = 3600.0, retry: float = 30.0) -> None:
    """Self-signed mode: write the CA bundle into our webhook configuration (at start, then
    every ``interval``: a configuration re-created by hand gets it back), and renew the serving
    certificate (and the CA) when due; the bundle is written before a certificate under a new
    CA is served. Until the bundle is written the API server cannot call the webhook and
    creates pods unchanged (failurePolicy Ignore): retried every ``retry`` seconds."""
    written = False
    while True:
        try:
            renewed_ca = certs.renew()
            n = await asyncio.to_thread(patch_ca_bundle, admission_api, configuration,
                                        certs.ca_bundle())
            certs.write_serving()
            if not written or renewed_ca:
                log.info("webhook: CA bundle written to %d webhook(s) of "
                         "MutatingWebhookConfiguration %s (certificate for %s)", n,
                         configuration, ", ".join(certs.hosts))
            written = True
        except Exception as err:   # RBAC, a missing configuration, an unreachable API server
            log.warning("webhook: cannot write the CA bundle to MutatingWebhookConfiguration "
                        "%s: %s: %s (pods are created unchanged until it is)", configuration,
                        type(err).__name__, str(err)[:300])
            written = False
        await asyncio.sleep(interval if written else retry)
