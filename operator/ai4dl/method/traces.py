"""The one in-memory form of resource-usage traces, and resampling to a fixed step.

An *execution* is one run of one container: a time-indexed float32 matrix, one column per
feature, each feature with a name and a unit. A *trace set* is executions that share the same
features, in the same order, and the same sampling step. Everything here is pure (no I/O).

Canonical feature names and units (loaders convert to these where the source allows):

=============  ===========  ================================================
feature        unit         meaning
=============  ===========  ================================================
``cpu``        ``cores``    CPU usage rate, cores (rate of cpu-seconds)
``memory``     ``bytes``    memory working set
``gpu_util``   ``percent``  GPU utilisation / duty cycle, 0-100
``gpu_memory`` ``bytes``    GPU memory used
=============  ===========  ================================================

Sources that only give relative figures keep them with an honest unit (``percent`` for the
Google trace's CPU and memory, ``fraction`` for Alibaba's memory): nothing is rescaled by
guesswork.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

import numpy as np

from ai4dl.errors import TraceError

CANONICAL_UNITS: dict[str, str] = {
    "cpu": "cores",
    "memory": "bytes",
    "gpu_util": "percent",
    "gpu_memory": "bytes",
}

DEFAULT_STEP_SECONDS = 15.0
DEFAULT_MAX_GAP_STEPS = 8


@dataclass(frozen=True, eq=False)
class Execution:
    """One execution: ``values[i, j]`` is feature ``features[j]`` at ``times[i]`` (unix s)."""

    name: str
    times: np.ndarray
    values: np.ndarray
    features: tuple[str, ...]
    units: tuple[str, ...]
    group: str = ""
    step: float | None = None
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        times = np.asarray(self.times, dtype=np.float64).reshape(-1)
        values = np.asarray(self.values, dtype=np.float32)
        if values.ndim == 1:
            values = values.reshape(-1, 1)
        if values.ndim != 2 or values.shape[0] != times.shape[0]:
            raise ValueError(f"execution {self.name!r}: values {values.shape} do not match "
                             f"{times.shape[0]} timestamps")
        if values.shape[1] != len(self.features) or len(self.units) != len(self.features):
            raise ValueError(f"execution {self.name!r}: {values.shape[1]} columns for "
                             f"features {self.features} with units {self.units}")
        object.__setattr__(self, "times", times)
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "features", tuple(self.features))
        object.__setattr__(self, "units", tuple(self.units))
        if not self.group:
            object.__setattr__(self, "group", self.name)

    def __len__(self) -> int:
        return int(self.values.shape[0])

    @property
    def n_samples(self) -> int:
        return len(self)

    @property
    def duration(self) -> float:
        """Seconds covered, counting each sample as one step long where the step is known."""
        if len(self) == 0:
            return 0.0
        span = float(self.times[-1] - self.times[0])
        return span + (self.step or 0.0)

    def column(self, feature: str) -> np.ndarray:
        return self.values[:, self._index(feature)]

    def _index(self, feature: str) -> int:
        try:
            return self.features.index(feature)
        except ValueError:
            raise TraceError(f"execution {self.name!r} has no feature {feature!r} "
                             f"(it has {', '.join(self.features)})") from None

    def select(self, features: Sequence[str]) -> "Execution":
        """The same execution restricted to (and reordered as) ``features``."""
        idx = [self._index(f) for f in features]
        return Execution(self.name, self.times, self.values[:, idx], tuple(features),
                         tuple(self.units[i] for i in idx), self.group, self.step, dict(self.meta))

    def slice(self, start: int, stop: int | None = None) -> "Execution":
        return Execution(self.name, self.times[start:stop], self.values[start:stop],
                         self.features, self.units, self.group, self.step, dict(self.meta))


class TraceSet(Sequence[Execution]):
    """Executions sharing features (same order), units and step."""

    def __init__(self, executions: Iterable[Execution], *, source: str = ""):
        self.executions: list[Execution] = list(executions)
        self.source = source
        if not self.executions:
            raise TraceError("no executions", path=source or None)
        first = self.executions[0]
        for ex in self.executions[1:]:
            if ex.features != first.features or ex.units != first.units:
                raise TraceError(
                    f"execution {ex.name!r} has features {list(zip(ex.features, ex.units))}, "
                    f"expected {list(zip(first.features, first.units))}", path=source or None)

    # Sequence protocol
    def __len__(self) -> int:
        return len(self.executions)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return TraceSet(self.executions[i], source=self.source)
        return self.executions[i]

    def __iter__(self) -> Iterator[Execution]:
        return iter(self.executions)

    @property
    def features(self) -> tuple[str, ...]:
        return self.executions[0].features

    @property
    def units(self) -> tuple[str, ...]:
        return self.executions[0].units

    @property
    def step(self) -> float | None:
        return self.executions[0].step

    @property
    def n_samples(self) -> int:
        return sum(len(e) for e in self.executions)

    def groups(self) -> list[str]:
        return sorted({e.group for e in self.executions})

    def select(self, features: Sequence[str]) -> "TraceSet":
        return TraceSet([e.select(features) for e in self.executions], source=self.source)

    def split_by_group(self, test_fraction: float, seed: int = 0, key: str = "group"
                       ) -> tuple["TraceSet", "TraceSet"]:
        """Train/test split by execution group (e.g. job id): a group never lands on both sides.

        ``key``: what a group is: ``group`` (the default), or an entry of the executions'
        ``meta`` (e.g. ``family`` in the DL corpus: whole families held out)."""
        def unit(e: Execution) -> str:
            if key == "group":
                return e.group
            if key not in e.meta:
                raise TraceError(f"cannot split by {key!r}: execution {e.name!r} has no such "
                                 f"attribute (it has: {', '.join(['group', *sorted(e.meta)])})",
                                 path=self.source or None)
            return str(e.meta[key])

        units = [unit(e) for e in self.executions]
        groups = np.array(sorted(set(units)), dtype=object)
        if len(groups) < 2:
            raise TraceError(f"cannot split {len(groups)} execution {key}(s) into train and "
                             "test", path=self.source or None)
        rng = np.random.default_rng(seed)
        rng.shuffle(groups)
        n_test = min(len(groups) - 1, max(1, int(round(test_fraction * len(groups)))))
        test_groups = set(groups[:n_test])
        train = [e for e, u in zip(self.executions, units) if u not in test_groups]
        test = [e for e, u in zip(self.executions, units) if u in test_groups]
        return TraceSet(train, source=self.source), TraceSet(test, source=self.source)

    def summary(self) -> str:
        lengths = np.array([len(e) for e in self.executions])
        feats = ", ".join(f"{f} [{u}]" for f, u in zip(self.features, self.units))
        step = f"{self.step:g} s" if self.step else "irregular"
        return (f"{len(self)} executions ({len(self.groups())} groups), {self.n_samples} samples "
                f"at {step} (length {lengths.min()}-{lengths.max()}, median {int(np.median(lengths))}); "
                f"features: {feats}")


def resample(times: np.ndarray, values: np.ndarray, step: float,
             max_gap_steps: float = DEFAULT_MAX_GAP_STEPS) -> list[tuple[np.ndarray, np.ndarray]]:
    """Put samples on a regular grid of ``step`` seconds.

    Samples are assigned to the nearest grid point (grid anchored at the first sample); several
    samples on one point are averaged (downsampling), and grid points with no sample between two
    that have one are linearly interpolated (upsampling, jitter). Where two consecutive samples
    are more than ``max_gap_steps`` steps apart, the series is split into separate segments
    rather than filled: data that was never observed is not invented.

    Returns a list of ``(times, values)`` segments, each regular at ``step``.
    """
    if step <= 0:
        raise ValueError("step must be positive")
    times = np.asarray(times, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        values = values[:, None]
    if len(times) == 0:
        return []
    order = np.argsort(times, kind="stable")
    times, values = times[order], values[order]
    breaks = np.flatnonzero(np.diff(times) > max_gap_steps * step) + 1
    segments = []
    for seg_t, seg_v in zip(np.split(times, breaks), np.split(values, breaks)):
        t0 = seg_t[0]
        # Round half up, not np.rint's half-to-even: every grid point then averages the same
        # window [k - 1/2, k + 1/2) steps; half-to-even alternates 1- and 3-sample windows
        # when samples come at exactly half the step (30 s scrapes on a 60 s grid).
        idx = np.floor((seg_t - t0) / step + 0.5).astype(np.int64)
        n = int(idx[-1]) + 1
        sums = np.zeros((n, values.shape[1]))
        counts = np.bincount(idx, minlength=n).astype(np.float64)
        np.add.at(sums, idx, seg_v)
        have = counts > 0
        grid = np.arange(n, dtype=np.float64)
        means = sums[have] / counts[have, None]
        out = np.empty((n, values.shape[1]))
        for j in range(values.shape[1]):
            out[:, j] = np.interp(grid, grid[have], means[:, j])
        segments.append((t0 + step * grid, out.astype(np.float32)))
    return segments


def regularise(name: str, times: np.ndarray, values: np.ndarray, features: Sequence[str],
               units: Sequence[str], *, step: float, max_gap_steps: float = DEFAULT_MAX_GAP_STEPS,
               group: str = "", meta: dict | None = None) -> list[Execution]:
    """Resample one raw series into one execution per gap-free segment.

    Segments after the first are named ``<name>#2``, ``<name>#3``...; all keep the group, so a
    train/test split never separates the pieces of one run.
    """
    out = []
    for i, (t, v) in enumerate(resample(times, values, step, max_gap_steps)):
        seg_name = name if i == 0 else f"{name}#{i + 1}"
        out.append(Execution(seg_name, t, v, tuple(features), tuple(units), group or name, step,
                             dict(meta or {})))
    return out
