"""ai4dl.sources.prometheus against a real Prometheus scraping a trace-replaying exporter.

One Prometheus (1 s scrapes) and one exporter for the module: 6 pods play the DLaaS sample
executions (synthetic ones if the shared data is absent) at 15x speed (one 15 s trace step per
wall second), plus 1,994 filler pods so that every query selects among 2,000 pods. The HTTP
failure paths that need no real server (5xx, timeouts, 404) use a scripted stub.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from ai4dl.errors import Ai4dlError
from ai4dl.promql import template_problem
from ai4dl.sources import (FeatureQuery, PodRef, PrometheusQueryError, PrometheusSource,
                           PrometheusUnavailable, default_feature_queries)
from ai4dl.sources.prometheus import pod_selector
from ai4dl.sources.prometheus_types import PrometheusQueryTimeout

SPEED = 15.0
RATE_WINDOW = "4s"
N_PODS = 2000
MAIN_PODS = [PodRef("team-a", f"train-{i}", "main") for i in range(3)] + \
            [PodRef("team-b", f"job.v2-{i}", "worker") for i in range(3)]
DECOY = PodRef("team-b", "jobXv2-0", "worker")  # would match an unescaped "job.v2-0"
LEAVER = PodRef("team-c", "leaver", "main")


def _fillers(n: int) -> list[PodRef]:
    return [PodRef(f"fill-{i % 4}", f"filler-{i:05d}", "main") for i in range(n)]


@pytest.fixture(scope="module")
def executions(request):
    """The DLaaS sample executions (cpu cores, memory bytes), else synthetic ones."""
    from ai4dl.method import synthetic
    from ai4dl.io import load_traces

    try:
        data = request.getfixturevalue("shared_data")
        return list(load_traces(data / "ai4dl_samples" / "sample-dlaas.csv"))
    except pytest.skip.Exception:
        return list(synthetic.generate(4, seed=5)[0].select(["cpu", "memory"]))


@pytest.fixture(scope="module")
def env(executions, trace_exporter, prometheus_server, scraped_twice_servers,
        timeout_server):
    """(exporter, prometheus, source) with MAIN_PODS already scraped for a while. (The
    scraped-twice and timeout tests' servers are started first, so that their scrapes pile up
    meanwhile.)"""
    pods = {p: executions[i % len(executions)] for i, p in enumerate(MAIN_PODS)}
    pods[DECOY] = executions[0]
    fill = executions[-1]
    for p in _fillers(N_PODS - len(pods)):
        pods[p] = fill
    assert len(pods) == N_PODS
    exp = trace_exporter(pods, speed=SPEED)
    srv = prometheus_server(exp, scrape_interval="1s")
    # The tests look up to ~15 s back (8 s windows + the 4 s rate window + slack); the first
    # scrape comes ~5 s after start.
    srv.wait_for_samples("container_memory_working_set_bytes", 16, timeout=60)
    src = PrometheusSource(srv.url, timeout=10.0, retries=2, backoff=0.05, rate_window=RATE_WINDOW)
    yield exp, srv, src
    src.close()


def _window(seconds: float, step: float = 1.0) -> tuple[float, float]:
    end = float(np.floor(time.time())) - 0.5  # a whole scrape after the grid's last point
    return end - seconds, end


# ----------------------------------------------------------------------------- exporter alone

def test_exporter_clock_counter_and_loop(executions):
    from e2e.prometheus.exporter import TraceExporter

    ex = executions[0]
    now = [1000.0]
    exp = TraceExporter({("ns", "p", "c"): ex}, speed=SPEED, clock=lambda: now[0])
    step = ex.step
    rel = ex.times - ex.times[0]
    # Sample k is in force for wall times [k * step / speed, (k + 1) * step / speed).
    for k in (0, 1, 7, len(ex) - 1):
        w = 1000.0 + (rel[k] + 0.5 * step) / SPEED
        v = exp.values_at(("ns", "p", "c"), w)
        assert v.memory == float(ex.column("memory")[k])
        assert v.cpu == float(ex.column("cpu")[k])
    # rate over one sample's wall span = that sample's cores (counter is in wall seconds).
    k = 3
    a, b = 1000.0 + rel[k] / SPEED, 1000.0 + (rel[k] + step) / SPEED
    rate = exp.cpu_rate(("ns", "p", "c"), a + 1e-6, b - 1e-6)
    assert rate == pytest.approx(ex.column("cpu")[k], rel=1e-6)
    # Looping: one lap later the same values, and the counter went up by one lap's cpu seconds.
    lap = (rel[-1] + step) / SPEED
    v1, v2 = exp.values_at(("ns", "p", "c"), 1001.3), exp.values_at(("ns", "p", "c"), 1001.3 + lap)
    assert v2.memory == v1.memory
    lap_cpu_seconds = float(np.sum(ex.column("cpu").astype(np.float64) * step)) / SPEED
    assert v2.cpu_counter - v1.cpu_counter == pytest.approx(lap_cpu_seconds, rel=1e-9)
    ts = np.linspace(1000.0, 1000.0 + 3.2 * lap, 500)
    counters = [exp.values_at(("ns", "p", "c"), t).cpu_counter for t in ts]
    assert np.all(np.diff(counters) >= 0)
    # Hold: after the end, the last sample stays.
    hold = TraceExporter({("ns", "p", "c"): ex}, speed=SPEED, loop=False, clock=lambda: now[0])
    assert hold.values_at(("ns", "p", "c"), 1000.0 + 2 * lap).memory == float(ex.column("memory")[-1])


def test_exporter_text_format(executions, prometheus_binary):
    from ai4dl.method import synthetic
    from e2e.prometheus.exporter import TraceExporter

    gpu_ex = synthetic.generate(1, seed=3)[0][0]  # cpu, memory, gpu_util, gpu_memory
    pods = {("ns", "a", "main"): executions[0], ("ns", "g", "main"): gpu_ex}
    with TraceExporter(pods, speed=SPEED) as exp:
        with urllib.request.urlopen(exp.url, timeout=5) as r:
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            body = r.read().decode()
        exp.set_paused(True)
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(exp.url, timeout=5)
        assert e.value.code == 503
    assert "# TYPE container_cpu_usage_seconds_total counter" in body
    assert 'container_memory_working_set_bytes{namespace="ns",pod="a",container="main"}' in body
    assert 'DCGM_FI_DEV_GPU_UTIL{namespace="ns",pod="g",container="main"}' in body
    assert 'DCGM_FI_DEV_FB_USED{namespace="ns",pod="g",container="main"}' in body
    assert 'DCGM_FI_DEV_GPU_UTIL{namespace="ns",pod="a"' not in body  # no GPU feature, no line
    promtool = prometheus_binary.parent / "promtool"
    if promtool.exists():  # Prometheus's own linter accepts the exposition
        r = subprocess.run([str(promtool), "check", "metrics"], input=body, text=True,
                           capture_output=True, timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr


def test_exporter_scrape_2000_pods_fast(executions):
    from e2e.prometheus.exporter import TraceExporter

    pods = {p: executions[i % len(executions)] for i, p in enumerate(_fillers(2000))}
    with TraceExporter(pods, speed=SPEED) as exp:
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            with urllib.request.urlopen(exp.url, timeout=10) as r:
                body = r.read()
            best = min(best, time.perf_counter() - t0)
    assert body.count(b"\ncontainer_memory_working_set_bytes{") == 2000
    print(f"scrape of 2,000 pods: {best * 1000:.0f} ms, {len(body)} bytes")
    assert best < 0.25


# ----------------------------------------------------------------------------- the adapter

def test_memory_and_cpu_match_exporter(env):
    exp, srv, src = env
    start, end = _window(8)
    s = src.fetch(["cpu", "memory"], MAIN_PODS, start, end, 1.0)
    assert s.features == ("cpu", "memory")
    assert np.allclose(np.diff(s.times), 1.0) and s.times[0] == pytest.approx(start)
    window = float(RATE_WINDOW.rstrip("s"))
    rel_errors = []
    for pod in MAIN_PODS:
        series = s[pod]
        assert series.values.shape == (len(s.times), 2) and series.values.dtype == np.float64
        assert series.missing_fraction == 0.0, series.values
        assert series.newest_age < 1.0
        for t, (cpu, mem) in zip(series.times, series.values):
            # The value at grid time t is the newest scrape at or before t (1 s scrapes; a
            # busy machine may delay one).
            served = {exp.values_at(pod, w).memory for w in np.arange(t - 3.0, t + 0.05, 0.01)}
            assert mem in served, (pod, t, mem)
            # rate() over the window ~ the mean of the cores served over it (Prometheus
            # extrapolates less when a scrape is late: allow 20 % under the lowest).
            expected = exp.cpu_rate(pod, t - window, t)
            lo = min(exp.values_at(pod, w).cpu for w in np.arange(t - window - 0.1, t, 0.05))
            hi = max(exp.values_at(pod, w).cpu for w in np.arange(t - window - 0.1, t, 0.05))
            assert lo * 0.8 - 1e-3 <= cpu <= hi * 1.1 + 1e-3, (pod, t, cpu, lo, hi)
            rel_errors.append(abs(cpu - expected) / max(expected, 1e-3))
    assert np.median(rel_errors) < 0.15, rel_errors


def test_one_query_for_all_pods(env):
    exp, srv, src = env
    pods = list(exp.pods)
    assert len(pods) == N_PODS
    before = srv.self_metric("prometheus_http_requests_total", handler="/api/v1/query_range")
    q0, a0 = src.query_count, src.attempt_count
    start, end = _window(5)
    t0 = time.perf_counter()
    s = src.fetch(default_feature_queries(["cpu", "memory"]), pods, start, end, 1.0)
    elapsed = time.perf_counter() - t0
    after = srv.self_metric("prometheus_http_requests_total", handler="/api/v1/query_range")
    assert after - before == 1  # Prometheus saw exactly one range query
    assert (src.query_count - q0, src.attempt_count - a0, s.queries) == (1, 1, 1)
    assert len(s) == N_PODS and list(s) == [PodRef(*p) for p in pods]
    assert s.values.shape == (N_PODS, len(s.times), 2)
    missing = np.array([s[PodRef(*p)].missing_fraction for p in pods])
    assert missing.max() == 0.0
    print(f"fetch of {N_PODS} pods x 2 features x {len(s.times)} points: {elapsed * 1000:.0f} ms")


def test_missing_pod_is_all_nan(env):
    exp, srv, src = env
    ghost = PodRef("team-a", "ghost", "main")
    start, end = _window(5)
    s = src.fetch(["cpu", "memory"], [MAIN_PODS[0], ghost], start, end, 1.0)
    assert s.queries == 1
    assert np.isnan(s[ghost].values).all() and s[ghost].missing_fraction == 1.0
    assert s[ghost].newest_age == float("inf") and s.stale(30.0) == [ghost]
    assert s[ghost].missing_by_feature == {"cpu": 1.0, "memory": 1.0}
    assert s[MAIN_PODS[0]].missing_fraction == 0.0


def test_selector_escapes_regex_metacharacters(env):
    exp, srv, src = env
    pod = MAIN_PODS[3]  # job.v2-0: an unescaped '.' would also select jobXv2-0
    assert "job\\\\.v2" in pod_selector([pod])  # regex \. inside a PromQL string
    result = srv.query(src.build_query(["memory"], [pod]))
    assert [r["metric"]["pod"] for r in result] == [pod.pod]
    assert result[0]["metric"]["ai4dl_feature"] == "memory"


def test_removed_pod_goes_stale(env, executions):
    exp, srv, src = env
    exp.add_pod(LEAVER, executions[1])
    srv.wait_for_samples("container_memory_working_set_bytes", 3, timeout=20,
                         selector=f'pod="{LEAVER.pod}"')
    exp.remove_pod(LEAVER)
    removed = time.time()
    time.sleep(4.0)
    end = time.time()
    s = src.fetch(["memory"], [LEAVER, MAIN_PODS[0]], end - 10, end, 0.5)
    age = s[LEAVER].newest_age
    # Prometheus marks vanished series stale at the first scrape without them (~1 s later).
    assert end - removed - 2.5 <= age <= end - removed + 1.5, age
    assert 0.0 < s[LEAVER].missing_fraction < 1.0
    assert s[MAIN_PODS[0]].newest_age <= 1.5
    assert s.stale(2.0) == [LEAVER]


def test_bad_promql_raises_query_error_without_retry(env):
    exp, srv, src = env
    a0 = src.attempt_count
    text = ("sum by (namespace, pod, container) "
            "(rate(container_cpu_usage_seconds_total{{{selector}}}[{rate_window}])")
    start, end = _window(5)
    # confined (the default): the exact text is parsed before it is sent, and refused
    with pytest.raises(PrometheusQueryError, match="feature 'cpu': query is not valid PromQL"):
        src.fetch([FeatureQuery("cpu", text), "memory"], MAIN_PODS, start, end, 1.0)
    assert src.attempt_count == a0
    # unconfined (--allow-free-promql): Prometheus' own 400, one line, no retry
    with pytest.raises(PrometheusQueryError) as e:
        src.fetch([FeatureQuery("cpu", text, confined=False), "memory"], MAIN_PODS, start, end,
                  1.0)
    msg = str(e.value)
    assert isinstance(e.value, Ai4dlError) and "\n" not in msg
    assert "parse error" in msg and srv.url in msg and e.value.status == 400
    assert src.attempt_count - a0 == 1
    # A template with an unknown placeholder is refused before anything is sent.
    with pytest.raises(PrometheusQueryError, match="bad PromQL template.*not a template: a '{' "
                                                   "at character 10"):
        src.fetch([FeatureQuery("x", "up{{pod=~{pod_regex}}}")], MAIN_PODS, start, end, 1.0)
    assert src.attempt_count - a0 == 1


def test_chunking_gives_the_same_result(env):
    exp, srv, src = env
    start, end = _window(12)
    whole = src.fetch(["cpu", "memory"], MAIN_PODS, start, end, 1.0)
    chunked_src = PrometheusSource(srv.url, max_points=4, rate_window=RATE_WINDOW)
    chunked = chunked_src.fetch(["cpu", "memory"], MAIN_PODS, start, end, 1.0)
    assert len(whole.times) == 13 and whole.queries == 1
    assert chunked.queries == 4 and chunked_src.query_count == 4
    np.testing.assert_array_equal(chunked.times, whole.times)
    np.testing.assert_array_equal(chunked.values, whole.values)  # NaN == NaN here
    assert not np.isnan(whole.values).all()


def test_outage_then_recovery(env):
    """Last on purpose (it restarts the module's server; later tests would wait for scrapes)."""
    exp, srv, src = env
    start, end = _window(6)
    before = src.fetch(["memory"], MAIN_PODS, start, end, 1.0)
    fast = PrometheusSource(srv.url, timeout=0.5, retries=2, backoff=0.05)
    srv.stop()
    try:
        t0 = time.perf_counter()
        with pytest.raises(PrometheusUnavailable) as e:
            fast.fetch(["cpu", "memory"], MAIN_PODS, start, end, 1.0)
        elapsed = time.perf_counter() - t0
        msg = str(e.value)
        assert "\n" not in msg and srv.url in msg and "connection refused" in msg, msg
        assert "after 3 attempts" in msg and fast.attempt_count == 3 and fast.query_count == 1
        assert e.value.__cause__ is None and e.value.__context__ is None  # no HTTP-library chain
        assert elapsed < 2.0
    finally:
        srv.start()
    after = fast.fetch(["memory"], MAIN_PODS, start, end, 1.0)  # the data survived the restart
    np.testing.assert_array_equal(after.values, before.values)


# ----------------------------------------------------------------------------- HTTP failure paths

class _Stub:
    """An HTTP server answering POSTs from a script of (status, body) pairs, or never."""

    def __init__(self, script):
        self.script = list(script)
        self.requests: list[dict] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                stub.requests.append({"path": self.path, "body": body})
                code, payload = stub.script.pop(0) if stub.script else (500, {"error": "end"})
                data = json.dumps(payload).encode() if not isinstance(payload, bytes) else payload
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST  # noqa: N815

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


EMPTY = {"status": "success", "data": {"resultType": "matrix", "result": []}}


def test_retries_5xx_then_succeeds():
    ok = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"namespace": "n", "pod": "p", "container": "c", "ai4dl_feature": "memory"},
         "values": [[100.0, "5"], [102.0, "7"]]}]}}
    stub = _Stub([(503, {"status": "error", "errorType": "unavailable", "error": "busy"}),
                  (502, b"<html>bad gateway</html>"), (200, ok)])
    try:
        src = PrometheusSource(stub.url, retries=3, backoff=0.01)
        s = src.fetch(["memory"], [("n", "p", "c")], 100, 104, 1)
        assert (src.query_count, src.attempt_count, len(stub.requests)) == (1, 3, 3)
        np.testing.assert_array_equal(s[PodRef("n", "p", "c")].values[:, 0],
                                      [5, np.nan, 7, np.nan, np.nan])
        assert s[PodRef("n", "p", "c")].newest_age == pytest.approx(2.0)
        form = urllib.parse.parse_qs(stub.requests[-1]["body"].decode())
        assert stub.requests[-1]["path"] == "/api/v1/query_range"  # the query is in the body
        assert (form["start"], form["end"], form["step"]) == (["100.000"], ["104.000"], ["1.000"])
        assert 'ai4dl_feature' in form["query"][0]
    finally:
        stub.close()


