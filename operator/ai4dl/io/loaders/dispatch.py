"""Any supported trace file or folder: format detection, option checks, the loaders by name."""

from __future__ import annotations

import contextlib
import gzip
import inspect
import os
import zlib
from pathlib import Path
from typing import Callable

from ai4dl.errors import TraceError
from ai4dl.io.loaders.ai4dl_csv import load_ai4dl_csv
from ai4dl.io.loaders.alibaba import ALIBABA_FILES, load_alibaba
from ai4dl.io.loaders.common import why
from ai4dl.io.loaders.corpus import DL_CORPUS, load_dl_corpus
from ai4dl.io.loaders.gcd import load_gcd_tar
from ai4dl.io.loaders.long_table import load_long_csv, load_parquet
from ai4dl.io.loaders.size_bound import DEFAULT_MAX_ROWS, check_rows, count_lines
from ai4dl.method.traces import Execution, TraceSet

FORMATS = ("auto", "ai4dl", "long", "parquet", "gcd", "alibaba", "corpus")
#: Names that stand for an input shipped with the package (``ai4dl evaluate dl-corpus``).
BUNDLED = {"dl-corpus": DL_CORPUS}

_LOADERS: dict[str, Callable[..., TraceSet]] = {
    "ai4dl": load_ai4dl_csv, "long": load_long_csv, "parquet": load_parquet,
    "gcd": load_gcd_tar, "alibaba": load_alibaba, "corpus": load_dl_corpus,
}


def _detect(path: Path) -> str:
    name = path.name.lower()
    if path.is_dir():
        if (path / "manifest.json").is_file():
            return "corpus"
        if any((path / f"{stem}.tar.gz").is_file() for stem, _ in ALIBABA_FILES.values()):
            return "alibaba"
        if _csv_files(path):
            return "csv-folder"
        raise TraceError("folder holds no CSV file, corpus manifest or Alibaba pod tarballs "
                         "(name a file, or --format / format= for the folder's format)",
                         path=str(path))
    if name.endswith((".tar.gz", ".tgz", ".tar")):
        return "gcd"  # the GCD loader says so if the archive is something else
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith((".csv", ".csv.gz")):
        try:
            with open(path, "rb") as f:
                gz = f.read(2) == b"\x1f\x8b"
            with (gzip.open if gz else open)(path, "rb") as f:
                header = f.readline(1 << 16)
        except (OSError, EOFError, zlib.error) as e:
            raise TraceError(f"cannot read file: {why(e)}", path=str(path)) from None
        return "ai4dl" if b"cpu.usage.cores" in header else "long"
    raise TraceError(f"cannot tell the trace format from the name; pass --format (format= in "
                     f"the library), one of {', '.join(FORMATS[1:])}", path=str(path))


def _csv_files(folder: Path) -> list[Path]:
    return sorted(f for f in folder.iterdir()
                  if f.is_file() and f.name.lower().endswith((".csv", ".csv.gz")))


def _load_csv_folder(folder: Path, fmt: str, max_rows: int | None, kwargs: dict) -> TraceSet:
    """Every CSV of a folder, read as ``fmt`` (each file detected when ``fmt`` is auto: all must
    agree), as one TraceSet. Execution names repeated across files get the file's name in front,
    so two files' ``pod-0`` stay two executions."""
    files = _csv_files(folder)
    kinds = {f.name: (_detect(f) if fmt == "auto" else fmt) for f in files}
    if len(set(kinds.values())) > 1:
        raise TraceError("the folder mixes CSV formats (" + ", ".join(
            f"{n}: {k}" for n, k in list(kinds.items())[:4]) + "); pass --format, or one file",
            path=str(folder))
    kind = next(iter(kinds.values()))
    if kind not in ("ai4dl", "long"):
        raise TraceError(f"format {kind!r} is not a CSV format: a folder is read as CSV files "
                         f"(ai4dl or long)", path=str(folder))
    if max_rows is not None:  # the bound is on the folder's rows together
        rows = 0
        for f in files:
            with contextlib.suppress(OSError):
                with open(f, "rb") as fh:
                    gz = fh.read(2) == b"\x1f\x8b"
                with (gzip.open if gz else open)(f, "rb") as fh:
                    rows += max(count_lines(fh, str(folder), max_rows - rows + 1, max_rows) - 1,
                                0)
    parts = [_LOADERS[kind](f, **kwargs) for f in files]
    seen: dict[str, int] = {}
    for part in parts:
        for e in part:
            seen[e.name] = seen.get(e.name, 0) + 1
    executions, warnings = [], []
    for f, part in zip(files, parts):
        warnings += [f"{f.name}: {w}" for w in getattr(part, "warnings", [])]
        for e in part:
            if seen[e.name] > 1:
                e = Execution(f"{f.name}:{e.name}", e.times, e.values, e.features, e.units,
                              f"{f.name}:{e.group}", e.step, dict(e.meta))
            executions.append(e)
    ts = TraceSet(executions, source=str(folder))
    ts.warnings = warnings
    return ts


