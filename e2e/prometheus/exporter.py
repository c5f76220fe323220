"""A fake cAdvisor / DCGM exporter that replays traces as live Prometheus metrics.

Each pod ``(namespace, pod, container)`` plays one :class:`ai4dl.method.traces.Execution` (features
``cpu`` [cores] and ``memory`` [bytes], optionally ``gpu_util`` [percent] and ``gpu_memory``
[bytes]) on a compressed clock::

    trace offset = offset + (wall time - time the pod was added) * speed

so with ``speed=15`` one wall second plays 15 trace seconds (a 15 s trace step becomes one
second). At the end of the execution the pod loops (``loop=True``) or holds its last sample.
Samples are held (step function): the value served is the sample in force at the trace offset.

``/metrics`` serves, in the Prometheus text format, with the labels
``namespace``, ``pod``, ``container`` (the cAdvisor names the operator queries):

* ``container_cpu_usage_seconds_total`` (counter). It integrates the trace's cores over *wall*
  time (trace CPU seconds / speed), so that ``rate()`` in Prometheus, which works in wall time,
  gives back the trace's cores. It starts at 0 when the pod is added and never decreases
  (looping keeps adding).
* ``container_memory_working_set_bytes`` (gauge, bytes).
* ``DCGM_FI_DEV_GPU_UTIL`` (percent) and ``DCGM_FI_DEV_FB_USED`` (MiB), when the execution has
  ``gpu_util`` / ``gpu_memory`` (and ``gpu`` is not False).

A NaN value in a trace is served as *no line* for that metric (the series is absent from that
scrape, as when cAdvisor loses a container). :meth:`TraceExporter.set_paused` makes ``/metrics``
answer 503, so Prometheus records failed scrapes and marks the series stale.

Usage::

    exp = TraceExporter({("ns", "pod-a", "main"): execution}, speed=15.0)
    url = exp.start()            # http://127.0.0.1:PORT/metrics
    ...
    exp.stop()

Live processes: :meth:`TraceExporter.add_process` serves a running process tree (a workload
started for a pod, see ``e2e/workloads/runner.py``) under a pod's labels instead of a trace:
``container_cpu_usage_seconds_total`` is the tree's cumulative CPU seconds and
``container_memory_working_set_bytes`` its memory (PSS sum), both read from ``/proc`` at each
scrape (:class:`ai4dl.recording.procstat.ProcessTree`). Once the process has exited (or after
:meth:`~TraceExporter.remove_pod`) its series are no longer served, as cAdvisor drops a
terminated container.

Run ``python e2e/prometheus/exporter.py --help`` to serve a trace file by hand.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Mapping

import numpy as np

from ai4dl.recording.procstat import ProcessTree, TreeSample, snapshot
from ai4dl.method.traces import Execution

PodKey = tuple[str, str, str]  # (namespace, pod, container)

CPU_METRIC = "container_cpu_usage_seconds_total"
MEMORY_METRIC = "container_memory_working_set_bytes"
GPU_UTIL_METRIC = "DCGM_FI_DEV_GPU_UTIL"
GPU_MEMORY_METRIC = "DCGM_FI_DEV_FB_USED"
MIB = 1048576.0

_HEADER = {
    CPU_METRIC: "# HELP {m} Cumulative cpu time consumed in seconds.\n# TYPE {m} counter\n",
    MEMORY_METRIC: "# HELP {m} Current working set in bytes.\n# TYPE {m} gauge\n",
    GPU_UTIL_METRIC: "# HELP {m} GPU utilization (in %).\n# TYPE {m} gauge\n",
    GPU_MEMORY_METRIC: "# HELP {m} Framebuffer memory used (in MiB).\n# TYPE {m} gauge\n",
}


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class _Digest:
    """One execution, pre-digested for fast lookups (plain Python lists + bisect). Shared by
    every pod that plays the same execution."""

    __slots__ = ("rel", "duration", "cpu", "cum", "cum_total", "memory", "gpu_util", "gpu_memory")

    def __init__(self, ex: Execution, gpu: bool | None):
        if len(ex) == 0:
            raise ValueError(f"execution {ex.name!r} has no samples")
        t = np.asarray(ex.times, dtype=np.float64)
        rel = t - t[0]
        if len(rel) > 1:
            step = ex.step or float(np.median(np.diff(rel))) or 1.0
        else:
            step = ex.step or 1.0
        self.rel = rel.tolist()
        self.duration = float(rel[-1] + step)
        feats = ex.features

        def col(name: str) -> list[float] | None:
            return ex.values[:, feats.index(name)].astype(np.float64).tolist() \
                if name in feats else None

        self.cpu = col("cpu")
        self.memory = col("memory")
        self.gpu_util = col("gpu_util") if gpu is not False else None
        self.gpu_memory = col("gpu_memory") if gpu is not False else None
        if gpu and self.gpu_util is None and self.gpu_memory is None:
            raise ValueError(f"execution {ex.name!r} has no gpu_util or gpu_memory feature")
        if self.cpu is not None:
            cores = np.nan_to_num(np.asarray(self.cpu), nan=0.0)
            seg = np.diff(np.append(rel, self.duration))  # how long each sample is in force
            cum = np.concatenate([[0.0], np.cumsum(cores * seg)])
            self.cum = cum[:-1].tolist()
            self.cum_total = float(cum[-1])
        else:
            self.cum, self.cum_total = [], 0.0


class _Track:
    """One pod: its labels, its execution's digest and its clock."""

    __slots__ = ("key", "labels", "d", "added", "offset")

    def __init__(self, key: PodKey, digest: _Digest, added: float, offset: float):
        self.key = key
        ns, pod, container = key
        self.labels = (f'namespace="{_escape_label(ns)}",pod="{_escape_label(pod)}",'
                       f'container="{_escape_label(container)}"')
        self.d = digest
        self.added = added
        self.offset = offset


