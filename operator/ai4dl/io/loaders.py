"""Trace files -> :class:`~ai4dl.traces.TraceSet`.

Every loader ends the same way: rows of (execution, time, feature values) are screened for bad
values, grouped per execution and put on a fixed step with :func:`~ai4dl.traces.regularise`
(a gap longer than ``max_gap_steps`` steps splits an execution into ``name``, ``name#2``...).
Formats: the AI4DL tabular CSV, a generic long CSV or Parquet table, the Google cluster
``GCD_VMs`` tar, the Alibaba GenAI 2026 pod tarballs and our recorded corpus of PyTorch training
runs (a folder with ``manifest.json``; see each loader).

Errors. Anything wrong with the input raises :class:`~ai4dl.errors.TraceError`, one line naming
the file, the row (the 1-based line number, header = line 1; for Parquet the 1-based record
number; for a file inside a tar, ``archive/member``) and the column. No ``ValueError``,
``csv.Error``, ``OSError``... escapes: the caller can print the message and stop.

The rule applied to NaN/negatives. A feature value that is NaN (an empty cell counts as NaN),
infinite or negative, or a timestamp that is NaN or infinite, is *bad*:

* ``on_bad="error"`` (default): the first bad value raises a TraceError naming file, row,
  column and value. Silently feeding such values to a model would hide a broken exporter.
* ``on_bad="drop"``: the whole row (one sample of every feature) is dropped and treated as a
  sample that was never taken: resampling interpolates across it, and a run of dropped rows
  longer than ``max_gap_steps`` steps splits the execution like any other gap. The count goes
  into the returned trace set's ``warnings``.

Text that is not a number at all (``"abc"``) is always an error, whatever ``on_bad`` says: it
means the file is not what the loader thinks it is; so is an empty execution name. Percent
values above 100 are kept (the Google trace has memory up to 215 %). For the Alibaba tables
the rule applies to the samples that survive the join (a bad value at a timestamp the other
metrics lack is dropped by the join, not reported).

Every returned TraceSet carries ``warnings``: a list (possibly empty) of one-line notes about
what was dropped or skipped, for the caller to show.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import inspect
import io
import itertools
import os
import re
import tarfile
import zlib
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from ai4dl.errors import TraceError
from ai4dl.plausibility import check_levels, check_runs, check_timestamps
from ai4dl.traces import (CANONICAL_UNITS, DEFAULT_MAX_GAP_STEPS, DEFAULT_STEP_SECONDS, Execution,
                          TraceSet, regularise)

__all__ = ["FORMATS", "DEFAULT_MAX_ROWS", "load_traces", "check_rows", "load_ai4dl_csv",
           "load_long_csv", "load_parquet", "option_default", "takes_option",
           "load_gcd_tar", "load_alibaba", "load_dl_corpus", "load_corpus_phases", "DL_CORPUS"]

FORMATS = ("auto", "ai4dl", "long", "parquet", "gcd", "alibaba", "corpus")
#: The recorded corpus of real PyTorch training runs shipped with the package
#: (``e2e/workloads/corpus.py`` re-records it); ``dl-corpus`` names it on the command line.
DL_CORPUS = Path(__file__).resolve().parent.parent / "data" / "dlcorpus"
BUNDLED = {"dl-corpus": DL_CORPUS}
CORPUS_FORMAT = "ai4dl-dl-corpus"

_BYTES = {"bytes": 1.0, "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30, "TiB": 2.0**40,
          "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
          # the suffixes of Kubernetes quantities, as a platform engineer types them
          "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40,
          "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
# Factor from a source unit to the canonical unit of each known feature (and of timestamps).
_SCALE: dict[str, dict[str, float]] = {
    "cpu": {"cores": 1.0, "millicores": 1e-3, "m": 1e-3, "percent-of-core": 1e-2},
    "memory": _BYTES,
    "gpu_memory": _BYTES,
    "gpu_util": {"percent": 1.0, "fraction": 100.0},
    "timestamp": {"s": 1.0, "ms": 1e-3, "us": 1e-6, "\u00b5s": 1e-6, "ns": 1e-9},
}

_ALIBABA_FILES = {  # feature -> (tarball stem, unit as published)
    "memory": ("pod_memory_util_anon", "fraction"),
    "gpu_util": ("pod_gpu_duty_cycle_anon", "percent"),
    "gpu_memory": ("pod_gpu_memory_used_bytes_anon", "bytes"),
}
_GCD_MEMBER = re.compile(r"(?:^|/)vm_([^/_]+)_(\d+)$")
_GCD_STEP = 300.0


# ----------------------------------------------------------------------------- small helpers

def _check_args(step: float, max_gap_steps: float, on_bad: str) -> None:
    if on_bad not in ("error", "drop"):
        raise TraceError(f"on_bad must be 'error' or 'drop', not {on_bad!r}")
    for name, value in (("step", step), ("max_gap_steps", max_gap_steps)):
        try:
            ok = bool(np.isfinite(value) and value > 0)
        except TypeError:
            ok = False
        if not ok:
            raise TraceError(f"{name} must be a positive number, not {value!r}")


def _why(e: object) -> str:
    """An exception's text on one line (tarfile's, for one, spans several)."""
    text = " ".join(str(e).split())
    return text if len(text) <= 200 else text[:200] + "..."


def _shown(text: object) -> str:
    """The offending text, short and on one line whatever it contains."""
    s = str(text)
    return repr(s if len(s) <= 20 else s[:20] + "...")


def _read_bytes(path: str | os.PathLike) -> bytes:
    """File contents, gunzipped when gzip-compressed (so ``x.csv.gz`` works like ``x.csv``)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise TraceError(f"cannot read file: {_why(e.strerror or e)}", path=str(path)) from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise TraceError(f"corrupt gzip data: {_why(e)}", path=str(path)) from None
    return data