def test_5xx_until_retries_spent():
    stub = _Stub([(503, {"status": "error", "errorType": "unavailable", "error": "busy"})] * 5)
    try:
        src = PrometheusSource(stub.url + "/", retries=2, backoff=0.01)
        with pytest.raises(PrometheusUnavailable) as e:
            src.fetch(["memory"], [("n", "p", "c")], 100, 104, 1)
        assert str(e.value) == (f"Prometheus at {stub.url} unavailable after 3 attempts: "
                                "HTTP 503 (unavailable): busy")
    finally:
        stub.close()


def test_a_query_prometheus_timed_out_is_the_querys_cost_and_not_sent_again():
    # issue 43: an expensive query was retried three times a window and blamed on Prometheus
    stub = _Stub([(503, {"status": "error", "errorType": "timeout",
                         "error": "query timed out in expression evaluation"})] * 5)
    try:
        src = PrometheusSource(stub.url, timeout=10, retries=3, backoff=0.01)
        with pytest.raises(PrometheusQueryTimeout) as e:
            src.fetch(["memory"], [("n", "p", "c")], 100, 104, 1)
        assert isinstance(e.value, PrometheusQueryError)
        assert str(e.value) == (f"Prometheus at {stub.url} rejected the query (timeout): query "
                                "timed out in expression evaluation")
        assert (src.attempt_count, len(stub.requests)) == (1, 1)
        # Prometheus's own timeout comes before the connection's (a share of it)
        form = urllib.parse.parse_qs(stub.requests[0]["body"].decode())
        assert form["timeout"] == ["8.000000"]
    finally:
        stub.close()


