"""The Alibaba GenAI 2026 pod traces: one tarball per metric, joined per pod and time."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from ai4dl.errors import TraceError
from ai4dl.io.loaders.common import (assemble, check_args, floats, parse_csv, screen,
                                     tar_members)
from ai4dl.method.traces import DEFAULT_MAX_GAP_STEPS, TraceSet

ALIBABA_FILES = {  # feature -> (tarball stem, unit as published)
    "memory": ("pod_memory_util_anon", "fraction"),
    "gpu_util": ("pod_gpu_duty_cycle_anon", "percent"),
    "gpu_memory": ("pod_gpu_memory_used_bytes_anon", "bytes"),
}


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
    member = next(((n, d) for n, d in tar_members(tar_path) if n.endswith(".csv")), None)
    if member is None:
        raise TraceError("no .csv file inside", path=str(tar_path))
    label = f"{tar_path}/{member[0]}"
    header, cols, lines = parse_csv(member[1], label)
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
    t = floats(cols[idx["timestamp_anon"]], label, "timestamp_anon", lines)
    v = floats(cols[idx["value"]], label, "value", lines)
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
    check_args(step, max_gap_steps, on_bad)
    label = str(path)
    folder = Path(path)
    features = _checked_alibaba_request(folder, label, features)
    pod_ids: dict[str, int] = {}
    files = [_alibaba_file(folder, ALIBABA_FILES[f][0], pod_ids) for f in features]
    warnings = [f"{f[0]}: dropped {f[5]} rows without a container_ip" for f in files if f[5]]
    complete = _complete_pods(files, pod_ids, features, require_all, label, warnings)

    # (pod, time) -> one int64 key, so the join is set algebra on sorted integers.
    t_all = _unique(np.concatenate([f[2] for f in files]))
    keys = [np.where(complete[pod], pod * len(t_all) + np.searchsorted(t_all, t), -1)
            for _, pod, t, _, _, _ in files]
    common = _screened_common_keys(files, keys, on_bad, warnings)
    values = _joined_values(files, keys, common)
    pod_code, t_code = np.divmod(common, len(t_all))
    ts = assemble(label, pod_code, t_all[t_code], values,
                  [(p, p, {}) for p in pod_ids], features,
                  [ALIBABA_FILES[f][1] for f in features], step=step,
                  max_gap_steps=max_gap_steps, warnings=warnings)
    ts.skipped_pods = int((~complete).sum())
    return ts


def _checked_alibaba_request(folder: Path, label: str, features: Sequence[str]) -> tuple:
    """``features`` as a tuple, once the folder and every tarball they need are there."""
    if not folder.is_dir():
        raise TraceError("not a folder (expected the folder of Alibaba pod tarballs)", path=label)
    features = tuple(features)
    if not features or any(f not in ALIBABA_FILES for f in features):
        raise TraceError(f"features must be among {', '.join(ALIBABA_FILES)}, not {features}",
                         path=label)
    for f in features:  # all present before any parsing: fail fast and on the right file
        if not (folder / f"{ALIBABA_FILES[f][0]}.tar.gz").is_file():
            raise TraceError("missing Alibaba trace file",
                             path=str(folder / f"{ALIBABA_FILES[f][0]}.tar.gz"))
    return features


def _complete_pods(files, pod_ids: dict[str, int], features: tuple, require_all: bool,
                   label: str, warnings: list[str]) -> np.ndarray:
    """Per pod id, whether every file has rows of it (the lacking ones said or refused)."""
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
    return complete


def _screened_common_keys(files, keys: list[np.ndarray], on_bad: str,
                          warnings: list[str]) -> np.ndarray:
    """The sorted (pod, time) keys every file has, less those with a bad sample in any file."""
    common = _unique(keys[0][keys[0] >= 0])
    for k in keys[1:]:
        common = common[_isin(common, _unique(k))]
    dropped_keys = []
    for (flabel, _, t, v, lines, _), k in zip(files, keys):
        sel = np.flatnonzero(_isin(k, common))
        keep = screen([("timestamp_anon", t[sel], True), ("value", v[sel], False)], on_bad,
                      flabel, lambda i, sel=sel, flabel=flabel, lines=lines:
                      (flabel, int(lines[sel[i]])), warnings)
        dropped_keys.append(k[sel[~keep]])
        n_pod_rows = int((k >= 0).sum())
        if n_pod_rows > len(sel):
            warnings.append(f"{flabel}: dropped {n_pod_rows - len(sel)} samples whose timestamp "
                            f"is missing from the other files (inner join on pod and time)")
    return common[~_isin(common, _unique(np.concatenate(dropped_keys)))]


def _joined_values(files, keys: list[np.ndarray], common: np.ndarray) -> np.ndarray:
    """(len(common), files) values: each file's rows at a key, averaged."""
    values = np.empty((len(common), len(files)))
    for j, ((_, _, _, v, _, _), k) in enumerate(zip(files, keys)):
        sel = _isin(k, common)  # common is a subset of every file's keys
        pos = np.searchsorted(common, k[sel])
        values[:, j] = (np.bincount(pos, weights=v[sel], minlength=len(common))
                        / np.bincount(pos, minlength=len(common)))
    return values
