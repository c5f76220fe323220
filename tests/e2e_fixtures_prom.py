"""pytest plugin: a real Prometheus server and a trace-replaying exporter for end-to-end tests.

Registered from tests/conftest.py (``pytest_plugins``). Fixtures:

* ``prometheus_binary`` (session): path of the ``prometheus`` binary. Looks at
  ``$AI4DL_PROMETHEUS``, the e2e/prometheus/install.sh cache, ``PATH``, and otherwise runs
  install.sh (set ``AI4DL_PROMETHEUS_INSTALL=0`` to forbid that). When none can be had the tests
  that need it are skipped with the reason, except under CI (env ``CI`` set), where they fail.
* ``trace_exporter`` (module): factory ``trace_exporter(executions_by_pod, speed=15.0,
  loop=True, **kw) -> TraceExporter`` (started; stopped at the end of the module).
* ``prometheus_server`` (module): factory ``prometheus_server(targets, scrape_interval="1s",
  **kw) -> PrometheusServer`` (started and ready; ``.url``, ``.stop()``, ``.start()``; stopped
  at the end of the module). ``targets``: exporter(s) or URL(s).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.append(str(REPO_ROOT))  # appended: the repo's folders never shadow real modules

from e2e.prometheus.exporter import TraceExporter  # noqa: E402
from e2e.prometheus.server import (PrometheusNotFound, PrometheusServer,  # noqa: E402
                                   find_prometheus)

__all__ = ["TraceExporter", "PrometheusServer"]


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="session")
def prometheus_binary() -> Path:
    """Path of a runnable ``prometheus`` (skip, or under CI fail, when none can be had)."""
    install = os.environ.get("AI4DL_PROMETHEUS_INSTALL", "1").strip() not in ("0", "false", "no")
    try:
        return find_prometheus(install=install)
    except PrometheusNotFound as e:
        if _in_ci():
            pytest.fail(f"Prometheus is required under CI but cannot be obtained: {e}", pytrace=False)
        pytest.skip(f"Prometheus not available: {e}")


@pytest.fixture(scope="module")
def trace_exporter():
    """Factory: ``trace_exporter(executions_by_pod, speed=15.0, loop=True, **kw)`` -> a started
    :class:`TraceExporter`; all are stopped at the end of the module."""
    made: list[TraceExporter] = []

    def make(executions_by_pod=None, speed: float = 15.0, loop: bool = True, **kw) -> TraceExporter:
        exp = TraceExporter(executions_by_pod, speed=speed, loop=loop, **kw)
        made.append(exp)
        exp.start()
        return exp

    yield make
    for exp in made:
        exp.stop()


@pytest.fixture(scope="module")
def prometheus_server(prometheus_binary, tmp_path_factory):
    """Factory: ``prometheus_server(exporter_or_urls, scrape_interval="1s", **kw)`` -> a ready
    :class:`PrometheusServer` (``.url``, ``.stop()``, ``.start()``, ``.query()``,
    ``.wait_for_samples()``); all are stopped at the end of the module."""
    made: list[PrometheusServer] = []

    def make(targets, scrape_interval: str = "1s", **kw) -> PrometheusServer:
        if isinstance(targets, (TraceExporter, str)):
            targets = [targets]
        urls = [t.url if isinstance(t, TraceExporter) else str(t) for t in targets]
        srv = PrometheusServer(urls, workdir=tmp_path_factory.mktemp("prometheus"),
                               scrape_interval=scrape_interval, binary=prometheus_binary, **kw)
        made.append(srv)
        srv.start()
        return srv

    yield make
    for srv in made:
        srv.stop()