def _parse_csv(data: bytes, label: str, *, index_column: bool = False
               ) -> tuple[list[str], list[Sequence[str]], np.ndarray]:
    """Header, data columns (each a sequence of cell texts) and each data row's line number.

    Blank lines are skipped. With ``index_column``, rows one field wider than the header (R's
    ``write.table`` puts an unnamed row index first) lose that first field. Files without
    quotes (most machine-written ones) are split with ``str.split``, several times faster than
    the csv module on the Alibaba tables.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise TraceError(f"not UTF-8 text (byte 0x{data[e.start]:02x})", path=label,
                         row=data[:e.start].count(b"\n") + 1) from None
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    simple = '"' not in text and "\r" not in text
    if simple:
        lines_text = text.split("\n")
        if lines_text and lines_text[-1] == "":
            lines_text.pop()
        rows: list = [h.split(",") for h in lines_text[:1]]
        lens = np.fromiter(map(str.count, lines_text, itertools.repeat(",")), dtype=np.int64,
                           count=len(lines_text)) + 1
        lens[np.fromiter(map(len, lines_text), dtype=np.int64, count=len(lines_text)) == 0] = 0
    else:
        reader = csv.reader(io.StringIO(text, newline=""), strict=True)
        rows, line_nums = [], []
        try:
            for row in reader:
                rows.append(row)
                line_nums.append(reader.line_num)
        except csv.Error as e:
            raise TraceError(f"malformed CSV: {_why(e)}", path=label, row=reader.line_num) from None
        lens = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    if not rows or not any(h.strip() for h in rows[0]):
        raise TraceError("empty file (no header)", path=label)
    header = [h.strip() for h in rows[0]]
    data_idx = np.flatnonzero(lens[1:] > 0) + 1  # blank lines carry nothing
    if not len(data_idx):
        raise TraceError("header only, no data rows", path=label)
    lines = data_idx + 1 if simple else np.asarray(line_nums, dtype=np.int64)[data_idx]
    width = len(header)
    if index_column and lens[data_idx[0]] == width + 1:
        width += 1
    ragged = np.flatnonzero(lens[data_idx] != width)
    if len(ragged):
        i = ragged[0]
        raise TraceError(f"{lens[data_idx[i]]} fields, expected {width} as in the header",
                         path=label, row=int(lines[i]))
    seen = set()
    for h in header:
        if h in seen and h:
            raise TraceError("duplicate column in header", path=label, row=1, column=h)
        seen.add(h)
    if simple:
        body = lines_text[1:] if len(data_idx) == len(lines_text) - 1 else \
            [lines_text[i] for i in data_idx]
        flat = ",".join(body).split(",")
        columns = [flat[j::width] for j in range(width)]
    else:
        columns = list(zip(*(rows[i] for i in data_idx)))
    return header, columns[width - len(header):], lines


def _floats(data, label: str, column: str, rows: np.ndarray) -> np.ndarray:
    """Numbers from text (fast path through numpy, slow path only to find the culprit).

    Empty cells become NaN, so that the NaN rule decides their fate; non-numeric text is an
    error whatever ``on_bad`` says.
    """
    if isinstance(data, np.ndarray) and data.dtype.kind in "biuf":
        return data.astype(np.float64)
    try:
        return np.array(data, dtype=np.float64)
    except (ValueError, TypeError):
        pass
    out = np.empty(len(data), dtype=np.float64)
    for i, s in enumerate(data):
        if s is None or (isinstance(s, str) and not s.strip()):
            out[i] = np.nan
            continue
        try:
            out[i] = float(s)
        except (ValueError, TypeError):
            raise TraceError(f"not a number: {_shown(s)}", path=label, row=int(rows[i]),
                             column=column) from None
    return out


def _names(data, label: str, column: str, rows: np.ndarray) -> np.ndarray:
    """Identifier column as a string array; an empty identifier is an error."""
    arr = np.array(["" if s is None else str(s).strip() for s in data], dtype=str)
    empty = np.flatnonzero(arr == "")
    if len(empty):
        raise TraceError("empty value", path=label, row=int(rows[empty[0]]), column=column)
    return arr


def _codes(arr: np.ndarray) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Code per row, distinct values numbered in order of first appearance, and that row."""
    uniq, first, inv = np.unique(arr, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[order] = np.arange(len(uniq))
    return rank[inv.reshape(-1)], [str(u) for u in uniq[order]], first[order]


def _screen(columns: Sequence[tuple[str, np.ndarray, bool]], on_bad: str, source: str,
            locate: Callable[[int], tuple[str, int]], warnings: list[str]) -> np.ndarray:
    """Apply the NaN/Inf/negative rule (module docstring); return the mask of rows to keep.

    ``columns`` are (name, values, negatives allowed); ``locate(i)`` gives (file, row) of row i.
    """
    bad = np.zeros(len(columns[0][1]), dtype=bool)
    first = None  # (row index, column, value) of the earliest bad value
    for name, vals, allow_negative in columns:
        with np.errstate(invalid="ignore"):
            b = ~np.isfinite(vals) if allow_negative else ~(np.isfinite(vals) & (vals >= 0))
        if b.any():
            i = int(np.argmax(b))
            if first is None or i < first[0]:
                first = (i, name, float(vals[i]))
            bad |= b
    if first is None:
        return ~bad
    i, name, value = first
    path, row = locate(i)
    if on_bad == "error":
        kind = ("NaN (or empty)" if np.isnan(value) else "infinite" if np.isinf(value)
                else "negative")
        raise TraceError(f"{kind} value {value!r} (--on-bad drop skips such rows)",
                         path=path, row=row, column=name)
    where = f"row {row}" if path == source else f"{path}:{row}"
    warnings.append(f"{source}: dropped {int(bad.sum())} rows with NaN/Inf/negative values "
                    f"(first at {where}, column '{name}')")
    return ~bad


def _assemble(source: str, codes: np.ndarray, times: np.ndarray, values: np.ndarray,
              executions: Sequence[tuple[str, str, dict]], features: Sequence[str],
              units: Sequence[str], *, step: float, max_gap_steps: float,
              warnings: list[str]) -> TraceSet:
    """Rows of (execution code, time, feature values) -> regular executions -> TraceSet.

    ``executions[code]`` is (name, group, meta); the result follows that order.
    """
    perm = np.argsort(codes, kind="stable")
    counts = np.bincount(codes, minlength=len(executions))
    out = []
    for (name, group, meta), idx in zip(executions, np.split(perm, np.cumsum(counts)[:-1])):
        if len(idx):
            out.extend(regularise(name, times[idx], values[idx], features, units, step=step,
                                  max_gap_steps=max_gap_steps, group=group, meta=meta))
    if not out:
        raise TraceError("no usable samples left" + (f" ({'; '.join(warnings)})" if warnings
                                                     else ""), path=source)
    ts = TraceSet(out, source=source)
    ts.warnings = list(warnings)
    return ts


def _locator(label: str, rows: np.ndarray) -> Callable[[int], tuple[str, int]]:
    return lambda i: (label, int(rows[i]))


# ----------------------------------------------------------------------------- AI4DL CSV

def load_ai4dl_csv(path: str | os.PathLike, *, step: float = DEFAULT_STEP_SECONDS,
                   max_gap_steps: float = DEFAULT_MAX_GAP_STEPS, on_bad: str = "error"
                   ) -> TraceSet:
    """The AI4DL paper's CSV (one row per sample, all containers in one file).

    Execution = ``service/pod.id``. Features are ``cpu`` from ``cpu.usage.cores`` (a rate, so
    no differencing of the cumulative counter is needed) and ``memory`` from
    ``mem.working.set`` (what the kernel will not reclaim, i.e. what a limit must cover). The
    pod's original request, ``cpu.num.cores`` and ``mem.limit`` (first valid value), goes in
    ``meta`` as ``cpu_limit_cores`` / ``memory_limit_bytes`` so a policy can compare against it.
    """
    _check_args(step, max_gap_steps, on_bad)
    label = str(path)
    header, data, lines = _parse_csv(_read_bytes(path), label, index_column=True)
    cols = {h: i for i, h in enumerate(header)}
    for need in ("timestamp", "service", "pod.id", "cpu.usage.cores", "mem.working.set"):
        if need not in cols:
            raise TraceError("missing required column", path=label, row=1, column=need)
    get = lambda c: data[cols[c]]  # noqa: E731
    service = _names(get("service"), label, "service", lines)
    pod = _names(get("pod.id"), label, "pod.id", lines)
    times = _floats(get("timestamp"), label, "timestamp", lines)
    values = np.column_stack([_floats(get(c), label, c, lines)
                              for c in ("cpu.usage.cores", "mem.working.set")])
    limits = {key: _floats(get(c), label, c, lines)
              for key, c in (("cpu_limit_cores", "cpu.num.cores"),
                             ("memory_limit_bytes", "mem.limit")) if c in cols}
    warnings: list[str] = []
    keep = _screen([("timestamp", times, True), ("cpu.usage.cores", values[:, 0], False),
                    ("mem.working.set", values[:, 1], False)],
                   on_bad, label, _locator(label, lines), warnings)
    codes, names, _ = _codes(np.char.add(np.char.add(service, "/"), pod)[keep])
    executions = []
    for k, name in enumerate(names):
        meta = {}
        for key, lim in limits.items():
            v = lim[keep][codes == k]
            v = v[np.isfinite(v) & (v > 0)]
            if len(v):
                meta[key] = float(v[0])
        executions.append((name, name, meta))
    return _assemble(label, codes, times[keep], values[keep], executions, ("cpu", "memory"),
                     ("cores", "bytes"), step=step, max_gap_steps=max_gap_steps,
                     warnings=warnings)


# ----------------------------------------------------------------------------- long CSV / Parquet

def load_long_csv(path: str | os.PathLike, *, step: float = DEFAULT_STEP_SECONDS,
                  max_gap_steps: float = DEFAULT_MAX_GAP_STEPS, on_bad: str = "error",
                  columns: Mapping[str, str] | None = None, units: Mapping[str, str] | None = None,
                  features: Sequence[str] | None = None) -> TraceSet:
    """A generic long table: ``execution,timestamp[,group],<feature>...``, one row per sample.

    This is the shape any exporter (Prometheus range queries, a notebook) can write, so it is
    the way in for traces we have no dedicated loader for. ``columns`` maps our names to the
    file's (``{"execution": "pod", "cpu": "cpu_rate"}``); ``units`` gives the source unit of a
    feature or of ``timestamp`` (``s`` by default) so values arrive canonical (``cpu`` cores,
    ``memory``/``gpu_memory`` bytes, ``gpu_util`` percent); ``features`` keeps only those, in
    that order. Feature columns we do not know are kept, with unit ``unknown`` unless ``units``
    names one. ``group`` (e.g. the job id) defaults to the execution name.
    """
    label = str(path)
    _check_args(step, max_gap_steps, on_bad)
    header, data, lines = _parse_csv(_read_bytes(path), label)
    index = {h: i for i, h in enumerate(header)}
    return _load_table(label, header, lambda c: data[index[c]], lines,
                       step=step, max_gap_steps=max_gap_steps, on_bad=on_bad, columns=columns,
                       units=units, features=features)


def load_parquet(path: str | os.PathLike, *, step: float = DEFAULT_STEP_SECONDS,
                 max_gap_steps: float = DEFAULT_MAX_GAP_STEPS, on_bad: str = "error",
                 columns: Mapping[str, str] | None = None, units: Mapping[str, str] | None = None,
                 features: Sequence[str] | None = None) -> TraceSet:
    """The long table of :func:`load_long_csv`, stored as Parquet (rows = 1-based records).

    A Parquet timestamp column is read in its own unit; ``units["timestamp"]`` applies to
    plain numeric timestamps only.
    """
    label = str(path)
    _check_args(step, max_gap_steps, on_bad)
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise TraceError("reading Parquet needs pyarrow (pip install 'ai4dl-operator[parquet]')",
                         path=label) from None
    if not Path(path).exists():  # a folder is fine: pyarrow reads a partitioned data set
        raise TraceError("cannot read file: no such file", path=label)
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise TraceError(f"not a readable Parquet file: {_why(e)}",
                         path=label) from None
    if table.num_columns == 0:
        raise TraceError("empty file (no columns)", path=label)
    if table.num_rows == 0:
        raise TraceError("header only, no data rows", path=label)

    def get(name: str):
        col = table.column(name)
        t = col.type
        try:
            if pa.types.is_timestamp(t) or pa.types.is_date(t):
                return col.cast(pa.timestamp("ns")).to_numpy().astype("datetime64[ns]")
            if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t):
                return col.cast(pa.float64()).to_numpy()
            return col.cast(pa.string()).to_pylist()
        except (pa.ArrowException, ValueError) as e:
            raise TraceError(f"cannot read column: {_why(e)}", path=label,
                             column=name) from None

    return _load_table(label, list(table.column_names), get,
                       np.arange(1, table.num_rows + 1, dtype=np.int64),
                       step=step, max_gap_steps=max_gap_steps, on_bad=on_bad, columns=columns,
                       units=units, features=features)


