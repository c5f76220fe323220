"""The operator's own Prometheus metrics (served on /metrics)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.utils import floatToGoString

#: the operator's metrics but the per-container gauges (POD_SERIES), whose lines /metrics
#: renders itself (ai4dl.controller.exposition)
REGISTRY = CollectorRegistry()


@dataclass(frozen=True)
class ContainerSeries:
    """One container's per-container gauges: its phase (None: none yet) and, per resource of
    its PhaseModel's table (in that order), the recommendation, the request and the author's
    request (NaN where there is none)."""
    phase: float | None
    recommended: tuple[float, ...]
    requested: tuple[float, ...]
    original: tuple[float, ...]


#: (name, help, whether the series has a resource label) of the per-container gauges
_POD_FAMILIES = (
    ("ai4dl_pod_phase", "Current phase of a managed container", False),
    ("ai4dl_recommendation", "Recommended request (cores, bytes)", True),
    ("ai4dl_pod_request", "Request of a managed container at the window's end (cores, bytes)",
     True),
    ("ai4dl_pod_original_request", "The request its author wrote for a managed container "
     "(cores, bytes): what admission recorded, else the request first seen", True),
)


class PodSeries:
    """The per-container gauges of every PhaseModel (``ai4dl_pod_phase``,
    ``ai4dl_recommendation``, ``ai4dl_pod_request``, ``ai4dl_pod_original_request``), exposed
    at scrape time from one table per PhaseModel that its window replaces whole (issue 44: as
    labelled gauges, 7 series per container were 48 MB at 10,000 pods, a lock and a value
    object each, and 70,000 ``labels().set()`` calls a window; a table is a tuple of floats per
    container). A table is never changed once handed over, so a scrape reads it while the
    next window builds its successor."""

    def __init__(self):
        #: (namespace, phasemodel) -> (resources, {(pod, container): ContainerSeries})
        self._tables: dict[tuple[str, str], tuple[tuple[str, ...], dict]] = {}
        #: (namespace, phasemodel) -> its table's sample lines, one bytes per family, rendered
        #: at the first scrape after the window that made it (a table never changes)
        self._lines: dict[tuple[str, str], tuple[bytes, ...]] = {}

    def table(self, namespace: str, phasemodel: str) -> dict:
        """The PhaseModel's current table ({} when it has none)."""
        return self._tables.get((namespace, phasemodel), ((), {}))[1]

    def replace(self, namespace: str, phasemodel: str, resources: tuple[str, ...],
                table: dict) -> None:
        self._tables[(namespace, phasemodel)] = (tuple(resources), table)
        self._lines.pop((namespace, phasemodel), None)

    def forget(self, namespace: str, phasemodel: str) -> None:
        self._tables.pop((namespace, phasemodel), None)
        self._lines.pop((namespace, phasemodel), None)

    def describe(self):
        return [GaugeMetricFamily(name, text, labels=_labels(has_resource))
                for name, text, has_resource in _POD_FAMILIES]

    def collect(self):
        families = self.describe()
        phase, recommended, requested, original = families
        for (namespace, phasemodel), (resources, table) in list(self._tables.items()):
            for (pod, container), s in table.items():
                if s.phase is not None:
                    phase.add_metric((namespace, pod, container, phasemodel), s.phase)
                for family, values in ((recommended, s.recommended), (requested, s.requested),
                                       (original, s.original)):
                    for r, v in zip(resources, values):
                        if not math.isnan(v):
                            family.add_metric((namespace, pod, container, r, phasemodel), v)
        return families

    def sample_lines(self) -> list[bytes]:
        """Every table's samples in the text exposition (the same lines in OpenMetrics for
        gauges), one bytes per family of ``_POD_FAMILIES``; each table rendered once.

        Why by hand: prometheus_client formats ~70,000 samples at 10,000 pods in about 1 s of
        the operator's CPU (1.2 s as OpenMetrics) at every scrape, holding the GIL the window
        needs; these lines are ~10 x quicker, and ai4dl.controller.exposition checks them
        against the library's own before it serves them."""
        out: list[list[bytes]] = [[] for _ in _POD_FAMILIES]
        for key, (resources, table) in list(self._tables.items()):
            lines = self._lines.get(key)
            if lines is None:
                lines = self._lines[key] = render_table(*key, resources, table)
            for family, chunk in zip(out, lines):
                family.append(chunk)
        return [b"".join(chunks) for chunks in out]


