"""Backfill a Prometheus data folder with cAdvisor-named history, from traces, with promtool.

Each container run (an :class:`ai4dl.method.traces.Execution` with cpu [cores] and memory [bytes], at
its own absolute timestamps) becomes the series cAdvisor would have written for it, labels
``namespace, pod, container, id`` (``id`` differs per run, as a restarted container's does):

* ``container_cpu_usage_seconds_total``: CPU seconds, integrated from 0 at the run's start
  (a restart starts a new series at 0, so ``rate()`` gives back the trace's cores);
* ``container_memory_working_set_bytes``;
* ``container_start_time_seconds``: the run's start;

and, for the pods given ``pod_labels``, kube-state-metrics' ``kube_pod_labels`` (value 1 with a
``label_<key>`` label per pod label, over the pod's runs), which the trainer reads to keep only
the pods a PhaseModel serves; for those given ``pod_owners``, ``kube_pod_owner`` (``owner_kind``,
``owner_name``), for ReplicaSets given ``replicaset_owners``, ``kube_replicaset_owner``, and for
the containers given ``requests``, ``kube_pod_container_resource_requests`` (cpu in cores,
memory in bytes), all over the pod's runs — what ``ai4dl evaluate --prometheus`` reads.

The samples are written as OpenMetrics text, one file per aligned 2-hour window (promtool
re-reads its whole input once per block, so one file per block keeps it to one pass), and
``promtool tsdb create-blocks-from openmetrics`` turns each into a TSDB block in the server's
storage folder. Start (or restart) Prometheus on that folder afterwards.

    runs = {("ml", "train-0", "main"): [execution]}        # list: one Execution per run
    backfill(runs, server.storage_path, promtool)
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from ai4dl.method.traces import Execution

BLOCK_SECONDS = 7200
CPU = "container_cpu_usage_seconds_total"
MEMORY = "container_memory_working_set_bytes"
START = "container_start_time_seconds"
KSM_LABELS = "kube_pod_labels"
KSM_OWNER = "kube_pod_owner"
KSM_RS_OWNER = "kube_replicaset_owner"
KSM_REQUESTS = "kube_pod_container_resource_requests"
FAMILIES = (CPU, MEMORY, START, KSM_LABELS, KSM_OWNER, KSM_RS_OWNER, KSM_REQUESTS)


def promtool_next_to(prometheus: Path | str) -> Path:
    p = Path(prometheus).with_name("promtool")
    if not p.is_file():
        raise FileNotFoundError(f"no promtool next to {prometheus}")
    return p


def _series(runs: Mapping[tuple[str, str, str], Sequence[Execution]],
            pod_labels: Mapping[tuple[str, str], Mapping[str, str]] | None = None,
            pod_owners: Mapping[tuple[str, str], tuple[str, str]] | None = None,
            replicaset_owners: Mapping[tuple[str, str], tuple[str, str]] | None = None,
            requests: Mapping[tuple[str, str, str], Mapping[str, float]] | None = None):
    """(family, labels, times, values) of every series, one run at a time."""
    from ai4dl.sources.membership import ksm_label

    def pod_times(ns: str, pod: str, ctr: str | None = None) -> np.ndarray:
        # kube-state-metrics' scrapes, thinned to one a minute (it exports every pod it sees)
        t = np.unique(np.concatenate([np.asarray(ex.times, np.float64)
                                      for (n, p, c), execs in runs.items()
                                      if (n, p) == (ns, pod) and ctr in (None, c)
                                      for ex in execs] or [np.empty(0)]))
        return t[np.r_[True, np.diff(t // 60) > 0]] if len(t) else t

    for (ns, pod), (kind, name) in (pod_owners or {}).items():
        t = pod_times(ns, pod)
        if len(t):
            yield (KSM_OWNER, f'namespace="{ns}",pod="{pod}",owner_kind="{kind}",'
                   f'owner_name="{name}",owner_is_controller="true"', t, np.ones(len(t)))
    for (ns, rs), (kind, name) in (replicaset_owners or {}).items():
        t = np.unique(np.concatenate([pod_times(n, p) for (n, p), (k, o) in
                                      (pod_owners or {}).items()
                                      if n == ns and k == "ReplicaSet" and o == rs]
                                     or [np.empty(0)]))
        if len(t):
            yield (KSM_RS_OWNER, f'namespace="{ns}",replicaset="{rs}",owner_kind="{kind}",'
                   f'owner_name="{name}",owner_is_controller="true"', t, np.ones(len(t)))
    for (ns, pod, ctr), req in (requests or {}).items():
        t = pod_times(ns, pod, ctr)
        for resource, unit in (("cpu", "core"), ("memory", "byte")):
            if resource in req and len(t):
                yield (KSM_REQUESTS, f'namespace="{ns}",pod="{pod}",container="{ctr}",'
                       f'resource="{resource}",unit="{unit}"', t, np.full(len(t), req[resource]))
    for (ns, pod), labels in (pod_labels or {}).items():
        t = np.unique(np.concatenate([np.asarray(ex.times, np.float64)
                                      for (n, p, _), execs in runs.items() if (n, p) == (ns, pod)
                                      for ex in execs] or [np.empty(0)]))
        if len(t):
            text = ",".join(f'{ksm_label(k)}="{v}"' for k, v in sorted(labels.items()))
            yield (KSM_LABELS, f'namespace="{ns}",pod="{pod}"' + (f",{text}" if text else ""),
                   t, np.ones(len(t)))
    for (ns, pod, ctr), execs in runs.items():
        for k, ex in enumerate(execs):
            labels = (f'namespace="{ns}",pod="{pod}",container="{ctr}",'
                      f'id="/kubepods/{ns}/{pod}/{ctr}-{k}"')
            t = np.asarray(ex.times, np.float64)
            cpu = ex.column("cpu").astype(np.float64)
            dt = np.diff(t, prepend=t[0])
            # counter: cpu-seconds up to each sample (the trace's cores held over each step)
            counter = np.cumsum(np.r_[0.0, cpu[:-1]] * dt)
            yield CPU, labels, t, counter
            yield MEMORY, labels, t, ex.column("memory").astype(np.float64)
            yield START, labels, t, np.full(len(t), t[0])


def write_openmetrics(runs: Mapping[tuple[str, str, str], Sequence[Execution]],
                      folder: Path,
                      pod_labels: Mapping[tuple[str, str], Mapping[str, str]] | None = None,
                      **kube_state) -> list[Path]:
    """OpenMetrics files, one per aligned 2-hour window that has samples. ``kube_state``:
    ``pod_owners``, ``replicaset_owners``, ``requests`` (see the module doc)."""
    folder.mkdir(parents=True, exist_ok=True)
    chunks: dict[int, dict[str, list[str]]] = {}
    for family, labels, t, v in _series(runs, pod_labels, **kube_state):
        block = (t // BLOCK_SECONDS).astype(np.int64)
        for b in np.unique(block):
            sel = block == b
            text = "\n".join(f"{family}{{{labels}}} {_value(family, y)} {ts:.3f}"
                             for ts, y in zip(t[sel].tolist(), v[sel].tolist()))
            chunks.setdefault(int(b), {f: [] for f in FAMILIES})[family].append(text)
    paths = []
    for b, fams in sorted(chunks.items()):
        path = folder / f"block-{b}.om"
        with open(path, "w") as f:
            for family in FAMILIES:
                if fams[family]:
                    f.write(f"# TYPE {family} gauge\n")
                    for text in fams[family]:
                        f.write(text)
                        f.write("\n")
            f.write("# EOF\n")
        paths.append(path)
    return paths


def backfill(runs: Mapping[tuple[str, str, str], Sequence[Execution]], storage: Path | str,
             promtool: Path | str, workers: int = 2,
             pod_labels: Mapping[tuple[str, str], Mapping[str, str]] | None = None,
             **kube_state) -> int:
    """Write the runs' series as TSDB blocks into ``storage``; returns the samples written.
    ``pod_labels[(namespace, pod)]``: that pod's labels as kube-state-metrics exports them;
    ``pod_owners``, ``replicaset_owners``, ``requests``: see the module doc."""
    storage = Path(storage)
    storage.mkdir(parents=True, exist_ok=True)
    n = sum(3 * len(ex) for execs in runs.values() for ex in execs)
    with tempfile.TemporaryDirectory(prefix="ai4dl-backfill-") as tmp:
        files = write_openmetrics(runs, Path(tmp), pod_labels, **kube_state)

        def run(path: Path) -> None:
            r = subprocess.run([str(promtool), "tsdb", "create-blocks-from", "openmetrics",
                                "--quiet", str(path), str(storage)],
                               capture_output=True, text=True, env=dict(os.environ))
            if r.returncode != 0:
                raise RuntimeError(f"promtool failed on {path.name}: "
                                   f"{(r.stderr or r.stdout).strip()[-500:]}")

        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            list(pool.map(run, files))
    return n


def history_server(retention: str = "30d", **kw):
    """A :class:`~e2e.prometheus.server.PrometheusServer` that keeps ``retention`` of data (the
    test server keeps 1 d, which would drop backfilled blocks older than that). Backfill into
    its ``storage_path`` before :meth:`start`."""
    from e2e.prometheus.server import PrometheusServer

    class _HistoryServer(PrometheusServer):
        def command(self) -> list[str]:
            return [a if not a.startswith("--storage.tsdb.retention.time=")
                    else f"--storage.tsdb.retention.time={retention}" for a in super().command()]

    return _HistoryServer(**kw)


def _value(family: str, y: float) -> str:
    """A sample's value as text: 9 significant digits (the files stay small), but a start
    time whole: at 9 digits a unix time is rounded to 10 s, and a run's age was off by up to
    5 s (a young rate read over that age was wrong)."""
    return repr(float(y)) if family == START else f"{y:.9g}"


def text_lines(runs: Mapping[tuple[str, str, str], Sequence[Execution]],
               pod_labels: Mapping[tuple[str, str], Mapping[str, str]] | None = None,
               **kube_state):
    """The same series as :func:`backfill` writes, as Prometheus text lines with millisecond
    timestamps (``name{labels} value ts_ms``): what VictoriaMetrics imports at
    ``/api/v1/import/prometheus`` (:meth:`e2e.victoriametrics.server.VictoriaMetricsServer.
    import_series`)."""
    for family, labels, t, v in _series(runs, pod_labels, **kube_state):
        for ts, y in zip(np.round(t * 1000).astype(np.int64).tolist(), v.tolist()):
            yield f"{family}{{{labels}}} {_value(family, y)} {ts}"
