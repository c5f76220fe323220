"""/metrics (ai4dl.controller.exposition): the per-container gauges rendered once per window,
served only in a format where their lines are the library's own."""

from __future__ import annotations

import gzip
import math
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter, exposition
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families)
from prometheus_client.parser import text_string_to_metric_families

from ai4dl.controller import exposition as ex
from ai4dl.controller import metrics as m

OPENMETRICS = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
ACCEPTS = (None, "text/plain;version=0.0.4", OPENMETRICS)


def _series() -> m.PodSeries:
    series = m.PodSeries()
    series.replace("ns", "pm", ("cpu", "memory"), {
        ("a", "main"): m.ContainerSeries(2.0, (0.5, 1.5e9), (1.0, math.nan), (1.0, 2e9)),
        ("b", "side"): m.ContainerSeries(None, (0.25, math.nan), (0.5, 1e9), ()),
        ('odd"\\name', "main"): m.ContainerSeries(0.0, (1e-3, 7.0), (1.0, 8.0), (1.0, 9.0))})
    series.replace("other", "pm2", ("memory",), {
        ("c", "main"): m.ContainerSeries(1.0, (3e9,), (4e9,), (math.nan,))})
    return series


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("ai4dl_test_windows", "a counter beside the gauges", registry=registry).inc(3)
    return registry


def _library_body(accept, series, registry) -> bytes:
    both = CollectorRegistry()
    both.register(registry)
    both.register(series)
    return exposition.choose_encoder(accept or "")[0](both)


def _parsed(body: bytes, content_type: str) -> list:
    parse = (openmetrics_families if content_type.startswith("application/openmetrics-text")
             else text_string_to_metric_families)
    return sorted((f.name, f.type, f.documentation,
                   sorted((s.name, sorted(s.labels.items()), s.value) for s in f.samples))
                  for f in parse(body.decode()))


@pytest.mark.parametrize("accept", ACCEPTS)
def test_the_served_gauges_are_what_the_library_would_write(accept):
    series, registry = _series(), _registry()
    body, content_type = ex.metrics_body(accept, series, registry)
    assert ex.lines_agree(*exposition.choose_encoder(accept or ""))
    expected = _library_body(accept, series, registry)
    assert _parsed(body, content_type) == _parsed(expected, content_type)
    assert sorted(body.splitlines()) == sorted(expected.splitlines())
    assert b'pod="odd\\"\\\\name"' in body
    assert body.count(b"# TYPE ai4dl_pod_phase gauge") == 1


def test_a_replaced_table_is_rendered_again_and_a_forgotten_one_goes():
    series = _series()
    first = series.sample_lines()
    series.replace("other", "pm2", ("memory",), {
        ("c", "main"): m.ContainerSeries(3.0, (5e9,), (6e9,), (math.nan,))})
    again = series.sample_lines()
    assert b'namespace="other",phasemodel="pm2",pod="c"} 3.0' in again[0]
    assert b"3.0" not in first[0]
    series.forget("other", "pm2")
    assert not any(b'pod="c"' in lines for lines in series.sample_lines())


def test_a_format_whose_lines_differ_is_served_by_the_library(monkeypatch):
    def encoder(registry):      # a format this module does not know: every value tripled
        return b"".join(f"{s.name} {3 * s.value}\n".encode()
                        for f in registry.collect() for s in f.samples)

    monkeypatch.setattr(ex.exposition, "choose_encoder", lambda accept: (encoder, "x/new"))
    series, registry = _series(), _registry()
    body, content_type = ex.metrics_body("x/new", series, registry)
    assert content_type == "x/new" and not ex.lines_agree(encoder, "x/new")
    assert body == encoder(_Both(registry, series))


class _Both:
    def __init__(self, *collectors):
        self.collectors = collectors

    def collect(self):
        return [f for c in self.collectors for f in c.collect()]


def test_the_server_answers_both_formats_gzipped_and_names_filtered():
    m.POD_SERIES.replace("ns", "served", ("cpu",), {
        ("a", "main"): m.ContainerSeries(4.0, (0.5,), (1.0,), (2.0,))})
    server = ex.serve(0)
    url = f"http://127.0.0.1:{server.server_port}/metrics"
    try:
        for accept in ACCEPTS:
            request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip",
                                                           **({"Accept": accept} if accept
                                                              else {})})
            with urllib.request.urlopen(request, timeout=10) as answer:
                assert answer.headers["Content-Encoding"] == "gzip"
                content_type = answer.headers["Content-Type"]
                body = gzip.decompress(answer.read())
            families = {f[0]: f for f in _parsed(body, content_type)}
            assert ("ai4dl_pod_phase", [("container", "main"), ("namespace", "ns"),
                                        ("phasemodel", "served"), ("pod", "a")], 4.0) \
                in families["ai4dl_pod_phase"][3]
            assert "ai4dl_resizes" in families      # the library's own metrics are there too
        names = "name[]=ai4dl_pod_request&name[]=ai4dl_window_queue_depth"
        with urllib.request.urlopen(f"{url}?{names}", timeout=10) as answer:
            body = answer.read().decode()
        assert "ai4dl_pod_request{" in body and "ai4dl_pod_phase{" not in body
        assert "ai4dl_window_queue_depth 0.0" in body and "ai4dl_windows_running" not in body
    finally:
        server.shutdown()
        server.server_close()
        m.forget_phasemodel("ns", "served")
