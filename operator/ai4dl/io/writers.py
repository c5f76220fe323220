"""Trace files out: the generic long CSV that ``load_long_csv`` reads back."""

from __future__ import annotations

import csv
import os
import tempfile
from pathlib import Path

from ai4dl.traces import TraceSet


def write_long_csv(traces: TraceSet, path: str | os.PathLike) -> Path:
    """``execution,group,timestamp,<feature>...`` rows; values with 7 significant digits
    (float32 precision)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["execution", "group", "timestamp", *traces.features])
        for e in traces:
            for t, row in zip(e.times, e.values):
                w.writerow([e.name, e.group, f"{t:.3f}", *(f"{v:.7g}" for v in row)])
    return path


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` whole or not at all (a temp file beside it, then a rename), so
    an interrupted write never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