def _load_table(label: str, header: list[str], get: Callable[[str], object], rows: np.ndarray,
                *, step: float, max_gap_steps: float, on_bad: str,
                columns: Mapping[str, str] | None, units: Mapping[str, str] | None,
                features: Sequence[str] | None) -> TraceSet:
    """The long-table loader once the columns can be fetched by name (CSV and Parquet)."""
    columns, units = dict(columns or {}), dict(units or {})
    present = set(header)
    for ours, theirs in columns.items():
        if theirs not in present:
            raise TraceError(f"missing column (mapped from '{ours}')", path=label, row=1,
                             column=theirs)
    renamed = {v: k for k, v in columns.items()}
    # Our name -> file column, in file order; a file column shadowed by a mapping is ignored.
    source = {renamed.get(h, h): h for h in header
              if h in renamed or (h and h not in columns)}
    for need in ("execution", "timestamp"):
        if need not in source:
            raise TraceError("missing required column", path=label, row=1,
                             column=columns.get(need, need))
    available = [n for n in source if n not in ("execution", "timestamp", "group")]
    if features is None:
        features = available
    else:
        features = list(features)
        for f in features:
            if f not in source:
                raise TraceError("missing feature column", path=label, row=1,
                                 column=columns.get(f, f))
    if not features:
        raise TraceError("no feature columns besides execution/timestamp", path=label, row=1)
    for key in units:
        if key != "timestamp" and key not in source:
            raise TraceError(f"units given for '{key}', which is not a column", path=label)

    def scale(name: str) -> tuple[float, str]:
        unit = units.get(name)
        if name not in _SCALE:
            return 1.0, unit or "unknown"
        table = _SCALE[name]
        if unit is None:
            return 1.0, CANONICAL_UNITS.get(name, "s")
        if unit not in table:
            raise TraceError(f"unknown unit {unit!r} for '{name}' (known: {', '.join(table)})",
                             path=label)
        return table[unit], CANONICAL_UNITS.get(name, "s")

    scales, t_scale = [scale(f) for f in features], scale("timestamp")[0]
    fcol = [source[f] for f in features]
    execution = _names(get(source["execution"]), label, source["execution"], rows)
    group = (_names(get(source["group"]), label, source["group"], rows)
             if "group" in source else execution)
    raw_t = get(source["timestamp"])
    if isinstance(raw_t, np.ndarray) and raw_t.dtype.kind == "M":
        times = np.where(np.isnat(raw_t), np.nan, raw_t.astype(np.int64) / 1e9)
    else:
        times = _floats(raw_t, label, source["timestamp"], rows) * t_scale
    values = np.column_stack([_floats(get(c), label, c, rows) for c in fcol])
    warnings: list[str] = []
    keep = _screen([(source["timestamp"], times, True)]
                   + [(c, values[:, j], False) for j, c in enumerate(fcol)],
                   on_bad, label, _locator(label, rows), warnings)
    values = values[keep] * np.array([s for s, _ in scales])
    codes, names, first = _codes(execution[keep])
    # Units here are the user's word (a flag or nothing): implausible numbers are refused
    # before they become executions, naming the --unit that fixes them (ai4dl.plausibility).
    check_timestamps(label, times[keep], codes, step, units.get("timestamp"))
    executions = [(n, str(g), {}) for n, g in zip(names, group[keep][first])]
    ts = _assemble(label, codes, times[keep], values, executions, features,
                   [u for _, u in scales], step=step, max_gap_steps=max_gap_steps,
                   warnings=warnings)
    check_levels(ts, label=label, units_given=tuple(units))
    check_runs(ts, label=label, max_gap_steps=max_gap_steps)
    return ts


