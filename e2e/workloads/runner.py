"""The kubelet stand-in's container runtime: one real workload process per pod.

:class:`WorkloadRunner` starts a process (usually one of this folder's training programs) for a
pod that ``FakeKubelet`` created, and has the exporter serve its live CPU and memory under the
pod's cAdvisor labels. A background thread plays kubelet:

* the pod is deleted (by the test, the operator, anyone) -> the process group is killed
  (SIGKILL, as after a zero grace period: the DataLoader workers go too) and its series stop;
* the process exits -> its series stop and, with a ``kubelet``, the pod's phase becomes
  ``Succeeded`` (exit 0) or ``Failed``.

Usage (pytest, with the ``fake_kubelet`` and ``trace_exporter`` fixtures)::

    runner = WorkloadRunner(fake_kubelet, trace_exporter())
    fake_kubelet.create_pod("train-a", requests={"cpu": "1", "memory": "2Gi"})
    proc = runner.start("train-a", workload_command("cnn", duration=60, phase_log=path))
    ...                                    # Prometheus scrapes runner.exporter.url
    runner.delete_pod("train-a")           # or any delete: the runner notices within ~0.5 s
    runner.close()                         # kills whatever still runs

Without a kubelet (``WorkloadRunner(None, exporter)``) nothing is watched: :meth:`stop` ends a
pod's process.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

HERE = Path(__file__).resolve().parent
WORKLOADS = {"cnn": HERE / "cnn.py", "transformer": HERE / "transformer.py"}


def workload_command(name: str, *, duration: float = 90.0, epochs: int = 3, scale: float = 1.0,
                     workers: int = 2, phase_log: str | os.PathLike | None = None,
                     extra: Sequence[str] = ()) -> list[str]:
    """The command line of workload ``name`` (``cnn`` or ``transformer``) on this Python."""
    cmd = [sys.executable, str(WORKLOADS[name]), "--duration", f"{duration:g}",
           "--epochs", str(epochs), "--scale", f"{scale:g}", "--workers", str(workers)]
    if phase_log is not None:
        cmd += ["--phase-log", str(phase_log)]
    return cmd + list(extra)


def read_phase_log(path: str | os.PathLike) -> list[tuple[float, str]]:
    """``[(unix time, phase), ...]`` from a workload's ``--phase-log`` file."""
    rows = []
    for line in Path(path).read_text().splitlines()[1:]:
        t, _, phase = line.partition(",")
        if phase:
            rows.append((float(t), phase))
    return rows


def phase_at(log: list[tuple[float, str]], t: float) -> str | None:
    """The phase in force at unix time ``t`` (None before the first entry)."""
    current = None
    for start, phase in log:
        if start > t:
            break
        current = phase
    return current


@dataclass
class PodProcess:
    namespace: str
    pod: str
    container: str
    popen: subprocess.Popen
    log_path: Path
    started: float = field(default_factory=time.time)
    tree: Any = None            # the exporter's ProcessTree
    killed: bool = False        # by us (pod deleted / stop)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.namespace, self.pod, self.container)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")


