"""The generic long table, CSV or Parquet: column mapping and conversion to canonical units."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from ai4dl.errors import TraceError
from ai4dl.io.loaders.common import (assemble, check_args, first_seen_codes, floats,
                                     identifiers, locator, parse_csv, read_bytes, screen, why)
from ai4dl.method.plausibility import (check_duplicates, check_levels, check_runs,
                                        check_timestamps)
from ai4dl.method.traces import (CANONICAL_UNITS, DEFAULT_MAX_GAP_STEPS, DEFAULT_STEP_SECONDS,
                                 TraceSet)

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
    check_args(step, max_gap_steps, on_bad)
    header, data, lines = parse_csv(read_bytes(path), label)
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
    check_args(step, max_gap_steps, on_bad)
    try:  # pyarrow is the optional [parquet] extra
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
        raise TraceError(f"not a readable Parquet file: {why(e)}",
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
            raise TraceError(f"cannot read column: {why(e)}", path=label,
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
    execution = identifiers(get(source["execution"]), label, source["execution"], rows)
    group = (identifiers(get(source["group"]), label, source["group"], rows)
             if "group" in source else execution)
    raw_t = get(source["timestamp"])
    if isinstance(raw_t, np.ndarray) and raw_t.dtype.kind == "M":
        times = np.where(np.isnat(raw_t), np.nan, raw_t.astype(np.int64) / 1e9)
    else:
        times = floats(raw_t, label, source["timestamp"], rows) * t_scale
    values = np.column_stack([floats(get(c), label, c, rows) for c in fcol])
    warnings: list[str] = []
    keep = screen([(source["timestamp"], times, True)]
                  + [(c, values[:, j], False) for j, c in enumerate(fcol)],
                  on_bad, label, locator(label, rows), warnings)
    values = values[keep] * np.array([s for s, _ in scales])
    codes, names, first = first_seen_codes(execution[keep])
    # Units here are the user's word (a flag or nothing): implausible numbers are refused
    # before they become executions, naming the --unit that fixes them (ai4dl.method.plausibility).
    check_timestamps(label, times[keep], codes, step, units.get("timestamp"))
    check_duplicates(label, times[keep], values, codes, names, np.asarray(rows)[keep])
    executions = [(n, str(g), {}) for n, g in zip(names, group[keep][first])]
    ts = assemble(label, codes, times[keep], values, executions, features,
                  [u for _, u in scales], step=step, max_gap_steps=max_gap_steps,
                  warnings=warnings)
    check_levels(ts, label=label, units_given=tuple(units))
    check_runs(ts, label=label, max_gap_steps=max_gap_steps)
    return ts