def test_422_and_404_are_not_retried():
    stub = _Stub([(422, {"status": "error", "errorType": "execution",
                         "error": "query processing would load too many samples"}),
                  (404, b"404 page not found\n")])
    try:
        src = PrometheusSource(stub.url, retries=3, backoff=0.01)
        with pytest.raises(PrometheusQueryError, match="execution.*too many samples"):
            src.fetch(["cpu"], [("n", "p", "c")], 100, 104, 1)
        with pytest.raises(PrometheusUnavailable, match="HTTP 404: 404 page not found"):
            src.fetch(["cpu"], [("n", "p", "c")], 100, 104, 1)
        assert src.attempt_count == 2
    finally:
        stub.close()


def test_timeout_is_retried_then_unavailable():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)  # accepts connections (backlog) but never answers
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        src = PrometheusSource(url, timeout=0.2, retries=1, backoff=0.01)
        t0 = time.perf_counter()
        with pytest.raises(PrometheusUnavailable, match=r"after 2 attempts: no answer within 0.2 s"):
            src.fetch(["cpu"], [("n", "p", "c")], 100, 104, 1)
        assert time.perf_counter() - t0 < 2.0
    finally:
        listener.close()


def test_no_pods_no_query_and_argument_checks():
    src = PrometheusSource("http://127.0.0.1:9")
    s = src.fetch(["cpu", "memory"], [], 0, 60, 15)
    assert len(s) == 0 and s.queries == 0 and src.query_count == 0 and len(s.times) == 5
    with pytest.raises(ValueError):
        src.fetch(["cpu"], [("n", "p", "c")], 60, 0, 15)
    with pytest.raises(ValueError):
        src.fetch(["nope"], [("n", "p", "c")], 0, 60, 15)
    with pytest.raises(ValueError):
        PrometheusSource("prometheus:9090")
    with pytest.raises(PrometheusUnavailable, match="cannot resolve host|unavailable"):
        PrometheusSource("http://no-such-host.invalid", retries=0, timeout=2).fetch(
            ["cpu"], [("n", "p", "c")], 0, 60, 15)


