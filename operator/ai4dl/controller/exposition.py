"""The operator's /metrics: prometheus_client's exposition of its registry, and the
per-container gauges (metrics.PodSeries) as lines rendered once per window.

At 10,000 pods those gauges are ~70,000 samples; the library formats them in about 1 s of CPU
at every scrape (holding the GIL the window's planning needs). Their lines are rendered here
instead, but only once they have been found equal, for each format asked for, to what the
library writes for the same sample; a format where they differ is served by the library."""

from __future__ import annotations

import gzip
import socket
import threading
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, exposition

from ai4dl.controller import metrics as m

_EOF = b"# EOF\n"
#: content type -> whether this module's lines are the library's for that format
_AGREES: dict[str, bool] = {}
#: content type -> the per-container families' HELP and TYPE lines in that format
_HEADS: dict[str, list[bytes]] = {}
_PROBE = ("ns", 'p"o\\d\n', "main", "memory", "pm", 1536.25)


def metrics_body(accept: str | None, series: m.PodSeries = m.POD_SERIES,
                 registry: CollectorRegistry = m.REGISTRY) -> tuple[bytes, str]:
    """(the exposition, its content type) for an Accept header."""
    encoder, content_type = exposition.choose_encoder(accept or "")
    if not lines_agree(encoder, content_type):
        return encoder(both(registry, series)), content_type
    body = encoder(registry)
    openmetrics = body.endswith(_EOF)
    if openmetrics:
        body = body[:-len(_EOF)]
    parts = [body]
    heads = _HEADS.get(content_type) or _HEADS.setdefault(content_type, family_heads(encoder))
    for head, lines in zip(heads, series.sample_lines()):
        parts += [head, lines]
    if openmetrics:
        parts.append(_EOF)
    return b"".join(parts), content_type


def both(registry: CollectorRegistry = m.REGISTRY, series: m.PodSeries = m.POD_SERIES
         ) -> CollectorRegistry:
    """The registry and the per-container gauges as one registry, for the library's own
    exposition (its metric names read now, so that ``name[]`` finds every one)."""
    out = CollectorRegistry(auto_describe=True)
    out.register(registry)
    out.register(series)
    return out


def family_heads(encoder) -> list[bytes]:
    """Each per-container family's HELP and TYPE lines, as ``encoder`` writes them."""
    heads = []
    for family in m.PodSeries().describe():
        one = CollectorRegistry()
        one.register(_Fixed([family]))
        text = encoder(one)
        heads.append(text[:-len(_EOF)] if text.endswith(_EOF) else text)
    return heads


def lines_agree(encoder, content_type: str) -> bool:
    """Whether :func:`metrics.render_table`'s lines are the library's for this format (checked
    once per content type, on a sample whose label needs escaping)."""
    known = _AGREES.get(content_type)
    if known is None:
        ns, pod, container, resource, pm, value = _PROBE
        probe = m.PodSeries()
        probe.replace(ns, pm, (resource,), {(pod, container): m.ContainerSeries(
            2.0, (value,), (value,), (value,))})
        ours = b"".join(h + lines for h, lines in zip(family_heads(encoder),
                                                        probe.sample_lines()))
        theirs = encoder(_Fixed(probe.collect()))
        known = _AGREES[content_type] = theirs.removesuffix(_EOF) == ours
    return known


class _Fixed:
    """A collector of given families."""

    def __init__(self, families):
        self.families = list(families)

    def collect(self):
        return self.families


def app(environ, start_response):
    """The WSGI application of /metrics (GET; gzip where accepted; ``name[]`` served by the
    library)."""
    if environ.get("REQUEST_METHOD") != "GET" or "name[]" in parse_qs(
            environ.get("QUERY_STRING", "")):
        return exposition.make_wsgi_app(both())(environ, start_response)
    body, content_type = metrics_body(environ.get("HTTP_ACCEPT"))
    headers = [("Content-Type", content_type)]
    if exposition.gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING") or ""):
        body = gzip.compress(body)
        headers.append(("Content-Encoding", "gzip"))
    start_response("200 OK", headers)
    return [body]


class _Quiet(WSGIRequestHandler):
    def log_message(self, format, *args):     # noqa: A002 - the base class's name
        pass


def serve(port: int, addr: str = "127.0.0.1"):
    """Serve /metrics on ``addr:port`` (IPv4 or IPv6) from a daemon thread; the server is
    returned."""
    family = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)[0][0]
    server_class = type("MetricsServer", (exposition.ThreadingWSGIServer,),
                        {"address_family": family})
    server = make_server(addr, port, app, server_class, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