def option_default(path: str | os.PathLike, option: str, format: str = "auto"):
    """The default of ``option`` (e.g. ``step``) of the loader for ``path`` (in ``format``),
    or ``inspect.Parameter.empty`` when that loader takes no such option (the Google trace has
    its own step) or the path or format is unusable (load_traces says why)."""
    p = Path(path)
    if not p.exists() and str(path) in BUNDLED:
        p = BUNDLED[str(path)]
    try:
        fmt = _detect(p) if format == "auto" else format
    except TraceError:
        return inspect.Parameter.empty
    loader = _LOADERS.get(fmt)
    param = inspect.signature(loader).parameters.get(option) if loader else None
    return inspect.Parameter.empty if param is None else param.default


def takes_option(path: str | os.PathLike, option: str, format: str = "auto") -> bool:
    """Whether the loader for ``path`` (in ``format``) takes ``option``."""
    return option_default(path, option, format) is not inspect.Parameter.empty


def load_traces(path: str | os.PathLike, *, format: str = "auto",
                max_rows: int | None = DEFAULT_MAX_ROWS, **kwargs) -> TraceSet:
    """Load any supported trace file or folder, detecting the format from the path if asked.

    Options a format does not take are refused (rather than ignored) so a ``--step`` given for
    a trace with a fixed step does not silently do nothing. An input of more than ``max_rows``
    rows is refused before it is parsed, and so is one whose resampled samples would exceed
    ``max_rows`` (None: no bound).
    """
    p = Path(path)
    if not p.exists() and str(path) in BUNDLED:
        p = BUNDLED[str(path)]
    if not p.exists():
        raise TraceError("no such file or folder", path=str(path))
    if format not in FORMATS:
        raise TraceError(f"unknown format {format!r} (known: {', '.join(FORMATS)})",
                         path=str(path))
    fmt = _detect(p) if format == "auto" or p.is_dir() and format in ("ai4dl", "long") \
        else format
    if fmt == "csv-folder" or p.is_dir() and fmt in ("ai4dl", "long"):
        unknown = set(kwargs) - set(inspect.signature(load_long_csv if format == "long" else
                                                      load_ai4dl_csv).parameters)
        if format == "auto":  # the folder's files decide; both CSV loaders take these
            unknown = set(kwargs) - set(inspect.signature(load_ai4dl_csv).parameters) - set(
                inspect.signature(load_long_csv).parameters)
        if unknown:
            raise TraceError(f"format '{format}' does not take {', '.join(sorted(unknown))}",
                             path=str(path))
        return _load_csv_folder(p, format, max_rows, kwargs)
    loader = _LOADERS[fmt]
    unknown = set(kwargs) - set(inspect.signature(loader).parameters)
    if unknown:
        raise TraceError(f"format '{fmt}' does not take {', '.join(sorted(unknown))}",
                         path=str(path))
    if max_rows is not None:
        if not (isinstance(max_rows, int) and max_rows > 0):
            raise TraceError(f"max_rows must be a positive integer, not {max_rows!r}",
                             path=str(path))
        check_rows(p, fmt, max_rows)
    traces = loader(p, **kwargs)
    # Rows far apart (up to max_gap_steps) are filled in by resampling: the samples held
    # afterwards are bounded too (each costs the model's work in detect and train).
    if max_rows is not None and traces.n_samples > max_rows:
        raise TraceError(f"{traces.n_samples:,} samples after resampling at the step: above "
                         f"--max-rows {max_rows}; raise it, or a longer --step", path=str(path))
    return traces