@dataclass(frozen=True)
class ServedValues:
    """What the exporter serves for one pod at one wall time (NaN: no line served)."""

    trace_offset: float      # seconds into the execution (after looping)
    cpu: float               # cores in force
    cpu_counter: float       # container_cpu_usage_seconds_total
    memory: float            # bytes
    gpu_util: float          # percent
    gpu_memory: float        # bytes (served as MiB)


class TraceExporter:
    """Serve executions as cAdvisor/DCGM metrics on ``http://127.0.0.1:<free port>/metrics``.

    ``executions_by_pod`` maps ``(namespace, pod, container)`` to an execution. ``speed`` trace
    seconds pass per wall second; ``loop`` replays an execution from the start when it ends
    (else the last sample is held). ``gpu``: None serves the DCGM metrics for executions that
    have GPU features, False never, True requires them. ``clock`` (for tests) replaces
    ``time.time``.
    """

    def __init__(self, executions_by_pod: Mapping[PodKey, Execution] | None = None, speed: float = 15.0,
                 loop: bool = True, *, gpu: bool | None = None, host: str = "127.0.0.1",
                 port: int = 0, clock=time.time):
        if not (speed > 0 and math.isfinite(speed)):
            raise ValueError(f"speed must be a positive number, not {speed!r}")
        self.speed = float(speed)
        self.loop = bool(loop)
        self.gpu = gpu
        self.host, self.port = host, port
        self._clock = clock
        self._lock = threading.Lock()
        self._tracks: dict[PodKey, _Track] = {}
        self._live: dict[PodKey, tuple[str, ProcessTree]] = {}  # key -> (labels, tree)
        self._digests: dict[int, tuple[Execution, _Digest]] = {}  # id(execution) -> digest
        self._paused = False
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.scrapes = 0                 # /metrics requests answered (200 or 503)
        self.last_render_seconds = 0.0   # time to build the last /metrics body
        for key, ex in (executions_by_pod or {}).items():
            self.add_pod(key, ex)

    # ------------------------------------------------------------------------ pods

    def add_pod(self, key: PodKey, execution: Execution, *, offset: float = 0.0,
                at: float | None = None) -> None:
        """Start playing ``execution`` as pod ``key`` now (or at wall time ``at``), ``offset``
        trace seconds into it. Replaces a pod with the same key (its counter restarts at 0, as
        for a new container)."""
        key = _key(key)
        with self._lock:
            cached = self._digests.get(id(execution))
        if cached is None or cached[0] is not execution:
            cached = (execution, _Digest(execution, self.gpu))
        track = _Track(key, cached[1], self._clock() if at is None else at, float(offset))
        with self._lock:
            self._digests[id(execution)] = cached
            tracks = dict(self._tracks)
            tracks[key] = track
            self._tracks = tracks  # copy-on-write: a scrape in progress keeps its snapshot

    def add_process(self, key: PodKey, pid: int) -> ProcessTree:
        """Serve the live process ``pid`` and its descendants as pod ``key`` (replacing a pod
        with that key). Returns the :class:`~ai4dl.recording.procstat.ProcessTree` that is sampled at
        each scrape (its counter starts at the tree's CPU time so far)."""
        key = _key(key)
        tree = ProcessTree(pid)
        tree.sample()  # fixes the tree's root now: a later reuse of the pid is not followed
        labels = _Track(key, None, 0.0, 0.0).labels
        with self._lock:
            if key in self._tracks:
                tracks = dict(self._tracks)
                del tracks[key]
                self._tracks = tracks
            live = dict(self._live)
            live[key] = (labels, tree)
            self._live = live
        return tree

    def process_values(self, key: PodKey) -> TreeSample:
        """Sample the live pod ``key`` now (what the next scrape would serve)."""
        return self._live[_key(key)][1].sample()

    def remove_pod(self, key: PodKey) -> None:
        """Stop serving pod ``key`` (Prometheus then marks its series stale). Unknown: no-op."""
        key = _key(key)
        with self._lock:
            if key in self._live:
                live = dict(self._live)
                live.pop(key)[1].close()
                self._live = live
            if key in self._tracks:
                tracks = dict(self._tracks)
                gone = tracks.pop(key).d
                self._tracks = tracks
                if all(t.d is not gone for t in tracks.values()):
                    self._digests = {k: v for k, v in self._digests.items() if v[1] is not gone}

    @property
    def pods(self) -> list[PodKey]:
        return list(self._tracks) + [k for k in self._live if k not in self._tracks]

    def set_paused(self, paused: bool) -> None:
        """While paused, ``/metrics`` answers 503: scrapes fail and the series go stale."""
        self._paused = bool(paused)

    @property
    def paused(self) -> bool:
        return self._paused

    # ------------------------------------------------------------------------ values

    def _trace_position(self, tr: _Track, now: float) -> tuple[float, int, float]:
        """(offset into the execution, sample index in force, trace cpu-seconds so far)."""
        d = tr.d
        tau = max(0.0, tr.offset + (now - tr.added) * self.speed)
        if tau >= d.duration:
            if self.loop:
                laps, r = divmod(tau, d.duration)
                base = laps * d.cum_total
            else:
                i = len(d.rel) - 1
                last = d.cpu[i] if d.cpu is not None else 0.0
                last = 0.0 if last != last else last
                return tau, i, d.cum_total + last * (tau - d.duration)
        else:
            r, base = tau, 0.0
        i = bisect.bisect_right(d.rel, r) - 1
        if d.cpu is None:
            return r, i, 0.0
        c = d.cpu[i]
        c = 0.0 if c != c else c
        return r, i, base + d.cum[i] + c * (r - d.rel[i])

    def values_at(self, key: PodKey, wall_time: float | None = None) -> ServedValues:
        """What ``/metrics`` serves (served at ``wall_time``, default now) for pod ``key``."""
        tr = self._tracks[_key(key)]
        d = tr.d
        now = self._clock() if wall_time is None else wall_time
        tau, i, cpu_seconds = self._trace_position(tr, now)
        nan = float("nan")
        pick = lambda col: col[i] if col is not None else nan  # noqa: E731
        return ServedValues(
            trace_offset=tau, cpu=pick(d.cpu),
            cpu_counter=cpu_seconds / self.speed if d.cpu is not None else nan,
            memory=pick(d.memory), gpu_util=pick(d.gpu_util), gpu_memory=pick(d.gpu_memory))

    def cpu_rate(self, key: PodKey, wall_start: float, wall_end: float) -> float:
        """Mean cores served over a wall-time window: what an ideal ``rate()`` returns."""
        a = self.values_at(key, wall_start).cpu_counter
        b = self.values_at(key, wall_end).cpu_counter
        return (b - a) / (wall_end - wall_start)

    def render(self, now: float | None = None) -> str:
        """The ``/metrics`` body at wall time ``now`` (default: the clock)."""
        t0 = time.perf_counter()
        now = self._clock() if now is None else now
        tracks = list(self._tracks.values())
        cpu_lines, mem_lines, gutil_lines, gmem_lines = [], [], [], []
        position = self._trace_position
        speed = self.speed
        for tr in tracks:
            _, i, cpu_seconds = position(tr, now)
            lab = tr.labels
            d = tr.d
            if d.cpu is not None:
                cpu_lines.append(f"{CPU_METRIC}{{{lab}}} {cpu_seconds / speed!r}\n")
            if d.memory is not None:
                v = d.memory[i]
                if v == v:
                    mem_lines.append(f"{MEMORY_METRIC}{{{lab}}} {v!r}\n")
            if d.gpu_util is not None:
                v = d.gpu_util[i]
                if v == v:
                    gutil_lines.append(f"{GPU_UTIL_METRIC}{{{lab}}} {v!r}\n")
            if d.gpu_memory is not None:
                v = d.gpu_memory[i]
                if v == v:
                    gmem_lines.append(f"{GPU_MEMORY_METRIC}{{{lab}}} {v / MIB!r}\n")
        live = list(self._live.values())
        if live:
            procs = snapshot()  # one pass over /proc for all live pods
            for lab, tree in live:
                s = tree.sample(procs)
                if s.alive:  # an exited container has no series (as with cAdvisor)
                    cpu_lines.append(f"{CPU_METRIC}{{{lab}}} {s.cpu_seconds!r}\n")
                    mem_lines.append(f"{MEMORY_METRIC}{{{lab}}} {float(s.memory_bytes)!r}\n")
        parts = []
        for metric, lines in ((CPU_METRIC, cpu_lines), (MEMORY_METRIC, mem_lines),
                              (GPU_UTIL_METRIC, gutil_lines), (GPU_MEMORY_METRIC, gmem_lines)):
            if lines:
                parts.append(_HEADER[metric].format(m=metric))
                parts.append("".join(lines))
        body = "".join(parts)
        self.last_render_seconds = time.perf_counter() - t0
        return body

    # ------------------------------------------------------------------------ server

    def start(self) -> str:
        """Serve in a background thread; returns the metrics URL. Idempotent."""
        if self._server is None:
            exporter = self

            class Handler(BaseHTTPRequestHandler):
                protocol_version = "HTTP/1.1"

                def do_GET(self):  # noqa: N802
                    path = self.path.split("?", 1)[0]
                    if path == "/metrics":
                        exporter.scrapes += 1
                        if exporter._paused:
                            self._send(503, b"paused\n", "text/plain")
                        else:
                            body = exporter.render().encode()
                            self._send(200, body, "text/plain; version=0.0.4; charset=utf-8")
                    elif path in ("/", "/healthz"):
                        self._send(200, b"ok\n", "text/plain")
                    else:
                        self._send(404, b"not found\n", "text/plain")

                def _send(self, code: int, body: bytes, ctype: str) -> None:
                    self.send_response(code)
                    self.send_header("Content-Type", ctype)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

                def log_message(self, *args):  # quiet
                    pass

            server = ThreadingHTTPServer((self.host, self.port), Handler)
            server.daemon_threads = True
            self.port = server.server_address[1]
            self._server = server
            self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                                            name=f"trace-exporter:{self.port}", daemon=True)
            self._thread.start()
        return self.url

    def stop(self) -> None:
        """Stop serving (the port is released). The pods and their clocks are kept."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._thread = None

    @property
    def address(self) -> str:
        """``host:port`` (the scrape target)."""
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}/metrics"

    def __enter__(self) -> "TraceExporter":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _key(key) -> PodKey:
    ns, pod, container = key
    return (str(ns), str(pod), str(container))


def main(argv: list[str] | None = None) -> int:
    """Serve a trace file's executions as pods until interrupted."""
    import argparse

    from ai4dl.io import load_traces

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("traces", help="a trace file or folder (any format ai4dl.io.load_traces reads)")
    p.add_argument("--pods", type=int, default=0, help="number of pods (default: one per execution; "
                   "more cycles through the executions)")
    p.add_argument("--namespace", default="default")
    p.add_argument("--container", default="main")
    p.add_argument("--speed", type=float, default=15.0)
    p.add_argument("--hold", action="store_true", help="hold the last sample instead of looping")
    p.add_argument("--port", type=int, default=0)
    a = p.parse_args(argv)
    traces = load_traces(a.traces)
    n = a.pods or len(traces)
    pods = {(a.namespace, f"pod-{i:05d}", a.container): traces[i % len(traces)] for i in range(n)}
    exp = TraceExporter(pods, speed=a.speed, loop=not a.hold, port=a.port)
    print(exp.start(), flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        exp.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