# ----------------------------------------------------------------------------- Google GCD_VMs tar

def _open_tar(path: str | os.PathLike) -> tarfile.TarFile:
    try:
        return tarfile.open(path, "r:*")
    except FileNotFoundError:
        raise TraceError("cannot read file: no such file", path=str(path)) from None
    except tarfile.ReadError:  # its text lists every compression tried: no help to a user
        raise TraceError("not a tar archive (plain, gzip, bzip2 or xz)", path=str(path)) from None
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        raise TraceError(f"not a readable tar archive: {_why(e)}", path=str(path)) from None


def _tar_members(path: str | os.PathLike):
    """Yield (member name, bytes) of the regular files, turning archive damage into TraceError."""
    label = str(path)
    with _open_tar(path) as tf:
        try:
            for m in tf:
                if m.isfile():
                    f = tf.extractfile(m)
                    yield m.name, (f.read() if f else b"")
        except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
            raise TraceError(f"corrupt archive: {_why(e)}", path=label) from None


def load_gcd_tar(path: str | os.PathLike, *, max_gap_steps: float = DEFAULT_MAX_GAP_STEPS,
                 on_bad: str = "error") -> TraceSet:
    """The ``GCD_VMs`` tar of the Google 2011 trace: one job-day per member, read in memory.

    The files have no timestamps; samples are 5 min apart, so day ``d`` sample ``i`` is put at
    ``(d-1)*86400 + i*300`` s, which keeps the days of one job in order on one axis. Each file is
    an execution ``vm_<job>_<day>`` in group ``<job>``, so a split by group never puts days of
    one job on both sides. CPU and memory stay in ``percent``: the trace is normalised and we
    do not invent machine sizes.
    """
    _check_args(_GCD_STEP, max_gap_steps, on_bad)
    label = str(path)
    found = []  # (job, day, member, cpu/mem values (n, 2), line numbers)
    for name, data in _tar_members(path):
        m = _GCD_MEMBER.search(name)
        if not m:
            continue
        member = f"{label}/{name}"
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError:
            raise TraceError("not a text file", path=member) from None
        lines = text.splitlines()
        n_fields = np.fromiter(map(len, map(str.split, lines)), dtype=np.int64,
                               count=len(lines))
        rows = np.flatnonzero(n_fields) + 1  # blank lines carry nothing
        if not len(rows):
            raise TraceError("empty file", path=member)
        if (n_fields[rows - 1] != 2).any():
            i = int(rows[np.argmax(n_fields[rows - 1] != 2)])
            raise TraceError(f"{n_fields[i - 1]} fields, expected 2 (cpu %, memory %)",
                             path=member, row=i)
        flat = text.split()
        try:
            vals = np.array(flat, dtype=np.float64).reshape(-1, 2)
        except ValueError:
            vals = np.column_stack([_floats(flat[j::2], member, c, rows)
                                    for j, c in enumerate(("cpu", "memory"))])
        found.append((m.group(1), int(m.group(2)), member, vals, rows))
    if not found:
        raise TraceError("no GCD_VMs/vm_<job>_<day> files: not a GCD VM trace archive",
                         path=label)
    found.sort(key=lambda f: (f[0], f[1]))
    lengths = np.array([len(f[3]) for f in found])
    codes = np.repeat(np.arange(len(found)), lengths)
    values = np.concatenate([f[3] for f in found])
    # Synthesised times use the data-line index, so a blank line does not shift the clock.
    times = np.concatenate([(f[1] - 1) * 86400.0 + _GCD_STEP * np.arange(len(f[3]))
                            for f in found])
    rows = np.concatenate([f[4] for f in found])
    ends = np.cumsum(lengths)
    warnings: list[str] = []
    keep = _screen([("cpu", values[:, 0], False), ("memory", values[:, 1], False)], on_bad,
                   label, lambda i: (found[int(np.searchsorted(ends, i, "right"))][2],
                                     int(rows[i])), warnings)
    executions = [(f"vm_{job}_{day}", job, {}) for job, day, *_ in found]
    return _assemble(label, codes[keep], times[keep], values[keep], executions,
                     ("cpu", "memory"), ("percent", "percent"), step=_GCD_STEP,
                     max_gap_steps=max_gap_steps, warnings=warnings)


