"""The ``--max-rows`` bound: inputs counted by streaming and refused before any parsing."""

from __future__ import annotations

import gzip
import tarfile
import zlib
from pathlib import Path
from typing import Sequence

from ai4dl.errors import TraceError

#: Data rows a trace input may hold (``--max-rows``). Every loader holds the parsed rows in
#: memory; measured peak RSS (``/usr/bin/time -v``, a 4-column long CSV): ``ai4dl detect``
#: 0.57 GB at 1 M rows and 1.09 GB at 2 M (about 0.52 GB per million rows), ``ai4dl train``
#: 1.0 / 1.18 GB. 2 M rows keep either under 1.2 GB, a third of the 4 GiB the chart gives the
#: trainer (margin for wider files: each column costs about as much as another row's cell).
DEFAULT_MAX_ROWS = 2_000_000
_CHUNK = 1 << 20


def _too_many(label: str, rows: int, max_rows: int, what: str = "data rows") -> TraceError:
    return TraceError(f"more than {max_rows:,} {what} (read {rows:,} so far): above --max-rows "
                      f"{max_rows}; raise it (about 0.5 GB of memory per million rows) or split "
                      f"the input", path=label)


def line_ends(chunk: bytes, after_cr: bool = False) -> int:
    r"""Line ends in ``chunk`` as the CSV parsers count them: ``\n``, ``\r\n`` and a bare
    ``\r`` (issue 43: counting only ``\n``, a file of bare-CR line ends was one "row" to the
    bound and five million to the parser). ``after_cr``: the chunk before ended with ``\r``
    (a ``\r\n`` split between chunks counts once)."""
    n = chunk.count(b"\n") + chunk.count(b"\r") - chunk.count(b"\r\n")
    return n - 1 if after_cr and chunk.startswith(b"\n") else n


def count_lines(stream, label: str, budget: int, max_rows: int, counted: int = 0) -> int:
    """Line ends read from ``stream`` (chunk by chunk: nothing is held; :func:`line_ends`)
    added to ``counted``; TraceError as soon as they pass ``budget``."""
    after_cr = False
    try:
        while True:
            chunk = stream.read(_CHUNK)
            if not chunk:
                return counted
            counted += line_ends(chunk, after_cr)
            after_cr = chunk.endswith(b"\r")
            if counted > budget:
                raise _too_many(label, counted - (budget - max_rows), max_rows)
    except (OSError, EOFError, zlib.error, tarfile.TarError):
        return counted              # unreadable: the loader names the problem itself


def _file_rows(path: Path, max_rows: int) -> None:
    """A CSV file (gzip or not) has at most ``max_rows`` data rows (line ends - the header)."""
    try:
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        with (gzip.open if gz else open)(path, "rb") as f:
            count_lines(f, str(path), max_rows + 1, max_rows)
    except OSError:
        return


def _tar_rows(paths: Sequence[Path], label: str, max_rows: int) -> None:
    """Text members of tar archives (GCD_VMs, Alibaba) hold at most ``max_rows`` lines in
    all (a header per member counts: a bound, not a census)."""
    counted = 0
    for path in paths:
        try:
            with tarfile.open(path, "r:*") as tf:
                for m in tf:
                    f = tf.extractfile(m) if m.isfile() else None
                    if f is not None:
                        counted = count_lines(f, label, max_rows, max_rows, counted)
        except (tarfile.TarError, OSError, EOFError, zlib.error):
            return                  # the loader reports a damaged archive in its own words


def check_rows(path: Path, fmt: str, max_rows: int) -> None:
    """Refuse, before any parsing, an input holding more than ``max_rows`` rows: one line
    naming the file and the bound (TraceError). Counted by streaming (no row is kept):
    line ends of CSVs and tar members (:func:`line_ends`), Parquet's own row count."""
    if fmt in ("ai4dl", "long"):
        _file_rows(path, max_rows)
    elif fmt == "corpus":
        _file_rows(path / "traces.csv.gz", max_rows)
    elif fmt == "gcd":
        _tar_rows([path], str(path), max_rows)
    elif fmt == "alibaba":
        _tar_rows(sorted(path.glob("*.tar.gz")), str(path), max_rows)
    elif fmt == "parquet":
        try:  # pyarrow is the optional [parquet] extra
            import pyarrow.dataset as ds

            rows = ds.dataset(str(path), format="parquet").count_rows()
        except Exception:           # noqa: BLE001 - unreadable: load_parquet says why
            return
        if rows > max_rows:
            raise TraceError(f"{rows:,} data rows: above --max-rows {max_rows}; raise it "
                             f"(about 0.5 GB of memory per million rows) or split the input",
                             path=str(path))
