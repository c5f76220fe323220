"""A single-node VictoriaMetrics process for tests: the same interface as
:class:`e2e.prometheus.server.PrometheusServer` (``url``, ``start``, ``stop``, ``set_targets``,
``query``, ``wait_for_samples``), scraping ``targets`` with the same Prometheus config file
(``-promscrape.config``), and :meth:`import_series` for history (VictoriaMetrics imports the
Prometheus text format with millisecond timestamps at ``/api/v1/import/prometheus``; promtool's
blocks are Prometheus's own format).

Flags that differ from a production default, and why (README: "Past one Prometheus"):

- ``-search.latencyOffset=0s``: by default VictoriaMetrics hides the newest 30 s of samples from
  queries (so a dashboard's last point is complete); the tests' windows are 10 s long;
- ``-search.disableCache``: the response cache would keep answers from before an import;
- ``-retentionPeriod=100y``: backfilled history is older than the default month allows for some
  tests' clocks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterable, Sequence

from e2e.prometheus.server import PrometheusServer

CACHE = Path(os.environ.get("AI4DL_CACHE", Path.home() / ".cache" / "ai4dl"))
INSTALL = Path(__file__).with_name("install.sh")


def find_victoria_metrics(install: bool = True) -> Path:
    binary = CACHE / "victoria-metrics" / "bin" / "victoria-metrics"
    if not binary.exists() and install:
        r = subprocess.run(["bash", str(INSTALL)], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"victoria-metrics install failed: {r.stderr.strip()[-500:]}")
    if not binary.exists():
        raise FileNotFoundError(f"no victoria-metrics at {binary} (run {INSTALL})")
    return binary


def victoria_metrics_version(binary: Path) -> str:
    v = (binary.parent.parent / "VERSION")
    return v.read_text().strip() if v.exists() else "unknown"


class VictoriaMetricsServer(PrometheusServer):
    def __init__(self, targets: Sequence[str] | str = (), **kw):
        kw.setdefault("binary", find_victoria_metrics())
        super().__init__(targets, **kw)

    @property
    def version(self) -> str:
        return victoria_metrics_version(self.binary)

    def command(self) -> list[str]:
        return [str(self.binary), f"-promscrape.config={self.config_path}",
                f"-storageDataPath={self.storage_path}",
                f"-httpListenAddr=127.0.0.1:{self.port}", "-retentionPeriod=100y",
                "-search.latencyOffset=0s", "-search.disableCache",
                "-promscrape.config.strictParse=false", "-loggerLevel=WARN", *self.extra_args]

    def _request(self, method: str, path: str, timeout: float = 5.0) -> int:
        # VictoriaMetrics answers readiness at /health; /-/reload re-reads the scrape config
        return super()._request(method, "/health" if path == "/-/ready" else path, timeout)

    def import_series(self, lines: Iterable[str], batch: int = 200_000) -> int:
        """POST Prometheus text lines (``name{labels} value timestamp_ms``) in batches; then
        force a flush so the samples are searchable at once. Returns the lines sent."""
        n = 0
        buf: list[str] = []

        def send() -> None:
            req = urllib.request.Request(self.url + "/api/v1/import/prometheus",
                                         data=("\n".join(buf) + "\n").encode(), method="POST")
            with urllib.request.urlopen(req, timeout=120) as r:
                r.read()
            buf.clear()
        for line in lines:
            buf.append(line)
            n += 1
            if len(buf) >= batch:
                send()
        if buf:
            send()
        with urllib.request.urlopen(self.url + "/internal/force_flush", timeout=60) as r:
            r.read()
        return n


if __name__ == "__main__":       # python -m e2e.victoriametrics.server: start one by hand
    srv = VictoriaMetricsServer(sys.argv[1:]).start()
    print(srv.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        srv.stop()