def render_table(namespace: str, phasemodel: str, resources: tuple[str, ...],
                 table: dict) -> tuple[bytes, ...]:
    """One PhaseModel's table as sample lines, one bytes per family of ``_POD_FAMILIES``."""
    ns, pm = label_value(namespace), label_value(phasemodel)
    phase, recommended, requested, original = [], [], [], []
    phase_name, *resource_names = (name for name, _, _ in _POD_FAMILIES)
    # labels in name order, as prometheus_client (0.2x) writes them
    by_resource = [(f'",resource="{label_value(r)}"}} ', i) for i, r in enumerate(resources)]
    for (pod, container), s in table.items():
        pod = label_value(pod)
        head = f'{{container="{label_value(container)}",namespace="{ns}",phasemodel="{pm}'
        if s.phase is not None:
            phase.append(f'{phase_name}{head}",pod="{pod}"}} {floatToGoString(s.phase)}\n')
        tails = [(f'",pod="{pod}{tail}', i) for tail, i in by_resource]
        for lines, name, values in zip((recommended, requested, original), resource_names,
                                       (s.recommended, s.requested, s.original)):
            for tail, i in tails:
                v = values[i] if i < len(values) else math.nan
                if not math.isnan(v):
                    lines.append(f"{name}{head}{tail}{floatToGoString(v)}\n")
    return tuple("".join(lines).encode() for lines in (phase, recommended, requested, original))


def label_value(text: str) -> str:
    """A label value escaped as both exposition formats escape it."""
    if "\\" in text or "\n" in text or '"' in text:
        return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')
    return text


def _labels(has_resource: bool) -> list[str]:
    return (["namespace", "pod", "container", "resource", "phasemodel"] if has_resource
            else ["namespace", "pod", "container", "phasemodel"])


POD_SERIES = PodSeries()

RESIZES = Counter("ai4dl_resizes_total", "In-place resizes patched",
                  ["namespace", "phasemodel"], registry=REGISTRY)
RESIZES_REFUSED = Counter("ai4dl_resizes_refused_total",
                          "Resizes the kubelet refused (PodResizeInProgress Error: a memory "
                          "limit below the container's usage), each taken back by the operator",
                          ["namespace", "phasemodel"], registry=REGISTRY)
SKIPPED_WINDOWS = Counter("ai4dl_skipped_windows_total",
                          "Windows (or pods within one) skipped, by reason",
                          ["namespace", "phasemodel", "reason"], registry=REGISTRY)
ERRORS = Counter("ai4dl_errors_total", "Errors, by kind", ["namespace", "phasemodel", "kind"],
                 registry=REGISTRY)
