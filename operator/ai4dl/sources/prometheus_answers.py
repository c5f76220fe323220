"""Reading Prometheus's HTTP answers: a body capped in bytes, a one-line reason for a failed
connection, and the lean parser of a range query's matrix (straight into numpy arrays).
"""

from __future__ import annotations

import json
import re
import socket
import warnings as _warnings
from dataclasses import dataclass

import numpy as np
import requests



def read_capped(r: requests.Response, max_bytes: int) -> bytes | None:
    """A streamed answer's (decompressed) body, or None as soon as it exceeds ``max_bytes``
    (the rest is not read: the connection is closed)."""
    declared = r.headers.get("Content-Length")
    if declared and declared.isdigit() and int(declared) > max_bytes \
            and not r.headers.get("Content-Encoding"):
        r.close()
        return None
    parts, size = [], 0
    for chunk in r.iter_content(chunk_size=1 << 16):
        size += len(chunk)
        if size > max_bytes:
            r.close()
            return None
        parts.append(chunk)
    return b"".join(parts)


def one_line(text: str, limit: int = 1000) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "..."


def connection_reason(exc: BaseException) -> str:
    """A short reason for a requests ConnectionError: the OS error at its root, if any."""
    seen: set[int] = set()
    stack: list = [exc]
    while stack:
        x = stack.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, ConnectionRefusedError):
            return "connection refused"
        if isinstance(x, ConnectionResetError):
            return "connection reset by peer"
        if isinstance(x, socket.gaierror):
            return f"cannot resolve host ({x.strerror or x})"
        if type(x).__name__ == "RemoteDisconnected":
            return "connection closed without an answer"
        if isinstance(x, OSError) and x.strerror and not isinstance(x, requests.RequestException):
            return x.strerror.lower() if x.strerror[:1].isupper() else x.strerror
        stack.extend([getattr(x, "reason", None), x.__cause__, x.__context__])
        stack.extend(a for a in getattr(x, "args", ()) if isinstance(a, BaseException))
    m = re.search(r"\[Errno -?\d+\] ([^'\")]+)", str(exc))
    return m.group(1).strip() if m else one_line(exc, 200)


# ----------------------------------------------------------------------------- lean answers

@dataclass
class LeanMatrix:
    """A successful range query's answer: (labels, (k, 2) float64 array of time, value) per
    series, and Prometheus's warnings."""
    series: list[tuple[dict, np.ndarray]]
    warnings: list[str]


_MATRIX_HEAD = re.compile(rb'\s*\{"status":"success","data":\{"resultType":"matrix","result":\[')
_TO_SPACES = bytes.maketrans(b'[],"', b"    ")


def parse_matrix(body: bytes) -> LeanMatrix | None:
    """Parse a range query's JSON answer without building its object tree, or None when it is
    not laid out as Prometheus writes one (the caller then uses ``json.loads``).

    Prometheus writes ``{"status":"success","data":{"resultType":"matrix","result":[
    {"metric":{...},"values":[[t,"v"],...]},...]}`` then optional keys (``warnings``...). The
    series' labels are decoded by one ``json.loads``; each series' ``values`` (numbers and
    quoted numbers, NaN and ±Inf included: no brackets, commas or quotes inside) are turned
    into spaces between numbers and read by numpy in one call. A series with anything else (native
    histograms...) sends the whole answer to the fallback."""
    head = _MATRIX_HEAD.match(body)
    if head is None:
        return None
    try:
        with _warnings.catch_warnings():
            _warnings.simplefilter("error")         # unparsable text: fall back
            found = _matrix_series(body, head.end())
        if found is None:
            return None
        labels, points, pos = found
        # every series' labels in one decoding (one call a series was most of the time of a
        # window's answer at 10,000 pods: 20,000 short series)
        metrics = json.loads(b"[" + b",".join(labels) + b"]")
        if len(metrics) != len(labels) or not all(isinstance(m, dict) for m in metrics):
            return None
        warnings = _matrix_warnings(body, pos)
    except (ValueError, TypeError, DeprecationWarning):
        return None
    if warnings is None:
        return None
    return LeanMatrix(list(zip(metrics, points)), warnings)


def _matrix_series(body: bytes, pos: int) -> tuple[list[bytes], list[np.ndarray], int] | None:
    """From ``pos`` (the first series of the result list): each series' label object (its
    bytes), its points, and where the list ends; None when the layout is not Prometheus's."""
    labels: list[bytes] = []
    points: list[np.ndarray] = []
    while not body.startswith(b"]", pos):
        if not body.startswith(b'{"metric":', pos):
            return None
        pos += 10
        # '},"values":[' cannot occur inside the (flat) label object: an unescaped '"'
        # ends a JSON string, and a string is followed by ',', ':' or '}' only.
        end = body.index(b'},"values":[', pos)
        labels.append(body[pos:end + 1])
        pos = end + 12
        if body.startswith(b"]", pos):                  # no points
            points.append(np.empty((0, 2)))
            pos += 1
        else:
            vend = body.index(b"]]", pos)
            text = body[pos:vend + 1]
            n = text.count(b"[")
            flat = np.fromstring(text.translate(_TO_SPACES), dtype=np.float64, sep=" ")
            if len(flat) != 2 * n:
                return None
            points.append(flat.reshape(n, 2))
            pos = vend + 2
        if not body.startswith(b"}", pos):
            return None
        pos += 1
        if body.startswith(b",", pos):
            pos += 1
            if not body.startswith(b"{", pos):
                return None
    return labels, points, pos


def _matrix_warnings(body: bytes, pos: int) -> list[str] | None:
    """The answer's warnings after the result list ending at ``pos``, or None when what
    follows it is not laid out as Prometheus writes it."""
    rest = body[pos + 1:].strip()      # after the result list: '}' ends data
    if not rest.startswith(b"}"):
        return None
    rest = rest[1:].strip()
    if rest == b"}":
        return []
    if not rest.startswith(b","):      # ',"warnings":[...]}' and the like
        return None
    tail = json.loads(b"{" + rest[1:])
    if not isinstance(tail, dict):
        return None
    return [str(w) for w in tail.get("warnings") or []]