# ----------------------------------------------------------------------------- Alibaba GenAI 2026

def _unique(a: np.ndarray) -> np.ndarray:
    """Sorted distinct values (numpy 2's hash-based ``np.unique`` is slower here than a sort)."""
    a = np.sort(a)
    return a[np.concatenate(([True], a[1:] != a[:-1]))] if len(a) else a


def _isin(x: np.ndarray, sorted_unique: np.ndarray) -> np.ndarray:
    """``x in sorted_unique``, elementwise, by binary search."""
    if not len(sorted_unique):
        return np.zeros(len(x), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_unique, x), len(sorted_unique) - 1)
    return sorted_unique[pos] == x


def _alibaba_file(folder: Path, stem: str, pod_ids: dict[str, int]):
    """(label, pod id, time, value, line, rows without a pod) of one tarball's CSV.

    Pods are numbered through the shared ``pod_ids`` so the three files join on integers.
    """
    tar_path = folder / f"{stem}.tar.gz"
    member = next(((n, d) for n, d in _tar_members(tar_path) if n.endswith(".csv")), None)
    if member is None:
        raise TraceError("no .csv file inside", path=str(tar_path))
    label = f"{tar_path}/{member[0]}"
    header, cols, lines = _parse_csv(member[1], label)
    idx = {h: i for i, h in enumerate(header)}
    for need in ("value", "timestamp_anon", "container_ip"):
        if need not in idx:
            raise TraceError("missing required column", path=label, row=1, column=need)
    ips = cols[idx["container_ip"]]
    for ip in sorted(set(ips) - pod_ids.keys()):  # sorted: the same numbering every run
        if ip.strip():
            pod_ids[ip] = len(pod_ids)
    pod = np.fromiter(map(pod_ids.get, ips, itertools.repeat(-1)), dtype=np.int64,
                      count=len(ips))
    has_pod = pod >= 0
    t = _floats(cols[idx["timestamp_anon"]], label, "timestamp_anon", lines)
    v = _floats(cols[idx["value"]], label, "value", lines)
    return label, pod[has_pod], t[has_pod], v[has_pod], lines[has_pod], int((~has_pod).sum())