class WorkloadRunner:
    def __init__(self, kubelet: Any | None, exporter: Any, *, poll_interval: float = 0.5,
                 log_dir: str | os.PathLike | None = None):
        self.kubelet = kubelet
        self.exporter = exporter
        self.poll_interval = poll_interval
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="ai4dl-workloads-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._procs: dict[tuple[str, str, str], PodProcess] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[BaseException] = []
        # the processes' temporary files (checkpoints) in one folder the runner removes on
        # close: a process killed as its pod is deleted cannot clean up after itself. Under
        # the system's temp folder, not log_dir: torch's workers bind AF_UNIX sockets in
        # TMPDIR, and a socket path over 107 bytes fails
        self.scratch = tempfile.mkdtemp(prefix="ai4dl-workloads-")

    # ------------------------------------------------------------------ processes
    def start(self, pod: str, command: Sequence[str], *, namespace: str | None = None,
              container: str = "main", env: dict[str, str] | None = None) -> PodProcess:
        """Run ``command`` as pod ``pod``'s container and serve its metrics. The pod should
        exist (``FakeKubelet.create_pod``); its process output goes to ``<log_dir>/<pod>.log``."""
        ns = namespace or (self.kubelet.namespace if self.kubelet is not None else None) \
            or "default"
        key = (ns, pod, container)
        if key in self._procs and self._procs[key].returncode is None:
            raise RuntimeError(f"{ns}/{pod}/{container} already runs pid {self._procs[key].pid}")
        log_path = self.log_dir / f"{ns}_{pod}_{container}.log"
        env = {"TMPDIR": self.scratch, **(env or {})}
        with open(log_path, "wb") as log:
            # its own session: the pod's processes are one group, killed together
            popen = subprocess.Popen(list(command), stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True,
                                     env={**os.environ, **env})
        pp = PodProcess(ns, pod, container, popen, log_path)
        pp.tree = self.exporter.add_process(key, popen.pid)
        with self._lock:
            self._procs[key] = pp
        if self.kubelet is not None and self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="workload-runner",
                                            daemon=True)
            self._thread.start()
        return pp

    def create_pod(self, pod: str, command: Sequence[str], **create_kwargs) -> PodProcess:
        """``kubelet.create_pod(pod, **create_kwargs)`` then :meth:`start`."""
        self.kubelet.create_pod(pod, **create_kwargs)
        return self.start(pod, command, namespace=create_kwargs.get("namespace"))

    def process(self, pod: str, *, namespace: str | None = None,
                container: str = "main") -> PodProcess:
        ns = namespace or (self.kubelet.namespace if self.kubelet is not None else "default")
        return self._procs[(ns, pod, container)]

    @property
    def processes(self) -> list[PodProcess]:
        return list(self._procs.values())

    def stop(self, pod: str, *, namespace: str | None = None, container: str = "main") -> None:
        """Kill the pod's process group and stop its series (the pod is left alone)."""
        self._kill(self.process(pod, namespace=namespace, container=container))

    def delete_pod(self, pod: str, *, namespace: str | None = None) -> None:
        """Delete the pod (grace 0, via the kubelet) and kill its processes at once."""
        ns = namespace or self.kubelet.namespace
        self.kubelet.delete_pod(pod, namespace=ns)
        for pp in [p for p in self.processes if (p.namespace, p.pod) == (ns, pod)]:
            self._kill(pp)

    def _kill(self, pp: PodProcess) -> None:
        self.exporter.remove_pod(pp.key)
        if pp.popen.poll() is None:
            pp.killed = True
            try:
                os.killpg(pp.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            pp.popen.wait(timeout=10)
        else:  # the leader exited: workers it left behind in the group go too
            try:
                os.killpg(pp.popen.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for pp in self.processes:
            self._kill(pp)
        shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> "WorkloadRunner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ kubelet loop
    def _watch(self) -> None:
        from kubernetes.client.rest import ApiException

        done: set[int] = set()  # id() of the PodProcess handled (a key may be restarted)
        while not self._stop.wait(self.poll_interval):
            try:
                procs = [p for p in self.processes if id(p) not in done]
                for ns in {p.namespace for p in procs}:
                    listed = self.kubelet.core.list_namespaced_pod(
                        ns, field_selector=f"spec.nodeName={self.kubelet.node_name}")
                    alive = {p.metadata.name for p in listed.items
                             if not p.metadata.deletion_timestamp}
                    for pp in procs:
                        if pp.namespace != ns:
                            continue
                        if pp.pod not in alive:        # deleted: kill, series stop
                            self._kill(pp)
                            done.add(id(pp))
                        elif pp.popen.poll() is not None:  # exited: series stop, pod phase
                            self._kill(pp)
                            done.add(id(pp))
                            try:
                                self.kubelet.set_phase(
                                    pp.pod, "Succeeded" if pp.popen.returncode == 0 else "Failed",
                                    namespace=ns)
                            except ApiException as exc:
                                if exc.status != 404:
                                    raise
            except Exception as exc:  # noqa: BLE001 - kept for the test to see
                self.errors.append(exc)
                time.sleep(self.poll_interval)
