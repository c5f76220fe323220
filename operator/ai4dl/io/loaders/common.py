"""What every trace loader shares: reading, CSV parsing, the bad-value screen, assembly."""

from __future__ import annotations

import csv
import gzip
import io
import itertools
import os
import tarfile
import zlib
from typing import Callable, Sequence

import numpy as np

from ai4dl.errors import TraceError
from ai4dl.method.traces import TraceSet, regularise


# ----------------------------------------------------------------------------- small helpers

def check_args(step: float, max_gap_steps: float, on_bad: str) -> None:
    if on_bad not in ("error", "drop"):
        raise TraceError(f"on_bad must be 'error' or 'drop', not {on_bad!r}")
    for name, value in (("step", step), ("max_gap_steps", max_gap_steps)):
        try:
            ok = bool(np.isfinite(value) and value > 0)
        except TypeError:
            ok = False
        if not ok:
            raise TraceError(f"{name} must be a positive number, not {value!r}")


def why(e: object) -> str:
    """An exception's text on one line (tarfile's, for one, spans several)."""
    text = " ".join(str(e).split())
    return text if len(text) <= 200 else text[:200] + "..."


def _shown(text: object) -> str:
    """The offending text, short and on one line whatever it contains."""
    s = str(text)
    return repr(s if len(s) <= 20 else s[:20] + "...")


def read_bytes(path: str | os.PathLike) -> bytes:
    """File contents, gunzipped when gzip-compressed (so ``x.csv.gz`` works like ``x.csv``)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise TraceError(f"cannot read file: {why(e.strerror or e)}", path=str(path)) from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise TraceError(f"corrupt gzip data: {why(e)}", path=str(path)) from None
    return data


def parse_csv(data: bytes, label: str, *, index_column: bool = False
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
            raise TraceError(f"malformed CSV: {why(e)}", path=label, row=reader.line_num) from None
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


def floats(data, label: str, column: str, rows: np.ndarray) -> np.ndarray:
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


def identifiers(data, label: str, column: str, rows: np.ndarray) -> np.ndarray:
    """Identifier column as a string array; an empty identifier is an error."""
    arr = np.array(["" if s is None else str(s).strip() for s in data], dtype=str)
    empty = np.flatnonzero(arr == "")
    if len(empty):
        raise TraceError("empty value", path=label, row=int(rows[empty[0]]), column=column)
    return arr


def first_seen_codes(arr: np.ndarray) -> tuple[np.ndarray, list[str], np.ndarray]:
    """Code per row, distinct values numbered in order of first appearance, and that row."""
    uniq, first, inv = np.unique(arr, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[order] = np.arange(len(uniq))
    return rank[inv.reshape(-1)], [str(u) for u in uniq[order]], first[order]


def screen(columns: Sequence[tuple[str, np.ndarray, bool]], on_bad: str, source: str,
           locate: Callable[[int], tuple[str, int]], warnings: list[str]) -> np.ndarray:
    """Apply the NaN/Inf/negative rule (the package docstring); return the mask of rows to keep.

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


def assemble(source: str, codes: np.ndarray, times: np.ndarray, values: np.ndarray,
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


def locator(label: str, rows: np.ndarray) -> Callable[[int], tuple[str, int]]:
    return lambda i: (label, int(rows[i]))


# ----------------------------------------------------------------------------- tar archives

def _open_tar(path: str | os.PathLike) -> tarfile.TarFile:
    try:
        return tarfile.open(path, "r:*")
    except FileNotFoundError:
        raise TraceError("cannot read file: no such file", path=str(path)) from None
    except tarfile.ReadError:  # its text lists every compression tried: no help to a user
        raise TraceError("not a tar archive (plain, gzip, bzip2 or xz)", path=str(path)) from None
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        raise TraceError(f"not a readable tar archive: {why(e)}", path=str(path)) from None


def tar_members(path: str | os.PathLike):
    """Yield (member name, bytes) of the regular files, turning archive damage into TraceError."""
    label = str(path)
    with _open_tar(path) as tf:
        try:
            for m in tf:
                if m.isfile():
                    f = tf.extractfile(m)
                    yield m.name, (f.read() if f else b"")
        except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
            raise TraceError(f"corrupt archive: {why(e)}", path=label) from None