def load_alibaba(path: str | os.PathLike, *, step: float = 60.0,
                 max_gap_steps: float = DEFAULT_MAX_GAP_STEPS, on_bad: str = "error",
                 features: Sequence[str] = ("memory", "gpu_util", "gpu_memory"),
                 require_all: bool = True) -> TraceSet:
    """The Alibaba GenAI 2026 pod traces: one tarball per metric, joined per pod and time.

    ``path`` is the folder holding ``pod_memory_util_anon.tar.gz``,
    ``pod_gpu_duty_cycle_anon.tar.gz`` and ``pod_gpu_memory_used_bytes_anon.tar.gz`` (only those
    for the requested ``features`` are read). Units are as published: memory ``fraction``
    (0-1 of the pod's limit), gpu_util ``percent``, gpu_memory ``bytes``.

    Join: an *inner* join on (container_ip, timestamp). A sample needs every requested feature
    at exactly the same timestamp; a timestamp present in only some files is dropped for that
    pod, because filling the missing metric would invent data. Several rows of one file at the
    same (pod, timestamp) are averaged. A pod lacking a requested feature altogether is skipped
    when ``require_all`` (the count goes into ``warnings`` and ``skipped_pods``), and is an
    error otherwise. Rows without a container_ip cannot be joined and are dropped (counted).
    The NaN/negative rule applies to the samples that survive the join.
    """
    _check_args(step, max_gap_steps, on_bad)
    label = str(path)
    folder = Path(path)
    if not folder.is_dir():
        raise TraceError("not a folder (expected the folder of Alibaba pod tarballs)", path=label)
    features = tuple(features)
    if not features or any(f not in _ALIBABA_FILES for f in features):
        raise TraceError(f"features must be among {', '.join(_ALIBABA_FILES)}, not {features}",
                         path=label)
    for f in features:  # all present before any parsing: fail fast and on the right file
        if not (folder / f"{_ALIBABA_FILES[f][0]}.tar.gz").is_file():
            raise TraceError("missing Alibaba trace file",
                             path=str(folder / f"{_ALIBABA_FILES[f][0]}.tar.gz"))
    pod_ids: dict[str, int] = {}
    files = [_alibaba_file(folder, _ALIBABA_FILES[f][0], pod_ids) for f in features]
    warnings = [f"{f[0]}: dropped {f[5]} rows without a container_ip" for f in files if f[5]]

    has = np.zeros((len(pod_ids), len(files)), dtype=bool)
    for j, f in enumerate(files):
        has[f[1], j] = True
    complete = has.all(axis=1)
    if not complete.all():
        lacking = [p for p, i in pod_ids.items() if not complete[i]]
        if not require_all:
            raise TraceError(f"{len(lacking)} pods lack one of the features {features} "
                             f"(e.g. {lacking[0]}); require_all=True skips them", path=label)
        warnings.append(f"{label}: skipped {len(lacking)} of {len(pod_ids)} pods lacking one "
                        f"of the features {', '.join(features)}")
    if not complete.any():
        raise TraceError(f"no pod has all of the features {', '.join(features)}", path=label)

    # (pod, time) -> one int64 key, so the join is set algebra on sorted integers.
    t_all = _unique(np.concatenate([f[2] for f in files]))
    keys = [np.where(complete[pod], pod * len(t_all) + np.searchsorted(t_all, t), -1)
            for _, pod, t, _, _, _ in files]
    common = _unique(keys[0][keys[0] >= 0])
    for k in keys[1:]:
        common = common[_isin(common, _unique(k))]
    dropped_keys = []
    for (flabel, _, t, v, lines, _), k in zip(files, keys):
        sel = np.flatnonzero(_isin(k, common))
        keep = _screen([("timestamp_anon", t[sel], True), ("value", v[sel], False)], on_bad,
                       flabel, lambda i, sel=sel, flabel=flabel, lines=lines:
                       (flabel, int(lines[sel[i]])), warnings)
        dropped_keys.append(k[sel[~keep]])
        n_pod_rows = int((k >= 0).sum())
        if n_pod_rows > len(sel):
            warnings.append(f"{flabel}: dropped {n_pod_rows - len(sel)} samples whose timestamp "
                            f"is missing from the other files (inner join on pod and time)")
    common = common[~_isin(common, _unique(np.concatenate(dropped_keys)))]
    values = np.empty((len(common), len(files)))
    for j, ((_, _, _, v, _, _), k) in enumerate(zip(files, keys)):
        sel = _isin(k, common)  # common is a subset of every file's keys
        pos = np.searchsorted(common, k[sel])
        values[:, j] = (np.bincount(pos, weights=v[sel], minlength=len(common))
                        / np.bincount(pos, minlength=len(common)))
    pod_code, t_code = np.divmod(common, len(t_all))
    ts = _assemble(label, pod_code, t_all[t_code], values,
                   [(p, p, {}) for p in pod_ids], features,
                   [_ALIBABA_FILES[f][1] for f in features], step=step,
                   max_gap_steps=max_gap_steps, warnings=warnings)
    ts.skipped_pods = int((~complete).sum())
    return ts


