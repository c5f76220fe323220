"""A small fake Prometheus on 127.0.0.1 that answers range queries with garbage on purpose.

The real Prometheus cannot be made to answer a negative working set or 1e30 bytes; a broken
exporter behind it can. This server speaks just enough of the HTTP API for the operator's
window query (``POST /api/v1/query_range``): for every pod it was given, one series per feature
named in the query (the operator's ``label_replace(..., "ai4dl_feature", "<name>", ...)``),
with values chosen per pod:

    good      plausible usage (cpu 1.5 cores, memory 2 GiB, a little noise)
    negative  both features negative
    huge      memory 1e30 bytes
    inf       memory +Inf
    nan       every value NaN
    empty     no series at all
    partial   every other point missing
    broken    series without the ``container`` label
    duplicate two series per feature for the container, an inflated one (x 10) first, then
              the good one (a template that does not aggregate, a relabelling)

``answer = "not-json"`` makes every answer a 200 with a body that is not JSON; ``extra_series``
adds that many series of pods nobody asked for (a query reading far more than it should);
``asked`` keeps every query received; ``delay`` seconds are slept before each range query's
answer (a slow Prometheus: window work that takes time without using the operator's CPU);
``slow`` {namespace: seconds} delays only the range queries that read that namespace (an
expensive query of one tenant) and, where those seconds reach the query's own ``timeout``,
answers as Prometheus does when it gives up at it: HTTP 503, errorType ``timeout``, at the
timeout.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

FEATURE_RE = re.compile(r'"ai4dl_feature",\s*"([^"]+)"')
GOOD = {"cpu": 1.5, "memory": 2.0 * 2 ** 30}
MODES = ("good", "negative", "huge", "inf", "nan", "empty", "partial", "broken", "duplicate")


def _value(mode: str, feature: str, t: float) -> str | None:
    base = GOOD.get(feature, 1.0) * (1.0 + 0.02 * np.sin(t / 7.0))
    if mode == "negative":
        return f"{-base:.6g}"
    if mode == "huge" and feature == "memory":
        return "1e30"
    if mode == "inf" and feature == "memory":
        return "+Inf"
    if mode == "nan":
        return "NaN"
    if mode == "partial" and int(t) % 2:
        return None
    return f"{base:.6g}"


class FakePrometheus:
    """``pods``: {(namespace, pod, container): mode}; change it (or ``answer``) any time."""

    def __init__(self):
        self.pods: dict[tuple[str, str, str], str] = {}
        self.answer = "matrix"
        self.delay = 0.0
        self.slow: dict[str, float] = {}
        self.queries = 0
        self.extra_series = 0
        self.asked: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):   # quiet
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                form = urllib.parse.parse_qs(self.rfile.read(length).decode())
                if fake.delay and self.path.startswith("/api/v1/query_range"):
                    time.sleep(fake.delay)
                code, body = fake._slow(self.path, form)
                if code is None:
                    code, body = 200, fake._answer(self.path, form)
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="fake-prometheus")

    def start(self) -> "FakePrometheus":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _slow(self, path: str, form: dict) -> tuple[int | None, bytes]:
        """(None, b"") after the ``slow`` delay of the namespace the query reads, or (503, the
        timeout error) when that delay reaches the query's timeout."""
        query = (form.get("query") or [""])[0]
        delay = max((s for ns, s in self.slow.items() if f'namespace="{ns}"' in query),
                    default=0.0)
        if not delay or not path.startswith("/api/v1/query_range"):
            return None, b""
        timeout = float((form.get("timeout") or ["inf"])[0])
        time.sleep(min(delay, timeout))
        if delay < timeout:
            return None, b""
        self.queries += 1
        self.asked.append(query)
        return 503, json.dumps({"status": "error", "errorType": "timeout",
                                "error": "query timed out in query execution"}).encode()

    def _answer(self, path: str, form: dict) -> bytes:
        self.queries += 1
        if self.answer == "not-json":
            return b"<html>this is not Prometheus</html>"
        if not path.startswith("/api/v1/query_range"):
            return json.dumps({"status": "success", "data": []}).encode()
        query = (form.get("query") or [""])[0]
        self.asked.append(query)
        start, end = float(form["start"][0]), float(form["end"][0])
        step = float(form["step"][0])
        times = np.arange(start, end + step / 2, step)
        result = []
        for (ns, pod, ctr), mode in sorted(self.pods.items()):
            if mode == "empty":
                continue
            for feature in FEATURE_RE.findall(query):
                metric = {"namespace": ns, "pod": pod, "ai4dl_feature": feature}
                if mode != "broken":
                    metric["container"] = ctr
                values = [[round(float(t), 3), v] for t in times
                          if (v := _value(mode, feature, float(t))) is not None]
                if mode == "duplicate":       # the inflated series first
                    result.append({"metric": {**metric, "id": "inflated"}, "values": [
                        [t, f"{10 * float(v):.6g}"] for t, v in values]})
                result.append({"metric": metric, "values": values})
        for i in range(self.extra_series):
            result.append({"metric": {"namespace": "elsewhere", "pod": f"x-{i}",
                                      "container": "main", "ai4dl_feature": "memory"},
                           "values": [[round(float(t), 3), "1"] for t in times]})
        return json.dumps({"status": "success",
                           "data": {"resultType": "matrix", "result": result}}).encode()