def test_to_execution_and_gpu_queries():
    q = {f.name: f.promql for f in default_feature_queries(["gpu_util", "gpu_memory"])}
    assert "DCGM_FI_DEV_GPU_UTIL" in q["gpu_util"] and "* 1048576" in q["gpu_memory"]
    ok = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"namespace": "n", "pod": "p", "container": "c", "ai4dl_feature": f},
         "values": [[100.0, v], [115.0, v]]} for f, v in (("cpu", "0.5"), ("memory", "1e9"))]}}
    stub = _Stub([(200, ok)])
    try:
        s = PrometheusSource(stub.url).fetch(["cpu", "memory"], [("n", "p", "c")], 100, 115, 15)
        ex = s[PodRef("n", "p", "c")].to_execution()
        assert ex.features == ("cpu", "memory") and ex.units == ("cores", "bytes") and ex.step == 15
        np.testing.assert_allclose(ex.values, [[0.5, 1e9], [0.5, 1e9]])
    finally:
        stub.close()


@pytest.fixture(scope="module")
def scraped_twice_servers(executions, trace_exporter, prometheus_server):
    """(Prometheus, twice, once): container ``twice`` served by one exporter that Prometheus
    scrapes as two targets (127.0.0.1 and localhost), ``once`` by another scraped once;
    started, not yet waited for."""
    twice, once = PodRef("dup", "twice-0", "main"), PodRef("dup", "once-0", "main")
    exp = trace_exporter({twice: executions[0]}, speed=SPEED)
    single = trace_exporter({once: executions[0]}, speed=SPEED)
    srv = prometheus_server([exp.url, exp.url.replace("127.0.0.1", "localhost"), single.url],
                            scrape_interval="1s")
    return srv, twice, once