# ----------------------------------------------------------------------------- DL training corpus

def _corpus_manifest(path: Path) -> dict:
    import json

    label = str(path / "manifest.json")
    try:
        doc = json.loads((path / "manifest.json").read_text())
    except OSError as e:
        raise TraceError(f"cannot read file: {_why(e.strerror or e)}", path=label) from None
    except ValueError as e:
        raise TraceError(f"not JSON: {_why(e)}", path=label) from None
    if not isinstance(doc, dict) or doc.get("format") != CORPUS_FORMAT:
        raise TraceError(f"not a corpus manifest (format is not {CORPUS_FORMAT!r})", path=label)
    if doc.get("version") != 1:
        raise TraceError(f"corpus manifest version {doc.get('version')!r} is not supported "
                         "(this ai4dl reads version 1)", path=label)
    runs = doc.get("executions")
    if not isinstance(runs, list) or not all(isinstance(r, dict) and isinstance(
            r.get("execution"), str) and isinstance(r.get("family"), str) for r in runs):
        raise TraceError("'executions' must be a list of objects with 'execution' and "
                         "'family'", path=label)
    return doc


def load_dl_corpus(path: str | os.PathLike = DL_CORPUS, *, step: float | None = None,
                   max_gap_steps: float = DEFAULT_MAX_GAP_STEPS, on_bad: str = "error",
                   features: Sequence[str] | None = None,
                   families: Sequence[str] | None = None) -> TraceSet:
    """The recorded corpus of real PyTorch training runs (``e2e/workloads/corpus.py``).

    A folder: ``traces.csv.gz`` (the long format with ``group`` = the job: the two ranks of a
    distributed job, the two parts of a preempted one), ``phases.csv.gz`` (each run's own phase
    log) and ``manifest.json`` (per execution: family, job, rank, part, parameters). Each
    execution's ``meta`` carries ``family``, ``job``, ``rank`` and ``part``, so an evaluation can
    hold out whole families (``--split-by family``). ``step`` defaults to the recording's
    (1 s); ``families`` keeps only those.
    """
    p = Path(path)
    doc = _corpus_manifest(p)
    known = {r["execution"]: r for r in doc["executions"]}
    if families is not None:
        unknown = sorted(set(families) - {r["family"] for r in known.values()})
        if unknown:
            raise TraceError(f"no family {', '.join(unknown)} in the corpus (it has "
                             f"{', '.join(sorted({r['family'] for r in known.values()}))})",
                             path=str(p))
    ts = load_long_csv(p / "traces.csv.gz", step=float(step or doc.get("step_seconds") or 1.0),
                       max_gap_steps=max_gap_steps, on_bad=on_bad, features=features)
    out = []
    for e in ts:
        base = e.name.split("#", 1)[0]  # a gap splits an execution into name, name#2...
        if base not in known:
            raise TraceError(f"execution {base!r} is not in the manifest", path=str(p))
        run = known[base]
        if families is not None and run["family"] not in families:
            continue
        meta = {**e.meta, "family": run["family"], "job": run.get("job", e.group),
                "rank": run.get("rank", 0), "part": run.get("part", 1)}
        out.append(Execution(e.name, e.times, e.values, e.features, e.units, e.group, e.step,
                             meta))
    result = TraceSet(out, source=str(p))
    result.warnings = list(ts.warnings)
    return result


