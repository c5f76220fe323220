"""Run a real Prometheus server (the binary from install.sh) for tests and demos.

:func:`find_prometheus` locates the ``prometheus`` binary (``$AI4DL_PROMETHEUS``, the
install.sh cache, ``PATH``; optionally running install.sh); :class:`PrometheusServer` writes a
``prometheus.yml`` that scrapes given targets, starts the server on a free local port, waits for
``/-/ready`` and can be stopped and started again on the same port and storage (an outage and
its recovery). No system service is involved.

Quirk worth knowing: Prometheus 2.x hands new targets to its scrape manager at most every 5 s,
so the first scrape comes ~5 s after start (after every start): use
:meth:`PrometheusServer.wait_for_samples` rather than a fixed sleep.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import weakref
from pathlib import Path
from typing import Sequence

HERE = Path(__file__).resolve().parent
INSTALL_SH = HERE / "install.sh"


class PrometheusNotFound(RuntimeError):
    """The prometheus binary is not available (the message says why)."""


def cache_dir() -> Path:
    return Path(os.environ.get("AI4DL_CACHE") or Path.home() / ".cache" / "ai4dl") / "prometheus"


def find_prometheus(install: bool = False, timeout: float = 600.0) -> Path:
    """Path of a runnable ``prometheus`` binary (``promtool`` lies beside it where installed).

    Looks at ``$AI4DL_PROMETHEUS`` (a binary), the install.sh cache, then ``PATH``. With
    ``install``, runs install.sh when none is found. Raises :class:`PrometheusNotFound`.
    """
    env = os.environ.get("AI4DL_PROMETHEUS")
    if env:
        p = Path(env)
        if p.is_file() and os.access(p, os.X_OK):
            return p
        raise PrometheusNotFound(f"AI4DL_PROMETHEUS={env} is not an executable file")
    candidates = [cache_dir() / "bin" / "prometheus"]
    which = shutil.which("prometheus")
    if which:
        candidates.append(Path(which))
    for c in candidates:
        if c.exists() and _runs(c):
            return c
    if not install:
        raise PrometheusNotFound(f"no prometheus binary in {cache_dir() / 'bin'} or on PATH "
                                 f"(run {INSTALL_SH})")
    try:
        r = subprocess.run(["bash", str(INSTALL_SH)], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise PrometheusNotFound(f"{INSTALL_SH} did not run: {e}") from None
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
        raise PrometheusNotFound(f"{INSTALL_SH} failed: {why}")
    return find_prometheus(install=False)


def _runs(binary: Path) -> bool:
    try:
        r = subprocess.run([str(binary), "--version"], capture_output=True, timeout=30)
        return r.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


_HELP_CACHE: dict[str, str] = {}


def _help_text(binary: Path) -> str:
    key = str(binary)
    if key not in _HELP_CACHE:
        r = subprocess.run([key, "--help"], capture_output=True, text=True, timeout=30)
        _HELP_CACHE[key] = r.stdout + r.stderr
    return _HELP_CACHE[key]


def prometheus_version(binary: Path) -> str:
    r = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    first = (r.stdout or r.stderr).splitlines()[0]
    return first.split("version", 1)[-1].split()[0] if "version" in first else first


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _target(url_or_address: str) -> tuple[str, str]:
    """``(host:port, metrics_path)`` from ``http://h:p/path``, ``h:p/path`` or ``h:p``."""
    u = url_or_address if "://" in url_or_address else "http://" + url_or_address
    parts = urllib.parse.urlsplit(u)
    return parts.netloc, parts.path or "/metrics"


class _PortTaken(Exception):
    pass


_RUNNING: "weakref.WeakSet[PrometheusServer]" = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    """A script that dies with an exception must not leave Prometheus processes behind."""
    for srv in list(_RUNNING):
        try:
            srv.stop(timeout=5)
        except Exception:
            pass