@pytest.fixture(scope="module")
def scraped_twice(scraped_twice_servers):
    """:func:`scraped_twice_servers` once both containers have 8 samples."""
    srv, twice, once = scraped_twice_servers
    for pod in (twice, once):
        srv.wait_for_samples("container_memory_working_set_bytes", 8, timeout=60,
                             selector=f'namespace="dup",pod="{pod.pod}"')
    return srv, twice, once


def test_a_container_scraped_twice_is_not_counted_twice(scraped_twice):
    """Issue 43 item 6: one container scraped by two jobs is two equal series; the default
    templates summed them (1001m/2253Mi against 501m/1127Mi). They take the max now."""
    srv, pod, _ = scraped_twice
    raw = srv.query('container_memory_working_set_bytes{namespace="dup",pod="twice-0"}')
    assert len(raw) == 2                                   # two scrape targets, one container
    src = PrometheusSource(srv.url, timeout=10.0, rate_window=RATE_WINDOW)
    start, end = _window(5)
    got = src.fetch(["cpu", "memory"], [pod], start, end, 1.0)
    mem = got[pod].values[:, 1]
    t = float(got.times[-1])
    at = srv.query(f'max(container_memory_working_set_bytes{{pod="twice-0"}} @ {t:.3f})')
    assert not got.duplicated and np.isfinite(mem[-1])
    assert mem[-1] == pytest.approx(float(at[0]["value"][1]))   # one container's, not two