def load_corpus_phases(path: str | os.PathLike = DL_CORPUS) -> dict[str, list[tuple[float, str]]]:
    """Each corpus run's own phase log: ``{execution: [(unix time, phase), ...]}``, in order.
    A sample at time t (the end of its interval) belongs to the phase in force at t - step/2."""
    p = Path(path)
    _corpus_manifest(p)
    header, data, _ = _parse_csv(_read_bytes(p / "phases.csv.gz"), str(p / "phases.csv.gz"))
    index = {h: i for i, h in enumerate(header)}
    out: dict[str, list[tuple[float, str]]] = {}
    for name, t, phase in zip(data[index["execution"]], data[index["timestamp"]],
                              data[index["phase"]]):
        out.setdefault(str(name), []).append((float(t), str(phase)))
    return out


# ----------------------------------------------------------------------------- dispatch

_LOADERS: dict[str, Callable[..., TraceSet]] = {
    "ai4dl": load_ai4dl_csv, "long": load_long_csv, "parquet": load_parquet,
    "gcd": load_gcd_tar, "alibaba": load_alibaba, "corpus": load_dl_corpus,
}


def _detect(path: Path) -> str:
    name = path.name.lower()
    if path.is_dir():
        if (path / "manifest.json").is_file():
            return "corpus"
        if any((path / f"{stem}.tar.gz").is_file() for stem, _ in _ALIBABA_FILES.values()):
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
            raise TraceError(f"cannot read file: {_why(e)}", path=str(path)) from None
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
                    rows += max(_count_lines(fh, str(folder), max_rows - rows + 1, max_rows) - 1,
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


# ----------------------------------------------------------------------------- size bound
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


def _count_lines(stream, label: str, budget: int, max_rows: int, counted: int = 0) -> int:
    """Newlines read from ``stream`` (chunk by chunk: nothing is held) added to ``counted``;
    TraceError as soon as they pass ``budget``."""
    try:
        while True:
            chunk = stream.read(_CHUNK)
            if not chunk:
                return counted
            counted += chunk.count(b"\n")
            if counted > budget:
                raise _too_many(label, counted - (budget - max_rows), max_rows)
    except (OSError, EOFError, zlib.error, tarfile.TarError):
        return counted              # unreadable: the loader names the problem itself


def _file_rows(path: Path, max_rows: int) -> None:
    """A CSV file (gzip or not) has at most ``max_rows`` data rows (newlines - the header)."""
    try:
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        with (gzip.open if gz else open)(path, "rb") as f:
            _count_lines(f, str(path), max_rows + 1, max_rows)
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
                        counted = _count_lines(f, label, max_rows, max_rows, counted)
        except (tarfile.TarError, OSError, EOFError, zlib.error):
            return                  # the loader reports a damaged archive in its own words


def check_rows(path: Path, fmt: str, max_rows: int) -> None:
    """Refuse, before any parsing, an input holding more than ``max_rows`` rows: one line
    naming the file and the bound (TraceError). Counted by streaming (no row is kept):
    newlines of CSVs and tar members, Parquet's own row count."""
    if fmt in ("ai4dl", "long"):
        _file_rows(path, max_rows)
    elif fmt == "corpus":
        _file_rows(path / "traces.csv.gz", max_rows)
    elif fmt == "gcd":
        _tar_rows([path], str(path), max_rows)
    elif fmt == "alibaba":
        _tar_rows(sorted(path.glob("*.tar.gz")), str(path), max_rows)
    elif fmt == "parquet":
        try:
            import pyarrow.dataset as ds

            rows = ds.dataset(str(path), format="parquet").count_rows()
        except Exception:           # noqa: BLE001 - unreadable: load_parquet says why
            return
        if rows > max_rows:
            raise TraceError(f"{rows:,} data rows: above --max-rows {max_rows}; raise it "
                             f"(about 0.5 GB of memory per million rows) or split the input",
                             path=str(path))


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
