"""Files out, each written whole or not at all: the generic long CSV that ``load_long_csv``
reads back, text (reports, JSON, models) and figures."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import tempfile
from pathlib import Path
from typing import IO, Iterator

from ai4dl.method.traces import TraceSet


def write_long_csv(traces: TraceSet, path: str | os.PathLike) -> Path:
    """``execution,group,timestamp,<feature>...`` rows; values with 7 significant digits
    (float32 precision)."""
    path = Path(path)
    with atomic_output(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["execution", "group", "timestamp", *traces.features])
        for e in traces:
            for t, row in zip(e.times, e.values):
                w.writerow([e.name, e.group, f"{t:.3f}", *(f"{v:.7g}" for v in row)])
    return path


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, mode: str = "w", **open_kw) -> Iterator[IO]:
    """Open a temp file beside ``path`` and rename it onto ``path`` only when the block ends
    without an exception, so an interrupted run (Ctrl-C, a crash, a full disk) leaves the old
    file or none, never half a file. The file gets the mode a plain ``open`` would give it
    (0666 less the umask), not mkstemp's 0600."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, mode, **open_kw) as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    # /proc first: os.umask() is the portable read, but it sets the process-wide mask for a
    # moment, which races with other threads creating files.
    with contextlib.suppress(OSError, ValueError, StopIteration):
        status = Path("/proc/self/status").read_text().splitlines()
        return int(next(line for line in status if line.startswith("Umask:")).split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` whole or not at all (see :func:`atomic_output`)."""
    with atomic_output(path, "w") as fh:
        fh.write(text)
    return Path(path)


def save_figure(fig, path: str | os.PathLike, dpi: int = 110) -> Path:
    """``fig.savefig`` whole or not at all (an interrupted PNG is otherwise a truncated file
    that image viewers refuse). The format comes from the file's suffix, as with savefig."""
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower() or "png"
    with atomic_output(path, "wb") as fh:
        fig.savefig(fh, dpi=dpi, format=fmt)
    return path


#: The folder's record of the figures its last `plot` wrote (only those are ever removed).
FIGURES_MANIFEST = ".ai4dl-figures.json"


@contextlib.contextmanager
def figure_folder(outdir: str | os.PathLike) -> Iterator[list[Path]]:
    """The set of figures written into ``outdir``; yields the list the caller appends each
    written path to (issue 45: a figure of an execution no longer drawn stayed beside the new
    ones). On success the figures the folder's previous set listed and this one did not write
    are removed, and the new set is listed: files the command never wrote are never touched.
    One writer at a time is the command's claim on the folder (:func:`claimed_outputs`)."""
    folder = Path(outdir)
    folder.mkdir(parents=True, exist_ok=True)
    manifest = folder / FIGURES_MANIFEST
    try:
        before = json.loads(manifest.read_text()).get("figures", [])
    except (OSError, ValueError, AttributeError):
        before = []
    written: list[Path] = []
    yield written
    names = sorted({p.name for p in written})
    for name in before:
        stale = folder / str(name)
        if isinstance(name, str) and name not in names and "/" not in name and \
                stale.suffix in (".png", ".svg", ".pdf") and stale.is_file():
            stale.unlink()
    write_text_atomic(manifest, json.dumps({"figures": names}) + "\n")