def test_a_container_scraped_twice_is_found_whatever_the_template_does(scraped_twice):
    """Issue 43 item 6: a template that sums hides a container scraped twice (its double is a
    plausible value). The duplicate check sent beside it finds that container: its samples are
    blank and it is named in ``duplicated``, in the operator's read and the trainer's lean read
    alike. A container scraped once keeps its values, even under a template that sums two
    metrics (two series of one container that are not one series read twice)."""
    srv, twice, once = scraped_twice
    summed = FeatureQuery("memory", "sum by (namespace, pod, container) "
                                    "(container_memory_working_set_bytes{{{selector}}})")
    two_metrics = FeatureQuery("both", "sum by (namespace, pod, container) ({{__name__=~"
                                       "\"container_memory_working_set_bytes|container_cpu_"
                                       "usage_seconds_total\",{selector}}})")
    assert template_problem(summed.promql) is None and template_problem(two_metrics.promql) is None
    src = PrometheusSource(srv.url, timeout=10.0, rate_window=RATE_WINDOW)
    start, end = _window(5)
    for got in (src.fetch([summed, two_metrics], [twice, once], start, end, 1.0),
                src._fetch_lean([summed, two_metrics], [twice, once], start, end, 1.0)):
        assert got.duplicated == {twice: ("memory", "both")}
        assert np.isnan(got[twice].values).all()
        assert np.isfinite(got[once].values[-1]).all()
        t = float(got.times[-1])
        at = srv.query(f'container_memory_working_set_bytes{{pod="once-0"}} @ {t:.3f}')
        assert got[once].values[-1, 0] == pytest.approx(float(at[0]["value"][1]))
        assert any("scraped twice" in w for w in got.warnings), got.warnings