WINDOW_SECONDS = Histogram("ai4dl_window_duration_seconds",
                           "Time to process one window of one PhaseModel",
                           ["namespace", "phasemodel"], registry=REGISTRY,
                           buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
QUERY_SECONDS = Histogram("ai4dl_window_query_seconds",
                          "Wall time of one PhaseModel's window query to Prometheus, retries "
                          "included (held to --query-budget-seconds)",
                          ["namespace", "phasemodel"], registry=REGISTRY,
                          buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
POD_LISTS = Counter("ai4dl_pod_lists_total",
                    "Windows that listed their PhaseModel's pods (listed), or did not because it "
                    "found none lately and admission saw none created since (idle)",
                    ["outcome"], registry=REGISTRY)
PROFILE_WRITES = Counter("ai4dl_profile_writes_total",
                         "WorkloadProfile writes (one per workload whose executions ended in a "
                         "window, at most)", ["namespace", "phasemodel"], registry=REGISTRY)
PROFILES_DELETED = Counter("ai4dl_profiles_deleted_total",
                           "WorkloadProfiles deleted past the bound per PhaseModel "
                           "(--max-workloads-per-phasemodel; the least recently ended)",
                           ["namespace", "phasemodel"], registry=REGISTRY)
STATUS_WRITES = Counter("ai4dl_status_writes_total",
                        "PhaseModel status writes per window: written (something changed) or "
                        "unchanged (no write)", ["namespace", "phasemodel", "outcome"],
                        registry=REGISTRY)
PODS_TRACKED = Gauge("ai4dl_pods_tracked", "Opted-in pods served by a PhaseModel",
                     ["namespace", "phasemodel"], registry=REGISTRY)
RECORDS_PENDING = Gauge("ai4dl_pod_records_pending",
                        "Pod records kept in memory, not yet written (the write budget: "
                        "--pod-record-share)", ["namespace", "phasemodel"], registry=REGISTRY)
PROFILES_INDEXED = Gauge("ai4dl_workload_profiles_indexed",
                         "Workload profiles admission holds in memory (verified objects)",
                         registry=REGISTRY)
RECORDS_WRITTEN = Counter("ai4dl_pod_records_written_total",
                          "Pod records written, by why: needed (before a pod's first resize, a "
                          "lowered memory limit or a take-back) or optional (within "
                          "--pod-record-share)", ["namespace", "phasemodel", "why"],
                          registry=REGISTRY)
PODS_SKIPPED = Gauge("ai4dl_pods_skipped",
                     "Pods skipped in the last window for gaps or bad samples in their metrics",
                     ["namespace", "phasemodel", "reason"], registry=REGISTRY)
ORIGINALS_CLAMPED = Counter("ai4dl_savings_originals_clamped_total",
                            "Authors' requests above the largest a container can have, counted "
                            "in the savings at that largest (per window)",
                            ["namespace", "phasemodel", "resource"], registry=REGISTRY)
STATE_REJECTED = Counter("ai4dl_pod_state_rejected_total",
                         "Records on pods (ai4dl.io/state, ai4dl.io/admitted) not sealed by "
                         "this operator's key, read as absent, per pod and window, by reason "
                         "(unsigned, forged, malformed, other-key)",
                         ["namespace", "phasemodel", "annotation", "reason"], registry=REGISTRY)
NOTICES = Counter("ai4dl_pod_warnings_total",
                  "Warning Events about pods' own setup (once per pod), by reason",
                  ["namespace", "reason"], registry=REGISTRY)
ORPHAN_PODS = Gauge("ai4dl_orphan_pods",
                    "Opted-in pods no PhaseModel serves, at the last sweep, by reason",
                    ["namespace", "reason"], registry=REGISTRY)
NOVEL_SHARE = Gauge("ai4dl_novel_share", "Share of containers whose last window was novel",
                    ["namespace", "phasemodel"], registry=REGISTRY)
REQUEST_SECONDS = Counter("ai4dl_request_seconds_total",
                          "Requests × time over the windows processed (core-seconds, "
                          "byte-seconds): kind=original (the authors' requests), kind=allocated "
                          "(what the pods held; in Recommend mode, what was recommended)",
                          ["namespace", "phasemodel", "resource", "kind"], registry=REGISTRY)
ADMISSIONS = Counter("ai4dl_admissions_total",
                     "Opted-in pods seen at creation by the admission webhook, by outcome "
                     "(set: requests set; unchanged: left as they came, reason annotated; "
                     "error: admitted unchanged after an error)", ["outcome"], registry=REGISTRY)
ADMISSION_SECONDS = Histogram("ai4dl_admission_duration_seconds",
                              "Time to decide one pod's admission (the handler itself)",
                              registry=REGISTRY,
                              buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1))


# Fair shares (ai4dl.controller.fairness): is any PhaseModel's window late, and why.
WINDOW_LATENESS = Gauge("ai4dl_window_lateness_seconds",
                        "How long after it was due (its boundary + --settle-seconds) the last "
                        "window's work started (stage=started) and finished (stage=finished)",
                        ["namespace", "phasemodel", "stage"], registry=REGISTRY)
WINDOWS_LATE = Counter("ai4dl_windows_late_total",
                       "Windows whose work started more than --window-late-seconds after it was "
                       "due", ["namespace", "phasemodel"], registry=REGISTRY)
WINDOW_WAIT_SECONDS = Histogram("ai4dl_window_queue_wait_seconds",
                                "Time a window's work waited for a worker, by namespace",
                                ["namespace"], registry=REGISTRY,
                                buckets=(0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
WINDOW_QUEUE_DEPTH = Gauge("ai4dl_window_queue_depth",
                           "Windows waiting for a worker (all namespaces)", registry=REGISTRY)
WINDOWS_RUNNING = Gauge("ai4dl_windows_running", "Windows being processed by a worker",
                        registry=REGISTRY)
# The client-side write limit (ai4dl.controller.throttle): how long writers waited for it.
WRITE_WAIT_SECONDS = Counter("ai4dl_api_write_wait_seconds",
                             "Seconds window writers waited for the client-side write limit "
                             "(--kube-api-qps, --kube-api-burst), all writers together",
                             registry=REGISTRY)


def forget_phasemodel(namespace: str, phasemodel: str) -> None:
    """Drop a stopped PhaseModel's lateness, pending-records and per-container series."""
    POD_SERIES.forget(namespace, phasemodel)
    try:
        RECORDS_PENDING.remove(namespace, phasemodel)
    except KeyError:
        pass
    for stage in ("started", "finished"):
        try:
            WINDOW_LATENESS.remove(namespace, phasemodel, stage)
        except KeyError:
            pass