class PrometheusServer:
    """A Prometheus process scraping ``targets`` every ``scrape_interval``.

    ``targets``: exporter URLs (``http://127.0.0.1:PORT/metrics``) or ``host:port``. The port
    and the storage folder are chosen once, so :meth:`stop` then :meth:`start` is an outage and
    recovery of the same server (data written before the outage is kept).
    """

    def __init__(self, targets: Sequence[str] | str, *, workdir: str | os.PathLike | None = None,
                 scrape_interval: str = "1s", binary: str | os.PathLike | None = None,
                 port: int | None = None, extra_args: Sequence[str] = (),
                 ready_timeout: float = 60.0):
        self.targets = [targets] if isinstance(targets, str) else list(targets)
        self.binary = Path(binary) if binary else find_prometheus()
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="ai4dl-prom-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.scrape_interval = scrape_interval
        self._fixed_port = bool(port)
        self.port = port or free_port()
        self._started_once = False
        self.extra_args = list(extra_args)
        self.ready_timeout = ready_timeout
        self.config_path = self.workdir / "prometheus.yml"
        self.storage_path = self.workdir / "data"
        self.log_path = self.workdir / "prometheus.log"
        self._proc: subprocess.Popen | None = None
        self._log = None
        self.write_config()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def version(self) -> str:
        return prometheus_version(self.binary)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def write_config(self) -> None:
        jobs = []
        for i, t in enumerate(self.targets):
            address, path = _target(t)
            jobs.append(
                f"  - job_name: ai4dl-exporter-{i}\n"
                f"    honor_labels: true\n"
                f"    metrics_path: {json.dumps(path)}\n"
                f"    static_configs:\n"
                f"      - targets: [{json.dumps(address)}]\n")
        text = ("global:\n"
                f"  scrape_interval: {self.scrape_interval}\n"
                f"  scrape_timeout: {self.scrape_interval}\n"
                f"  evaluation_interval: {self.scrape_interval}\n"
                "scrape_configs:\n" + ("".join(jobs) if jobs else "  []\n"))
        if not jobs:
            text = text.replace("scrape_configs:\n  []\n", "scrape_configs: []\n")
        self.config_path.write_text(text)

    def set_targets(self, targets: Sequence[str]) -> None:
        """Change the scraped targets (rewrites the config and reloads a running server)."""
        self.targets = list(targets)
        self.write_config()
        if self.running:
            self._request("POST", "/-/reload")

    def command(self) -> list[str]:
        cmd = [str(self.binary), f"--config.file={self.config_path}",
               f"--storage.tsdb.path={self.storage_path}",
               f"--web.listen-address=127.0.0.1:{self.port}", "--web.enable-lifecycle",
               "--storage.tsdb.retention.time=1d", "--log.level=info"]
        if "--web.enable-remote-write-receiver" in _help_text(self.binary):
            cmd.append("--web.enable-remote-write-receiver")
        return cmd + self.extra_args

    def start(self) -> "PrometheusServer":
        """Start (idempotent) and wait until ``/-/ready``.

        If the port was taken meanwhile (it was only free when chosen) and the server never ran
        yet, a new free port is tried once.
        """
        if self.running:
            return self
        try:
            return self._start()
        except _PortTaken:
            if self._started_once or self._fixed_port:
                raise RuntimeError(f"port {self.port} is taken; "
                                   f"log tail: {self.log_tail(3)}") from None
            self.port = free_port()
            return self._start()

    def _start(self) -> "PrometheusServer":
        self._log = open(self.log_path, "ab")
        self._proc = subprocess.Popen(self.command(), stdout=self._log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, cwd=self.workdir,
                                      start_new_session=True)
        _RUNNING.add(self)
        deadline = time.monotonic() + self.ready_timeout
        while True:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._close_log()
                self._proc = None
                if "address already in use" in self.log_tail(5):
                    raise _PortTaken()
                raise RuntimeError(f"prometheus exited with status {code} at start; "
                                   f"log tail: {self.log_tail(5)}")
            try:
                if self._request("GET", "/-/ready", timeout=1.0) == 200:
                    self._started_once = True
                    return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"prometheus not ready within {self.ready_timeout:g} s; "
                                   f"log tail: {self.log_tail(5)}")
            time.sleep(0.05)

    def stop(self, timeout: float = 15.0) -> None:
        """Stop the process (SIGTERM, then SIGKILL). Storage is kept for a later start."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        self._close_log()

    def restart(self) -> "PrometheusServer":
        self.stop()
        return self.start()

    def cleanup(self) -> None:
        """Stop and remove the work folder (if this object created it)."""
        self.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, n: int = 20) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()[-n:]
        except OSError:
            return "(no log)"
        return " | ".join(lines)

    # ------------------------------------------------------------------------ helpers for tests

    def _request(self, method: str, path: str, timeout: float = 5.0) -> int:
        req = urllib.request.Request(self.url + path, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                r.read()
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def query(self, promql: str, timeout: float = 10.0) -> list[dict]:
        """An instant query's result list (for test set-up; the adapter is what is under test)."""
        data = urllib.parse.urlencode({"query": promql}).encode()
        with urllib.request.urlopen(self.url + "/api/v1/query", data=data, timeout=timeout) as r:
            return json.loads(r.read())["data"]["result"]

    def self_metric(self, name: str, **labels: str) -> float:
        """Sum of Prometheus's own metric ``name`` (from its /metrics) over matching labels."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            text = r.read().decode()
        total = 0.0
        for line in text.splitlines():
            if not line.startswith(name + "{") and not line.startswith(name + " "):
                continue
            head, _, value = line.rpartition(" ")
            if all(f'{k}="{v}"' in head for k, v in labels.items()):
                total += float(value)
        return total

    def wait_for_samples(self, metric: str, count: int = 3, timeout: float = 30.0,
                         selector: str = "") -> None:
        """Wait until some series of ``metric`` has at least ``count`` samples (scrapes)."""
        q = f"max(count_over_time({metric}{{{selector}}}[10m]))"
        deadline = time.monotonic() + timeout
        got = 0.0
        while time.monotonic() < deadline:
            res = self.query(q)
            got = float(res[0]["value"][1]) if res else 0.0
            if got >= count:
                return
            time.sleep(0.2)
        raise TimeoutError(f"{metric}: {got:g} samples after {timeout:g} s, wanted {count} "
                           f"(log tail: {self.log_tail(3)})")

    def __enter__(self) -> "PrometheusServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cleanup()