@pytest.fixture(scope="module")
def timeout_server(executions, trace_exporter, prometheus_server):
    """(Prometheus, pod): the timeout test's own, one pod scraped; started, not waited for."""
    pod = PodRef("cost", "slow-0", "main")
    exp = trace_exporter({pod: executions[0]}, speed=SPEED)
    return prometheus_server([exp.url], scrape_interval="1s"), pod


def test_the_real_prometheus_gives_up_on_a_query_as_a_timeout(timeout_server, monkeypatch):
    """Issue 43 item 2: what a query the real Prometheus gives up on at its own timeout looks
    like from here: PrometheusQueryTimeout (errorType timeout) after one attempt, not
    "unavailable" after four. Prometheus's timeout is made 1 µs (a share of the client's)."""
    from ai4dl.sources import prometheus

    srv, pod = timeout_server
    srv.wait_for_samples("container_memory_working_set_bytes", 3, timeout=60,
                         selector='namespace="cost"')
    costly = ("max by (namespace, pod, container) (max_over_time("
              "container_memory_working_set_bytes{{{selector}}}[1000s:1s]))")
    assert template_problem(costly) is None
    monkeypatch.setattr(prometheus, "SERVER_TIMEOUT_SHARE", 5e-7)
    src = PrometheusSource(srv.url, timeout=2.0, retries=3, backoff=0.01)
    start, end = _window(600)
    with pytest.raises(PrometheusQueryTimeout, match=r"rejected the query \(timeout\)"):
        src.fetch([FeatureQuery("memory", costly)], [pod], start, end, 1.0)
    assert src.attempt_count == 1
